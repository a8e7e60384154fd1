// Collectives of the CUDA plugin, over NCCL.
//
// Communicators are created non-blocking (ncclConfig_t.blocking = 0), so neither their creation nor a
// collective can hang the host: the host polls ncclCommGetAsyncError while it waits. NCCL does not
// report a dead peer on the same host by itself (nccl#279), so each wait also has the communicator's
// timeout: past it, or on an NCCL error, the communicator is aborted (ncclCommAbort, which releases the
// kernels waiting on the peer) and the wait fails with PEER_FAILED. A collective is ordered on its stream
// like a kernel; the stream remembers the communicator of its last collective, and stream_synchronize
// and event_synchronize wait through wait_for_collectives instead of blocking in CUDA.
// comm_create only starts joining: the first collective waits for the join within the timeout the host
// set after creating it (the run's deadline), so a peer that never joins fails the run then, not after
// this plugin's default of 10 minutes.
#include <nccl.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "cuda_comm.hpp"
#include "cuda_ops.hpp"

struct kestrel_comm {
  ncclComm_t nccl = nullptr;
  int device = 0, rank = 0, size = 1;
  double timeout = 600;
  std::mutex mutex;
  kestrel_status failed = KESTREL_STATUS_OK;
  std::string failure;
  uint64_t issued = 0;
  bool joined = false;  // ncclCommInitRankConfig has settled (see join)
};

namespace kestrel_cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_text(ncclResult_t result) { return ncclGetErrorString(result); }

ncclDataType_t nccl_type(kestrel_dtype dtype) {
  switch (dtype) {
    case KESTREL_DTYPE_F32: return ncclFloat32;
    case KESTREL_DTYPE_F16: return ncclFloat16;
    case KESTREL_DTYPE_BF16: return ncclBfloat16;
    case KESTREL_DTYPE_F64: return ncclFloat64;
    case KESTREL_DTYPE_I32: return ncclInt32;
    case KESTREL_DTYPE_I64: return ncclInt64;
    case KESTREL_DTYPE_U8: return ncclUint8;
    default: fail("a collective's tensor has an unknown dtype");
  }
}

void* data_of(const kestrel_tensor* t, const char* role) {
  using namespace kestrel::plugin_shapes;
  if (!t || !t->buffer || !valid_tensor(*t)) fail(std::string("collective: the ") + role + " tensor is malformed");
  if (!is_contiguous(*t)) fail(std::string("collective: the ") + role + " tensor must be contiguous", KESTREL_STATUS_UNSUPPORTED);
  if ((t->offset + uint64_t(numel(*t))) * dtype_bytes(t->dtype) > t->buffer->bytes)
    fail(std::string("collective: the ") + role + " tensor reaches past its buffer");
  return static_cast<char*>(t->buffer->data) + t->offset * dtype_bytes(t->dtype);
}

// Called with the comm's mutex held: aborts NCCL's side (kernels waiting on a peer return) once.
void fail_comm(kestrel_comm& comm, kestrel_status status, const std::string& message) {
  if (comm.failed != KESTREL_STATUS_OK) return;
  comm.failed = status;
  comm.failure = message;
  ncclCommAbort(comm.nccl);
}

// The communicator's asynchronous state, with its mutex held: every NCCL call on a communicator goes
// through the mutex (NCCL's calls on one communicator must not overlap, and none may run while another
// thread aborts it), and none is made once the communicator failed (an aborted handle is freed).
ncclResult_t async_state(kestrel_comm& comm) {
  if (comm.failed != KESTREL_STATUS_OK) fail(comm.failure, comm.failed);
  ncclResult_t result = ncclSuccess;
  ncclCommGetAsyncError(comm.nccl, &result);
  return result;
}

// Waits for a non-blocking NCCL call (ncclInProgress) to settle, within the timeout.
void settle(kestrel_comm& comm, ncclResult_t result, const std::string& what) {
  const auto until = Clock::now() + std::chrono::duration<double>(comm.timeout);
  while (result == ncclInProgress) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::lock_guard<std::mutex> lock(comm.mutex);
    result = async_state(comm);
    if (result == ncclInProgress && Clock::now() > until) {
      fail_comm(comm, KESTREL_STATUS_PEER_FAILED,
                what + " on rank " + std::to_string(comm.rank) + " did not settle within the timeout: a peer is missing");
      fail(comm.failure, comm.failed);
    }
  }
  if (result != ncclSuccess) {
    std::lock_guard<std::mutex> lock(comm.mutex);
    fail_comm(comm, KESTREL_STATUS_PEER_FAILED, what + " failed in NCCL: " + nccl_text(result));
    fail(comm.failure, comm.failed);
  }
}

