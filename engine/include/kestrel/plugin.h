/*
 * Kestrel backend plugin ABI.
 *
 * This is the only header a backend plugin needs. It is plain C: no exceptions, STL types or C++
 * ownership cross it. A plugin is a shared library that exports one symbol,
 *
 *     const kestrel_plugin_api* kestrel_plugin_v1(void);
 *
 * (use KESTREL_PLUGIN_ENTRY below), returning a table of function pointers that lives as long as the
 * library stays loaded. The host loads the library with Boost.DLL, checks the ABI version, fills in the
 * defaults of optional entries (NULL pointers) in one place, and from then on talks to the plugin only
 * through the table.
 *
 * Versioning: a change of KESTREL_PLUGIN_ABI_MAJOR breaks compatibility and the host refuses the
 * plugin. A minor change only appends fields at the end of structs (and entries at the end of the
 * table). Every struct that crosses the boundary starts with `size_t struct_size`, so each side can tell
 * how much of it the other knows: a reader must not touch fields past struct_size. The writer sets it to
 * KESTREL_STRUCT_SIZE(type, last field), the end of the last field it knows, not sizeof(type): sizeof
 * counts the tail padding, where a field appended later (an int32_t after a double, say) would land
 * without changing sizeof, so neither side could tell the versions apart. A reader that needs a field
 * checks struct_size >= KESTREL_STRUCT_SIZE(type, that field).
 *
 * Errors: every entry that can fail returns kestrel_status. The message of the last failure on the
 * calling thread is returned by `last_error`; it is owned by the plugin and valid until the next call
 * into the plugin on that thread. Messages say what went wrong and what the user can do.
 *
 * Threads: entries may be called from several threads, but one stream is used by one thread at a time.
 *
 * ABI changelog
 *   1.0  first version: devices, contexts, streams, events, buffers, pinned host memory, copies,
 *        memory statistics, ops (required primitives and optional fused ops), capture/replay and
 *        collectives as optional entries.
 *   1.1  RANDOM may take its counter base from a device scalar (in0), so a captured graph draws fresh
 *        numbers at every replay; the rules for memory and host copies during a capture are spelled out
 *        at capture_begin.
 *   1.2  struct_size is measured to the end of the last field (KESTREL_STRUCT_SIZE), not with sizeof:
 *        seven structs end in padding, where an appended int32_t was invisible. Plugins built against
 *        1.0/1.1 compared struct_size with sizeof and would refuse the padded parameter blocks this host
 *        now sends, so the host refuses them at load with a request to rebuild. Op kinds a plugin does not
 *        know are answered 0 by supports_op (unchanged rule, now stated): new fused families are added
 *        to one backend at a time. The host reads only the first struct_size bytes of a plugin's table
 *        and checks the required entries within them.
 *   1.3  collectives complete: broadcast, reduce-scatter and all-gather beside all-reduce, a timeout per
 *        communicator, a non-blocking failure query, an abort, group start/end for one thread driving
 *        several devices, and the status PEER_FAILED. Collectives are ordered on their stream like
 *        launches (see all_reduce_sum).
 *   1.4  buffer_host_address: a backend whose buffers are host memory says where, so the host can hand
 *        them to other libraries without a copy (numpy views, DLPack).
 *   1.5  ADAM_UPDATE and SGD_UPDATE may read f16 loss scaling's state from the device (params.scaler):
 *        the step is skipped there when the gradients overflowed, so a loss-scaled step never waits for
 *        the host. Both parameter blocks grew a field; a plugin that cannot read it answers 0.
 *   1.6  GEMM may multiply f16 or bf16 operands into an f32 result (mixed precision's products, kept
 *        unrounded as tensor cores give them). Optional within the required op: a plugin that cannot
 *        answers 0 for that combination, and the engine rounds through the 16-bit dtype instead.
 *   1.7  ATTENTION and ATTENTION_BACKWARD: scaled dot-product attention (optionally causal) as one fused
 *        op, forward and backward, so a backend need not keep the (T x T) attention weights between them:
 *        forward leaves each query's log-sum-exp, and backward recomputes the weights from it.
 *        LAYER_NORM and LAYER_NORM_BACKWARD: layer normalisation over the last axis, forward leaving each
 *        row's mean and inverse standard deviation for backward. LSTM_CELL and LSTM_CELL_BACKWARD: an
 *        LSTM step's gate math after its products, in one pass each way. Device properties say which row
 *        alignment GEMMs prefer (gemm_row_alignment), so the engine can pad rows that would miss it.
 *   1.8  ATTENTION and ATTENTION_BACKWARD may drop out attention weights (kestrel_attention_params grew
 *        dropout, seed and offset): the mask is RANDOM's Bernoulli draw over the (B,Tq,Tk) weights, so
 *        fused and composed training agree, and such ops take the counter base as one more input; a
 *        plugin that does not drop out answers 0 for them, and the engine composes.
 *   1.9  ATTENTION and ATTENTION_BACKWARD may mask padded keys (kestrel_attention_params grew
 *        key_padding): one more input, the (N,Tk) key-padding mask of B = N * heads entries, before the
 *        counter base; a plugin that does not mask answers 0, and the engine composes. GRU_CELL and
 *        GRU_CELL_BACKWARD: a GRU step's gate math after its products, as LSTM_CELL is the LSTM's.
 *   1.10 CONV2D, CONV2D_BACKWARD_DATA and CONV2D_BACKWARD_FILTER: a 2-D convolution (with its bias and a
 *        ReLU) and its two gradients as fused ops, so a backend can convolve without the (C*KH*KW, N*OH*OW)
 *        column matrix that the composed im2col + GEMM path writes and reads in memory (cuDNN's three
 *        calls; on the CPU, columns of one image at a time, kept in cache).
 *   1.11 REDUCE's fn may be MAX_ABS, the largest magnitude (NaN wins, float dtypes only): f16 loss
 *        scaling's non-finite check then reads the gradients once instead of twice (max and min). A plugin
 *        built against 1.10 or earlier refuses the unknown fn in supports_op, and the engine takes max and
 *        min as before.
 *   1.12 SOFTMAX_CROSS_ENTROPY may read f16/bf16 logits, its loss then f32 and computed in f32 (mixed
 *        precision's logits need no f32 copy), and SOFTMAX_CROSS_ENTROPY_BACKWARD writes the logits'
 *        gradient from the logits themselves, scaled per row: forward need not leave an (N,C) gradient for
 *        backward to scale in another pass. A plugin built against 1.11 or earlier answers 0 for both; the
 *        engine widens the logits and scales forward's gradient as before.
 *   1.13 ATTENTION and ATTENTION_BACKWARD may take their (B,T,D) tensors (q, k, v, out, dout, dq, dk, dv)
 *        as rank-4 (N,H,T,D) views with any strides whose last is 1, batch entry b being (b / H, b % H):
 *        multi-head attention then reads its heads where the packed (N,T,3E) projection leaves them and
 *        writes (N,T,E) rows, with no copies to split or join heads. The log-sum-exp stays (B,Tq) and
 *        contiguous, the key-padding mask (N',Tk). A plugin built against 1.12 or earlier answers 0 for
 *        rank 4, and the engine splits and joins the heads itself.
 *   1.14 BINARY's fn may be RELU_BACKWARD or GELU_BACKWARD (float dtypes): an activation's gradient in
 *        one pass, dy times the derivative at the saved output or input, instead of the derivative's own
 *        pass and a product (two reads and a write fewer per element). A plugin built against 1.13 or
 *        earlier refuses the unknown fn in supports_op, and the engine composes them as before. A rank-2
 *        GEMM may have a second output, the rows of in0 summed over K (a linear layer's bias gradient
 *        beside its weight gradient, from cuBLASLt's BGRADB epilogue on CUDA); a plugin that does not
 *        offer it refuses two outputs, and the engine reduces separately. SOFTMAX_CROSS_ENTROPY_BACKWARD
 *        may take forward's per-row losses as in3, from which each row's log-sum-exp follows without
 *        reading the row for it; a plugin that does not refuses four inputs, and the engine passes three.
 *   1.15 RECURRENT_LAYER and RECURRENT_LAYER_BACKWARD: a whole recurrent layer (RNN, LSTM or GRU, one
 *        direction) over a sequence, forward and backward, for a backend whose library runs the layer in
 *        one call (cuDNN's RNN API). Forward leaves a `saved` output of the plugin's own layout for
 *        backward, whose size the new optional entry op_saved_bytes says. A plugin that does not offer the
 *        family answers 0, and the engine runs the layer step by step as before. LAYER_NORM's y and
 *        LAYER_NORM_BACKWARD's dy may be f16 or bf16 where x is f32: under mixed precision a pre-norm
 *        block's norm feeds a 16-bit product, so its output need not be written in f32 and cast, nor its
 *        gradient widened. BINARY's ADD may take an f16/bf16 in1 beside an f32 in0 and out (a residual
 *        stream plus a mixed-precision block's output), widening it as it reads. A plugin built against
 *        1.14 or earlier answers 0 to both, and the engine casts.
 *   1.16 LAYER_NORM_BACKWARD may take one more input, a gradient already accumulated for x, and write
 *        dx plus it: a pre-norm block's norm reads the residual stream, whose gradient from the skip
 *        connection is there before the norm's backward runs, and the separate addition (a write and
 *        two reads of dx) goes. The engine offers the extra input only to plugins built against 1.16 or
 *        later; with others, or where supports_op refuses it, it adds as before.
 *   1.17 REDUCE's fn may be SUM_SQUARES, the sum of the squares (float dtypes): gradient clipping's norm
 *        then reads the gradients once, with no temporary of their size, where SQUARE then SUM wrote and
 *        read the squares. A plugin built against 1.16 or earlier refuses the unknown fn in supports_op,
 *        and the engine squares and sums as before.
 */
