// Throws out of its probe, across the C ABI: a plugin's bug, which must cost the engine this plugin only.
#include <stdexcept>

#include "fake_table.hpp"

static kestrel_status probe(kestrel_probe_result*) { throw std::runtime_error("probe exploded (deliberately)"); }

KESTREL_PLUGIN_ENTRY {
  return fake::entry("probe_throws", [](kestrel_plugin_api& a) { a.probe = probe; });
}
