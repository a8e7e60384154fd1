// Marks an object busy for a scope, so that a call made again from inside it (a progress callback
// calling fit) is refused rather than nested. Engine-internal.
#pragma once
#include <string>

#include "kestrel/error.h"

namespace kestrel {

class BusyGuard {
 public:
  // Throws InvalidArgument(refusal) when `busy` is already set; otherwise sets it until the scope ends.
  BusyGuard(bool& busy, const std::string& refusal) : busy_(busy) {
    if (busy_) throw InvalidArgument(refusal);
    busy_ = true;
  }
  ~BusyGuard() { busy_ = false; }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  bool& busy_;
};

}  // namespace kestrel
