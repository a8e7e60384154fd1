// Collectives of the Vulkan plugin, host-staged over MPI through the transport the CPU plugin uses too
// (plugins/mpi). A collective waits for its stream, hands MPI the tensors' host memory — the buffers'
// own mapping where device memory is host-visible (lavapipe, integrated GPUs), else copies read back
// from the device — and, once MPI is done, writes staged results back in stream order. So it blocks
// the calling thread for the transfer: correct and simple, but without the overlap of the CPU plugin's
// collectives, which run on the transport's thread while the host goes on. Nothing better is measured
// yet (a device-side path needs a transport that reads GPU memory, as NCCL does on CUDA).
#include <memory>
#include <string>
#include <vector>

#include "../mpi/mpi_entries.hpp"
#include "vk_capture.hpp"
#include "vk_comm.hpp"

struct kestrel_comm {
  kestrel::mpi_transport::Transport transport;
  // Host copies of tensors in device-only memory. Held apart: a failed transport's worker may still be
  // inside MPI with them, so then they outlive the communicator (see comm_destroy).
  struct Staging {
    std::vector<char> input, output;
  };
  std::unique_ptr<Staging> staging = std::make_unique<Staging>();
  kestrel_comm(int32_t rank, int32_t world_size) : transport("vulkan", rank, world_size) {}
};

namespace kestrel_vk {
namespace {

using kestrel::mpi_transport::check_blocks;
using kestrel::mpi_transport::collective_bytes;
using kestrel::mpi_transport::collective_offset;
using kestrel::mpi_transport::Transport;
using Entries = kestrel::mpi_transport::MpiEntries<Boundary, kestrel_comm>;
using kestrel::plugin_shapes::numel;

// A tensor as MPI sees it: host memory holding its bytes.
struct HostSide {
  const kestrel_tensor* tensor;
  uint64_t offset, bytes;  // in its buffer
  char* data;
  bool staged;  // `data` is a copy, written back by run()
};

// The tensor's host memory once the stream is idle: its buffer's mapping, or `staging` holding a copy
// (read from the device when `read`: the collective's input).
HostSide host_side(kestrel_stream* stream, const kestrel_tensor* t, const char* role, std::vector<char>& staging,
                   bool read) {
  const uint64_t offset = collective_offset(t, role), bytes = collective_bytes(t);
  if (t->buffer->mapped) return {t, offset, bytes, static_cast<char*>(t->buffer->mapped) + offset, false};
  staging.resize(bytes);
  if (read) copy_to_host(stream, staging.data(), t->buffer, offset, bytes);
  return {t, offset, bytes, staging.data(), true};
}

// Runs `queue`'s collective on the transport and waits for it; then a staged result goes back to the device.
template <class Queue>
void run(kestrel_comm* comm, kestrel_stream* stream, const HostSide& result, Queue queue) {
  comm->transport.wait(queue(comm->transport));
  if (result.staged) copy_to_device(stream, result.tensor->buffer, result.offset, result.data, result.bytes);
}

// Collectives run now, so the stream must have finished what came before: nothing is captured. A failed
// transport refuses at once, before the staging memory its worker may still use is touched.
void begin(kestrel_comm* comm, kestrel_stream* stream) {
  if (stream->recording) refuse_while_capturing("a collective");
  comm->transport.check();
  synchronize(stream);
}

}  // namespace

kestrel_status comm_unique_id(char* id, size_t id_size) { return Entries::unique_id(id, id_size); }

kestrel_status comm_create(kestrel_context*, const char*, int32_t rank, int32_t world_size, kestrel_comm** out) {
  return Entries::create(rank, world_size, out);
}

void comm_destroy(kestrel_comm* comm) {
  if (!comm) return;
  std::string failure;
  if (comm->transport.query(failure) != KESTREL_STATUS_OK) (void)comm->staging.release();  // see Staging
  delete comm;
}

kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor) {
  return Boundary::guarded([&] {
    begin(comm, stream);
    const HostSide data = host_side(stream, tensor, "all-reduce", comm->staging->input, true);
    run(comm, stream, data, [&](Transport& t) { return t.all_reduce_sum(data.data, numel(*tensor), tensor->dtype); });
  });
}

kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root) {
  return Boundary::guarded([&] {
    begin(comm, stream);
    const HostSide data =
        host_side(stream, tensor, "broadcast", comm->staging->input, comm->transport.rank() == root);
    run(comm, stream, data, [&](Transport& t) { return t.broadcast(data.data, numel(*tensor), tensor->dtype, root); });
  });
}

kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    collective_offset(input, "reduce-scatter input");  // both well-formed before they are compared
    collective_offset(output, "reduce-scatter output");
    check_blocks(input, output, comm->transport.size(), "reduce-scatter", "input", "output");
    begin(comm, stream);
    const HostSide in = host_side(stream, input, "reduce-scatter input", comm->staging->input, true);
    const HostSide out = host_side(stream, output, "reduce-scatter output", comm->staging->output, false);
    run(comm, stream, out,
        [&](Transport& t) { return t.reduce_scatter_sum(in.data, out.data, numel(*output), input->dtype); });
  });
}

kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    collective_offset(input, "all-gather input");
    collective_offset(output, "all-gather output");
    check_blocks(output, input, comm->transport.size(), "all-gather", "output", "input");
    begin(comm, stream);
    const HostSide in = host_side(stream, input, "all-gather input", comm->staging->input, true);
    const HostSide out = host_side(stream, output, "all-gather output", comm->staging->output, false);
    run(comm, stream, out, [&](Transport& t) { return t.all_gather(in.data, out.data, numel(*input), input->dtype); });
  });
}

kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds) { return Entries::set_timeout(comm, seconds); }

kestrel_status comm_query(kestrel_comm* comm) { return Entries::query(comm); }

void comm_abort(kestrel_comm*, int32_t exit_code) { Transport::abort(exit_code); }

}  // namespace kestrel_vk
