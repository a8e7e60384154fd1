// A backend communicator over the world's processes, driven from the host.
#include <fmt/format.h>

#include "../runtime/device_runtime.h"
#include "../runtime/loaded_plugin.h"
#include "kestrel/distributed.h"

namespace kestrel {

bool ProcessGroup::supported(const Device& device) { return offers_collectives(device.runtime().api()); }

ProcessGroup::ProcessGroup(const Device& device, World& world, double timeout_seconds)
    : device_(device), rank_(world.rank()), size_(world.size()) {
  DeviceRuntime& runtime = device_.runtime();
  const kestrel_plugin_api& api = runtime.api();
  if (!supported(device_))
    throw Unsupported(fmt::format("{}: the {} backend offers no collectives, so it cannot train with several processes; "
                                  "pick a backend that does (kestrel devices lists them)",
                                  device_.str(), device_.backend()));
  // Every rank needs the same id: rank 0's, handed round by the launcher's channel.
  char id[128] = {};
  if (world.is_root()) runtime.check(api.comm_unique_id(id, sizeof id), "making a communicator id");
  std::vector<std::string> ids = world.all_gather(std::string(id, sizeof id));
  // The id "mpi": the plugin's collectives run over MPI itself (the CPU and Vulkan plugins), which a
  // process no launcher started has not initialised yet.
  if (std::string(ids.front().c_str()) == "mpi") world.require_mpi(device_.backend());
  runtime.check(api.comm_create(runtime.context(), ids.front().data(), rank_, size_, &comm_),
                fmt::format("joining the communicator as rank {} of {}", rank_, size_));
  try {
    check(api.comm_set_timeout(comm_, timeout_seconds), "setting the collectives' timeout");
    check(api.stream_create(runtime.context(), &stream_), "creating the collectives' stream");
    check(api.event_create(runtime.context(), &computed_), "creating the collectives' event");
  } catch (...) {
    if (stream_) api.stream_destroy(stream_);
    api.comm_destroy(comm_);
    throw;
  }
}

ProcessGroup::~ProcessGroup() {
  const kestrel_plugin_api& api = device_.runtime().api();
  api.stream_synchronize(stream_);  // a failure was reported to whoever waited
  in_flight_.clear();
  api.event_destroy(computed_);
  api.stream_destroy(stream_);
  api.comm_destroy(comm_);
}

void ProcessGroup::check(kestrel_status status, const std::string& what) {
  if (status == KESTREL_STATUS_PEER_FAILED)
    throw PeerFailed(fmt::format("{}: {}: {}", device_.str(), what, device_.runtime().api().last_error()));
  device_.runtime().check(status, what);
}

kestrel_stream* ProcessGroup::ordered_after_device() {
  const kestrel_plugin_api& api = device_.runtime().api();
  check(api.event_record(computed_, device_.runtime().stream()), "ordering a collective after the device's work");
  check(api.stream_wait_event(stream_, computed_), "ordering a collective after the device's work");
  return stream_;
}

void ProcessGroup::issued(std::string label, std::initializer_list<Tensor> tensors) {
  labels_.push_back(fmt::format("#{} {}", ++issued_, label));
  in_flight_.insert(in_flight_.end(), tensors);
}

void ProcessGroup::all_reduce_sum(const Tensor& tensor, const std::string& label) {
  const kestrel_tensor t = tensor.descriptor();
  const std::string what = label.empty() ? fmt::format("all-reduce of {}", tensor.describe()) : label;
  check(device_.runtime().api().all_reduce_sum(comm_, ordered_after_device(), &t), what);
  issued(what, {tensor});
}

void ProcessGroup::broadcast(const Tensor& tensor, int root, const std::string& label) {
  const kestrel_tensor t = tensor.descriptor();
  const std::string what = label.empty() ? fmt::format("broadcast of {} from rank {}", tensor.describe(), root) : label;
  check(device_.runtime().api().broadcast(comm_, ordered_after_device(), &t, root), what);
  issued(what, {tensor});
}

void ProcessGroup::reduce_scatter_sum(const Tensor& input, const Tensor& output, const std::string& label) {
  const kestrel_tensor in = input.descriptor(), out = output.descriptor();
  const std::string what = label.empty() ? fmt::format("reduce-scatter of {}", input.describe()) : label;
  check(device_.runtime().api().reduce_scatter_sum(comm_, ordered_after_device(), &in, &out), what);
  issued(what, {input, output});
}

void ProcessGroup::all_gather(const Tensor& input, const Tensor& output, const std::string& label) {
  const kestrel_tensor in = input.descriptor(), out = output.descriptor();
  const std::string what = label.empty() ? fmt::format("all-gather of {}", input.describe()) : label;
  check(device_.runtime().api().all_gather(comm_, ordered_after_device(), &in, &out), what);
  issued(what, {input, output});
}

void ProcessGroup::wait(const std::string& context) {
  const kestrel_plugin_api& api = device_.runtime().api();
  const kestrel_status status = api.stream_synchronize(stream_);
  if (status == KESTREL_STATUS_OK) {
    in_flight_.clear();
    labels_.clear();
    return;
  }
  const std::string message = api.last_error();
  std::string in_flight;
  for (const std::string& label : labels_) in_flight += (in_flight.empty() ? "" : ", ") + label;
  if (status == KESTREL_STATUS_PEER_FAILED)
    throw PeerFailed(fmt::format("{}: {} (collectives in flight: {})", context, message, in_flight));
  device_.runtime().check(status, context);
}

void ProcessGroup::abort(int exit_code) {
  device_.runtime().api().comm_abort(comm_, exit_code);
  World::get().abort(exit_code);  // a backend whose abort returns: end this process
}

}  // namespace kestrel
