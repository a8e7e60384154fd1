// gather and scatter_add along one axis (torch.gather / Tensor.scatter_add_), shaders/index.comp.
// Indices are range-checked on the device first and the host waits for the answer (a sync point), so
// a bad one fails the launch before anything is written and a bad label never corrupts memory. Inside
// a capture nothing can be waited for: the check is deferred to the sync after a replay, and the
// shaders skip out-of-range entries so memory stays safe meanwhile.
#include <cstring>

#include "vk_capture.hpp"
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

// The dtypes index.comp has variants for: f32, i32, i64 data (no f16), i32/i64 indices.
bool index_dtypes_ok(const kestrel_tensor& data, const kestrel_tensor& index, uint32_t dtypes) {
  return in_mask(dtypes, index.dtype) && in_mask(dtypes, data.dtype) && data.dtype != KESTREL_DTYPE_F16 &&
         data.dtype != KESTREL_DTYPE_BF16;
}

void check_indices(kestrel_stream* stream, const kestrel_tensor& index, int64_t extent, const char* what) {
  if (numel(index) == 0) return;
  if (stream->recording) return record_index_check(stream, index, extent, 0);  // words 0..3 of the graph's flags
  // Words 0..3 of the stream's flags; 4..7 belong to the deferred label check (vk_common.hpp).
  // An earlier check waited for its dispatch, so the device is done with words 0..3.
  uint32_t* words = static_cast<uint32_t*>(ensure_flags(stream)->mapped);
  std::memset(words, 0, 4 * sizeof(uint32_t));
  record_index_check(stream, index, extent, 0);
  synchronize(stream);
  if (words[0]) {
    const int64_t bad = static_cast<int64_t>(uint64_t(words[1]) | (uint64_t(words[2]) << 32));
    fail(std::string(what) + ": index " + std::to_string(bad) + " is out of range for an axis of size " +
         std::to_string(extent));
  }
}

}  // namespace

kestrel_buffer* ensure_flags(kestrel_stream* stream) {
  if (kestrel_graph* graph = stream->recording) {
    if (!graph->flags) {
      graph->flags.reset(allocate_host_buffer(stream->context, 8 * sizeof(uint32_t)), destroy_host_buffer);
      std::memset(graph->flags->mapped, 0, 8 * sizeof(uint32_t));
    }
    return graph->flags.get();
  }
  if (!stream->flags) {
    stream->flags = allocate_host_buffer(stream->context, 8 * sizeof(uint32_t));
    std::memset(stream->flags->mapped, 0, 8 * sizeof(uint32_t));
  }
  return stream->flags;
}

void record_index_check(kestrel_stream* stream, const kestrel_tensor& index, int64_t extent, uint32_t first_word) {
  Dispatch d;
  d.shader = std::string("index_check_") + dtype_suffix(index.dtype);
  d.params.tensors[0] = describe(index);
  d.params.uints[0] = static_cast<uint32_t>(extent);
  d.params.uints[1] = first_word;
  d.buffers[0] = index.buffer;
  d.buffers[1] = ensure_flags(stream);
  set_flat_grid(stream->context, d, static_cast<uint64_t>(numel(index)));
  run(stream, {d});
}

// in0 data, in1 index -> out (index's shape): out[.., i, ..] = data[.., index[.., i, ..], ..]
bool supports_gather(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::gather_fits(op) && index_dtypes_ok(op.inputs[0], op.inputs[1], dtypes);
}

void launch_gather(kestrel_stream* stream, const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "gather").axis;
  const kestrel_tensor &data = op.inputs[0], &index = op.inputs[1], &out = op.outputs[0];
  check_indices(stream, index, data.shape[axis], "gather");
  if (numel(out) == 0) return;
  Dispatch d;
  d.shader = std::string("gather_") + dtype_suffix(data.dtype) + "_" + dtype_suffix(index.dtype);
  d.params.tensors[0] = describe(data);
  d.params.tensors[1] = describe(index);
  d.params.tensors[2] = describe(out);
  d.params.ints[0] = axis;
  d.buffers[0] = data.buffer;
  d.buffers[1] = index.buffer;
  d.buffers[2] = out.buffer;
  set_flat_grid(stream->context, d, static_cast<uint64_t>(numel(out)));
  run(stream, {d});
}

// in0 src, in1 index (same shape) -> out updated in place: out[.., index[.., i, ..], ..] += src[.., i, ..]
bool supports_scatter_add(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::scatter_add_fits(op) && index_dtypes_ok(op.outputs[0], op.inputs[1], dtypes);
}

void launch_scatter_add(kestrel_stream* stream, const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "scatter_add").axis;
  const kestrel_tensor &src = op.inputs[0], &index = op.inputs[1], &out = op.outputs[0];
  check_indices(stream, index, out.shape[axis], "scatter_add");
  if (numel(index) == 0) return;
  Dispatch d;
  d.shader = std::string("scatter_add_") + dtype_suffix(out.dtype) + "_" + dtype_suffix(index.dtype);
  d.params.tensors[0] = describe(src);
  d.params.tensors[1] = describe(index);
  d.params.tensors[2] = describe(out);
  d.params.ints[0] = axis;
  // One invocation per line along `axis` (see index.comp): lines write disjoint elements.
  const uint64_t lines = static_cast<uint64_t>(numel(index) / index.shape[axis]);
  d.params.uints[0] = static_cast<uint32_t>(lines);
  d.buffers[0] = src.buffer;
  d.buffers[1] = index.buffer;
  d.buffers[2] = out.buffer;
  set_flat_grid(stream->context, d, lines);
  run(stream, {d});
}

}  // namespace kestrel_vk
