// The collective entries of the CUDA plugin's table, over NCCL (cuda_comm.cpp; see the ABI in plugin.h).
#pragma once
#include "kestrel/plugin_table.hpp"

namespace kestrel_cuda {

KESTREL_DECLARE_COLLECTIVE_ENTRIES;
kestrel_status group_start();
kestrel_status group_end();

// Waits for the stream's last collective by polling (NCCL errors, the communicator's timeout), never
// blocking in CUDA; throws Failure with PEER_FAILED. Nothing to do without one. Without NCCL: a no-op.
void wait_for_collectives(kestrel_stream* stream);

}  // namespace kestrel_cuda
