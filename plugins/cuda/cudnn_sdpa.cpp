// f16/bf16 attention through cuDNN's fused scaled-dot-product attention (flash attention on tensor
// cores: forward never writes the (Tq x Tk) scores to memory; the deterministic backward keeps one
// 2-byte (B x Tq x Tk) workspace), built with the cuDNN frontend's graph API. It takes
// the ABI's ATTENTION and ATTENTION_BACKWARD where cuDNN computes exactly what they ask: no dropout
// (cuDNN would draw its own mask, not RANDOM's), no key padding (Kestrel's masks are any keys, cuDNN's
// padding is a length), causal only with Tq == Tk (Kestrel aligns the diagonal bottom-right), head size
// a multiple of 8 up to 128, 16-byte aligned tensors. Everything else, and f32, goes to the plugin's own
// kernels (ops_attention.cu), whose forward leaves the same log-sum-exp (cuDNN's "stats": natural log of
// each query's sum of exp(scaled score)), so either backward takes either forward's.
//
// The ABI's (B, T, D) tensors are cuDNN's (B, 1, T, D), and its (N, H, T, D) views (1.13) cuDNN's with the
// same strides: heads are read where a packed projection leaves them. Each shape's graph is built once per stream (its
// cuDNN handle), in an eager step (cuDNN compiles kernels then; a shape first met inside a graph capture
// runs on the plugin's kernels), and cached; its workspace comes from the stream-ordered pool, so a step
// replayed from a CUDA graph runs it too, and a shape whose workspace would pass the plugin's own scratch
// budget (1 GiB) is left to its kernels, which work in chunks. Backward asks for cuDNN's deterministic
// algorithm (exact resume needs two runs of a step to agree). KESTREL_CUDA_DISABLE_SDPA=1 keeps every
// attention on the plugin's own kernels.
#include "cudnn_sdpa.hpp"

#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kestrel/plugin_env.hpp"

#include <dlfcn.h>

namespace fe = cudnn_frontend;

// Built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (see CMakeLists.txt), the frontend reaches cuDNN through
// this handle: the libcudnn.so.9 the plugin is linked with, opened once before the first graph.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace kestrel_cuda {

namespace {

// Tensor ids in a graph's variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

constexpr int64_t kWorkspaceBudget = int64_t(1) << 30;  // as the plugin's own kernels' scratch

// An operand in cuDNN's terms: dims (N, H, T, D) and their strides, an axis of extent 1 given the stride it
// would have packed (the ABI lets such strides be anything; cuDNN validates them, and plans are cached by them).
struct Layout {
  std::array<int64_t, 4> dims, strides;
  static Layout of(const kestrel_tensor& t) {
    const kestrel::plugin_shapes::HeadRows at = kestrel::plugin_shapes::head_rows(t);
    Layout l{{at.batch / at.heads, at.heads, at.rows, at.depth}, {at.sample_stride, at.head_stride, at.row_stride, 1}};
    for (int d = 2; d >= 0; --d)
      if (l.dims[d] == 1) l.strides[d] = l.strides[d + 1] * l.dims[d + 1];
    return l;
  }
  // cuDNN's kernels load 16-byte vectors: every stride but the last a multiple of 8 elements.
  bool vector_aligned() const { return strides[0] % 8 == 0 && strides[1] % 8 == 0 && strides[2] % 8 == 0; }
  bool operator<(const Layout& o) const { return std::tie(dims, strides) < std::tie(o.dims, o.strides); }
};

struct Shape {
  int64_t b, tq, tk, d;
  kestrel_dtype dtype;
  bool causal, backward;
  float scale;
  // Forward: q, k, v, o; backward: also dout, dq, dk, dv.
  std::vector<Layout> layouts;
  auto key() const {
    uint32_t scale_bits;  // by bits: a NaN scale must not break the map's ordering
    std::memcpy(&scale_bits, &scale, sizeof scale_bits);
    return std::make_tuple(b, tq, tk, d, int(dtype), causal, backward, scale_bits, layouts);
  }
  bool operator<(const Shape& o) const { return key() < o.key(); }
};

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

void check(fe::error_t status, const char* what) {
  if (status.is_bad()) fail(std::string("cuDNN attention: ") + what + ": " + status.get_message());
}

std::vector<int64_t> dims_of(const Layout& l) { return {l.dims.begin(), l.dims.end()}; }
std::vector<int64_t> strides_of(const Layout& l) { return {l.strides.begin(), l.strides.end()}; }

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, Uid uid, const Layout& l) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims_of(l)).set_stride(strides_of(l)));
}

void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid, const Layout& l) {
  t->set_output(true).set_uid(uid).set_dim(dims_of(l)).set_stride(strides_of(l));
}

// Each query's log-sum-exp, (B, Tq) contiguous, as (N, H, Tq, 1).
std::vector<int64_t> stats_dims(const Layout& q) { return {q.dims[0], q.dims[1], q.dims[2], 1}; }
std::vector<int64_t> stats_strides(const Layout& q) { return {q.dims[1] * q.dims[2], q.dims[2], 1, 1}; }

