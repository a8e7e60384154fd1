// Plugin SDK (header-only, C++): on/off switches read from the environment, with one convention for
// every KESTREL_* switch: on when set to exactly "1".
#pragma once

#include <cstdlib>
#include <cstring>

namespace kestrel::plugin_env {

inline bool flag(const char* name) {
  const char* value = std::getenv(name);
  return value && std::strcmp(value, "1") == 0;
}

}  // namespace kestrel::plugin_env
