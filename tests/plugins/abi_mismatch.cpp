// Claims a future ABI major version: the engine must refuse it and say to rebuild.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  return fake::entry("abi_mismatch", [](kestrel_plugin_api& a) {
    a.abi_major = 999;
    a.abi_minor = 0;
  });
}
