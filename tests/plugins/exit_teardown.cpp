// A working device whose "driver" tears itself down in an exit handler registered when a context is
// created, as NVIDIA's does: after that handler has run, any call on the context or its stream is a
// crash on real hardware. This plugin reports it and ends the process with status 70 instead, so a test
// can tell whether the engine released its devices before such handlers run.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "fake_table.hpp"

struct kestrel_context {};
struct kestrel_stream {};

namespace {

bool driver_torn_down = false;
kestrel_context the_context;
kestrel_stream the_stream;

void tear_down_driver() { driver_torn_down = true; }

void check_driver_alive(const char* call) {
  if (!driver_torn_down) return;
  const char* prefix = "exit_teardown plugin: ";
  const char* suffix = " after the driver's exit handler ran\n";
  (void)!write(2, prefix, std::strlen(prefix));
  (void)!write(2, call, std::strlen(call));
  (void)!write(2, suffix, std::strlen(suffix));
  _exit(70);
}

kestrel_status device_properties(int32_t, kestrel_device_properties* props) {
  std::strncpy(props->name, "exit teardown test device", sizeof(props->name) - 1);
  props->kind = KESTREL_DEVICE_KIND_SOFTWARE;
  props->dtype_mask = 1u << KESTREL_DTYPE_F32;
  return KESTREL_STATUS_OK;
}

kestrel_status context_create(int32_t, kestrel_context** out) {
  std::atexit(tear_down_driver);
  *out = &the_context;
  return KESTREL_STATUS_OK;
}

void context_destroy(kestrel_context*) { check_driver_alive("context_destroy"); }

kestrel_status stream_create(kestrel_context*, kestrel_stream** out) {
  *out = &the_stream;
  return KESTREL_STATUS_OK;
}

void stream_destroy(kestrel_stream*) { check_driver_alive("stream_destroy"); }

kestrel_status stream_synchronize(kestrel_stream*) {
  check_driver_alive("stream_synchronize");
  return KESTREL_STATUS_OK;
}

void shutdown() { check_driver_alive("shutdown"); }

}  // namespace

KESTREL_PLUGIN_ENTRY {
  return fake::entry("exit_teardown", [](kestrel_plugin_api& a) {
    a.device_properties = device_properties;
    a.context_create = context_create;
    a.context_destroy = context_destroy;
    a.stream_create = stream_create;
    a.stream_destroy = stream_destroy;
    a.stream_synchronize = stream_synchronize;
    a.shutdown = shutdown;
  });
}
