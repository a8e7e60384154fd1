// Runs the kestrel command line as a user would, for the CLI tests.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

struct CliRun {
  int status;          // the exit status, or 128 + the signal that ended it
  std::string output;  // stdout and stderr together
};

// Runs a shell command; its stdout and stderr together.
inline CliRun run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

// env: assignments put before the command ("KESTREL_PLUGIN_PATH=..."), or empty.
inline CliRun run_cli(const std::string& args, const std::string& env = "") {
  return run_command(env + " " + KESTREL_CLI + " " + args);
}
