// Plugin tables: whatever a plugin's entry returns — any struct_size, any entries set or NULL — the host
// copies only the declared bytes, defaults the optional entries and names the missing required ones; it
// never reads past the table or leaves a NULL entry it would call. (Entries are compared, never called.)
#include <algorithm>
#include <cstring>
#include <vector>

#include "../../engine/src/runtime/loaded_plugin.h"
#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The table as a plugin's library holds it: a heap block of exactly the fuzzed bytes, whose
  // struct_size (the ABI's promise) is at most that many. Reading one byte more is an overread that the
  // address sanitizer reports.
  if (size < sizeof(size_t)) return 0;
  std::vector<uint8_t> block(data, data + size);
  size_t declared = 0;
  std::memcpy(&declared, block.data(), sizeof declared);
  declared = std::min(declared, size);
  std::memcpy(block.data(), &declared, sizeof declared);
  const auto& from_plugin = *reinterpret_cast<const kestrel_plugin_api*>(block.data());
  kestrel::fuzz::expect_clear_errors("plugin_table", [&] {
    const kestrel_plugin_api api = kestrel::complete_plugin_api(from_plugin);
    const std::string missing = kestrel::missing_required_entries(api);
    // Every optional entry has a value after completion; a required one is NULL only if named missing.
    if (!api.probe || !api.initialize || !api.shutdown || !api.event_create || !api.host_alloc || !api.memory_trim ||
        !api.capture_begin || !api.comm_create)
      std::abort();
    if (!api.launch && missing.find("launch") == std::string::npos) std::abort();
  });
  return 0;
}
