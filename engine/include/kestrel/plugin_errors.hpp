// Plugin SDK (header-only, C++): how a plugin written in C++ turns failures into the plain-C ABI's
// status codes and per-thread last_error text. Plugins throw Failure (through fail()) anywhere below an
// entry point; each entry point wraps its body in guarded(), which catches and reports.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "kestrel/plugin.h"

namespace kestrel::plugin_errors {

// A failed request: the status the entry point returns and the message last_error() will show.
struct Failure : std::runtime_error {
  kestrel_status status;
  Failure(kestrel_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

[[noreturn]] inline void fail(const std::string& message, kestrel_status status = KESTREL_STATUS_INVALID_ARGUMENT) {
  throw Failure(status, message);
}

// Runs `body`; a Failure becomes its status, running out of host memory OUT_OF_MEMORY, and any other
// exception INTERNAL naming the plugin. The message goes to `last_error`, the plugin's thread_local
// string (each plugin keeps its own: a variable defined here would be shared by every plugin that the
// dynamic linker happens to unify).
template <class Body>
kestrel_status guarded(std::string& last_error, const char* plugin, Body&& body) {
  try {
    body();
    return KESTREL_STATUS_OK;
  } catch (const Failure& f) {
    last_error = f.what();
    return f.status;
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return KESTREL_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error = std::string("internal error in the ") + plugin + " plugin: " + e.what();
    return KESTREL_STATUS_INTERNAL;
  } catch (...) {  // nothing may cross the C boundary
    last_error = std::string("internal error in the ") + plugin + " plugin: an exception of unknown type";
    return KESTREL_STATUS_INTERNAL;
  }
}

// A plugin's error boundary: its per-thread last_error text and the wrapper its entries run in.
// `name` is the plugin's name, a constant of its own (`inline constexpr char kPluginName[] = "cpu";`):
// being the plugin's, it gives each plugin its own thread_local text even where the dynamic linker
// unifies template instances of two libraries.
template <const char* name>
struct ErrorBoundary {
  static std::string& message() {
    thread_local std::string text;
    return text;
  }
  static const char* last_error() { return message().c_str(); }
  template <class Body>
  static kestrel_status guarded(Body&& body) {
    return plugin_errors::guarded(message(), name, body);
  }
};

}  // namespace kestrel::plugin_errors
