// Collectives of the Vulkan plugin, host-staged over MPI through the transport the CPU plugin uses too
// (plugins/mpi). They are asynchronous, as the CPU plugin's are: issuing one submits what its stream has
// recorded and queues the collective on the transport's thread, which first waits for the fences of the
// device work that wrote the tensors, then runs MPI on their host memory — the buffers' own mapping where
// device memory is host-visible (lavapipe, integrated GPUs), else host buffers that a reader stream of
// the communicator's own fills in queue order. The host goes on recording backward meanwhile. Work on
// the collective's stream after it (and any host wait on that stream) first waits for the collective and
// writes staged results back to the device, in stream order (wait_for_collectives). The reader's ring
// of submissions bounds how far ahead of the device the host may issue staged collectives.
//
// A communicator and the streams it issued collectives on are used by one host thread at a time (as
// NCCL's are): waiting on any of those streams settles the communicator's bookkeeping. After a failure
// the host ends the job (comm_abort): the transport's thread may still be inside MPI with the memory.
#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../mpi/mpi_entries.hpp"
#include "vk_capture.hpp"
#include "vk_comm.hpp"

namespace kestrel_vk {

// A queued collective's leftovers: the host buffers its staged tensors use, and its staged result.
struct PendingCollective {
  uint64_t ticket = 0;
  kestrel_stream* stream = nullptr;      // it was issued on
  std::vector<kestrel_buffer*> held;      // host buffers, back to the spares once it is done
  kestrel_buffer* result = nullptr;      // the device tensor's buffer written back from `staged_result`
  uint64_t result_offset = 0, result_bytes = 0;
  const kestrel_buffer* staged_result = nullptr;
};

}  // namespace kestrel_vk

struct kestrel_comm {
  kestrel::mpi_transport::Transport transport;
  kestrel_context* context;
  // Reads tensors in device-only memory into host buffers, in queue order after the work that wrote
  // them, without making the collectives' stream wait for anything (created on first use).
  kestrel_stream* reader = nullptr;
  std::vector<kestrel_buffer*> spare;                 // host buffers for staged tensors, free
  std::deque<kestrel_vk::PendingCollective> pending;  // in issue order
  std::set<kestrel_stream*> streams;                  // the streams whose `comm` is this one
  kestrel_comm(kestrel_context* c, int32_t rank, int32_t world_size) : transport("vulkan", rank, world_size), context(c) {}
};

namespace kestrel_vk {
namespace {

using kestrel::mpi_transport::check_blocks;
using kestrel::mpi_transport::collective_bytes;
using kestrel::mpi_transport::collective_offset;
using kestrel::mpi_transport::Transport;
using Entries = kestrel::mpi_transport::MpiEntries<Boundary, kestrel_comm>;
using kestrel::plugin_shapes::numel;

kestrel_buffer* take_host_buffer(kestrel_comm* comm, uint64_t bytes) {
  for (size_t i = 0; i < comm->spare.size(); ++i)
    if (comm->spare[i]->reserved >= bytes) {
      kestrel_buffer* buffer = comm->spare[i];
      comm->spare.erase(comm->spare.begin() + long(i));
      return buffer;
    }
  return allocate_host_buffer(comm->context, std::max<uint64_t>(bytes, 1));
}

void return_host_buffers(kestrel_comm* comm, std::vector<kestrel_buffer*>& buffers) {
  comm->spare.insert(comm->spare.end(), buffers.begin(), buffers.end());
  buffers.clear();
}

// The streams' collectives that leave staged results in [offset, offset + bytes) of `buffer`'s memory.
std::vector<kestrel_stream*> writing_back_into(kestrel_comm* comm, const kestrel_buffer* buffer, uint64_t offset,
                                               uint64_t bytes) {
  std::vector<kestrel_stream*> streams;
  const uint64_t begin = buffer->offset + offset, end = begin + bytes;
  for (const PendingCollective& p : comm->pending) {
    if (!p.result || p.result->buffer != buffer->buffer) continue;
    const uint64_t from = p.result->offset + p.result_offset;
    if (from < end && begin < from + p.result_bytes) streams.push_back(p.stream);
  }
  return streams;
}

// One collective being issued on `stream`: the host memory MPI gets for each tensor, and the device
// work MPI must wait for.
class Issue {
 public:
  // Collectives are not captured, so one issued while capturing is refused. A failed transport refuses at
  // once. Everything the stream recorded is submitted now: the collective waits for it.
  Issue(kestrel_comm* comm, kestrel_stream* stream) : comm_(comm), stream_(stream) {
    if (stream->recording) refuse_while_capturing("a collective");
    comm->transport.check();
    if (stream->comm && stream->comm != comm) wait_for_collectives(stream);  // order across communicators
    wait_for_submissions_of(stream);
    writers_.insert(writers_.end(), stream->awaited.begin(), stream->awaited.end());
  }
  // Not issued after all (the transport refused it): its host buffers go back to the spares once the
  // reader has finished filling them.
  ~Issue() {
    if (pending_.held.empty()) return;
    try {
      if (read_back_) synchronize(comm_->reader);
      return_host_buffers(comm_, pending_.held);
    } catch (...) {
      // the device failed: the buffers are left alone
    }
  }
  Issue(const Issue&) = delete;
  Issue& operator=(const Issue&) = delete;

