#include "kestrel/graph.h"

#include <utility>

#include "device_runtime.h"
#include "loaded_plugin.h"

namespace kestrel {

bool CapturedGraph::supported(const Device& device) { return offers_capture(device.runtime().api()); }

CapturedGraph CapturedGraph::capture(const Device& device, const std::function<void()>& record) {
  DeviceRuntime& runtime = device.runtime();
  runtime.check(runtime.api().capture_begin(runtime.stream()), "beginning a capture");
  kestrel_graph* graph = nullptr;
  try {
    record();
  } catch (...) {
    // End the capture so the stream works again; what was recorded is discarded.
    if (runtime.api().capture_end(runtime.stream(), &graph) == KESTREL_STATUS_OK) runtime.api().graph_destroy(graph);
    throw;
  }
  runtime.check(runtime.api().capture_end(runtime.stream(), &graph), "ending a capture");
  CapturedGraph captured;
  captured.device_ = device;
  captured.graph_ = graph;
  return captured;
}

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : device_(std::move(other.device_)), graph_(std::exchange(other.graph_, nullptr)) {}

// Steals `other` into a temporary first and swaps it in: the temporary's destructor then releases the
// graph *this held, and self-assignment leaves the graph in place.
CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  CapturedGraph stolen(std::move(other));
  std::swap(device_, stolen.device_);
  std::swap(graph_, stolen.graph_);
  return *this;
}

CapturedGraph::~CapturedGraph() {
  if (graph_) device_.runtime().api().graph_destroy(graph_);
  graph_ = nullptr;
}

void CapturedGraph::replay() const {
  DeviceRuntime& runtime = device_.runtime();
  runtime.check(runtime.api().graph_launch(graph_, runtime.stream()), "replaying a captured graph");
}

}  // namespace kestrel
