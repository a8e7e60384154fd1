// What the plugins on the MPI transport share at their collective entries: the checks on a collective's
// tensors (templates on the tensor type: each plugin defines kestrel_buffer itself, with `bytes`, the size
// the host asked for), and the entries that do the same in every such plugin (MpiEntries).
#pragma once
#include <cstdint>
#include <string>

#include "kestrel/plugin_boundary.hpp"
#include "mpi_transport.hpp"

namespace kestrel::mpi_transport {

// Where the tensor's first element lies in its buffer, in bytes; it must be contiguous and inside the buffer.
template <class Tensor>
uint64_t collective_offset(const Tensor* t, const char* role) {
  using plugin_errors::fail;
  if (!t || !t->buffer) fail(std::string("collective: no ") + role + " tensor");
  if (!plugin_shapes::valid_tensor(*t)) fail(std::string("collective: the ") + role + " tensor is malformed");
  if (!plugin_shapes::is_contiguous(*t))
    fail(std::string("collective: the ") + role + " tensor must be contiguous", KESTREL_STATUS_UNSUPPORTED);
  plugin_sdk::check_in_buffer(*t, (std::string("collective: the ") + role).c_str());
  return t->offset * plugin_shapes::dtype_bytes(t->dtype);
}

inline uint64_t collective_bytes(const kestrel_tensor* t) {
  return uint64_t(plugin_shapes::numel(*t)) * plugin_shapes::dtype_bytes(t->dtype);
}

// reduce-scatter's input and all-gather's output (`whole`) hold world_size blocks of the other's size.
inline void check_blocks(const kestrel_tensor* whole, const kestrel_tensor* block, int32_t world_size, const char* op,
                         const char* whole_role, const char* block_role) {
  using plugin_errors::fail;
  const int64_t whole_count = plugin_shapes::numel(*whole), block_count = plugin_shapes::numel(*block);
  if (whole->dtype != block->dtype) fail(std::string(op) + ": input and output dtypes differ");
  if (whole_count != block_count * world_size)
    fail(std::string(op) + ": the " + whole_role + " has " + std::to_string(whole_count) + " elements, not world size (" +
         std::to_string(world_size) + ") x the " + block_role + "'s " + std::to_string(block_count));
}

// The entries that only create, configure and end the transport. Boundary: the plugin's ErrorBoundary;
// Comm: its kestrel_comm, holding a `transport` and constructed from (rank, world_size).
template <class Boundary, class Comm>
struct MpiEntries {
  static kestrel_status unique_id(char* id, size_t id_size) {
    return Boundary::guarded([&] { Transport::unique_id(id, id_size); });
  }
  static kestrel_status create(int32_t rank, int32_t world_size, Comm** out) {
    return Boundary::guarded([&] { *out = new Comm(rank, world_size); });
  }
  static kestrel_status set_timeout(Comm* comm, double seconds) {
    return Boundary::guarded([&] { comm->transport.set_timeout(seconds); });
  }
  static kestrel_status query(Comm* comm) {
    std::string message;
    const kestrel_status status = comm->transport.query(message);
    if (status != KESTREL_STATUS_OK) Boundary::message() = message;
    return status;
  }
};

}  // namespace kestrel::mpi_transport
