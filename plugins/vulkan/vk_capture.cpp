// Capture and replay: the ABI entries' bodies (see vk_capture.hpp for how a graph is recorded and
// submitted, and plugin.h's capture_begin for the rules they follow, as the CPU plugin does).
#include "vk_capture.hpp"

#include <algorithm>
#include <exception>

namespace kestrel_vk {

namespace {

// Stops recording on the stream and detaches the graph from the context's allocator; returns how
// many buffers allocated during the capture are still alive.
size_t stop_recording(kestrel_stream* stream) {
  kestrel_graph* graph = stream->recording;
  kestrel_context* context = stream->context;
  stream->recording = nullptr;
  graph->open = false;
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  context->capturing = nullptr;
  const size_t live = graph->live.size();
  graph->live.clear();  // they stay allocated; freed later, they go back like any buffer
  return live;
}

// Frees a graph none of whose replays can still be running.
void discard(kestrel_graph* graph) {
  return_graph_memory(graph->context, graph);
  destroy_chunks(graph);
  delete graph;
}

}  // namespace

[[noreturn]] void refuse_while_capturing(const char* what) {
  fail(std::string(what) + " is not allowed while the stream is being captured; end the capture first");
}

bool context_capturing(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->memory_mutex);
  return context->capturing != nullptr;
}

kestrel_status capture_begin(kestrel_stream* stream) {
  return Boundary::guarded([&] {
    if (stream->recording) fail("capture_begin: this stream is already being captured; end that capture first");
    kestrel_context* context = stream->context;
    wait_for_collectives(stream);  // their staged results land on the stream, not in the graph
    flush(stream);  // what was launched before runs before any replay
    auto graph = std::make_unique<kestrel_graph>();
    graph->context = context;
    {
      std::lock_guard<std::mutex> lock(context->memory_mutex);
      if (context->capturing)
        fail("capture_begin: another stream of this Vulkan context is being captured; end that capture first");
      context->capturing = graph.get();
      context->capture_thread = std::this_thread::get_id();
    }
    stream->recording = graph.release();
  });
}

kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** out) {
  return Boundary::guarded([&] {
    kestrel_graph* graph = stream->recording;
    if (!graph) fail("capture_end: this stream is not being captured; call capture_begin first");
    std::exception_ptr closing_failed;
    try {
      flush(stream);  // ends the last chunk
    } catch (...) {
      closing_failed = std::current_exception();
    }
    const size_t live = stop_recording(stream);
    if (closing_failed) {
      discard(graph);
      std::rethrow_exception(closing_failed);
    }
    if (live) {
      discard(graph);  // nothing will replay it
      fail("capture_end: " + std::to_string(live) +
           " buffer(s) allocated during the capture are still allocated; free them before capture_end or "
           "allocate them before capture_begin");
    }
    *out = graph;
  });
}

void abandon_capture(kestrel_stream* stream) {
  kestrel_graph* graph = stream->recording;
  if (!graph) return;
  try {
    flush(stream);
  } catch (const std::exception&) {
    // the recording is dropped either way
  }
  stop_recording(stream);
  discard(graph);
}

kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream) {
  return Boundary::guarded([&] {
    if (!graph || graph->open) fail("graph_launch: not a finished capture; call capture_end first");
    if (stream->context != graph->context)
      fail("graph_launch: the graph was captured on another Vulkan context; replay it on a stream of that context");
    if (stream->recording) refuse_while_capturing("graph_launch");
    submit_chunks(stream, graph);
    // Its deferred checks are reported at this stream's next sync.
    auto& replayed = stream->replayed_flags;
    if (graph->flags && std::find(replayed.begin(), replayed.end(), graph->flags) == replayed.end())
      replayed.push_back(graph->flags);
  });
}

void graph_destroy(kestrel_graph* graph) {
  if (!graph) return;
  kestrel_context* context = graph->context;
  {
    // Its replays may have gone through any stream: wait for all of them.
    std::lock_guard<std::mutex> lock(context->queue_mutex);
    vkQueueWaitIdle(context->queue);  // a lost device fails here too; the graph goes regardless
  }
  discard(graph);
}

}  // namespace kestrel_vk