#ifndef KESTREL_PLUGIN_H
#define KESTREL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KESTREL_PLUGIN_ABI_MAJOR 1
#define KESTREL_PLUGIN_ABI_MINOR 17
#define KESTREL_PLUGIN_ENTRY_SYMBOL "kestrel_plugin_v1"
#define KESTREL_MAX_RANK 8
#define KESTREL_MAX_OP_TENSORS 8

/* The size a writer puts in struct_size: the end of the struct's last field (see Versioning above). */
#define KESTREL_STRUCT_SIZE(type, last_field) (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

#if defined(_WIN32)
#define KESTREL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define KESTREL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Write `KESTREL_PLUGIN_ENTRY { static kestrel_plugin_api api = {...}; return &api; }` in one source. */
#ifdef __cplusplus
#define KESTREL_PLUGIN_ENTRY extern "C" KESTREL_PLUGIN_EXPORT const kestrel_plugin_api* kestrel_plugin_v1(void)
#else
#define KESTREL_PLUGIN_ENTRY KESTREL_PLUGIN_EXPORT const kestrel_plugin_api* kestrel_plugin_v1(void)
#endif

typedef enum kestrel_status {
  KESTREL_STATUS_OK = 0,
  KESTREL_STATUS_INVALID_ARGUMENT = 1, /* the caller passed something malformed */
  KESTREL_STATUS_UNSUPPORTED = 2,      /* valid, but this plugin or device cannot do it */
  KESTREL_STATUS_OUT_OF_MEMORY = 3,    /* an allocation failed; the context stays usable */
  KESTREL_STATUS_UNAVAILABLE = 4,      /* the hardware or driver is missing or went away */
  KESTREL_STATUS_INTERNAL = 5,         /* a bug or an unexpected driver error */
  KESTREL_STATUS_PEER_FAILED = 6       /* since 1.3: another rank of a collective failed, left, or missed the
                                          communicator's timeout; the communicator is unusable: abort it */
} kestrel_status;

