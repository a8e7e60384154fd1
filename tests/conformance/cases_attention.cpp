// The fused attention ops (plugin ABI 1.7), optional: forward (output and each query's log-sum-exp) and
// backward (dq, dk, dv), against softmax(scale q k^T [causal]) v and its gradients in double.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"

namespace kestrel::conformance {

namespace {

struct Case {
  int64_t batch, queries, keys, depth;
  bool causal;
};

// Double-precision attention of one batch entry's rows, and its gradients for a given dout.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout) {
  const int64_t tq = c.queries, tk = c.keys, d = c.depth;
  const double scale = 1.0 / std::sqrt(double(d));
  Reference r{std::vector<double>(q.size()), std::vector<double>(size_t(c.batch * tq)), std::vector<double>(q.size()),
              std::vector<double>(k.size()), std::vector<double>(v.size())};
  std::vector<double> p(static_cast<size_t>(tk)), dp(static_cast<size_t>(tk));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t row = b * tq + i, seen = c.causal ? i + tk - tq + 1 : tk;
      const double* qi = &q[size_t(row * d)];
      double top = -INFINITY;
      for (int64_t j = 0; j < seen; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += qi[e] * k[size_t((b * tk + j) * d + e)];
        p[j] = s * scale;
        top = std::max(top, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < seen; ++j) sum += std::exp(p[j] - top);
      r.lse[row] = top + std::log(sum);
      double delta = 0;
      for (int64_t j = 0; j < seen; ++j) {
        p[j] = std::exp(p[j] - r.lse[row]);
        dp[j] = 0;
        for (int64_t e = 0; e < d; ++e) {
          r.out[row * d + e] += p[j] * v[size_t((b * tk + j) * d + e)];
          dp[j] += dout[size_t(row * d + e)] * v[size_t((b * tk + j) * d + e)];
        }
        delta += p[j] * dp[j];
      }
      for (int64_t j = 0; j < seen; ++j) {
        const double ds = p[j] * (dp[j] - delta) * scale;
        for (int64_t e = 0; e < d; ++e) {
          r.dq[row * d + e] += ds * k[size_t((b * tk + j) * d + e)];
          r.dk[(b * tk + j) * d + e] += ds * qi[e];
          r.dv[(b * tk + j) * d + e] += p[j] * dout[size_t(row * d + e)];
        }
      }
    }
  return r;
}

}  // namespace

void attention_cases(Runner& r) {
  // Square and rectangular (a query block continuing a prefix of keys), a head size that is not a power of
  // two, rows longer than a GPU warp, and empty batches, queries and keys (no keys: a log-sum-exp of -inf
  // and a zero output).
  const Case cases[] = {{2, 5, 5, 4, false}, {2, 5, 5, 4, true},    {3, 3, 7, 6, false}, {3, 3, 7, 6, true},
                        {1, 40, 40, 16, true}, {2, 1, 9, 8, true},  {0, 3, 3, 4, true},  {2, 0, 5, 4, true},
                        {2, 3, 0, 4, false}};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Case& c : cases)
      for (bool backward : {false, true}) {
        const std::string shape = fmt::format("({}, {}, {}, {})", c.batch, c.queries, c.keys, c.depth);
        r.run(case_name({backward ? "backward" : "forward", std::string(dtype_name(dtype)), shape,
                         c.causal ? "causal" : "full"}),
              false, [&] {
                const int64_t qn = c.batch * c.queries * c.depth, kn = c.batch * c.keys * c.depth;
                auto q = r.values(qn, -1, 1, dtype), k = r.values(kn, -1, 1, dtype), v = r.values(kn, -1, 1, dtype);
                auto dout = r.values(qn, -1, 1, dtype);
                const Shape q_shape{c.batch, c.queries, c.depth}, k_shape{c.batch, c.keys, c.depth};
                kestrel_attention_params p{abi_size<kestrel_attention_params>, 1.0 / std::sqrt(double(c.depth)),
                                           c.causal ? 1 : 0};
                const Tensor tq = r.upload(q_shape, q, dtype), tk = r.upload(k_shape, k, dtype),
                             tv = r.upload(k_shape, v, dtype);
                Tensor out = Tensor::empty(q_shape, dtype, r.device());
                Tensor lse = Tensor::empty({c.batch, c.queries}, statistics_of(dtype), r.device());
                ops::launch(r.device(), op_of(KESTREL_OP_ATTENTION, &p, {tq, tk, tv}, {out, lse}));
                const Reference want = reference(c, q, k, v, dout);
                const Tolerance tol = tolerance_for(dtype, 8);
                if (!backward) {
                  r.expect_close(out, want.out, tol, "output");
                  r.expect_close(lse, want.lse, tolerance_for(statistics_of(dtype), 16), "log-sum-exp");
                  return;
                }
                Tensor dq = Tensor::empty(q_shape, dtype, r.device()), dk = Tensor::empty(k_shape, dtype, r.device()),
                       dv = Tensor::empty(k_shape, dtype, r.device());
                ops::launch(r.device(), op_of(KESTREL_OP_ATTENTION_BACKWARD, &p,
                                              {r.upload(q_shape, dout, dtype), tq, tk, tv, out, lse}, {dq, dk, dv}));
                r.expect_close(dq, want.dq, tol, "dq");
                r.expect_close(dk, want.dk, tol, "dk");
                r.expect_close(dv, want.dv, tol, "dv");
              });
      }
}

}  // namespace kestrel::conformance
