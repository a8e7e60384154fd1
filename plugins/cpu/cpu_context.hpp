// The CPU plugin's context, stream and graph objects: the caching allocator and capture state shared
// by cpu_plugin.cpp (allocation, copies, launches) and cpu_capture.cpp (recording and replay).
#pragma once
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cpu_common.hpp"

namespace kestrel_cpu {

// Free blocks by rounded size. Training allocates the same shapes every step, and returning large
// blocks to the OS each time costs page faults (torch's CPU caching does the same).
using BlockCache = std::unordered_map<uint64_t, std::vector<void*>>;

inline uint64_t rounded_size(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64; }

struct Context {
  std::mutex mutex;
  uint64_t allocated = 0, cached = 0, peak = 0, count = 0;
  uint64_t held_by_graphs = 0;  // memory kept for captured graphs (ABI: never lent outside them)
  BlockCache free_blocks;
  // The open capture, if any: allocations and frees by its thread belong to it.
  kestrel_graph* capturing = nullptr;
  std::thread::id capture_thread;

  void trim();
  ~Context() { trim(); }
};

// Called with the context's mutex held. While this thread captures, blocks come from the graph's own
// pool first (take_from_capture returns null when it has none of that size), and every block freed
// goes to that pool: the graph's replays may still use it.
bool capture_owns_this_thread(const Context& context);
void* take_from_capture(Context& context, uint64_t rounded);
void note_capture_allocation(Context& context, kestrel_buffer* buffer);
void give_to_capture(Context& context, kestrel_buffer* buffer, uint64_t rounded);

}  // namespace kestrel_cpu

struct kestrel_context : kestrel_cpu::Context {};
struct kestrel_stream {
  kestrel_context* context;
  kestrel_graph* recording = nullptr;  // launches and device copies are recorded into it, not run
  // The last collective issued on the stream (cpu_comm.cpp): it runs on its communicator's thread, and
  // what the stream does next waits for it. Null once it has been waited for.
  kestrel_comm* comm = nullptr;
  uint64_t comm_ticket = 0;
};

namespace kestrel_cpu {

// Validates an op and runs it (cpu_plugin.cpp); replay and eager launches share it.
void run_op(const kestrel_op& op);
// KESTREL_CPU_PROFILE=1 (cpu_profile.cpp): run_op times each launch and prints the totals at exit.
bool profiling();
void run_profiled(const kestrel_op& op, void (*launch)(const kestrel_op&));
void check_op(const kestrel_op& op);  // throws unless supported and in bounds
// Records an op or a device copy into the stream's open capture (cpu_capture.cpp).
void record_op(kestrel_stream* stream, const kestrel_op& op);
void record_copy(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                 uint64_t src_offset, uint64_t bytes);
[[noreturn]] void refuse_while_capturing(const char* what);
// Waits for the collective last issued on the stream, if any (cpu_comm.cpp; without MPI there is none);
// throws Failure with PEER_FAILED when it failed.
void wait_for_collectives(kestrel_stream* stream);

// The capture entries of the ABI table.
kestrel_status capture_begin(kestrel_stream* stream);
kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** graph);
kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream);
void graph_destroy(kestrel_graph* graph) noexcept;

}  // namespace kestrel_cpu
