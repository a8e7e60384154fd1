// Reports INT32_MAX devices: the engine must skip it instead of describing devices for ever.
#include <cstdint>

#include "fake_table.hpp"

static kestrel_status device_count(int32_t* count) {
  *count = INT32_MAX;
  return KESTREL_STATUS_OK;
}

KESTREL_PLUGIN_ENTRY {
  return fake::entry("countless_devices", [](kestrel_plugin_api& a) { a.device_count = device_count; });
}
