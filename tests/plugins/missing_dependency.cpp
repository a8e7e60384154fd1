// Links against a library that the build deletes afterwards, so loading fails in the dynamic loader,
// as a CUDA plugin does on a machine without libcudart.
#include "fake_table.hpp"

int vanishing_dependency_function();

static kestrel_status device_count(int32_t* count) {
  *count = vanishing_dependency_function();
  return KESTREL_STATUS_OK;
}

KESTREL_PLUGIN_ENTRY {
  return fake::entry("missing_dependency", [](kestrel_plugin_api& a) { a.device_count = device_count; });
}
