// Passes its probe but fails to initialise, like a driver that refuses a context.
#include "fake_table.hpp"

static const char* last_error() { return "driver handshake failed (deliberately, for the fault tests)"; }
static kestrel_status initialize() { return KESTREL_STATUS_UNAVAILABLE; }

KESTREL_PLUGIN_ENTRY {
  return fake::entry("init_fails", [](kestrel_plugin_api& a) {
    a.last_error = last_error;
    a.initialize = initialize;
  });
}
