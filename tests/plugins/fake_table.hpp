// A complete function table whose entries do nothing useful: the deliberately broken test plugins
// start from it and break one thing each, so the engine reaches exactly the check under test.
#pragma once
#include "kestrel/plugin.h"
#include "kestrel/plugin_table.hpp"

namespace fake {

inline const char* last_error() { return "deliberately broken test plugin"; }
inline kestrel_status unsupported() { return KESTREL_STATUS_UNSUPPORTED; }
inline kestrel_status device_count(int32_t* count) {
  *count = 1;
  return KESTREL_STATUS_OK;
}
inline kestrel_status device_properties(int32_t, kestrel_device_properties*) { return unsupported(); }
inline kestrel_status context_create(int32_t, kestrel_context**) { return unsupported(); }
inline void context_destroy(kestrel_context*) {}
inline kestrel_status stream_create(kestrel_context*, kestrel_stream**) { return unsupported(); }
inline void stream_destroy(kestrel_stream*) {}
inline kestrel_status stream_synchronize(kestrel_stream*) { return unsupported(); }
inline kestrel_status buffer_alloc(kestrel_context*, uint64_t, kestrel_buffer**) { return unsupported(); }
inline void buffer_free(kestrel_buffer*) {}
inline kestrel_status copy_host_to_device(kestrel_stream*, kestrel_buffer*, uint64_t, const void*, uint64_t) { return unsupported(); }
inline kestrel_status copy_device_to_host(kestrel_stream*, void*, kestrel_buffer*, uint64_t, uint64_t) { return unsupported(); }
inline kestrel_status copy_device_to_device(kestrel_stream*, kestrel_buffer*, uint64_t, kestrel_buffer*, uint64_t, uint64_t) {
  return unsupported();
}
inline kestrel_status memory_stats(kestrel_context*, kestrel_memory_stats*) { return unsupported(); }
inline int32_t supports_op(kestrel_context*, const kestrel_op*) { return 0; }
inline kestrel_status launch(kestrel_stream*, const kestrel_op*) { return unsupported(); }

inline kestrel_plugin_api table(const char* name) {
  kestrel_plugin_api api = kestrel::abi_init<kestrel_plugin_api>();
  api.abi_major = KESTREL_PLUGIN_ABI_MAJOR;
  api.abi_minor = KESTREL_PLUGIN_ABI_MINOR;
  api.name = name;
  api.version = "0.0-test";
  KESTREL_SET_REQUIRED_ENTRIES(api);
  return api;
}

// What a plugin's entry returns: table(name) with `edit` applied to it once (each plugin breaks one thing),
// kept for the library's lifetime.
template <class Edit>
const kestrel_plugin_api* entry(const char* name, Edit edit) {
  static const kestrel_plugin_api api = [&] {
    kestrel_plugin_api a = table(name);
    edit(a);
    return a;
  }();
  return &api;
}

}  // namespace fake
