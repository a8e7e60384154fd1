// Leaves required entries NULL: the engine must name them instead of crashing on first use.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  static kestrel_plugin_api api = [] {
    kestrel_plugin_api a = fake::table("incomplete");
    a.launch = nullptr;
    a.supports_op = nullptr;
    return a;
  }();
  return &api;
}
