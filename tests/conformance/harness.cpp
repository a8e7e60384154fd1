#include "harness.hpp"

#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <limits>

#include "kestrel/engine.h"

#include "kestrel/error.h"
#include "kestrel/half.h"

namespace kestrel::conformance {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous: return "contiguous";
    case Layout::strided: return "strided";
    case Layout::transposed: return "transposed";
    case Layout::padded: return "padded";
  }
  return "?";
}

double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::f64: return v;
    case DType::f32: return static_cast<float>(v);
    case DType::f16: return kestrel_f16_to_f32(kestrel_f32_to_f16(static_cast<float>(v)));
    case DType::bf16: return kestrel_bf16_to_f32(kestrel_f32_to_bf16(static_cast<float>(v)));
    case DType::i32: return static_cast<double>(static_cast<int32_t>(v));
    case DType::i64: return static_cast<double>(static_cast<int64_t>(v));
    case DType::u8: return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));
  }
  return v;
}

Tolerance tolerance_for(DType dtype, double scale) {
  switch (dtype) {
    case DType::f64: return {1e-12 * scale, 1e-12 * scale};
    case DType::f32: return {2e-6 * scale, 2e-6 * scale};
    case DType::f16: return {2e-3 * scale, 2e-3 * scale};
    case DType::bf16: return {1.6e-2 * scale, 1.6e-2 * scale};
    default: return {0, 0};
  }
}

kestrel_op op_of(kestrel_op_kind kind, const void* params, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& outputs) {
  kestrel_op op{};
  op.struct_size = abi_size<kestrel_op>;
  op.kind = kind;
  op.params = params;
  for (const Tensor& t : inputs) op.inputs[op.num_inputs++] = t.descriptor();
  for (const Tensor& t : outputs) op.outputs[op.num_outputs++] = t.descriptor();
  return op;
}

std::string case_name(std::initializer_list<std::string> parts) {
  std::string name;
  for (const auto& part : parts) name += (name.empty() ? "" : "/") + part;
  return name;
}

std::vector<int64_t> unravel(int64_t linear, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + index[d];
  return linear;
}

Runner::Runner(const Device& device, const std::string& family, const std::string& filter, Summary& summary,
               const std::function<void(const CaseResult&)>& on_case)
    : device_(device), family_(family), filter_(filter), summary_(summary), on_case_(on_case),
      rng_(std::hash<std::string>{}(family)), declared_(Engine::global().properties(device).dtypes) {}

bool Runner::required(bool rule, std::initializer_list<DType> dtypes) const {
  for (DType dtype : dtypes)
    if (std::find(declared_.begin(), declared_.end(), dtype) == declared_.end()) return false;
  return rule;
}

void Runner::run(const std::string& name, bool required, const std::function<void()>& body) {
  std::string full = family_ + "/" + name;
  if (!filter_.empty() && full.find(filter_) == std::string::npos) return;
  rng_.seed(std::hash<std::string>{}(full));  // each case's data is independent of which others ran
  CaseResult result{full, "passed", ""};
  try {
    body();
  } catch (const Unsupported& e) {
    result.outcome = required ? "failed" : "unsupported";
    result.detail = required ? std::string("a required primitive is unsupported: ") + e.what() : e.what();
  } catch (const std::exception& e) {
    result.outcome = "failed";
    result.detail = e.what();
  }
  if (result.outcome == "unsupported") {
    ++summary_.unsupported;
  } else {
    ++summary_.run;
    if (result.outcome == "passed") {
      ++summary_.passed;
    } else {
      ++summary_.failed;
      summary_.failures.push_back(result);
    }
  }
  if (on_case_) on_case_(result);
}

std::vector<double> Runner::values(int64_t count, double lo, double hi, DType dtype) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(count);
  for (auto& v : out) v = round_to(dtype, is_floating(dtype) ? dist(rng_) : std::floor(dist(rng_)));
  return out;
}

Tensor Runner::result_rows(int64_t n, int64_t width, DType dtype, bool strided) {
  if (!strided) return Tensor::empty({n, width}, dtype, device_);
  return Tensor::empty({n, width + 3}, dtype, device_).slice(1, 0, width);
}

void Runner::cell_cases(const std::function<void(DType, int64_t, int64_t, bool, bool)>& body) {
  const Shape shapes[] = {{3, 5}, {4, 33}, {0, 4}};  // (N, H)
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Shape& shape : shapes)
      for (bool strided : {false, true})
        for (bool backward : {false, true})
          run(case_name({backward ? "backward" : "forward", std::string(dtype_name(dtype)), shape_str(shape),
                         strided ? "strided" : "contiguous"}),
              false, [&] { body(dtype, shape[0], shape[1], strided, backward); });
}

Tensor Runner::upload(const Shape& shape, const std::vector<double>& values, DType dtype, Layout layout) {
  auto store = [&](const Shape& host_shape, const std::vector<double>& host) {
    std::vector<unsigned char> raw(host.size() * dtype_size(dtype));
    convert_host_elements(host.data(), DType::f64, raw.data(), dtype, static_cast<int64_t>(host.size()));
    return Tensor::from_host(raw.data(), host_shape, dtype, device_);
  };
  if (layout == Layout::transposed && shape.size() >= 2) {
    // Store the transpose contiguously, then view it transposed back: strides (.., 1, rows).
    Shape swapped = shape;
    std::swap(swapped[shape.size() - 1], swapped[shape.size() - 2]);
    std::vector<double> host(values.size());
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      auto index = unravel(i, shape);
      std::swap(index[shape.size() - 1], index[shape.size() - 2]);
      host[ravel(index, swapped)] = values[i];
    }
    return store(swapped, host).transpose(-1, -2);
  }
  if (layout == Layout::strided && !shape.empty()) {
    // Every other element of a wider tensor; the gaps hold a sentinel no result may depend on.
    Shape wide = shape;
    wide.back() = shape.back() * 2;
    std::vector<double> host(shape_numel(wide), round_to(dtype, 77));
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      auto index = unravel(i, shape);
      index.back() *= 2;
      host[ravel(index, wide)] = values[i];
    }
    return store(wide, host).slice(-1, 0, wide.back(), 2);
  }
  if (layout == Layout::padded && shape.size() >= 2) {
    // Rows 3 elements longer than they are used; the gaps hold the sentinel.
    Shape wide = shape;
    wide.back() = shape.back() + 3;
    std::vector<double> host(shape_numel(wide), round_to(dtype, 77));
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) host[ravel(unravel(i, shape), wide)] = values[i];
    return store(wide, host).slice(-1, 0, shape.back());
  }
  return store(shape, values);
}

void Runner::expect_close(const Tensor& got, const std::vector<double>& want, Tolerance tol, const std::string& what) {
  expect_close(got.to_doubles(), want, tol, what);
}

void Runner::expect_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol,
                          const std::string& what) {
  if (got.size() != want.size())
    throw CaseFailure(fmt::format("{}{} elements, expected {}", what.empty() ? "" : what + ": ", got.size(), want.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w);
    if (!ok)
      throw CaseFailure(fmt::format("{}element {} is {:.9g}, expected {:.9g} (rtol {:g}, atol {:g})",
                                    what.empty() ? "" : what + ": ", i, g, w, tol.rtol, tol.atol));
  }
}

}  // namespace kestrel::conformance
