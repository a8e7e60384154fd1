// Built against ABI 1.1, whose struct sizes were sizeof (plugin.h's changelog): the engine must refuse
// it and say to rebuild.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  static kestrel_plugin_api api = [] {
    kestrel_plugin_api a = fake::table("old_minor");
    a.abi_minor = 1;
    return a;
  }();
  return &api;
}
