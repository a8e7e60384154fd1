// Its probe says it cannot run here, as a CUDA plugin does on a machine without a GPU.
#include <cstring>

#include "fake_table.hpp"

static kestrel_status probe(kestrel_probe_result* result) {
  result->usable = 0;
  std::strncpy(result->reason, "no Widget accelerator found (this test plugin never runs)", sizeof(result->reason) - 1);
  return KESTREL_STATUS_OK;
}

KESTREL_PLUGIN_ENTRY {
  return fake::entry("widget", [](kestrel_plugin_api& a) { a.probe = probe; });
}