typedef enum kestrel_dtype {
  KESTREL_DTYPE_F32 = 0,
  KESTREL_DTYPE_F16 = 1,  /* IEEE binary16, stored as uint16_t bits */
  KESTREL_DTYPE_BF16 = 2, /* bfloat16, stored as uint16_t bits (upper half of an f32) */
  KESTREL_DTYPE_I32 = 3,
  KESTREL_DTYPE_I64 = 4,
  KESTREL_DTYPE_U8 = 5,
  KESTREL_DTYPE_F64 = 6,  /* for reference computations and gradient checks; GPUs may not offer it */
  KESTREL_DTYPE_COUNT = 7
} kestrel_dtype;

typedef enum kestrel_device_kind {
  KESTREL_DEVICE_KIND_CPU = 0,
  KESTREL_DEVICE_KIND_DISCRETE_GPU = 1,
  KESTREL_DEVICE_KIND_INTEGRATED_GPU = 2,
  KESTREL_DEVICE_KIND_SOFTWARE = 3 /* a GPU API emulated on the CPU, e.g. Mesa's lavapipe */
} kestrel_device_kind;

/* Opaque objects, each created and destroyed by the plugin. */
typedef struct kestrel_context kestrel_context; /* one device, its allocator and statistics */
typedef struct kestrel_stream kestrel_stream;   /* an in-order queue of work on one context */
typedef struct kestrel_event kestrel_event;     /* a point in a stream that others can wait for */
typedef struct kestrel_buffer kestrel_buffer;   /* device memory */
typedef struct kestrel_graph kestrel_graph;     /* a captured sequence of launches */
typedef struct kestrel_comm kestrel_comm;       /* a collective-communication group */

/* ---- plugin and device description ------------------------------------------------------------ */

typedef struct kestrel_probe_result {
  size_t struct_size;
  int32_t usable;    /* 0: the plugin cannot run on this machine; `reason` says why */
  int32_t priority;  /* higher is preferred when the user names no backend (cpu: 10, vulkan gpu: 90, cuda: 100) */
  char reason[256];  /* NUL-terminated; for usable plugins an optional remark */
} kestrel_probe_result;

typedef struct kestrel_device_properties {
  size_t struct_size;
  char name[128];            /* "NVIDIA H100 80GB HBM3", "AMD EPYC 7B13 (2 threads)" */
  kestrel_device_kind kind;
  uint64_t memory_total;     /* bytes the device can hold */
  uint64_t memory_free;      /* bytes free now, as the driver or OS reports it */
  char arch[64];             /* compute capability ("9.0") or instruction set ("x86_64 avx2 fma") */
  int32_t compute_units;     /* streaming multiprocessors, compute units or CPU threads */
  char runtime[64];          /* what runs the kernels: "Kokkos 3.4.1 Serial", "CUDA 13.0", "Vulkan 1.3" */
  uint32_t dtype_mask;       /* bit (1u << dtype) set for each dtype the device computes in */
  /* Since 1.7: GEMMs run faster when their operands' and results' row strides are a multiple of this many
   * bytes (16 on tensor-core GPUs); 0 when it makes no difference. Written only within struct_size. */
  uint32_t gemm_row_alignment;
} kestrel_device_properties;

typedef struct kestrel_memory_stats {
  size_t struct_size;
  uint64_t allocated;      /* bytes in live buffers */
  uint64_t reserved;       /* bytes held from the system, including cached free blocks */
  uint64_t peak_allocated; /* high-water mark of `allocated` since the last reset_peak */
  uint64_t alloc_count;    /* number of live buffers */
} kestrel_memory_stats;

/* ---- operations ------------------------------------------------------------------------------- */

/* A strided view of a buffer. Shapes and strides count elements, not bytes. A stride of 0 broadcasts:
 * the engine expands every broadcast operand to the output's shape this way, so plugins never see
 * shape-mismatched operands. A rank-0 tensor is a scalar. */
typedef struct kestrel_tensor {
  size_t struct_size;
  kestrel_buffer* buffer; /* borrowed; must stay alive until the launch has completed on its stream */
  uint64_t offset;        /* in elements, from the start of the buffer */
  kestrel_dtype dtype;
  int32_t rank;
  int64_t shape[KESTREL_MAX_RANK];
  int64_t strides[KESTREL_MAX_RANK];
} kestrel_tensor;

