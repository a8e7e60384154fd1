// Defaults for the optional entries of the plugin ABI, applied once when a plugin is loaded so the rest
// of the engine calls every entry unconditionally.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loaded_plugin.h"

namespace kestrel {
namespace {

kestrel_status default_probe(kestrel_probe_result* result) {
  result->usable = 1;
  result->priority = 0;
  result->reason[0] = '\0';
  return KESTREL_STATUS_OK;
}
kestrel_status default_initialize() { return KESTREL_STATUS_OK; }
void default_shutdown() {}

// Without events every launch has completed on return, so there is nothing to record or wait for.
kestrel_status default_event_create(kestrel_context*, kestrel_event** event) {
  *event = nullptr;
  return KESTREL_STATUS_OK;
}
void default_event_destroy(kestrel_event*) {}
kestrel_status default_event_record(kestrel_event*, kestrel_stream*) { return KESTREL_STATUS_OK; }
kestrel_status default_stream_wait_event(kestrel_stream*, kestrel_event*) { return KESTREL_STATUS_OK; }
kestrel_status default_event_synchronize(kestrel_event*) { return KESTREL_STATUS_OK; }

kestrel_status default_host_alloc(kestrel_context*, uint64_t bytes, void** ptr) {
  // Round up: aligned_alloc wants a multiple of the alignment.
  *ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  return *ptr ? KESTREL_STATUS_OK : KESTREL_STATUS_OUT_OF_MEMORY;
}
void default_host_free(kestrel_context*, void* ptr) { std::free(ptr); }

kestrel_status default_memory_trim(kestrel_context*) { return KESTREL_STATUS_OK; }
kestrel_status default_memory_reset_peak(kestrel_context*) { return KESTREL_STATUS_OK; }

kestrel_status unsupported_capture_begin(kestrel_stream*) { return KESTREL_STATUS_UNSUPPORTED; }
kestrel_status unsupported_capture_end(kestrel_stream*, kestrel_graph**) { return KESTREL_STATUS_UNSUPPORTED; }
kestrel_status unsupported_graph_launch(kestrel_graph*, kestrel_stream*) { return KESTREL_STATUS_UNSUPPORTED; }
void noop_graph_destroy(kestrel_graph*) {}
kestrel_status unsupported_comm_unique_id(char*, size_t) { return KESTREL_STATUS_UNSUPPORTED; }
kestrel_status unsupported_comm_create(kestrel_context*, const char*, int32_t, int32_t, kestrel_comm**) {
  return KESTREL_STATUS_UNSUPPORTED;
}
void noop_comm_destroy(kestrel_comm*) {}
kestrel_status unsupported_all_reduce_sum(kestrel_comm*, kestrel_stream*, const kestrel_tensor*) {
  return KESTREL_STATUS_UNSUPPORTED;
}
kestrel_status unsupported_broadcast(kestrel_comm*, kestrel_stream*, const kestrel_tensor*, int32_t) {
  return KESTREL_STATUS_UNSUPPORTED;
}
kestrel_status unsupported_exchange(kestrel_comm*, kestrel_stream*, const kestrel_tensor*, const kestrel_tensor*) {
  return KESTREL_STATUS_UNSUPPORTED;
}
kestrel_status unsupported_comm_set_timeout(kestrel_comm*, double) { return KESTREL_STATUS_UNSUPPORTED; }
kestrel_status unsupported_comm_query(kestrel_comm*) { return KESTREL_STATUS_UNSUPPORTED; }
void noop_comm_abort(kestrel_comm*, int32_t) {}
// Without grouping each collective is issued as it is called.
kestrel_status default_group_edge() { return KESTREL_STATUS_OK; }
// Buffers the host cannot address: tensors leave the device by copy.
void* no_host_address(kestrel_buffer*) { return nullptr; }
// Nothing saved in a layout of the plugin's own: the ops that would need it are unsupported.
kestrel_status no_saved_bytes(kestrel_context*, const kestrel_op*, uint64_t*) { return KESTREL_STATUS_UNSUPPORTED; }

template <class Fn>
void default_to(Fn*& entry, Fn* fallback) {
  if (!entry) entry = fallback;
}

}  // namespace

kestrel_plugin_api complete_plugin_api(const kestrel_plugin_api& from_plugin) {
  kestrel_plugin_api api{};
  // An older plugin declares a shorter table: copy what it knows, leave the rest NULL (then default).
  size_t known = from_plugin.struct_size < sizeof(api) ? from_plugin.struct_size : sizeof(api);
  std::memcpy(&api, &from_plugin, known);
  set_abi_size(api);
  default_to(api.probe, default_probe);
  default_to(api.initialize, default_initialize);
  default_to(api.shutdown, default_shutdown);
  if (!api.event_create || !api.event_destroy || !api.event_record || !api.stream_wait_event ||
      !api.event_synchronize) {
    api.event_create = default_event_create;
    api.event_destroy = default_event_destroy;
    api.event_record = default_event_record;
    api.stream_wait_event = default_stream_wait_event;
    api.event_synchronize = default_event_synchronize;
  }
  if (!api.host_alloc || !api.host_free) {
    api.host_alloc = default_host_alloc;
    api.host_free = default_host_free;
  }
  default_to(api.memory_trim, default_memory_trim);
  default_to(api.memory_reset_peak, default_memory_reset_peak);
  if (!api.capture_begin || !api.capture_end || !api.graph_launch || !api.graph_destroy) {
    api.capture_begin = unsupported_capture_begin;
    api.capture_end = unsupported_capture_end;
    api.graph_launch = unsupported_graph_launch;
    api.graph_destroy = noop_graph_destroy;
  }
  // Training needs the whole set (timeouts and abort included): a plugin offering only the 1.0 four is
  // treated as offering none, so the engine's "no collectives" message names it.
  if (!api.comm_unique_id || !api.comm_create || !api.comm_destroy || !api.all_reduce_sum || !api.broadcast ||
      !api.reduce_scatter_sum || !api.all_gather || !api.comm_set_timeout || !api.comm_query || !api.comm_abort) {
    api.comm_unique_id = unsupported_comm_unique_id;
    api.comm_create = unsupported_comm_create;
    api.comm_destroy = noop_comm_destroy;
    api.all_reduce_sum = unsupported_all_reduce_sum;
    api.broadcast = unsupported_broadcast;
    api.reduce_scatter_sum = unsupported_exchange;
    api.all_gather = unsupported_exchange;
    api.comm_set_timeout = unsupported_comm_set_timeout;
    api.comm_query = unsupported_comm_query;
    api.comm_abort = noop_comm_abort;
  }
  if (!api.group_start || !api.group_end) {
    api.group_start = default_group_edge;
    api.group_end = default_group_edge;
  }
  default_to(api.buffer_host_address, no_host_address);
  default_to(api.op_saved_bytes, no_saved_bytes);
  return api;
}

bool offers_capture(const kestrel_plugin_api& api) { return api.capture_begin != unsupported_capture_begin; }
bool offers_collectives(const kestrel_plugin_api& api) { return api.comm_create != unsupported_comm_create; }
bool offers_saved_bytes(const kestrel_plugin_api& api) { return api.op_saved_bytes != no_saved_bytes; }

std::string missing_required_entries(const kestrel_plugin_api& api) {
  std::vector<const char*> missing;
  auto need = [&](const void* entry, const char* name) {
    if (!entry) missing.push_back(name);
  };
  need(reinterpret_cast<const void*>(api.last_error), "last_error");
  need(reinterpret_cast<const void*>(api.device_count), "device_count");
  need(reinterpret_cast<const void*>(api.device_properties), "device_properties");
  need(reinterpret_cast<const void*>(api.context_create), "context_create");
  need(reinterpret_cast<const void*>(api.context_destroy), "context_destroy");
  need(reinterpret_cast<const void*>(api.stream_create), "stream_create");
  need(reinterpret_cast<const void*>(api.stream_destroy), "stream_destroy");
  need(reinterpret_cast<const void*>(api.stream_synchronize), "stream_synchronize");
  need(reinterpret_cast<const void*>(api.buffer_alloc), "buffer_alloc");
  need(reinterpret_cast<const void*>(api.buffer_free), "buffer_free");
  need(reinterpret_cast<const void*>(api.copy_host_to_device), "copy_host_to_device");
  need(reinterpret_cast<const void*>(api.copy_device_to_host), "copy_device_to_host");
  need(reinterpret_cast<const void*>(api.copy_device_to_device), "copy_device_to_device");
  need(reinterpret_cast<const void*>(api.memory_stats), "memory_stats");
  need(reinterpret_cast<const void*>(api.supports_op), "supports_op");
  need(reinterpret_cast<const void*>(api.launch), "launch");
  std::string joined;
  for (const char* name : missing) joined += (joined.empty() ? "" : ", ") + std::string(name);
  return joined;
}

}  // namespace kestrel
