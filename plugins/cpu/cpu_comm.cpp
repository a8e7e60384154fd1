// Collectives of the CPU plugin: its buffers are host memory, so they go straight to the MPI transport
// (plugins/mpi), which runs them on a thread of its own while the host goes on computing backward. The
// stream a collective was issued on remembers it: whatever the stream does next waits for it first,
// which keeps the ABI's stream order.
#include "../mpi/mpi_entries.hpp"
#include "cpu_comm.hpp"
#include "cpu_context.hpp"

struct kestrel_comm {
  kestrel::mpi_transport::Transport transport;
  kestrel_comm(int32_t rank, int32_t world_size) : transport("cpu", rank, world_size) {}
};

namespace kestrel_cpu {
namespace {

using kestrel::mpi_transport::Transport;
using Entries = kestrel::mpi_transport::MpiEntries<Boundary, kestrel_comm>;
using kestrel::mpi_transport::check_blocks;
using kestrel::plugin_shapes::numel;

char* data_of(const kestrel_tensor* t, const char* role) {
  const uint64_t offset = kestrel::mpi_transport::collective_offset(t, role);  // checks t first
  return static_cast<char*>(t->buffer->data) + offset;
}

// Makes `stream` wait for the collective `queue` issues on `comm`.
template <class Queue>
void issue(kestrel_comm* comm, kestrel_stream* stream, Queue queue) {
  if (stream->recording) fail("collectives cannot be captured on the cpu backend", KESTREL_STATUS_UNSUPPORTED);
  if (stream->comm && stream->comm != comm) wait_for_collectives(stream);  // order across communicators
  stream->comm_ticket = queue(comm->transport);
  stream->comm = comm;
}

}  // namespace

void wait_for_collectives(kestrel_stream* stream) {
  kestrel_comm* comm = stream->comm;
  if (!comm) return;
  comm->transport.wait(stream->comm_ticket);
  stream->comm = nullptr;
}

kestrel_status comm_unique_id(char* id, size_t id_size) { return Entries::unique_id(id, id_size); }

kestrel_status comm_create(kestrel_context*, const char*, int32_t rank, int32_t world_size, kestrel_comm** out) {
  return Entries::create(rank, world_size, out);
}

void comm_destroy(kestrel_comm* comm) { delete comm; }

kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor) {
  return Boundary::guarded([&] {
    char* data = data_of(tensor, "all-reduce");
    issue(comm, stream, [&](Transport& t) { return t.all_reduce_sum(data, numel(*tensor), tensor->dtype); });
  });
}

kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root) {
  return Boundary::guarded([&] {
    char* data = data_of(tensor, "broadcast");
    issue(comm, stream, [&](Transport& t) { return t.broadcast(data, numel(*tensor), tensor->dtype, root); });
  });
}

kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    const char* in = data_of(input, "reduce-scatter input");
    char* out = data_of(output, "reduce-scatter output");
    check_blocks(input, output, comm->transport.size(), "reduce-scatter", "input", "output");
    issue(comm, stream, [&](Transport& t) { return t.reduce_scatter_sum(in, out, numel(*output), input->dtype); });
  });
}

kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    const char* in = data_of(input, "all-gather input");
    char* out = data_of(output, "all-gather output");
    check_blocks(output, input, comm->transport.size(), "all-gather", "output", "input");
    issue(comm, stream, [&](Transport& t) { return t.all_gather(in, out, numel(*input), input->dtype); });
  });
}

kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds) { return Entries::set_timeout(comm, seconds); }

kestrel_status comm_query(kestrel_comm* comm) { return Entries::query(comm); }

void comm_abort(kestrel_comm*, int32_t exit_code) { Transport::abort(exit_code); }

}  // namespace kestrel_cpu
