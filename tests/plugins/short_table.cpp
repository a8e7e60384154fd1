// Declares a table that ends before supports_op although the entries behind it are filled: the engine
// reads only the declared bytes, so it must report supports_op and launch missing (it used to check the
// full table, copy the short one, and crash on the first launch).
#include <cstddef>

#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  return fake::entry("short_table",
                     [](kestrel_plugin_api& a) { a.struct_size = offsetof(kestrel_plugin_api, supports_op); });
}
