// Declares a table that ends before supports_op although the entries behind it are filled: the engine
// reads only the declared bytes, so it must report supports_op and launch missing (it used to check the
// full table, copy the short one, and crash on the first launch).
#include <cstddef>

#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  static kestrel_plugin_api api = [] {
    kestrel_plugin_api a = fake::table("short_table");
    a.struct_size = offsetof(kestrel_plugin_api, supports_op);
    return a;
  }();
  return &api;
}
