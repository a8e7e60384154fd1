// The CUDA plugin's op families. Each has `supports_*` (checks dtypes, ranks, shapes and strides from the
// descriptors alone; never throws) and `launch_*` (enqueues on the stream; called only after supports_*
// said yes; throws Failure). Kernels live in the ops_*.cu files, one family per file.
#pragma once
#include "cuda_common.hpp"

namespace kestrel_cuda {

bool supports_fill(const kestrel_op& op);
void launch_fill(kestrel_stream& s, const kestrel_op& op);
bool supports_copy(const kestrel_op& op);
void launch_copy(kestrel_stream& s, const kestrel_op& op);
bool supports_unary(const kestrel_op& op);
void launch_unary(kestrel_stream& s, const kestrel_op& op);
bool supports_binary(const kestrel_op& op);
void launch_binary(kestrel_stream& s, const kestrel_op& op);
bool supports_reduce(const kestrel_op& op);
void launch_reduce(kestrel_stream& s, const kestrel_op& op);
// The reduction `fn` (kestrel_reduce_fn) of in into out (in's rank, extent 1 on the reduced axes), for
// other families' kernels that reduce memory of their own (the convolution's bias gradient).
void reduce_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out, int fn);
// out (M) = in (M,K) summed over K, out in's dtype or f32 for 16-bit in: GEMM's out1 (ABI 1.14) where
// cuBLASLt's epilogue does not compute it.
void row_sums_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out);
bool supports_gemm(const kestrel_op& op);
void launch_gemm(kestrel_stream& s, const kestrel_op& op);
bool supports_linear(const kestrel_op& op);
void launch_linear(kestrel_stream& s, const kestrel_op& op);
bool supports_gather(const kestrel_op& op);
void launch_gather(kestrel_stream& s, const kestrel_op& op);
bool supports_scatter_add(const kestrel_op& op);
void launch_scatter_add(kestrel_stream& s, const kestrel_op& op);
bool supports_random(const kestrel_op& op);
void launch_random(kestrel_stream& s, const kestrel_op& op);
bool supports_window(const kestrel_op& op);  // im2col, col2im, pool2d, pool2d_backward
void launch_window(kestrel_stream& s, const kestrel_op& op);
bool supports_softmax(const kestrel_op& op);
void launch_softmax(kestrel_stream& s, const kestrel_op& op);
bool supports_softmax_cross_entropy(const kestrel_op& op);
void launch_softmax_cross_entropy(kestrel_stream& s, const kestrel_op& op);
bool supports_optimizer(const kestrel_op& op);  // adam_update, sgd_update
void launch_optimizer(kestrel_stream& s, const kestrel_op& op);
bool supports_attention(const kestrel_op& op);  // attention, attention_backward (ABI 1.7)
void launch_attention(kestrel_stream& s, const kestrel_op& op);
bool supports_layer_norm(const kestrel_op& op);  // layer_norm, layer_norm_backward (ABI 1.7)
void launch_layer_norm(kestrel_stream& s, const kestrel_op& op);
bool supports_lstm_cell(const kestrel_op& op);  // lstm_cell, lstm_cell_backward (ABI 1.7)
void launch_lstm_cell(kestrel_stream& s, const kestrel_op& op);
bool supports_gru_cell(const kestrel_op& op);  // gru_cell, gru_cell_backward (ABI 1.9)
void launch_gru_cell(kestrel_stream& s, const kestrel_op& op);
bool supports_conv(const kestrel_op& op);  // conv2d and its two gradients through cuDNN (ABI 1.10)
void launch_conv(kestrel_stream& s, const kestrel_op& op);
bool supports_recurrent_layer(const kestrel_op& op);  // recurrent_layer and its backward through cuDNN (ABI 1.15)
void launch_recurrent_layer(kestrel_stream& s, const kestrel_op& op);
// The bytes a recurrent_layer's saved output needs (op_saved_bytes); throws where the plugin runs no such op.
uint64_t recurrent_layer_saved_bytes(kestrel_context& context, const kestrel_op& op);

// A batch of matrices in device memory: element (b, r, c) at base + (b * bs + r * rs + c * cs) elements.
struct MatrixView {
  char* base;
  int64_t rs, cs, bs;
};
// c (batch, m, n) = alpha * a (batch, m, k) @ b (batch, k, n) + beta * c through cuBLAS (ops_gemm.cu), for
// the plugin's own fused ops: a and b in `operands`, c in `result` (the same, or f32 for f16/bf16).
void batched_gemm(kestrel_stream& s, kestrel_dtype operands, kestrel_dtype result, int64_t batch, int64_t m, int64_t n,
                  int64_t k, MatrixView a, MatrixView b, MatrixView c, double alpha, double beta);

// cols (C*KH*KW, N, OH*OW) = the windows of x (N, C, H, W) that g describes, the batch inside each row:
// the layout in which a weight gradient sums over the batch within one product (ops_window.cu).
void im2col_batch_inner(kestrel_stream& s, const kestrel::plugin_shapes::WindowGeometry& g, const TensorRef& x,
                        void* cols);

// out = cast(in) elementwise, equal shapes, any strides and dtypes (ops_elementwise.cu). Used by GEMM to
// pack operands that cuBLAS cannot read directly.
void strided_copy(kestrel_stream& s, const TensorRef& in, const TensorRef& out);
// out = fn(in) element-wise (kestrel_unary_fn with its alpha and beta), in and out alike in shape and dtype,
// in 16-byte packs where both are contiguous (ops_elementwise.cu); out may be in.
void unary_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out, int fn, double alpha = 0.0,
                double beta = 0.0);

// KESTREL_CUDA_TF32=1 lets f32 GEMMs and convolutions use TF32 tensor cores (ops_gemm.cu).
bool tf32_enabled();

// Raises the error a kernel launch left behind (bad configuration, missing kernel image for this GPU).
void check_launch(const char* what);

}  // namespace kestrel_cuda