  // Host memory holding tensor `t` for MPI. `read`: MPI reads it (its bytes must be there first);
  // `result`: MPI writes it (the device tensor gets those bytes afterwards).
  char* host(const kestrel_tensor* t, const char* role, bool read, bool result) {
    const uint64_t offset = collective_offset(t, role), bytes = collective_bytes(t);
    // A staged result of an earlier collective, still to be written back where this one reads, lands first.
    if (read)
      for (kestrel_stream* writer : writing_back_into(comm_, t->buffer, offset, bytes)) {
        wait_for_collectives(writer);
        wait_for_submissions_of(writer);
      }
    if (t->buffer->mapped) return static_cast<char*>(t->buffer->mapped) + offset;
    kestrel_buffer* staged = take_host_buffer(comm_, bytes);
    pending_.held.push_back(staged);
    if (read && bytes > 0) {
      kestrel_stream* reader = reader_stream();
      copy_on_device(reader, staged, 0, t->buffer, offset, bytes);
      wait_for_submissions_of(reader);
      read_back_ = true;
    }
    if (result) {
      pending_.result = t->buffer;
      pending_.result_offset = offset;
      pending_.result_bytes = bytes;
      pending_.staged_result = staged;
    }
    return static_cast<char*>(staged->mapped);
  }

  // Queues the collective (`queue(transport, ready)` returns its ticket); the stream waits for it.
  template <class Queue>
  void queue(Queue queue) {
    Transport::Ready ready = [writers = std::move(writers_)] {
      for (const std::shared_ptr<Fence>& fence : writers) wait_fence(*fence);
    };
    // The bookkeeping's room first: nothing may fail once the transport owns the memory.
    comm_->pending.emplace_back();
    const bool listed = comm_->streams.insert(stream_).second;
    try {
      pending_.ticket = queue(comm_->transport, std::move(ready));
    } catch (...) {
      comm_->pending.pop_back();
      if (listed) comm_->streams.erase(stream_);
      throw;
    }
    pending_.stream = stream_;
    std::swap(comm_->pending.back(), pending_);
    stream_->comm = comm_;
    stream_->comm_ticket = comm_->pending.back().ticket;
  }

 private:
  kestrel_comm* comm_;
  kestrel_stream* stream_;
  std::vector<std::shared_ptr<Fence>> writers_;  // the submissions MPI waits for
  PendingCollective pending_;
  bool read_back_ = false;  // the reader copies into pending_.held

  // Submits what `s` recorded; MPI will wait for it.
  void wait_for_submissions_of(kestrel_stream* s) {
    flush(s);
    if (std::shared_ptr<Fence> latest = latest_fence(s)) writers_.push_back(std::move(latest));
  }