typedef enum kestrel_op_kind {
  /* Required primitives: every plugin implements these (for the dtypes in its dtype_mask). */
  KESTREL_OP_FILL = 0,           /* out = value                                  params: kestrel_fill_params */
  KESTREL_OP_COPY = 1,           /* out = cast(in0), any strides and dtypes      params: none */
  KESTREL_OP_UNARY = 2,          /* out = f(in0)                                 params: kestrel_unary_params */
  KESTREL_OP_BINARY = 3,         /* out = f(in0, in1), same dtype everywhere (1.15: or ADD of an f32 in0
                                  * and out with an f16/bf16 in1)             params: kestrel_binary_params */
  KESTREL_OP_REDUCE = 4,         /* out = reduce(in0) over dims where out.shape[d] == 1 != in0.shape[d] */
  KESTREL_OP_GEMM = 5,           /* out = alpha * in0 @ in1 + beta * out; rank 2, or rank 3 batched;
                                  * one dtype, or since 1.6 f16/bf16 in0 and in1 with an f32 out;
                                  * since 1.14, rank 2, optionally out1 (M) contiguous in out0's dtype =
                                  * in0 summed over K (no alpha), accumulated in f32 or wider, written */
  KESTREL_OP_GATHER = 6,         /* out = torch.gather(in0, axis, index=in1) */
  KESTREL_OP_SCATTER_ADD = 7,    /* out.scatter_add_(axis, index=in1, src=in0) */
  KESTREL_OP_RANDOM = 8,         /* out = Philox4x32-10 draws [, in0 counter base] params: kestrel_random_params */
  KESTREL_OP_IM2COL = 9,         /* in0 (N,C,H,W) -> out (N, C*KH*KW, OH*OW)     params: kestrel_window_params */
  KESTREL_OP_COL2IM = 10,        /* in0 (N, C*KH*KW, OH*OW) -> out (N,C,H,W), overlaps summed */
  KESTREL_OP_POOL2D = 11,        /* in0 (N,C,H,W) -> out0 (N,C,OH,OW) [, out1 argmax (i64) for max] */
  KESTREL_OP_POOL2D_BACKWARD = 12, /* in0 dy (N,C,OH,OW) [, in1 argmax] -> out dx (N,C,H,W) */
  /* Optional fused ops: a plugin advertises them through supports_op; the engine otherwise composes
   * them from the primitives above. */
  KESTREL_OP_LINEAR = 32,        /* out0 = act(in0 @ in1 + in2) [, out1 = pre-activation] */
  KESTREL_OP_SOFTMAX = 33,       /* out = softmax or log_softmax of in0 over its last axis */
  KESTREL_OP_SOFTMAX_CROSS_ENTROPY = 34, /* in0 logits (N,C), in1 labels (N) i64 -> out0 loss (N)
                                          [, out1 dlogits (N,C) = softmax - onehot]; since 1.12 f16/bf16
                                          logits with an f32 loss and no out1 */
  KESTREL_OP_ADAM_UPDATE = 35,   /* in-place on in0 param, in1 grad (read, zeroed if asked), in2 m, in3 v */
  KESTREL_OP_SGD_UPDATE = 36,    /* in-place on in0 param, in1 grad (likewise) [, in2 momentum buffer] */
  /* Since 1.7. in0 q (B,Tq,D), in1 k (B,Tk,D), in2 v (B,Tk,D), one float dtype, contiguous (1.13: or
   * all of them and out0 (N,H,T,D) views whose last stride is 1)
   * [, the key-padding mask (1.9: with key_padding)] [, the counter base (1.8: with dropout, see
   * kestrel_attention_params)] -> out0 (B,Tq,D) =
   * dropout(softmax(scale * q @ k^T [masked])) @ v, out1 (B,Tq) = log(sum(exp(...))) of each query's
   * scaled, masked scores (before dropout), f32 (f64 for f64).   params: kestrel_attention_params */
  KESTREL_OP_ATTENTION = 37,
  /* Since 1.7. in0 dout (B,Tq,D), in1 q, in2 k, in3 v, in4 out, in5 log-sum-exp (B,Tq), as forward
   * gave them [, the key-padding mask (1.9)] [, the counter base (1.8: with dropout)] -> out0 dq (B,Tq,D), out1 dk (B,Tk,D),
   * out2 dv (B,Tk,D), written (not accumulated). */
  KESTREL_OP_ATTENTION_BACKWARD = 38,
  /* Since 1.7. in0 x (R,C) [, in1 weight (C) [, in2 bias (C)]], one float dtype, contiguous -> out0 y (R,C)
   * = (x - mean) * rstd [* weight [+ bias]], out1 mean (R), out2 rstd (R), both f32 (f64 for f64),
   * where rstd = 1 / sqrt(biased variance + eps). Since 1.15 y may be f16/bf16 for an f32 x: rounded
   * to f32, then to the 16-bit dtype, the bits a cast of the f32 y gives.   params: kestrel_layer_norm_params */
  KESTREL_OP_LAYER_NORM = 39,
  /* Since 1.7. in0 dy (R,C), in1 x, in2 mean, in3 rstd [, in4 weight (C)] -> out0 dx (R,C) [, out1
   * dweight (C) [, out2 dbias (C)]]: as many outputs as forward had inputs; written, not accumulated.
   * Since 1.15 dy may be f16/bf16 for an f32 x (the outputs stay in x's dtype). Since 1.16 optionally
   * one more input after the others, a gradient (R,C) in x's dtype, contiguous, not overlapping out0:
   * out0 is then dx rounded to x's dtype plus it, rounded once more (the bits of the separate ADD). */
  KESTREL_OP_LAYER_NORM_BACKWARD = 40,
  /* Since 1.7; no params. An LSTM step after its two products: in0 (N,4H) the input's product and in1
   * (N,4H) the state's (biases included; gates i, f, g, o in torch's order), in2 c (N,H) -> out0 h' (N,H)
   * = o * tanh(c'), out1 c' (N,H) = f * c + i * g, out2 (N,4H) sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
   * for backward. One float dtype; each tensor's rows contiguous (row strides free). */
  KESTREL_OP_LSTM_CELL = 41,
  /* Since 1.7; no params. in0 dh' (N,H), in1 dc' (N,H), in2 the gates forward kept (N,4H), in3 c (N,H),
   * in4 c' (N,H) -> out0 (N,4H) the gradient of both products, out1 dc (N,H). Rows as forward's. */
  KESTREL_OP_LSTM_CELL_BACKWARD = 42,
  /* Since 1.9; no params. A GRU step after its two products: in0 (N,3H) the input's product and in1
   * (N,3H) the state's (biases included; gates r, z, n in torch's order), in2 h (N,H) -> out0 h' (N,H)
   * = (1 - z) * n + z * h where r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z), n = tanh(x_n + r * h_n),
   * out1 (N,3H) r, z, n for backward. One float dtype; each tensor's rows contiguous (row strides free). */
  KESTREL_OP_GRU_CELL = 43,
  /* Since 1.9; no params. in0 dh' (N,H), in1 the gates forward kept (N,3H), in2 the state's product
   * (N,3H), in3 h (N,H) -> out0 (N,3H) the input product's gradient, out1 (N,3H) the state product's
   * (they differ in the n block, which r scales), out2 (N,H) dh through z * h alone (the state
   * product's share is the engine's GEMM). Rows as forward's. */
  KESTREL_OP_GRU_CELL_BACKWARD = 44,
  /* Since 1.10. 2-D convolution as torch.nn.functional.conv2d with groups = 1 (cross-correlation), one
   * float dtype, every tensor contiguous: in0 x (N,C,H,W), in1 weight (O,C,KH,KW) [, in2 bias (O)] ->
   * out0 y (N,O,OH,OW) = act(conv(x, weight) + bias), act NONE or RELU.  params: kestrel_conv_params */
  KESTREL_OP_CONV2D = 45,
  /* Since 1.10. in0 dy (N,O,OH,OW), in1 weight (O,C,KH,KW) [, in2 y (N,O,OH,OW) with RELU] -> out0 dx
   * (N,C,H,W), written. */
  KESTREL_OP_CONV2D_BACKWARD_DATA = 46,
  /* Since 1.10. in0 dy (N,O,OH,OW), in1 x (N,C,H,W) [, in2 y (N,O,OH,OW) with RELU] -> out0 dweight
   * (O,C,KH,KW) [, out1 dbias (O)], written (not accumulated). */
  KESTREL_OP_CONV2D_BACKWARD_FILTER = 47,
  /* Since 1.12; no params. in0 logits (N,C) of any float dtype, in1 labels (N) i32/i64, in2 each row's
   * scale (N) f32 (f64 for f64 logits; stride 0 for one scale) -> out0 dlogits (N,C) in the logits' dtype
   * = (softmax(in0) - onehot(in1)) * in2, computed in f32 or wider and rounded once. A label outside
   * [0, C) subtracts nothing (forward has reported it). Since 1.14 optionally in3, forward's losses (N)
   * in in2's dtype, contiguous: a row whose label is in [0, C) may then take its log-sum-exp as in3 +
   * in0[label] instead of two passes over the row for its maximum and sum, where the loss is small and
   * finite enough for that to stay accurate (the CPU and CUDA plugins: at most 16 nats). */
  KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD = 48,
  /* Since 1.15. One recurrent layer, one direction, from t = 0 up, as torch.nn.RNN/LSTM/GRU's with both
   * biases (gates in torch's order): in0 x (N,T,F), in1 weight_ih (G*H,F), in2 weight_hh (G*H,H), in3
   * bias_ih (G*H), in4 bias_hh (G*H), in5 h0 (N,H) [, in6 c0 (N,H) for LSTM] -> out0 y (N,T,H), every
   * step's h, out1 the last h (N,H) [, out2 the last c (N,H) for LSTM] [, then `saved`: U8 (bytes) of the
   * size op_saved_bytes gives, what backward needs, in the plugin's layout; without it the op only
   * infers]. G = 1 (RNN), 4 (LSTM), 3 (GRU). One float dtype; every tensor contiguous.
   * params: kestrel_recurrent_params */
  KESTREL_OP_RECURRENT_LAYER = 49,
  /* Since 1.15. in0 dy (N,T,H), in1 x, in2 y, in3 weight_ih, in4 weight_hh, in5 h0 [, in6 c0], then saved,
   * as forward had and left them -> out0 dx (N,T,F), out1 dweight_ih, out2 dweight_hh, out3 dbias_ih, out4
   * dbias_hh, written (not accumulated). The last state gets no gradient: callers that carry it on (text
   * generation) carry it as data. Backward may write into saved (cuDNN's reserve space is its scratch
   * too): one backward per forward. params: kestrel_recurrent_params, forward's */
  KESTREL_OP_RECURRENT_LAYER_BACKWARD = 50
} kestrel_op_kind;

