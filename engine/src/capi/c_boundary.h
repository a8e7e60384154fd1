// The C API's error boundary: C++ errors become a kes_status and the thread's last message. Engine-internal.
#pragma once
#include <new>
#include <string>

#include "kestrel/c_api.h"
#include "kestrel/config.h"
#include "kestrel/distributed.h"
#include "kestrel/error.h"

namespace kestrel::capi {

std::string& last_error();

// Runs `body`; whatever it throws becomes the matching status, its message kept for kes_last_error().
template <class Body>
kes_status guarded(Body&& body) {
  try {
    body();
    last_error().clear();
    return KES_OK;
  } catch (const NonFiniteLossError& e) {
    last_error() = e.what();
    return KES_NONFINITE_LOSS;
  } catch (const InvalidArgument& e) {  // ConfigError and DeviceMismatch too
    last_error() = e.what();
    return KES_INVALID_ARGUMENT;
  } catch (const Unsupported& e) {
    last_error() = e.what();
    return KES_UNSUPPORTED;
  } catch (const OutOfMemory& e) {
    last_error() = e.what();
    return KES_OUT_OF_MEMORY;
  } catch (const BackendUnavailable& e) {
    last_error() = e.what();
    return KES_UNAVAILABLE;
  } catch (const PeerFailed& e) {
    last_error() = e.what();
    return KES_PEER_FAILED;
  } catch (const BackendError& e) {
    last_error() = e.what();
    return KES_BACKEND_ERROR;
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return KES_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return KES_INTERNAL;
  } catch (...) {
    last_error() = "internal error: an unknown exception";
    return KES_INTERNAL;
  }
}

// Throws InvalidArgument naming `what` when a required pointer is NULL.
inline void need(const void* pointer, const char* what) {
  if (!pointer) throw InvalidArgument(std::string(what) + " is NULL");
}

}  // namespace kestrel::capi
