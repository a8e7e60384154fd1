// Capture and replay: the launches made by a piece of host code are recorded once on a device's
// stream and replayed with one call (CUDA Graphs on NVIDIA GPUs, a recorded op list on the CPU, a
// recorded command buffer on Vulkan, wherever the backend offers it). Replays skip everything the host
// does per op: autograd, shape checks, allocation, parameter blocks, launch overhead.
//
// The rules come from the plugin ABI (capture_begin in kestrel/plugin.h): op parameters are frozen at
// capture, so what changes between replays must live in device tensors that the host refreshes with
// launches before each replay (copies into static inputs, ops::CounterBaseScope for random draws);
// tensors the code allocates while capturing must be released before the capture ends; tensors made
// before it and used by it must outlive the graph.
#pragma once
#include <functional>

#include "kestrel/device.h"

typedef struct kestrel_graph kestrel_graph;

namespace kestrel {

class CapturedGraph {
 public:
  // Whether `device`'s backend offers capture at all.
  static bool supported(const Device& device);
  // Runs `record` with the device's stream capturing; nothing is computed until replay(). Throws the
  // backend's error (e.g. a tensor allocated inside and still alive) and leaves the stream usable.
  static CapturedGraph capture(const Device& device, const std::function<void()>& record);

  CapturedGraph() = default;
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph& operator=(CapturedGraph&& other) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph();

  bool valid() const { return graph_ != nullptr; }
  // Enqueues the recorded work on the device's stream.
  void replay() const;

 private:
  Device device_;
  kestrel_graph* graph_ = nullptr;
};

}  // namespace kestrel
