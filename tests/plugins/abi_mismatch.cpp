// Claims a future ABI major version: the engine must refuse it and say to rebuild.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  static kestrel_plugin_api api = [] {
    kestrel_plugin_api a = fake::table("abi_mismatch");
    a.abi_major = 999;
    a.abi_minor = 0;
    return a;
  }();
  return &api;
}