Built build(cudnnHandle_t handle, const Shape& s) {
  Built built;
  built.graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& g = *built.graph;
  g.set_io_data_type(s.dtype == KESTREL_DTYPE_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<Layout>& l = s.layouts;
  auto q = tensor(g, "q", kQ, l[0]), k = tensor(g, "k", kK, l[1]), v = tensor(g, "v", kV, l[2]);
  if (!s.backward) {
    auto options =
        fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(s.scale);
    if (s.causal) options.set_causal_mask(true);
    auto [o, stats] = g.sdpa(q, k, v, options);
    as_output(o, kO, l[3]);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    stats->set_dim(stats_dims(l[0])).set_stride(stats_strides(l[0]));
  } else {
    auto o = tensor(g, "o", kO, l[3]), d_o = tensor(g, "dout", kDO, l[4]);
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("stats")
                              .set_uid(kStats)
                              .set_dim(stats_dims(l[0]))
                              .set_stride(stats_strides(l[0]))
                              .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(s.scale)
                       .set_deterministic_algorithm(true);
    if (s.causal) options.set_causal_mask(true);
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
    as_output(dq, kDQ, l[5]);
    as_output(dk, kDK, l[6]);
    as_output(dv, kDV, l[7]);
  }
  check(g.validate(), "validating the graph");
  check(g.build_operation_graph(handle), "building the operation graph");
  check(g.create_execution_plans({fe::HeurMode_t::A}), "finding execution plans");
  check(g.check_support(handle), "no engine supports this attention");
  check(g.build_plans(handle), "building the plan");
  check(g.get_workspace_size(built.workspace), "sizing the workspace");
  if (built.workspace > kWorkspaceBudget) fail("cuDNN attention: its workspace would pass the scratch budget");
  return built;
}

bool aligned(const kestrel_tensor& t) { return reinterpret_cast<uintptr_t>(ref(t).base) % 16 == 0; }

// The libcudnn the plugin is linked with (and made its handles with), already loaded; null if not found.
void* linked_cudnn() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cudnnCreate), &info) || !info.dli_fname) return nullptr;
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

}  // namespace

// Each stream's built graphs, by shape; failures are remembered too, so a shape cuDNN refuses is asked
// about once and then runs on the plugin's own kernels.
struct SdpaPlans {
  std::map<Shape, std::shared_ptr<Built>> built;
};

bool sdpa_try(kestrel_stream& s, const kestrel_op& op) {
  static const bool disabled = kestrel::plugin_env::flag("KESTREL_CUDA_DISABLE_SDPA");
  if (disabled || !s.dnn) return false;
  const auto& p = params_of<kestrel_attention_params>(op, "attention");
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD;
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1];
  const kestrel::plugin_shapes::HeadRows qr = kestrel::plugin_shapes::head_rows(q), kr = kestrel::plugin_shapes::head_rows(k);
  Shape shape{qr.batch, qr.rows, kr.rows, qr.depth, q.dtype, p.causal != 0, backward, static_cast<float>(p.scale), {}};
  // q, k, v, o [, dout, dq, dk, dv] in the graph's order.
  const std::vector<const kestrel_tensor*> operands =
      backward ? std::vector<const kestrel_tensor*>{&op.inputs[1], &op.inputs[2], &op.inputs[3], &op.inputs[4],
                                                    &op.inputs[0], &op.outputs[0], &op.outputs[1], &op.outputs[2]}
               : std::vector<const kestrel_tensor*>{&op.inputs[0], &op.inputs[1], &op.inputs[2], &op.outputs[0]};
  for (const kestrel_tensor* t : operands) {
    shape.layouts.push_back(Layout::of(*t));
    if (!shape.layouts.back().vector_aligned()) return false;
  }
  // cuDNN 9.5.0 read dout with out's strides (fixed in 9.5.1): the views must agree for any release.
  if (backward && shape.layouts[3].strides != shape.layouts[4].strides) return false;
  const bool fits = (q.dtype == KESTREL_DTYPE_F16 || q.dtype == KESTREL_DTYPE_BF16) && p.dropout == 0 &&
                    !p.key_padding && (!p.causal || shape.tq == shape.tk) && shape.d % 8 == 0 && shape.d <= 128 &&
                    shape.b > 0 && shape.tq > 0 && shape.tk > 0;
  if (!fits) return false;
  for (int i = 0; i < op.num_inputs; ++i)
    if (!aligned(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!aligned(op.outputs[i])) return false;

  static void* const cudnn = fe::cudnn_dlhandle = linked_cudnn();
  if (!cudnn) return false;
  if (!s.sdpa_plans) s.sdpa_plans = std::make_shared<SdpaPlans>();
  auto found = s.sdpa_plans->built.find(shape);
  if (found == s.sdpa_plans->built.end()) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s.cuda, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone)
      return false;  // building compiles and loads kernels: not inside a capture
    auto built = std::make_shared<Built>();
    try {
      *built = build(s.dnn, shape);
    } catch (const std::exception&) {
      built->graph.reset();  // cuDNN has no engine for it here (or too large a workspace): the plugin's kernels
    }
    found = s.sdpa_plans->built.emplace(shape, std::move(built)).first;
  }
  const std::shared_ptr<Built>& built = found->second;
  if (!built->graph) return false;

  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack;
  auto bind = [&](Uid uid, const kestrel_tensor& t) { pack[uid] = ref(t).base; };
  if (!backward) {
    bind(kQ, op.inputs[0]), bind(kK, op.inputs[1]), bind(kV, op.inputs[2]);
    bind(kO, op.outputs[0]), bind(kStats, op.outputs[1]);
  } else {
    bind(kDO, op.inputs[0]), bind(kQ, op.inputs[1]), bind(kK, op.inputs[2]), bind(kV, op.inputs[3]);
    bind(kO, op.inputs[4]), bind(kStats, op.inputs[5]);
    bind(kDQ, op.outputs[0]), bind(kDK, op.outputs[1]), bind(kDV, op.outputs[2]);
  }
  Scratch workspace(s, uint64_t(std::max<int64_t>(built->workspace, 1)));
  check(built->graph->execute(s.dnn, pack, workspace.get()), "running the attention");
  return true;
}

}  // namespace kestrel_cuda