// Waits, once, for the communicator's creation to settle: every rank has joined, within the timeout.
void join(kestrel_comm& comm) {
  if (comm.joined) return;
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(comm.mutex);
    result = async_state(comm);
  }
  settle(comm, result, "joining the communicator of " + std::to_string(comm.size) + " ranks");
  comm.joined = true;
}

// Enqueues one NCCL call on the stream, refusing a failed communicator, and marks the stream.
template <class Call>
void issue(kestrel_comm* comm, kestrel_stream* stream, const std::string& what, Call call) {
  set_device(comm->device);
  join(*comm);
  ncclResult_t started = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (comm->failed != KESTREL_STATUS_OK) fail(comm->failure, comm->failed);
    started = call();
  }
  settle(*comm, started, what);
  stream->comm = comm;
  stream->comm_issued = Clock::now();
  stream->comm_what = what + " (collective #" + std::to_string(++comm->issued) + ")";
}

std::string describe(const char* op, int64_t count, kestrel_dtype dtype) {
  return std::string(op) + " of " + std::to_string(count) + " elements of dtype " + std::to_string(int(dtype));
}

}  // namespace

void wait_for_collectives(kestrel_stream* stream) {
  kestrel_comm* comm = stream->comm;
  if (!comm) return;
  set_device(comm->device);
  const auto until = stream->comm_issued + std::chrono::duration<double>(comm->timeout);
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream->cuda);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) check_cuda(state, "cudaStreamQuery (waiting for a collective)");
    std::lock_guard<std::mutex> lock(comm->mutex);
    const ncclResult_t result = async_state(*comm);
    if (result != ncclSuccess && result != ncclInProgress)
      fail_comm(*comm, KESTREL_STATUS_PEER_FAILED, stream->comm_what + " on rank " + std::to_string(comm->rank) +
                                                      " failed in NCCL: " + nccl_text(result));
    else if (Clock::now() > until)
      fail_comm(*comm, KESTREL_STATUS_PEER_FAILED,
                stream->comm_what + " on rank " + std::to_string(comm->rank) + " of " + std::to_string(comm->size) +
                    " did not complete within the communicator's timeout (" + std::to_string(comm->timeout) +
                    " s): a peer stalled or died (NCCL cannot tell which; the ranks that did not fail the same way "
                    "are the suspects)");
    if (comm->failed != KESTREL_STATUS_OK) fail(comm->failure, comm->failed);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  stream->comm = nullptr;
}

kestrel_status comm_unique_id(char* id, size_t id_size) {
  return guarded([&] {
    static_assert(sizeof(ncclUniqueId) <= 128, "the ABI's id holds 128 bytes");
    if (!id || id_size < sizeof(ncclUniqueId)) fail("comm_unique_id: the id buffer needs 128 bytes");
    ncclUniqueId unique;
    const ncclResult_t result = ncclGetUniqueId(&unique);
    if (result != ncclSuccess) fail("ncclGetUniqueId failed: " + nccl_text(result), KESTREL_STATUS_UNAVAILABLE);
    std::memcpy(id, &unique, sizeof unique);
  });
}

kestrel_status comm_create(kestrel_context* context, const char* id, int32_t rank, int32_t world_size,
                           kestrel_comm** out) {
  return guarded([&] {
    if (!id || rank < 0 || rank >= world_size) fail("comm_create: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
    auto comm = std::make_unique<kestrel_comm>();
    comm->device = context->device;
    comm->rank = rank;
    comm->size = world_size;
    ncclUniqueId unique;
    std::memcpy(&unique, id, sizeof unique);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // nothing may hang the host: every wait below has a deadline
    set_device(context->device);
    const ncclResult_t started = ncclCommInitRankConfig(&comm->nccl, world_size, unique, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress)
      fail("ncclCommInitRankConfig as rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
               " failed: " + nccl_text(started) + (started == ncclInvalidUsage ? " (two ranks on one GPU? one device per rank)" : ""),
           KESTREL_STATUS_UNAVAILABLE);
    comm->joined = started == ncclSuccess;  // else the first collective waits for the join (join)
    *out = comm.release();
  });
}

void comm_destroy(kestrel_comm* comm) {
  if (!comm) return;
  set_device(comm->device);
  {
    std::lock_guard<std::mutex> lock(comm->mutex);  // no comm_query overlaps the last NCCL calls
    if (comm->failed == KESTREL_STATUS_OK && !comm->joined) {
      ncclResult_t state = ncclSuccess;  // a join under way (or failed) is aborted, not waited for
      ncclCommGetAsyncError(comm->nccl, &state);
      if (state != ncclSuccess) fail_comm(*comm, KESTREL_STATUS_PEER_FAILED, "destroyed before every rank joined");
    }
    if (comm->failed == KESTREL_STATUS_OK) {
      // Flush what was issued, within the timeout; a communicator that cannot is aborted instead.
      ncclResult_t result = ncclCommFinalize(comm->nccl);
      const auto until = Clock::now() + std::chrono::duration<double>(comm->timeout);
      while (result == ncclInProgress && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ncclCommGetAsyncError(comm->nccl, &result);
      }
      if (result == ncclSuccess)
        ncclCommDestroy(comm->nccl);
      else
        ncclCommAbort(comm->nccl);
    }
  }
  delete comm;
}

kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor) {
  return guarded([&] {
    void* data = data_of(tensor, "all-reduce");
    const size_t count = size_t(kestrel::plugin_shapes::numel(*tensor));
    const ncclDataType_t type = nccl_type(tensor->dtype);
    issue(comm, stream, describe("all-reduce", count, tensor->dtype),
          [&] { return ncclAllReduce(data, data, count, type, ncclSum, comm->nccl, stream->cuda); });
  });
}

kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root) {
  return guarded([&] {
    void* data = data_of(tensor, "broadcast");
    if (root < 0 || root >= comm->size) fail("broadcast: root " + std::to_string(root) + " is not a rank");
    const size_t count = size_t(kestrel::plugin_shapes::numel(*tensor));
    const ncclDataType_t type = nccl_type(tensor->dtype);
    issue(comm, stream, describe("broadcast", count, tensor->dtype),
          [&] { return ncclBroadcast(data, data, count, type, root, comm->nccl, stream->cuda); });
  });
}

kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output) {
  return guarded([&] {
    void* in = data_of(input, "reduce-scatter input");
    void* out = data_of(output, "reduce-scatter output");
    const int64_t n = kestrel::plugin_shapes::numel(*output);
    if (input->dtype != output->dtype || kestrel::plugin_shapes::numel(*input) != n * comm->size)
      fail("reduce-scatter: the input must hold world size x the output's elements, of the same dtype");
    const ncclDataType_t type = nccl_type(input->dtype);
    issue(comm, stream, describe("reduce-scatter", n * comm->size, input->dtype),
          [&] { return ncclReduceScatter(in, out, size_t(n), type, ncclSum, comm->nccl, stream->cuda); });
  });
}

kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output) {
  return guarded([&] {
    void* in = data_of(input, "all-gather input");
    void* out = data_of(output, "all-gather output");
    const int64_t n = kestrel::plugin_shapes::numel(*input);
    if (input->dtype != output->dtype || kestrel::plugin_shapes::numel(*output) != n * comm->size)
      fail("all-gather: the output must hold world size x the input's elements, of the same dtype");
    const ncclDataType_t type = nccl_type(input->dtype);
    issue(comm, stream, describe("all-gather", n * comm->size, input->dtype),
          [&] { return ncclAllGather(in, out, size_t(n), type, comm->nccl, stream->cuda); });
  });
}

kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds) {
  return guarded([&] {
    if (!(seconds > 0)) fail("comm_set_timeout: the timeout must be a positive number of seconds");
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->timeout = seconds;
  });
}

kestrel_status comm_query(kestrel_comm* comm) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->failed == KESTREL_STATUS_OK) {
    ncclResult_t result = ncclSuccess;
    ncclCommGetAsyncError(comm->nccl, &result);
    if (result != ncclSuccess && result != ncclInProgress)
      fail_comm(*comm, KESTREL_STATUS_PEER_FAILED, "NCCL reported: " + nccl_text(result));
  }
  if (comm->failed != KESTREL_STATUS_OK) Boundary::message() = comm->failure;
  return comm->failed;
}

void comm_abort(kestrel_comm* comm, int32_t) {
  // NCCL's abort releases this rank's kernels; the other ranks' own timeouts (or their launcher) end them.
  std::lock_guard<std::mutex> lock(comm->mutex);
  fail_comm(*comm, KESTREL_STATUS_PEER_FAILED, "the communicator was aborted");
}

kestrel_status group_start() {
  return guarded([] {
    const ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) fail("ncclGroupStart failed: " + nccl_text(result), KESTREL_STATUS_INTERNAL);
  });
}

kestrel_status group_end() {
  return guarded([] {
    const ncclResult_t result = ncclGroupEnd();
    if (result != ncclSuccess && result != ncclInProgress)
      fail("ncclGroupEnd failed: " + nccl_text(result), KESTREL_STATUS_PEER_FAILED);
  });
}

}  // namespace kestrel_cuda