typedef enum kestrel_unary_fn {
  KESTREL_UNARY_NEG = 0, KESTREL_UNARY_ABS = 1, KESTREL_UNARY_EXP = 2, KESTREL_UNARY_LOG = 3,
  KESTREL_UNARY_SQRT = 4, KESTREL_UNARY_RSQRT = 5, KESTREL_UNARY_TANH = 6, KESTREL_UNARY_SIGMOID = 7,
  KESTREL_UNARY_RELU = 8, KESTREL_UNARY_GELU = 9,   /* GELU with the exact erf form, as torch's default */
  KESTREL_UNARY_GELU_GRAD = 10,                     /* d gelu(x) / dx */
  KESTREL_UNARY_STEP = 11,                          /* x > 0 ? 1 : 0 (relu's derivative) */
  KESTREL_UNARY_SQUARE = 12, KESTREL_UNARY_RECIPROCAL = 13, KESTREL_UNARY_SIGN = 14,
  KESTREL_UNARY_AFFINE = 15,                        /* alpha * x + beta */
  KESTREL_UNARY_POW = 16                            /* x ^ alpha */
} kestrel_unary_fn;

typedef enum kestrel_binary_fn {
  KESTREL_BINARY_ADD = 0, KESTREL_BINARY_SUB = 1, KESTREL_BINARY_MUL = 2, KESTREL_BINARY_DIV = 3,
  KESTREL_BINARY_MAX = 4, KESTREL_BINARY_MIN = 5, KESTREL_BINARY_POW = 6,
  /* comparisons give 1 or 0 in the operands' dtype */
  KESTREL_BINARY_EQ = 7, KESTREL_BINARY_NE = 8, KESTREL_BINARY_LT = 9, KESTREL_BINARY_LE = 10,
  KESTREL_BINARY_GT = 11, KESTREL_BINARY_GE = 12,
  /* Since 1.14, float dtypes: activation gradients, a the incoming gradient dy */
  KESTREL_BINARY_RELU_BACKWARD = 13, /* a * (b > 0 ? 1 : 0), b relu's output (a NaN in a stays NaN) */
  KESTREL_BINARY_GELU_BACKWARD = 14  /* a * gelu'(b), b gelu's input (the exact erf form) */
} kestrel_binary_fn;

typedef enum kestrel_reduce_fn {
  KESTREL_REDUCE_SUM = 0, KESTREL_REDUCE_MEAN = 1, KESTREL_REDUCE_MAX = 2, KESTREL_REDUCE_MIN = 3,
  KESTREL_REDUCE_ARGMAX = 4, /* exactly one reduced axis; out is i64; first index wins ties; NaN wins */
  KESTREL_REDUCE_MAX_ABS = 5, /* 1.11: max |x|, float dtypes; NaN wins (an infinity gives +inf) */
  KESTREL_REDUCE_SUM_SQUARES = 6 /* 1.17: sum of x * x, float dtypes, accumulated as SUM is (0 for none) */
} kestrel_reduce_fn;

