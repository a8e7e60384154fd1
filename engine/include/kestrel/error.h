// Typed errors of the public C++ API. Plugin statuses become these in one place (runtime/status.cpp).
#pragma once
#include <stdexcept>
#include <string>

namespace kestrel {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad arguments from the caller: shapes, dtypes, names. The message says what was expected.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Two tensors on different devices met in one op; the message names both and the call to make.
class DeviceMismatch : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A backend or device cannot be used (not found, skipped, failed to start): the message says why.
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

// The op or dtype is not offered by this backend.
class Unsupported : public Error {
 public:
  using Error::Error;
};

// A device allocation failed. The context stays usable; a smaller request may succeed.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Any other failure reported by a backend.
class BackendError : public Error {
 public:
  using Error::Error;
};

// Training stopped because the loss became NaN or infinite (RunConfig::nonfinite_loss): the message
// names the step and what to try.
class NonFiniteLossError : public Error {
 public:
  using Error::Error;
};

// Anomaly detection (AnomalyModeGuard) found an op whose output or gradient holds NaN or infinity: the
// message names the op, the layer and whether it was forward or backward.
class AnomalyError : public NonFiniteLossError {
 public:
  using NonFiniteLossError::NonFiniteLossError;
};

}  // namespace kestrel
