// The collective entries of the CUDA plugin's table, over NCCL (cuda_comm.cpp; see the ABI in plugin.h).
#pragma once
#include "kestrel/plugin.h"

namespace kestrel_cuda {

kestrel_status comm_unique_id(char* id, size_t id_size);
kestrel_status comm_create(kestrel_context* context, const char* id, int32_t rank, int32_t world_size,
                           kestrel_comm** comm);
void comm_destroy(kestrel_comm* comm);
// tensor: any shape, contiguous.
kestrel_status all_reduce_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor);
kestrel_status broadcast(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor, int32_t root);
// input: (world_size * n); output: (n).
kestrel_status reduce_scatter_sum(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                  const kestrel_tensor* output);
// input: (n); output: (world_size * n).
kestrel_status all_gather(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                          const kestrel_tensor* output);
kestrel_status comm_set_timeout(kestrel_comm* comm, double seconds);
kestrel_status comm_query(kestrel_comm* comm);
void comm_abort(kestrel_comm* comm, int32_t exit_code);
kestrel_status group_start();
kestrel_status group_end();

// Waits for the stream's last collective by polling (NCCL errors, the communicator's timeout), never
// blocking in CUDA; throws Failure with PEER_FAILED. Nothing to do without one. Without NCCL: a no-op.
void wait_for_collectives(kestrel_stream* stream);

}  // namespace kestrel_cuda
