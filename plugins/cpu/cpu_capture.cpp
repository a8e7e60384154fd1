// Capture and replay for the CPU backend: the ops of a stream are recorded (descriptors and parameter
// blocks copied) and replayed in order. Replays skip the engine's per-op work (autograd, shape checks,
// allocation), which is what a captured training step saves on the host; the kernels are the same.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "cpu_context.hpp"

struct kestrel_graph {
  struct Step {
    kestrel_op op{};  // buffers are the graph's shadows; op.params points into `params`
    alignas(8) unsigned char params[256];
    bool is_copy = false;
    kestrel_buffer *dst = nullptr, *src = nullptr;
    uint64_t dst_offset = 0, src_offset = 0, bytes = 0;
  };
  kestrel_context* context = nullptr;
  std::vector<std::unique_ptr<Step>> steps;  // stable addresses: op.params points into each step
  // The host's kestrel_buffer objects may be deleted once freed, but the memory stays for the graph:
  // recorded steps refer to the graph's own descriptor of each block, keyed by its address.
  std::unordered_map<void*, std::unique_ptr<kestrel_buffer>> shadows;
  kestrel_cpu::BlockCache pool;             // memory freed during the capture, kept for replays
  uint64_t pool_bytes = 0;
  std::unordered_set<kestrel_buffer*> live;  // allocated during the capture and not freed yet
  bool open = true;
};

namespace kestrel_cpu {

bool capture_owns_this_thread(const Context& context) {
  return context.capturing && context.capture_thread == std::this_thread::get_id();
}

void* take_from_capture(Context& context, uint64_t rounded) {
  auto found = context.capturing->pool.find(rounded);
  if (found == context.capturing->pool.end() || found->second.empty()) return nullptr;
  void* block = found->second.back();
  found->second.pop_back();
  context.capturing->pool_bytes -= rounded;
  context.held_by_graphs -= rounded;
  return block;
}

void note_capture_allocation(Context& context, kestrel_buffer* buffer) { context.capturing->live.insert(buffer); }

void give_to_capture(Context& context, kestrel_buffer* buffer, uint64_t rounded) {
  kestrel_graph* graph = context.capturing;
  graph->live.erase(buffer);
  graph->pool[rounded].push_back(buffer->data);
  graph->pool_bytes += rounded;
  context.held_by_graphs += rounded;
}

[[noreturn]] void refuse_while_capturing(const char* what) {
  fail(std::string(what) + " is not allowed while the stream is being captured; end the capture first");
}

kestrel_status capture_begin(kestrel_stream* stream) {
  return Boundary::guarded([&] {
    Context& context = *stream->context;
    std::lock_guard<std::mutex> lock(context.mutex);
    if (context.capturing) fail("capture_begin: this context is already capturing; end that capture first");
    auto* graph = new kestrel_graph;
    graph->context = stream->context;
    context.capturing = graph;
    context.capture_thread = std::this_thread::get_id();
    stream->recording = graph;
  });
}

namespace {
kestrel_buffer* shadow_of(kestrel_graph* graph, const kestrel_buffer* buffer) {
  auto& shadow = graph->shadows[buffer->data];
  if (!shadow) shadow = std::make_unique<kestrel_buffer>(*buffer);
  shadow->bytes = std::max(shadow->bytes, buffer->bytes);
  return shadow.get();
}
}  // namespace

void record_op(kestrel_stream* stream, const kestrel_op& op) {
  kestrel_graph* graph = stream->recording;
  auto step = std::make_unique<kestrel_graph::Step>();
  step->op = op;
  for (int i = 0; i < op.num_inputs; ++i) step->op.inputs[i].buffer = shadow_of(graph, op.inputs[i].buffer);
  for (int i = 0; i < op.num_outputs; ++i) step->op.outputs[i].buffer = shadow_of(graph, op.outputs[i].buffer);
  if (op.params) {
    // Every parameter block starts with its struct_size, so it can be copied without knowing its type.
    const size_t size = *static_cast<const size_t*>(op.params);
    if (size > sizeof(step->params)) fail("capture: a parameter block of " + std::to_string(size) + " bytes is too large");
    std::memcpy(step->params, op.params, size);
    step->op.params = step->params;
  }
  graph->steps.push_back(std::move(step));
}

void record_copy(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset, kestrel_buffer* src,
                 uint64_t src_offset, uint64_t bytes) {
  auto step = std::make_unique<kestrel_graph::Step>();
  step->is_copy = true;
  step->dst = shadow_of(stream->recording, dst);
  step->src = shadow_of(stream->recording, src);
  step->dst_offset = dst_offset;
  step->src_offset = src_offset;
  step->bytes = bytes;
  stream->recording->steps.push_back(std::move(step));
}

kestrel_status capture_end(kestrel_stream* stream, kestrel_graph** out) {
  return Boundary::guarded([&] {
    kestrel_graph* graph = stream->recording;
    if (!graph) fail("capture_end: this stream is not capturing");
    Context& context = *stream->context;
    std::lock_guard<std::mutex> lock(context.mutex);
    context.capturing = nullptr;
    stream->recording = nullptr;
    graph->open = false;
    if (!graph->live.empty()) {
      const size_t live = graph->live.size();
      graph->live.clear();
      // The recording is discarded; its pool goes back to the cache (nothing will replay it).
      for (auto& [bytes, blocks] : graph->pool)
        for (void* block : blocks) context.free_blocks[bytes].push_back(block);
      context.held_by_graphs -= graph->pool_bytes;
      context.cached += graph->pool_bytes;
      delete graph;
      fail("capture_end: " + std::to_string(live) +
           " buffer(s) allocated during the capture are still allocated; free them before capture_end or "
           "allocate them before capture_begin");
    }
    *out = graph;
  });
}

kestrel_status graph_launch(kestrel_graph* graph, kestrel_stream* stream) {
  return Boundary::guarded([&] {
    if (!graph || graph->open) fail("graph_launch: not a finished capture");
    if (stream->context != graph->context) fail("graph_launch: the graph was captured on another context");
    if (stream->recording) refuse_while_capturing("graph_launch");
    for (const auto& step : graph->steps) {
      if (step->is_copy)
        std::memmove(static_cast<char*>(step->dst->data) + step->dst_offset,
                     static_cast<const char*>(step->src->data) + step->src_offset, step->bytes);
      else
        run_op(step->op);
    }
  });
}

void graph_destroy(kestrel_graph* graph) noexcept {
  if (!graph) return;
  Context& context = *graph->context;
  {
    std::lock_guard<std::mutex> lock(context.mutex);
    for (auto& [bytes, blocks] : graph->pool)
      for (void* block : blocks) {
        try {  // back to the shared cache; with no host memory left for its list, to the system
          context.free_blocks[bytes].push_back(block);
          context.cached += bytes;
        } catch (const std::bad_alloc&) {
          std::free(block);
        }
      }
    context.held_by_graphs -= graph->pool_bytes;
  }
  delete graph;
}

}  // namespace kestrel_cpu
