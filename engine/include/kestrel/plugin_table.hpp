// Plugin SDK (header-only, C++): a plugin's function table, filled from entry functions named like the
// table's fields. The optional entries come in the groups plugin.h defines (all of a group or none), so
// a plugin states its capabilities group by group:
//
//   KESTREL_PLUGIN_ENTRY {
//     using namespace my_backend;  // where probe, device_count, ... are defined
//     return kestrel::plugin_sdk::plugin_table("mine", KESTREL_VERSION, [](kestrel_plugin_api& api) {
//       KESTREL_SET_REQUIRED_ENTRIES(api);
//       KESTREL_SET_EVENT_ENTRIES(api);
//       api.probe = probe;
//     });
//   }
#ifndef KESTREL_PLUGIN_TABLE_HPP
#define KESTREL_PLUGIN_TABLE_HPP

#include "kestrel/plugin.h"
#include "kestrel/plugin_struct_size.hpp"

#define KESTREL_SET_REQUIRED_ENTRIES(api)                                                                    \
  ((api).last_error = last_error, (api).device_count = device_count,                                        \
   (api).device_properties = device_properties, (api).context_create = context_create,                      \
   (api).context_destroy = context_destroy, (api).stream_create = stream_create,                            \
   (api).stream_destroy = stream_destroy, (api).stream_synchronize = stream_synchronize,                    \
   (api).buffer_alloc = buffer_alloc, (api).buffer_free = buffer_free,                                      \
   (api).copy_host_to_device = copy_host_to_device, (api).copy_device_to_host = copy_device_to_host,        \
   (api).copy_device_to_device = copy_device_to_device, (api).memory_stats = memory_stats,                  \
   (api).supports_op = supports_op, (api).launch = launch)
#define KESTREL_SET_EVENT_ENTRIES(api)                                                                       \
  ((api).event_create = event_create, (api).event_destroy = event_destroy, (api).event_record = event_record, \
   (api).stream_wait_event = stream_wait_event, (api).event_synchronize = event_synchronize)
#define KESTREL_SET_PINNED_HOST_ENTRIES(api) ((api).host_alloc = host_alloc, (api).host_free = host_free)
#define KESTREL_SET_MEMORY_CACHE_ENTRIES(api) \
  ((api).memory_trim = memory_trim, (api).memory_reset_peak = memory_reset_peak)
#define KESTREL_SET_CAPTURE_ENTRIES(api)                                                          \
  ((api).capture_begin = capture_begin, (api).capture_end = capture_end,                          \
   (api).graph_launch = graph_launch, (api).graph_destroy = graph_destroy)
#define KESTREL_SET_COLLECTIVE_ENTRIES(api)                                                      \
  ((api).comm_unique_id = comm_unique_id, (api).comm_create = comm_create,                        \
   (api).comm_destroy = comm_destroy, (api).all_reduce_sum = all_reduce_sum, (api).broadcast = broadcast,   \
   (api).reduce_scatter_sum = reduce_scatter_sum, (api).all_gather = all_gather,                          \
   (api).comm_set_timeout = comm_set_timeout, (api).comm_query = comm_query, (api).comm_abort = comm_abort)
// Declares the ten collective entries in the enclosing namespace, as KESTREL_SET_COLLECTIVE_ENTRIES
// names them (their contracts: plugin.h). all_reduce_sum and broadcast take a contiguous tensor of any
// shape; reduce_scatter_sum's input is (world_size * n) and its output (n), all_gather's the reverse.
#define KESTREL_DECLARE_COLLECTIVE_ENTRIES                                                                   \
  kestrel_status comm_unique_id(char* id, size_t id_size);                                                   \
  kestrel_status comm_create(kestrel_context* context, const char* id, int32_t rank, int32_t world_size,     \
                             kestrel_comm** comm);                                                           \
  void comm_destroy(kestrel_comm* comm);                                                                     \
  kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor);   \
  kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor,         \
                           int32_t root);                                                                    \
  kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,  \
                                    const kestrel_tensor* output);                                           \
  kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,          \
                            const kestrel_tensor* output);                                                   \
  kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds);                                       \
  kestrel_status comm_query(kestrel_comm* comm);                                                             \
  void comm_abort(kestrel_comm* comm, int32_t exit_code)
#define KESTREL_SET_GROUP_ENTRIES(api) ((api).group_start = group_start, (api).group_end = group_end)
#define KESTREL_SET_HOST_ADDRESS_ENTRY(api) ((api).buffer_host_address = buffer_host_address)
#define KESTREL_SET_SAVED_BYTES_ENTRY(api) ((api).op_saved_bytes = op_saved_bytes)

namespace kestrel::plugin_sdk {

// The table, built once by `fill` (one static per plugin: each passes its own lambda type) on top of
// the fields every table starts with.
template <class Fill>
const kestrel_plugin_api* plugin_table(const char* name, const char* version, Fill fill) {
  static const kestrel_plugin_api api = [&] {
    kestrel_plugin_api table = abi_init<kestrel_plugin_api>();
    table.abi_major = KESTREL_PLUGIN_ABI_MAJOR;
    table.abi_minor = KESTREL_PLUGIN_ABI_MINOR;
    table.name = name;
    table.version = version;
    fill(table);
    return table;
  }();
  return &api;
}

}  // namespace kestrel::plugin_sdk

#endif  // KESTREL_PLUGIN_TABLE_HPP
