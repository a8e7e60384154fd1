// Wall-clock seconds for rates, ETAs and redraw intervals. Engine-internal.
#pragma once
#include <chrono>

namespace kestrel {

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void restart() { start_ = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

}  // namespace kestrel
