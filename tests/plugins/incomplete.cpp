// Leaves required entries NULL: the engine must name them instead of crashing on first use.
#include "fake_table.hpp"

KESTREL_PLUGIN_ENTRY {
  return fake::entry("incomplete", [](kestrel_plugin_api& a) {
    a.launch = nullptr;
    a.supports_op = nullptr;
  });
}
