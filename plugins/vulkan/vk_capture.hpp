// Capture and replay (plugin.h, capture_begin): the graph object and the hooks that submission,
// memory and the index checks use while a stream is being captured.
//
// A capture records into the graph's own command buffers ("chunks", each one Submission with its
// descriptor pool, parameter blocks and upload space), built exactly like the stream's batches but
// ended instead of submitted. They are recorded with SIMULTANEOUS_USE, so graph_launch submits them
// again without waiting for the previous replay: every chunk starts with a full barrier, which orders
// it after everything submitted before it, earlier replays included. graph_launch submits through a
// slot of the stream's ring, so stream_synchronize, events and stream-ordered frees treat a replay like
// any other batch of the stream. graph_destroy waits for the queue to go idle rather than tracking
// each replay's fence: it is rare, and a replay may have gone through any stream.
#pragma once
#include <map>
#include <thread>
#include <unordered_set>

#include "vk_common.hpp"

namespace kestrel_vk {

// Device memory the graph keeps for its replays: a range freed during the capture.
struct HeldRange {
  MemoryBlock* block;
  uint64_t offset, bytes;
};

}  // namespace kestrel_vk

struct kestrel_graph {
  kestrel_context* context = nullptr;
  VkCommandPool command_pool = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<kestrel_vk::Submission>> chunks;  // in submission order
  // Words 0..3: the deferred index check of gather/scatter_add, 4..7: softmax_cross_entropy's label
  // check. Shared with the streams that replayed the graph, which report them at their next sync.
  std::shared_ptr<kestrel_buffer> flags;

  // Memory (guarded by context->memory_mutex): ranges freed during the capture, by size, and the
  // buffers allocated during it that are still alive.
  std::multimap<uint64_t, kestrel_vk::HeldRange> pool;
  std::unordered_set<kestrel_buffer*> live;

  bool open = true;  // still being captured
};

namespace kestrel_vk {

// The capture entries of the ABI table (vk_capture.cpp).
kestrel_status capture_begin(kestrel_stream* stream);
kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** graph);
kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream);
void graph_destroy(kestrel_graph* graph);
// Ends a capture whose stream is being destroyed, dropping the recording.
void abandon_capture(kestrel_stream* stream);
[[noreturn]] void refuse_while_capturing(const char* what);
// Whether any stream of the context is being captured (memory_trim is refused then).
bool context_capturing(kestrel_context* context);

// ---- memory (vk_memory.cpp) ----

// The graph the calling thread captures on this context, or null. Call with context->memory_mutex held.
kestrel_graph* capture_of_this_thread(const kestrel_context* context);
// Hands the graph's held ranges back to the context's free memory, stream-ordered like buffer_free.
void return_graph_memory(kestrel_context* context, kestrel_graph* graph);

// ---- submission hooks (vk_submit.cpp) ----

// The graph's last chunk, opened (a new one created) when it has none open.
Submission& open_chunk(kestrel_graph* graph);
void destroy_chunks(kestrel_graph* graph);
// Submits the graph's chunks through one slot of the stream's ring, after the stream's open batch.
void submit_chunks(kestrel_stream* stream, kestrel_graph* graph);

}  // namespace kestrel_vk
