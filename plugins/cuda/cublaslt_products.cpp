// Products through cuBLASLt, the default (KESTREL_CUDA_DISABLE_LT=1 goes back to cuBLAS's
// cublasGemmStridedBatchedEx). LINEAR's gets its bias in the product's epilogue, where ops_gemm.cu's
// linear_epilogue otherwise reads and writes the whole output once more after a cuBLAS product; plain 2-D
// GEMMs (the gradient products) take cuBLASLt's heuristic choice of kernels. On an H200 (2026-11-27) this
// made GPT-2 small's captured bf16 step 38.8 -> 34.4 ms (its GELU layers had their bias alone in the
// epilogue then, as every layer has now). The gemm and fused conformance families passed with it but for
// one case: cuBLASLt's ReLU epilogue turns a NaN into 0 in f16 and bf16 ("linear/.../relu keeps NaN"), so
// activations stay outside, in a pass of their own (ops_gemm.cu; GELU would anyway: cuBLASLt's is the tanh
// approximation, the engine's and torch.nn.GELU's default the erf form).
//
// A weight gradient's product may bring its bias gradient along (ABI 1.14's GEMM out1): cuBLASLt's BGRADB
// epilogue sums B, the engine's a (dz^T), over k as the product reads it, in place of a column fold that
// read dz once more (GPT-2's bias gradients were about 7% of its H200 step, 2026-11-27).
//
// cuBLASLt may decline a problem (alignment, a shape no kernel takes): the caller then takes the cuBLAS path.
#include <array>
#include <map>
#include <memory>
#include <string>

#include "cublas_layout.hpp"
#include "cublaslt_products.hpp"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

bool lt_enabled() {
  static const bool enabled = !kestrel::plugin_env::flag("KESTREL_CUDA_DISABLE_LT");
  return enabled;
}

namespace {

// One problem's descriptors and the algorithm cuBLASLt's heuristic chose for them (or that it found none).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  ~LtPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The largest power of two (up to 16) that divides the address: cuBLASLt's heuristic picks kernels by it.
int64_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t a = 16;
  while (a > 1 && address % uint64_t(a) != 0) a /= 2;
  return a;
}

template <class T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  check_cublas(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
}

void prefer(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, uint32_t value) {
  cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
}

// One product in cuBLASLt's column-major terms: D (rows x cols) = alpha op(A) (rows x k) @ op(B) (k x cols)
// + beta D [+ bias (rows)], the engine's row-major z (M,N) = x (M,K) @ w (K,N) read as z^T = w^T x^T: A is
// w, B is x, D is z (rows = N, cols = M), and a bias runs along D's rows, one per output feature.
struct Product {
  kestrel_dtype operands, result;
  const kestrel_tensor *x, *w, *z;
  const void* bias = nullptr;  // BIAS: read, (rows); BGRADB: x's rows summed over k written, (cols), D's type
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 1.0f, beta = 0.0f;
};

// Plans by (operand and result dtypes, transa, transb, D's rows and columns, k, lda, ldb, ldd, epilogue,
// whether C is read, four alignments).
using Key = std::array<int64_t, 16>;

}  // namespace

struct LtPlans {
  std::map<Key, std::unique_ptr<LtPlan>> built;
};

