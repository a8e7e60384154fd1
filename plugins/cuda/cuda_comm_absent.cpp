// Built without NCCL: the CUDA plugin offers no collectives, so no stream ever waits for one.
#include "cuda_comm.hpp"

namespace kestrel_cuda {
void wait_for_collectives(kestrel_stream*) {}
}  // namespace kestrel_cuda
