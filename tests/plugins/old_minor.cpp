// Built against ABI 1.1, whose struct sizes were sizeof (plugin.h's changelog): the engine must refuse
// it and say to rebuild.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  return fake::entry("old_minor", [](kestrel_plugin_api& a) { a.abi_minor = 1; });
}