namespace {

bool run_by_lt(kestrel_stream& s, const Product& p) {
  const kestrel_tensor &x = *p.x, &w = *p.w, &z = *p.z;
  const bool sixteen = p.operands == KESTREL_DTYPE_F16 || p.operands == KESTREL_DTYPE_BF16;
  if (!sixteen && p.operands != KESTREL_DTYPE_F32) return false;
  if (p.result != p.operands && !(sixteen && p.result == KESTREL_DTYPE_F32)) return false;
  if (x.dtype != p.operands || w.dtype != p.operands || z.dtype != p.result) return false;
  const int64_t m = z.shape[0], n = z.shape[1], k = x.shape[1];
  if (m == 0 || n == 0 || k == 0) return false;
  const Classified cx = classify(m, k, x.strides[0], x.strides[1]), cw = classify(k, n, w.strides[0], w.strides[1]);
  const Classified cz = classify(m, n, z.strides[0], z.strides[1]);
  if (cx.order == Order::none || cw.order == Order::none || cz.order != Order::row) return false;
  const TensorRef rx = ref(x), rw = ref(w), rz = ref(z);
  const cublasOperation_t transa = cw.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t transb = cx.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const Key key = {p.operands, p.result, transa, transb, n, m, k, cw.ld, cx.ld, cz.ld, p.epilogue, p.beta != 0.0f,
                   alignment(rw.base), alignment(rx.base), alignment(rz.base), p.bias ? alignment(p.bias) : 0};
  if (!s.lt_plans) s.lt_plans = std::make_shared<LtPlans>();
  std::unique_ptr<LtPlan>& slot = s.lt_plans->built[key];
  if (!slot) {  // built aside, so a throw part-way leaves no half-made plan behind
    auto plan = std::make_unique<LtPlan>();
    const cudaDataType operands = cuda_type(p.operands), result = cuda_type(p.result);
    const cublasComputeType_t compute =
        p.operands == KESTREL_DTYPE_F32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    check_cublas(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
    set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    if (p.bias) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    if (p.epilogue == CUBLASLT_EPILOGUE_BGRADB) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(p.result));
    // The stored matrices: op(A) is n x k, so A is stored n x k (N) or k x n (T); likewise B.
    check_cublas(cublasLtMatrixLayoutCreate(&plan->a, operands, transa == CUBLAS_OP_N ? n : k,
                                            transa == CUBLAS_OP_N ? k : n, cw.ld),
                 "cublasLtMatrixLayoutCreate (w)");
    check_cublas(cublasLtMatrixLayoutCreate(&plan->b, operands, transb == CUBLAS_OP_N ? k : m,
                                            transb == CUBLAS_OP_N ? m : k, cx.ld),
                 "cublasLtMatrixLayoutCreate (x)");
    check_cublas(cublasLtMatrixLayoutCreate(&plan->d, result, n, m, cz.ld), "cublasLtMatrixLayoutCreate (z)");
    cublasLtMatmulPreference_t preference = nullptr;
    check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = kBlasWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    // The heuristic assumes 256-byte aligned matrices unless told: a view at an offset would get a kernel
    // that cannot read it.
    prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(key[12]));
    prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(key[13]));
    prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(key[14]));
    prefer(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(key[14]));
    cublasLtMatmulHeuristicResult_t result_algo{};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(s.blas_lt, plan->desc, plan->a, plan->b, plan->d,
                                                                 plan->d, preference, 1, &result_algo, &returned);
    cublasLtMatmulPreferenceDestroy(preference);
    plan->found = status == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (plan->found) plan->algo = result_algo.algo;
    slot = std::move(plan);
  }
  LtPlan& plan = *slot;
  if (!plan.found) return false;
  if (p.bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);  // this call's (same alignment)
  const cublasStatus_t status = cublasLtMatmul(s.blas_lt, plan.desc, &p.alpha, rw.base, plan.a, rx.base, plan.b,
                                               &p.beta, rz.base, plan.d, rz.base, plan.d, &plan.algo, s.blas_workspace,
                                               kBlasWorkspaceBytes, s.cuda);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.found = false;  // refused before anything was enqueued: cuBLAS takes this problem from now on
    return false;
  }
  check_cublas(status, "cublasLtMatmul");
  return true;
}

}  // namespace

bool linear_by_lt(kestrel_stream& s, const kestrel_tensor& x, const kestrel_tensor& w, const kestrel_tensor* bias,
                  const kestrel_tensor& z) {
  if (bias && (bias->dtype != z.dtype || (z.shape[1] > 1 && bias->strides[0] != 1)))
    return false;  // cuBLASLt reads a contiguous vector of D's type
  Product p{z.dtype, z.dtype, &x, &w, &z};
  p.bias = bias ? ref(*bias).base : nullptr;
  p.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  return run_by_lt(s, p);
}

bool gemm_by_lt(kestrel_stream& s, const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c, double alpha,
                double beta, const kestrel_tensor* row_sums) {
  if (a.rank != 2 || c.rank != 2) return false;
  Product p{a.dtype, c.dtype, &a, &b, &c};
  p.alpha = float(alpha);
  p.beta = float(beta);
  if (row_sums) {
    p.bias = ref(*row_sums).base;
    p.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  }
  return run_by_lt(s, p);
}

}  // namespace kestrel_cuda
