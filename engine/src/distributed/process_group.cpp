// A backend communicator over the world's processes, driven from the host; over the ranks of one
// process, collectives combined on the host.
#include <fmt/format.h>

#include <cstring>

#include "../runtime/device_runtime.h"
#include "../runtime/loaded_plugin.h"
#include "kestrel/distributed.h"
#include "kestrel/half.h"
#include "local_rendezvous.h"

namespace kestrel {

namespace {

// acc[i] += x[i] for n elements of `dtype`, rounded to the dtype after each addition as a transport
// summing rank by rank would (16-bit formats added in f32).
void add_into(char* acc, const char* x, int64_t n, DType dtype) {
  auto each = [&](auto zero, auto add) {
    using T = decltype(zero);
    T* a = reinterpret_cast<T*>(acc);
    const T* b = reinterpret_cast<const T*>(x);
    for (int64_t i = 0; i < n; ++i) a[i] = add(a[i], b[i]);
  };
  auto plain = [](auto a, auto b) { return decltype(a)(a + b); };
  switch (dtype) {
    case DType::f32: return each(float{}, plain);
    case DType::f64: return each(double{}, plain);
    case DType::i32: return each(int32_t{}, plain);
    case DType::i64: return each(int64_t{}, plain);
    case DType::u8: return each(uint8_t{}, plain);
    case DType::f16:
      return each(uint16_t{}, [](uint16_t a, uint16_t b) {
        return kestrel_f32_to_f16(kestrel_f16_to_f32(a) + kestrel_f16_to_f32(b));
      });
    case DType::bf16:
      return each(uint16_t{}, [](uint16_t a, uint16_t b) {
        return kestrel_f32_to_bf16(kestrel_bf16_to_f32(a) + kestrel_bf16_to_f32(b));
      });
  }
}

// The element-wise sum of `block` elements starting at element `first` of every rank's bytes, in rank order.
std::vector<char> sum_over_ranks(const std::vector<std::vector<char>>& all, int64_t first, int64_t block, DType dtype) {
  const size_t bytes = dtype_size(dtype), offset = size_t(first) * bytes;
  std::vector<char> sum(all[0].begin() + long(offset), all[0].begin() + long(offset + size_t(block) * bytes));
  for (size_t r = 1; r < all.size(); ++r) add_into(sum.data(), all[r].data() + offset, block, dtype);
  return sum;
}

// Writes host bytes into `tensor` (contiguous, on its device): in place where the backend's memory is the
// host's (the CPU's), else through a staging tensor.
void upload(const Tensor& tensor, const char* bytes) {
  if (void* host = tensor.host_data())
    return void(std::memcpy(host, bytes, size_t(tensor.numel()) * dtype_size(tensor.dtype())));
  Tensor target = tensor;
  target.copy_from(Tensor::from_host(bytes, tensor.shape(), tensor.dtype(), tensor.device()));
}

}  // namespace

bool ProcessGroup::supported(const Device& device) { return offers_collectives(device.runtime().api()); }

ProcessGroup::ProcessGroup(const Device& device, World& world, double timeout_seconds)
    : device_(device), rank_(world.rank()), size_(world.size()), local_(world.rendezvous()),
      timeout_seconds_(timeout_seconds) {
  if (local_) return;  // the ranks of this process meet on the host
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
  if (local_) return;
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

void ProcessGroup::exchanged(const Tensor& tensor, const std::string& what,
                             const std::function<void(const std::vector<std::vector<char>>&)>& read) {
  const size_t bytes = size_t(tensor.numel()) * dtype_size(tensor.dtype());
  std::vector<char> mine(bytes);
  tensor.copy_to_host(mine.data());
  const std::string where = fmt::format("{}: {}", device_.str(), what);
  const std::vector<std::vector<char>>& all = local_->arrive(rank_, std::move(mine), timeout_seconds_, where);
  struct Departure {
    LocalRendezvous* rendezvous;
    int rank;
    ~Departure() { rendezvous->depart(rank); }
  } departure{local_, rank_};
  // Ranks that disagree on the collective (different sizes) stop here, as MPI's truncation error does.
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].size() != bytes) {
      const std::string why = fmt::format("{}: rank {} gave {} bytes where rank {} gave {}: the ranks issued different "
                                          "collectives",
                                          where, r, all[r].size(), rank_, bytes);
      local_->fail(why);
      throw PeerFailed(why);
    }
  read(all);
}

void ProcessGroup::all_reduce_sum(const Tensor& tensor, const std::string& label) {
  const kestrel_tensor t = tensor.descriptor();
  const std::string what = label.empty() ? fmt::format("all-reduce of {}", tensor.describe()) : label;
  if (local_)
    return exchanged(tensor, what, [&](const auto& all) {
      upload(tensor, sum_over_ranks(all, 0, tensor.numel(), tensor.dtype()).data());
    });
  check(device_.runtime().api().all_reduce_sum(comm_, ordered_after_device(), &t), what);
  issued(what, {tensor});
}

void ProcessGroup::broadcast(const Tensor& tensor, int root, const std::string& label) {
  const kestrel_tensor t = tensor.descriptor();
  const std::string what = label.empty() ? fmt::format("broadcast of {} from rank {}", tensor.describe(), root) : label;
  if (local_) return exchanged(tensor, what, [&](const auto& all) { upload(tensor, all[size_t(root)].data()); });
  check(device_.runtime().api().broadcast(comm_, ordered_after_device(), &t, root), what);
  issued(what, {tensor});
}

void ProcessGroup::reduce_scatter_sum(const Tensor& input, const Tensor& output, const std::string& label) {
  const kestrel_tensor in = input.descriptor(), out = output.descriptor();
  const std::string what = label.empty() ? fmt::format("reduce-scatter of {}", input.describe()) : label;
  if (local_) {
    const int64_t block = output.numel();
    return exchanged(input, what, [&](const auto& all) {
      upload(output, sum_over_ranks(all, rank_ * block, block, input.dtype()).data());
    });
  }
  check(device_.runtime().api().reduce_scatter_sum(comm_, ordered_after_device(), &in, &out), what);
  issued(what, {input, output});
}

void ProcessGroup::all_gather(const Tensor& input, const Tensor& output, const std::string& label) {
  const kestrel_tensor in = input.descriptor(), out = output.descriptor();
  const std::string what = label.empty() ? fmt::format("all-gather of {}", input.describe()) : label;
  if (local_) {
    return exchanged(input, what, [&](const auto& all) {
      std::vector<char> joined;
      for (const std::vector<char>& part : all) joined.insert(joined.end(), part.begin(), part.end());
      upload(output, joined.data());
    });
  }
  check(device_.runtime().api().all_gather(comm_, ordered_after_device(), &in, &out), what);
  issued(what, {input, output});
}

void ProcessGroup::wait(const std::string& context) {
  if (local_) return;  // done as they were issued
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
  if (local_) {  // the other ranks of this process stop waiting; this one's caller ends the run
    const std::string why = fmt::format("rank {} of this process stopped the run", rank_);
    local_->fail(why);
    throw PeerFailed(why);
  }
  device_.runtime().api().comm_abort(comm_, exit_code);
  World::get().abort(exit_code);  // a backend whose abort returns: end this process
}

}  // namespace kestrel
