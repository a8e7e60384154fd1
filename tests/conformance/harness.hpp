// Helpers shared by the conformance cases: host reference data, uploads in several layouts, and
// comparisons with per-dtype tolerances.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "kestrel/ops.h"
#include "kestrel/tensor.h"

namespace kestrel::conformance {

// How an input tensor is laid out on the device: the same logical values, different strides. padded:
// each row a prefix of a longer one (a time step's slice of a batch-first sequence).
enum class Layout { contiguous, strided, transposed, padded };
const char* layout_name(Layout layout);

struct CaseFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value `v` becomes when stored in `dtype` (rounding, truncation, wrap-around as the dtype does).
double round_to(DType dtype, double v);
// Tolerances: |got - want| <= atol + rtol * |want|, scaled by `scale` for long accumulations.
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dtype, double scale = 1.0);
// The dtype of the statistics a fused op's forward leaves for backward (plugin.h, ABI 1.7).
inline DType statistics_of(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

class Runner {
 public:
  Runner(const Device& device, const std::string& family, const std::string& filter, Summary& summary,
         const std::function<void(const CaseResult&)>& on_case);

  const Device& device() const { return device_; }
  // Runs one case. `required`: an Unsupported answer is a failure (see required()).
  void run(const std::string& name, bool required, const std::function<void()>& body);
  // Whether a case must run: `rule` (required primitives in f32, integer ones in i64) and the device
  // lists every dtype of the case among those it computes in.
  bool required(bool rule, std::initializer_list<DType> dtypes) const;

  // Deterministic inputs, already representable in `dtype`.
  std::vector<double> values(int64_t count, double lo, double hi, DType dtype);
  std::mt19937_64& rng() { return rng_; }

  Tensor upload(const Shape& shape, const std::vector<double>& values, DType dtype, Layout layout = Layout::contiguous);
  // An uninitialised (n, width) result; with `strided` its rows are `width + 3` apart, as a step's slice
  // of a sequence (the recurrent cells' cases).
  Tensor result_rows(int64_t n, int64_t width, DType dtype, bool strided);
  // The recurrent cells' grid of optional cases: every float dtype, (N, H) of (3, 5), (4, 33) and (0, 4),
  // contiguous and strided rows, forward and backward; `body` runs one.
  void cell_cases(const std::function<void(DType dtype, int64_t n, int64_t hidden, bool strided, bool backward)>& body);
  // Fails the case when any element differs beyond the tolerance (NaN matches NaN, Inf its own sign).
  void expect_close(const Tensor& got, const std::vector<double>& want, Tolerance tol, const std::string& what = "");
  void expect_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol,
                    const std::string& what = "");

 private:
  Device device_;
  std::string family_, filter_;
  Summary& summary_;
  const std::function<void(const CaseResult&)>& on_case_;
  std::mt19937_64 rng_;
  std::vector<DType> declared_;
};

// An op descriptor over tensors, for the cases of fused ops; `params` is borrowed.
kestrel_op op_of(kestrel_op_kind kind, const void* params, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& outputs);

// Name helpers: "f32", "(7, 13)".
std::string case_name(std::initializer_list<std::string> parts);

// Row-major index helpers for references.
std::vector<int64_t> unravel(int64_t linear, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& index, const Shape& shape);

// The families, each registering its cases on a Runner.
void fill_cases(Runner& r);
void copy_cases(Runner& r);
void unary_cases(Runner& r);
void binary_cases(Runner& r);
void reduce_cases(Runner& r);
void gemm_cases(Runner& r);
void index_cases(Runner& r);
void random_cases(Runner& r);
void window_cases(Runner& r);
void fused_cases(Runner& r);
void attention_cases(Runner& r);
void layer_norm_cases(Runner& r);
void lstm_cell_cases(Runner& r);
void gru_cell_cases(Runner& r);
void conv_cases(Runner& r);
void recurrent_layer_cases(Runner& r);
void capture_cases(Runner& r);
void collective_cases(Runner& r);

}  // namespace kestrel::conformance