typedef enum kestrel_activation {
  KESTREL_ACTIVATION_NONE = 0, KESTREL_ACTIVATION_RELU = 1, KESTREL_ACTIVATION_GELU = 2
} kestrel_activation;

typedef enum kestrel_distribution {
  KESTREL_DISTRIBUTION_UNIFORM = 0,   /* a + (b - a) * u, u in [0, 1) */
  KESTREL_DISTRIBUTION_NORMAL = 1,    /* a + b * z, z standard normal (Box-Muller) */
  KESTREL_DISTRIBUTION_BERNOULLI = 2  /* 1 with probability a, else 0 (dropout keep-masks) */
} kestrel_distribution;

typedef enum kestrel_pool_mode { KESTREL_POOL_MAX = 0, KESTREL_POOL_AVG = 1 } kestrel_pool_mode;

/* Parameter blocks: op.params points at the one named for the op kind (or is NULL where none). */
typedef struct kestrel_fill_params { size_t struct_size; double value; } kestrel_fill_params;
typedef struct kestrel_unary_params {
  size_t struct_size; kestrel_unary_fn fn; double alpha; double beta;
} kestrel_unary_params;
typedef struct kestrel_binary_params { size_t struct_size; kestrel_binary_fn fn; } kestrel_binary_params;
typedef struct kestrel_reduce_params { size_t struct_size; kestrel_reduce_fn fn; } kestrel_reduce_params;
typedef struct kestrel_gemm_params {
  size_t struct_size;
  double alpha, beta; /* transposes are expressed by strides: a (K,M) tensor viewed as (M,K) */
} kestrel_gemm_params;
typedef struct kestrel_index_params { size_t struct_size; int32_t axis; } kestrel_index_params;
/* Random draws. Element i of the (row-major) output uses the Philox4x32-10 block with key `seed` and
 * counter `offset + i / 4` for uniform/bernoulli (word i % 4), or `offset + i / 2` for normal (words
 * 2*(i % 2) and 2*(i % 2) + 1). A 32-bit word w becomes u = (w >> 8) * 2^-24. Normal draws use
 * Box-Muller, z = sqrt(-2 ln(u1 + 2^-24)) cos(2 pi u2), from the two words in order. Bernoulli keeps when
 * (w >> 8) < a * 2^24 (compared in double), so masks are bit-identical on every backend. See
 * kestrel/philox.h.
 * Since 1.1 the op may have one input: a one-element i64 tensor on the device whose value, read when the
 * op runs, is added to `offset`. A captured graph then draws new numbers at each replay once the host
 * has written the next base. A plugin that cannot read it answers 0 in supports_op. */
typedef struct kestrel_random_params {
  size_t struct_size; kestrel_distribution distribution; uint64_t seed; uint64_t offset; double a, b;
} kestrel_random_params;
/* Convolution/pooling windows. OH = floor((H + 2*pad_h - dilation_h*(KH-1) - 1) / stride_h) + 1, at least 1. */
typedef struct kestrel_window_params {
  size_t struct_size;
  int32_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  kestrel_pool_mode mode; /* POOL2D and POOL2D_BACKWARD; avg counts padding like torch's default */
} kestrel_window_params;
/* Attention (1.7). causal: query i sees keys j <= i + Tk - Tq (the mask aligned to the last key, so a
 * query continuing a cached prefix sees all of it); Tk >= Tq then. Masked weights are exactly 0.
 * Since 1.8, dropout in [0, 1): with dropout > 0, weight (b, i, j) is kept, and scaled by
 * 1 / (1 - dropout), exactly where RANDOM's Bernoulli draw with a = 1 - dropout, this seed and offset
 * plus the counter base (a one-element i64 tensor, the op's last input, as RANDOM's in0) keeps element
 * (b * Tq + i) * Tk + j of a contiguous (B,Tq,Tk) tensor; backward draws the same mask again.
 * Since 1.9, key_padding != 0: the op takes a key-padding mask (N,Tk) of q's dtype, contiguous, with
 * N dividing B (entry b belongs to sample b / (B / N)), 1 where key j of the sample is padding, 0 where
 * it is real; KESTREL_KEY_PADDING_SCORE (-1e29) is added to the scaled score of each padded key (after
 * causal masking, which drops later keys altogether), so a query that sees a real key gives padded keys
 * weight exactly 0 and one that sees only padded keys weighs them equally, as the engine's composed
 * attention does. */
#define KESTREL_KEY_PADDING_SCORE (-1e29)
typedef struct kestrel_attention_params {
  size_t struct_size; double scale; int32_t causal;
  double dropout; uint64_t seed; uint64_t offset; /* 1.8 */
  int32_t key_padding;                            /* 1.9 */
} kestrel_attention_params;
typedef struct kestrel_layer_norm_params { size_t struct_size; double eps; } kestrel_layer_norm_params;
/* Convolution (1.10): the window's steps; its extent is the weight's (KH, KW), OH and OW as for
 * kestrel_window_params. activation (NONE or RELU) applies to CONV2D's output y. The backward ops take
 * dy, the gradient of y; with RELU they also take y, and use dy where y > 0 and 0 elsewhere, so ReLU's
 * derivative costs no pass of its own over memory. */
typedef struct kestrel_conv_params {
  size_t struct_size;
  int32_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  kestrel_activation activation;
} kestrel_conv_params;
typedef struct kestrel_linear_params {
  size_t struct_size; kestrel_activation activation;
} kestrel_linear_params;
typedef struct kestrel_softmax_params { size_t struct_size; int32_t log; } kestrel_softmax_params;
/* AdamW when decoupled != 0 (weight decay applied to the parameter, not the gradient). `step` counts
 * from 1 and drives bias correction. grad_scale multiplies the gradient first (1 / loss scale).
 * zero_grad != 0: the gradient (in1) is set to zero once read, ready for the next backward pass, which
 * saves the trainer a separate pass over every gradient.
 * Since 1.5, scaler != 0 adds one last input: loss scaling's state, a contiguous f32 tensor of 4 elements
 * on the device, [scale, clean_steps, skipped_steps, found_inf], read when the op runs (so a replay reads
 * the current one). When found_inf != 0 the op changes nothing (the gradient is still zeroed if asked);
 * otherwise the gradient is divided by scale, any positive value (the engine's gradient clipping passes
 * its divisor there too, times the loss scale if any; grad_scale is ignored), and Adam's bias corrections use
 * step - skipped_steps, the updates actually made. The op does not write the state. */