  kestrel_stream* reader_stream() {
    if (!comm_->reader) {
      auto reader = std::make_unique<kestrel_stream>();
      reader->context = comm_->context;
      create_stream_objects(reader.get());
      comm_->reader = reader.release();
    }
    return comm_->reader;
  }
};

// Drops the stream's collectives after the transport failed. Their host buffers are left alone: the
// transport's thread may still be inside MPI with them.
void forget_collectives(kestrel_comm* comm, kestrel_stream* stream) {
  auto& pending = comm->pending;
  pending.erase(std::remove_if(pending.begin(), pending.end(), [&](const auto& p) { return p.stream == stream; }),
                pending.end());
}

}  // namespace

void wait_for_collectives(kestrel_stream* stream) {
  kestrel_comm* comm = stream->comm;
  if (!comm) return;
  try {
    comm->transport.wait(stream->comm_ticket);
  } catch (...) {
    forget_collectives(comm, stream);  // `comm` stays: later work on the stream fails the same way
    throw;
  }
  // The stream's collectives leave the communicator's books before anything below may fail.
  std::vector<PendingCollective> done;
  for (auto p = comm->pending.begin(); p != comm->pending.end();) {
    if (p->stream != stream) {
      ++p;
      continue;
    }
    done.push_back(std::move(*p));
    p = comm->pending.erase(p);
  }
  stream->comm = nullptr;  // the write-backs below record on the stream
  comm->streams.erase(stream);
  std::exception_ptr failed;
  for (PendingCollective& p : done) {
    if (p.result && !failed) try {
        copy_to_device(stream, p.result, p.result_offset, p.staged_result->mapped, p.result_bytes);
      } catch (...) {
        failed = std::current_exception();  // the results not yet written back are lost
      }
    return_host_buffers(comm, p.held);
  }
  if (failed) std::rethrow_exception(failed);
  // Submitted now, in their own batch: the caller may be about to record into upload space it reserved.
  if (std::any_of(done.begin(), done.end(), [](const PendingCollective& p) { return p.result; })) flush(stream);
}

void leave_collectives(kestrel_stream* stream) noexcept {
  kestrel_comm* comm = stream->comm;
  if (!comm) return;
  try {
    wait_for_collectives(stream);
  } catch (...) {
  }
  comm->streams.erase(stream);
  stream->comm = nullptr;
}

kestrel_status comm_unique_id(char* id, size_t id_size) { return Entries::unique_id(id, id_size); }

kestrel_status comm_create(kestrel_context* context, const char*, int32_t rank, int32_t world_size,
                           kestrel_comm** out) {
  return Boundary::guarded([&] { *out = new kestrel_comm(context, rank, world_size); });
}

void comm_destroy(kestrel_comm* comm) {
  if (!comm) return;
  // Streams the host did not wait on get their results now; they must not point at this communicator after.
  const std::set<kestrel_stream*> streams = comm->streams;
  for (kestrel_stream* stream : streams) leave_collectives(stream);
  std::string failure;
  const bool failed = comm->transport.query(failure) != KESTREL_STATUS_OK;
  if (comm->reader) {  // first: its copies may still be filling spares
    destroy_stream_objects(comm->reader);
    delete comm->reader;
  }
  for (kestrel_buffer* buffer : comm->spare) destroy_host_buffer(buffer);
  if (!failed)  // else see forget_collectives
    for (PendingCollective& p : comm->pending)
      for (kestrel_buffer* buffer : p.held) destroy_host_buffer(buffer);
  delete comm;
}

kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor) {
  return Boundary::guarded([&] {
    Issue issue(comm, stream);
    char* data = issue.host(tensor, "all-reduce", true, true);
    issue.queue([&](Transport& t, Transport::Ready ready) {
      return t.all_reduce_sum(data, numel(*tensor), tensor->dtype, std::move(ready));
    });
  });
}

kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root) {
  return Boundary::guarded([&] {
    Issue issue(comm, stream);
    const bool sends = comm->transport.rank() == root;
    char* data = issue.host(tensor, "broadcast", sends, !sends);
    issue.queue([&](Transport& t, Transport::Ready ready) {
      return t.broadcast(data, numel(*tensor), tensor->dtype, root, std::move(ready));
    });
  });
}

kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    collective_offset(input, "reduce-scatter input");  // both well-formed before they are compared
    collective_offset(output, "reduce-scatter output");
    check_blocks(input, output, comm->transport.size(), "reduce-scatter", "input", "output");
    Issue issue(comm, stream);
    const char* in = issue.host(input, "reduce-scatter input", true, false);
    char* out = issue.host(output, "reduce-scatter output", false, true);
    issue.queue([&](Transport& t, Transport::Ready ready) {
      return t.reduce_scatter_sum(in, out, numel(*output), input->dtype, std::move(ready));
    });
  });
}

kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output) {
  return Boundary::guarded([&] {
    collective_offset(input, "all-gather input");
    collective_offset(output, "all-gather output");
    check_blocks(output, input, comm->transport.size(), "all-gather", "output", "input");
    Issue issue(comm, stream);
    const char* in = issue.host(input, "all-gather input", true, false);
    char* out = issue.host(output, "all-gather output", false, true);
    issue.queue([&](Transport& t, Transport::Ready ready) {
      return t.all_gather(in, out, numel(*input), input->dtype, std::move(ready));
    });
  });
}

kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds) { return Entries::set_timeout(comm, seconds); }

kestrel_status comm_query(kestrel_comm* comm) { return Entries::query(comm); }

void comm_abort(kestrel_comm*, int32_t exit_code) { Transport::abort(exit_code); }

}  // namespace kestrel_vk
