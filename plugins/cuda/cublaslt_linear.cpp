// LINEAR's product through cuBLASLt, with the bias (and a ReLU) added in the product's epilogue, where
// ops_gemm.cu's linear_epilogue otherwise reads and writes the whole output once more after a cuBLAS
// product (4% of the 8192-wide MLP's bf16 step on an H100, 2026-11-25). GELU stays outside: cuBLASLt's
// is the tanh approximation and the engine's, like torch.nn.GELU's default, the erf form. Whether
// cuBLASLt's ReLU keeps a NaN, as the engine's and torch's do, is for the conformance case "linear/.../
// relu keeps NaN" to say on a GPU.
//
// Opt-in with KESTREL_CUDA_LINEAR_LT=1 until a GPU run has passed the conformance suite with it and
// measured it (scripts/gpu/on_device.sh linear_lt). cuBLASLt may decline a problem (alignment, a shape no
// kernel takes): the caller then takes the cuBLAS path.
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "cublas_layout.hpp"
#include "cublaslt_linear.hpp"

namespace kestrel_cuda {

bool linear_lt_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KESTREL_CUDA_LINEAR_LT");
    return v && v[0] == '1';
  }();
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

}  // namespace

// Plans by (dtype, transa, transb, D's rows and columns, k, lda, ldb, ldd, epilogue, four alignments).
struct LtPlans {
  std::map<std::array<int64_t, 14>, std::unique_ptr<LtPlan>> built;
};

// Column-major, as cuBLASLt sees it: D (n x m) = op(A) (n x k) @ op(B) (k x m) + bias (n), where A is w
// (k x n in the engine's row-major terms), B is x (m x k) and D is z (m x n); the bias runs along D's rows.
bool linear_by_lt(kestrel_stream& s, const kestrel_tensor& x, const kestrel_tensor& w, const kestrel_tensor* bias,
                  const kestrel_tensor& z, bool relu) {
  const kestrel_dtype dtype = z.dtype;
  if (dtype != KESTREL_DTYPE_F32 && dtype != KESTREL_DTYPE_F16 && dtype != KESTREL_DTYPE_BF16) return false;
  if (x.dtype != dtype || w.dtype != dtype || (bias && bias->dtype != dtype)) return false;
  const int64_t m = z.shape[0], n = z.shape[1], k = x.shape[1];
  if (m == 0 || n == 0 || k == 0) return false;
  if (bias && n > 1 && bias->strides[0] != 1) return false;  // cuBLASLt reads a contiguous vector
  const Classified cx = classify(m, k, x.strides[0], x.strides[1]), cw = classify(k, n, w.strides[0], w.strides[1]);
  const Classified cz = classify(m, n, z.strides[0], z.strides[1]);
  if (cx.order == Order::none || cw.order == Order::none || cz.order != Order::row) return false;
  const TensorRef rx = ref(x), rw = ref(w), rz = ref(z);
  const void* bias_at = bias ? ref(*bias).base : nullptr;
  const cublasOperation_t transa = cw.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t transb = cx.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  const std::array<int64_t, 14> key = {dtype, transa, transb, n, m, k, cw.ld, cx.ld, cz.ld, epilogue,
                                       alignment(rw.base), alignment(rx.base), alignment(rz.base),
                                       bias ? alignment(bias_at) : 0};
  if (!s.lt_plans) s.lt_plans = std::make_shared<LtPlans>();
  std::unique_ptr<LtPlan>& slot = s.lt_plans->built[key];
  if (!slot) {  // built aside, so a throw part-way leaves no half-made plan behind
    auto plan = std::make_unique<LtPlan>();
    const cudaDataType type = cuda_type(dtype);
    const cublasComputeType_t compute =
        dtype == KESTREL_DTYPE_F32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    check_cublas(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
    set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (bias) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_at);
    // The stored matrices: op(A) is n x k, so A is stored n x k (N) or k x n (T); likewise B.
    check_cublas(cublasLtMatrixLayoutCreate(&plan->a, type, transa == CUBLAS_OP_N ? n : k, transa == CUBLAS_OP_N ? k : n,
                                            cw.ld),
                 "cublasLtMatrixLayoutCreate (w)");
    check_cublas(cublasLtMatrixLayoutCreate(&plan->b, type, transb == CUBLAS_OP_N ? k : m, transb == CUBLAS_OP_N ? m : k,
                                            cx.ld),
                 "cublasLtMatrixLayoutCreate (x)");
    check_cublas(cublasLtMatrixLayoutCreate(&plan->d, type, n, m, cz.ld), "cublasLtMatrixLayoutCreate (z)");
    cublasLtMatmulPreference_t preference = nullptr;
    check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = kBlasWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    // The heuristic assumes 256-byte aligned matrices unless told: a view at an offset would get a kernel
    // that cannot read it.
    const uint32_t aligned_w = uint32_t(key[10]), aligned_x = uint32_t(key[11]), aligned_z = uint32_t(key[12]);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aligned_w,
                                         sizeof(aligned_w));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &aligned_x,
                                         sizeof(aligned_x));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &aligned_z,
                                         sizeof(aligned_z));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &aligned_z,
                                         sizeof(aligned_z));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(s.blas_lt, plan->desc, plan->a, plan->b, plan->d,
                                                                 plan->d, preference, 1, &result, &returned);
    cublasLtMatmulPreferenceDestroy(preference);
    plan->found = status == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (plan->found) plan->algo = result.algo;
    slot = std::move(plan);
  }
  LtPlan& plan = *slot;
  if (!plan.found) return false;
  if (bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_at);  // this call's (same alignment)
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(s.blas_lt, plan.desc, &one, rw.base, plan.a, rx.base, plan.b, &zero,
                                               rz.base, plan.d, rz.base, plan.d, &plan.algo, s.blas_workspace,
                                               kBlasWorkspaceBytes, s.cuda);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.found = false;  // refused before anything was enqueued: cuBLAS takes this problem from now on
    return false;
  }
  check_cublas(status, "cublasLtMatmul (linear)");
  return true;
}

}  // namespace kestrel_cuda