typedef struct kestrel_adam_params {
  size_t struct_size;
  double lr, beta1, beta2, eps, weight_decay, grad_scale; int64_t step; int32_t decoupled; int32_t zero_grad;
  int32_t scaler; /* since 1.5 */
} kestrel_adam_params;
typedef struct kestrel_sgd_params {
  size_t struct_size;
  double lr, momentum, dampening, weight_decay, grad_scale; int32_t nesterov; int32_t first_step;
  int32_t zero_grad;  /* as for Adam */
  int32_t scaler;     /* since 1.5, as for Adam; then first_step is ignored, and `step` (from 1, skipped
                       * updates included) starts the momentum buffer where step - skipped_steps == 1 */
  int64_t step;
} kestrel_sgd_params;

/* Recurrent layers (1.15): the cell of RECURRENT_LAYER and its backward. */
typedef enum kestrel_recurrent_cell {
  KESTREL_RECURRENT_RNN_TANH = 0, KESTREL_RECURRENT_RNN_RELU = 1, KESTREL_RECURRENT_LSTM = 2,
  KESTREL_RECURRENT_GRU = 3
} kestrel_recurrent_cell;
typedef struct kestrel_recurrent_params { size_t struct_size; kestrel_recurrent_cell cell; } kestrel_recurrent_params;

typedef struct kestrel_op {
  size_t struct_size;
  kestrel_op_kind kind;
  int32_t num_inputs;
  int32_t num_outputs;
  kestrel_tensor inputs[KESTREL_MAX_OP_TENSORS];
  kestrel_tensor outputs[KESTREL_MAX_OP_TENSORS];
  const void* params; /* borrowed for the duration of the call; the struct named for `kind` */
} kestrel_op;

/* ---- the function table ----------------------------------------------------------------------- */

