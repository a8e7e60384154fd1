// fill, copy (with casts), unary and binary element-wise ops (shaders/fill, copy, unary, binary.comp).
// Every pair of the device's dtypes has a copy variant; f16 unary/binary compute in f32; an f32 plus a
// 16-bit operand (ABI 1.15) has variants of its own.
#include <cmath>

#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

bool integer_dtype(kestrel_dtype d) { return d == KESTREL_DTYPE_I32 || d == KESTREL_DTYPE_I64; }

// One invocation per element of `count`; nothing to launch for empty tensors.
void run_elementwise(kestrel_stream* stream, Dispatch& dispatch, int64_t count) {
  if (count == 0) return;
  set_flat_grid(stream->context, dispatch, static_cast<uint64_t>(count));
  run(stream, {dispatch});
}

}  // namespace

bool supports_fill(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::fill_fits(op) && in_mask(dtypes, op.outputs[0].dtype);
}

void launch_fill(kestrel_stream* stream, const kestrel_op& op) {
  const double value = params_of<kestrel_fill_params>(op, "fill").value;
  const kestrel_tensor& out = op.outputs[0];
  Dispatch d;
  d.shader = std::string("fill_") + dtype_suffix(out.dtype);
  d.params.tensors[0] = describe(out);
  d.params.floats[0] = static_cast<float>(value);
  // Integers take the value as the CPU plugin does: truncated to 64 bits, then wrapped to the dtype.
  const int64_t integer = std::isfinite(value) ? static_cast<int64_t>(value) : 0;
  d.params.ints[0] = static_cast<int32_t>(static_cast<uint64_t>(integer) & 0xffffffffu);
  d.params.ints[1] = static_cast<int32_t>(static_cast<uint64_t>(integer) >> 32);
  d.buffers[0] = out.buffer;
  run_elementwise(stream, d, numel(out));
}

bool supports_copy(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::copy_fits(op) && in_mask(dtypes, op.inputs[0].dtype) &&
         in_mask(dtypes, op.outputs[0].dtype);
}

void launch_copy(kestrel_stream* stream, const kestrel_op& op) {
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  Dispatch d;
  d.shader = std::string("copy_") + dtype_suffix(in.dtype) + "_" + dtype_suffix(out.dtype);
  d.params.tensors[0] = describe(in);
  d.params.tensors[1] = describe(out);
  d.buffers[0] = in.buffer;
  d.buffers[1] = out.buffer;
  run_elementwise(stream, d, numel(out));
}

bool supports_unary(const kestrel_op& op, uint32_t dtypes) {
  // The shaders compute f32 (f16 and bf16 stored in 16 bits) and i32/i64; no f64.
  const kestrel_dtype dtype = op.inputs[0].dtype;
  return kestrel::plugin_shapes::unary_fits(op) && in_mask(dtypes, dtype) && (float_dtype(dtype) || integer_dtype(dtype));
}

void launch_unary(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_unary_params>(op, "unary");
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  Dispatch d;
  d.shader = std::string("unary_") + dtype_suffix(in.dtype);
  d.params.tensors[0] = describe(in);
  d.params.tensors[1] = describe(out);
  d.params.ints[0] = p.fn;
  d.params.floats[0] = static_cast<float>(p.alpha);
  d.params.floats[1] = static_cast<float>(p.beta);
  d.buffers[0] = in.buffer;
  d.buffers[1] = out.buffer;
  run_elementwise(stream, d, numel(out));
}

// Since ABI 1.15 also ADD of an f32 and a 16-bit operand (binary_fits' widening add), where the device
// stores the 16-bit dtype.
bool supports_binary(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::binary_fits(op, /*widening_add=*/true) && in_mask(dtypes, op.outputs[0].dtype) &&
         in_mask(dtypes, op.inputs[1].dtype);
}

void launch_binary(kestrel_stream* stream, const kestrel_op& op) {
  const auto fn = params_of<kestrel_binary_params>(op, "binary").fn;
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &out = op.outputs[0];
  Dispatch d;
  d.shader = b.dtype == out.dtype ? std::string("binary_") + dtype_suffix(out.dtype)
                                  : std::string("binary_f32_widening_") + dtype_suffix(b.dtype);
  d.params.tensors[0] = describe(a);
  d.params.tensors[1] = describe(b);
  d.params.tensors[2] = describe(out);
  d.params.ints[0] = fn;
  d.buffers[0] = a.buffer;
  d.buffers[1] = b.buffer;
  d.buffers[2] = out.buffer;
  run_elementwise(stream, d, numel(out));
}

}  // namespace kestrel_vk
