// Whole-file reads and crash-safe whole-file writes (write a temporary, fsync, rename, fsync the folder).
#include <fcntl.h>
#include <signal.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <system_error>

#include "kestrel/error.h"
#include "kestrel/io.h"

namespace kestrel::io {

namespace {

std::string os_error(int error_number) { return std::strerror(error_number); }

// The folder that holds `path`: where the temporary goes and which directory entry must be made durable.
std::string parent_folder(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// This process's mark in its temporaries' names besides its pid: a run restarted in a fresh container
// often has the same pid (1) as the run that was killed, and must tell its own files from that run's.
uint32_t process_nonce() {
  static const uint32_t nonce = std::random_device{}();
  return nonce;
}

// "<file>.tmp-<pid>-<nonce>-<counter>": unique per process and call, so concurrent writers (threads or
// processes) never share a temporary.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp-{}-{:08x}-{}", path, static_cast<long>(::getpid()), process_nonce(),
                     counter.fetch_add(1));
}

// Who wrote a temporary, read back from its name.
struct TemporaryOwner {
  pid_t pid;
  uint32_t nonce;
};

std::optional<TemporaryOwner> temporary_owner(const std::string& name) {
  const size_t mark = name.rfind(".tmp-");
  if (mark == std::string::npos) return std::nullopt;
  const char* cursor = name.data() + mark + 5;
  const char* last = name.data() + name.size();
  int64_t pid = 0;
  uint32_t nonce = 0;
  uint64_t counter = 0;
  auto field = [&](auto& value, int base, bool final) {
    const auto [end, error] = std::from_chars(cursor, last, value, base);
    if (error != std::errc() || (final ? end != last : end == last || *end != '-')) return false;
    cursor = end + (final ? 0 : 1);
    return true;
  };
  if (!field(pid, 10, false) || !field(nonce, 16, false) || !field(counter, 10, true)) return std::nullopt;
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return std::nullopt;
  return TemporaryOwner{static_cast<pid_t>(pid), nonce};
}

// Whether the writer of a temporary is gone: another run of this pid (an earlier container), or a pid
// that no process on this machine has (kill(pid, 0) asks without signalling). A writer on another
// machine sharing the folder cannot be asked, so its temporaries may be taken for stale.
bool writer_is_gone(const TemporaryOwner& owner) {
  if (owner.pid == ::getpid()) return owner.nonce != process_nonce();
  return ::kill(owner.pid, 0) != 0 && errno == ESRCH;
}

// Owns the temporary until it has been renamed: on any early exit it is closed and removed.
class TemporaryFile {
 public:
  TemporaryFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  // close() can report a deferred write error (e.g. NFS), so its result matters; the fd is gone either way.
  int close() {
    int result = ::close(fd_);
    fd_ = -1;
    return result;
  }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

void write_all(int fd, std::string_view bytes, const std::string& path, const std::string& temporary) {
  const char* cursor = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t written = ::write(fd, cursor, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot write '{}' (via temporary '{}'): {}; check free disk space and quotas", path,
                              temporary, os_error(errno)));
    }
    cursor += written;
    left -= static_cast<size_t>(written);
  }
}

// Makes the rename itself durable. Some filesystems cannot fsync a folder (EINVAL); the rename is then as
// durable as that filesystem allows, which is not an error of ours.
void sync_folder(const std::string& folder, const std::string& path) {
  int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw Error(
        fmt::format("wrote '{}' but cannot open its folder '{}' to sync it: {}", path, folder, os_error(errno)));
  int result = ::fsync(fd);
  int error_number = errno;
  ::close(fd);
  if (result != 0 && error_number != EINVAL)
    throw Error(
        fmt::format("wrote '{}' but cannot sync its folder '{}': {}; the new file may not survive a "
                    "crash",
                    path, folder, os_error(error_number)));
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  if (path.empty()) throw InvalidArgument("write_file_atomically: empty path; pass the file to write");
  const std::string folder = parent_folder(path);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    throw Error(
        fmt::format("cannot write '{}': cannot create its folder '{}': {}; check that the path is a "
                    "writable folder",
                    path, folder, ec.message()));

  const std::string temporary = temporary_name(path);
  // O_EXCL: never write through a stale temporary (or a link an attacker planted under that name).
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    throw Error(
        fmt::format("cannot write '{}': cannot create temporary '{}': {}; check that the folder is "
                    "writable",
                    path, temporary, os_error(errno)));
  TemporaryFile file(temporary, fd);
  write_all(file.fd(), bytes, path, temporary);
  if (::fsync(file.fd()) != 0)
    throw Error(fmt::format("cannot write '{}': fsync of temporary '{}' failed: {}", path, temporary, os_error(errno)));
  if (file.close() != 0)
    throw Error(fmt::format("cannot write '{}': closing temporary '{}' failed: {}", path, temporary, os_error(errno)));
  if (::rename(temporary.c_str(), path.c_str()) != 0)
    throw Error(
        fmt::format("cannot write '{}': renaming temporary '{}' over it failed: {}", path, temporary, os_error(errno)));
  file.commit();
  sync_folder(folder, path);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  auto unreadable = [&](int error_number) {
    return InvalidArgument(
        fmt::format("cannot read '{}': {}; check the path and its permissions", path, os_error(error_number)));
  };
  // Non-blocking, so that opening a FIFO returns at once and is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw unreadable(errno);
  // Closes on every path out, including throws.
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  struct stat info {};
  if (::fstat(fd, &info) != 0) throw unreadable(errno);
  if (S_ISDIR(info.st_mode)) throw unreadable(EISDIR);
  if (!S_ISREG(info.st_mode))
    throw InvalidArgument(fmt::format("cannot read '{}': not a regular file (a FIFO, socket or device); give the path "
                                      "of a file", path));
  auto too_large = [&](uint64_t bytes) {
    return InvalidArgument(fmt::format("cannot read '{}': {} bytes or more, above the {} this file may hold; check the path",
                                       path, bytes, max_bytes));
  };
  if (uint64_t(info.st_size) > max_bytes) throw too_large(uint64_t(info.st_size));
  std::string contents;
  // The size is only a hint (the file may grow while it is read): read until end of file.
  contents.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw unreadable(errno);
    }
    if (got == 0) break;
    contents.append(buffer, static_cast<size_t>(got));
    if (contents.size() > max_bytes) throw too_large(contents.size());
  }
  return contents;
}

void check_regular_file(const std::string& path, const char* what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status))
    throw InvalidArgument(fmt::format("{} '{}' not found", what, path));
  if (!std::filesystem::is_regular_file(status))
    throw InvalidArgument(fmt::format("{} '{}' is not a regular file (a FIFO, device or folder); give the path of a file",
                                      what, path));
}

void remove_stale_temporaries(const std::string& folder) {
  std::error_code error;
  std::filesystem::directory_iterator entry(folder, error), end;
  for (; !error && entry != end; entry.increment(error)) {
    const std::optional<TemporaryOwner> owner = temporary_owner(entry->path().filename().string());
    std::error_code ignored;  // one that cannot be removed is left, as before
    if (owner && writer_is_gone(*owner)) std::filesystem::remove(entry->path(), ignored);
  }
}

}  // namespace kestrel::io