typedef struct kestrel_plugin_api {
  size_t struct_size;
  uint32_t abi_major;  /* KESTREL_PLUGIN_ABI_MAJOR the plugin was built against */
  uint32_t abi_minor;
  const char* name;    /* static string: "cpu", "cuda", "vulkan" — what users type in --backend */
  const char* version; /* static string, the plugin's own version */

  /* Message of the last failure on this thread; owned by the plugin (see top). Required. */
  const char* (*last_error)(void);
  /* optional: NULL means usable with priority 0. Must not initialise the device; cheap. */
  kestrel_status (*probe)(kestrel_probe_result* result);
  /* optional: NULL means nothing to do. Called once after a successful probe. */
  kestrel_status (*initialize)(void);
  /* optional: NULL means nothing to do. Called once; every object must have been destroyed. */
  void (*shutdown)(void);

  kestrel_status (*device_count)(int32_t* count);
  kestrel_status (*device_properties)(int32_t device, kestrel_device_properties* props);

  /* The context owns every buffer and stream made from it: destroy those first. */
  kestrel_status (*context_create)(int32_t device, kestrel_context** context);
  void (*context_destroy)(kestrel_context* context);
  kestrel_status (*stream_create)(kestrel_context* context, kestrel_stream** stream);
  void (*stream_destroy)(kestrel_stream* stream);
  kestrel_status (*stream_synchronize)(kestrel_stream* stream);
  /* optional (all five): NULL means every launch completes before it returns, so events are no-ops
   * (collectives excepted: they complete in stream order, and stream_synchronize waits for them).
   * event_synchronize blocks the calling thread until the work recorded before the event is done. */
  kestrel_status (*event_create)(kestrel_context* context, kestrel_event** event);
  void (*event_destroy)(kestrel_event* event);
  kestrel_status (*event_record)(kestrel_event* event, kestrel_stream* stream);
  kestrel_status (*stream_wait_event)(kestrel_stream* stream, kestrel_event* event);
  kestrel_status (*event_synchronize)(kestrel_event* event);

  /* Device buffers: at least 64-byte aligned. Freed buffers may be cached by the plugin. buffer_free is
   * stream-ordered: the memory must not be reused before work already enqueued on the context's
   * streams has finished with it. */
  kestrel_status (*buffer_alloc)(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer);
  void (*buffer_free)(kestrel_buffer* buffer);
  /* optional (both): pinned (page-locked) host memory for asynchronous copies; NULL means the host
   * uses ordinary aligned memory. The pointer is owned by the caller until host_free. */
  kestrel_status (*host_alloc)(kestrel_context* context, uint64_t bytes, void** ptr);
  void (*host_free)(kestrel_context* context, void* ptr);

  /* Copies are ordered on the stream. For asynchronous copies the host memory must stay valid (and,
   * for the source, unchanged) until the stream reaches the copy. Offsets are in bytes. */
  kestrel_status (*copy_host_to_device)(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                        const void* src, uint64_t bytes);
  kestrel_status (*copy_device_to_host)(kestrel_stream* stream, void* dst, kestrel_buffer* src,
                                        uint64_t src_offset, uint64_t bytes);
  kestrel_status (*copy_device_to_device)(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                          kestrel_buffer* src, uint64_t src_offset, uint64_t bytes);

  kestrel_status (*memory_stats)(kestrel_context* context, kestrel_memory_stats* stats);
  /* optional: NULL means nothing is cached. Releases cached free memory (torch.cuda.empty_cache). */
  kestrel_status (*memory_trim)(kestrel_context* context);
  /* optional: NULL means the host cannot reset the peak (it then reports the all-time peak). */
  kestrel_status (*memory_reset_peak)(kestrel_context* context);

  /* 1 if the plugin can run this op with these dtypes, shapes and strides, else 0 (also for an op kind
   * the plugin does not know, e.g. one added by a later minor version). Buffers may be NULL: the answer
   * depends only on the descriptors. Required. */
  int32_t (*supports_op)(kestrel_context* context, const kestrel_op* op);
  /* Enqueues the op. Fails with UNSUPPORTED when supports_op says 0. Required. */
  kestrel_status (*launch)(kestrel_stream* stream, const kestrel_op* op);

  /* optional (all four): capture the launches on a stream into a graph and replay it. NULL means no
   * capture; the engine then launches each op every time.
   * Between capture_begin and capture_end, launches and device-to-device copies on the stream are
   * recorded, not run; graph_launch enqueues the whole recording (any number of times). Op parameters
   * are frozen at capture: what must change per replay lives in device memory (see RANDOM's in0).
   * Host copies, stream_synchronize and memory_trim are refused on a capturing stream. Memory: buffers
   * allocated by the capturing thread during the capture belong to the graph's use; the host frees each
   * of them before capture_end (a plugin may refuse capture_end otherwise), and the plugin keeps their
   * memory for the graph until graph_destroy, never handing it to allocations outside the graph.
   * Buffers allocated before the capture and used by it stay allocated until graph_destroy. */
  kestrel_status (*capture_begin)(kestrel_stream* stream);
  kestrel_status (*capture_end)(kestrel_stream* stream, kestrel_graph** graph);
  kestrel_status (*graph_launch)(kestrel_graph* graph, kestrel_stream* stream);
  void (*graph_destroy)(kestrel_graph* graph);

  /* optional (all four, and since 1.3 the six after them): collectives for data-parallel training. NULL
   * means single-process only.
   * comm_create takes an opaque unique id (id_size bytes, at most 128) produced by comm_unique_id on rank 0
   * and shared by the host with every rank (over MPI, say); the communicator belongs to the context and
   * is destroyed before it. A plugin whose transport is itself the launcher's (MPI) may ignore the id but
   * checks that rank and world_size are the launcher's; it makes the id the string "mpi", and the host
   * then initialises MPI (with MPI_THREAD_MULTIPLE) before comm_create where no launcher did.
   * Collectives are ordered on `stream` like launches: work enqueued on the stream after a collective
   * waits for it, and stream_synchronize returns once it is done, or returns PEER_FAILED (with a message
   * naming the ranks missing, where the plugin can tell) when a rank failed or the communicator's timeout
   * passed first. Every rank issues the same collectives in the same order. Tensors are contiguous and
   * borrowed until the collective has completed; dtypes are those of the device's dtype_mask. */
  kestrel_status (*comm_unique_id)(char* id, size_t id_size);
  kestrel_status (*comm_create)(kestrel_context* context, const char* id, int32_t rank, int32_t world_size,
                                kestrel_comm** comm);
  void (*comm_destroy)(kestrel_comm* comm);
  /* In place: `tensor` (any shape) becomes the element-wise sum of every rank's `tensor`. */
  kestrel_status (*all_reduce_sum)(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor);
  /* 1.3. In place: every rank's `tensor` becomes root's. */
  kestrel_status (*broadcast)(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* tensor,
                              int32_t root);
  /* 1.3. input: (world_size * n) on every rank; output: (n), rank r's gets elements [r*n, (r+1)*n) of the
   * sum over ranks of input. */
  kestrel_status (*reduce_scatter_sum)(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                                       const kestrel_tensor* output);
  /* 1.3. input: (n); output: (world_size * n), elements [r*n, (r+1)*n) are rank r's input. */
  kestrel_status (*all_gather)(kestrel_comm* comm, kestrel_stream* stream, const kestrel_tensor* input,
                               const kestrel_tensor* output);
  /* 1.3. A collective not complete `seconds` after it could start (its stream reached it) fails the
   * communicator with PEER_FAILED. Until set, the plugin's default (at most 10 minutes). */
  kestrel_status (*comm_set_timeout)(kestrel_comm* comm, double seconds);
  /* 1.3. Non-blocking: OK while the communicator works, else the status it failed with (message in
   * last_error). Safe to call from any thread while a collective is pending. */
  kestrel_status (*comm_query)(kestrel_comm* comm);
  /* 1.3. Ends the communicator's pending collectives on every rank so that no rank waits on them. Where
   * the transport can only do so by ending the processes (MPI_Abort), it ends the whole job with
   * `exit_code` and does not return: the host says what went wrong before calling it. */
  void (*comm_abort)(kestrel_comm* comm, int32_t exit_code);

  /* optional (both), 1.3: between group_start and group_end, collectives the calling thread issues (on
   * the communicators of several devices, one per device) are held and issued together at group_end, as
   * one thread driving several devices needs. NULL means collectives are issued as they are called. */
  kestrel_status (*group_start)(void);
  kestrel_status (*group_end)(void);

  /* optional, 1.4: the address of the buffer's first byte in the host's memory when the host may read and
   * write it in place (a CPU backend's buffers; memory a device shares with the host), valid until
   * buffer_free; NULL otherwise, and when the entry is NULL: the host then copies. The host reads or
   * writes through it only after stream_synchronize, and enqueues no work on the buffer meanwhile. */
  void* (*buffer_host_address)(kestrel_buffer* buffer);

  /* optional, 1.15: the bytes of the `saved` output of `op` (RECURRENT_LAYER's last), whose layout and
   * size are the plugin's own; the descriptor is the one that will be launched, its saved output's shape
   * ignored and its buffers possibly NULL. NULL, or a failed status: the plugin saves nothing of its own,
   * and ops with such an output are unsupported. */
  kestrel_status (*op_saved_bytes)(kestrel_context* context, const kestrel_op* op, uint64_t* bytes);
} kestrel_plugin_api;

typedef const kestrel_plugin_api* (*kestrel_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KESTREL_PLUGIN_H */
