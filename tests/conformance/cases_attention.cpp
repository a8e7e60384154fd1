// The fused attention ops (plugin ABI 1.7), optional: forward (output and each query's log-sum-exp) and
// backward (dq, dk, dv), against softmax(scale q k^T [causal] [+ -1e29 on padded keys]) v and its
// gradients in double; with dropout on the weights (1.8), the mask of RANDOM's Bernoulli draw
// (kestrel/philox.h) in the reference; with a key-padding mask (1.9), its -1e29 on each padded key; and
// (1.13) with every (B, T, D) operand a (N, H, T, D) view of a packed projection's columns.
#include <fmt/format.h>

#include <cmath>

#include "harness.hpp"
#include "kestrel/philox.h"

namespace kestrel::conformance {

namespace {

struct Case {
  int64_t batch, queries, keys, depth;
  bool causal;
};

// Dropout on the weights: the params' offset and the counter base the op reads from its last input.
struct Dropout {
  double p = 0;
  uint64_t seed = 0, offset = 0, base = 0;
  // The factor of weight (row, j): 1 / (1 - p) where the Bernoulli draw keeps element row * keys + j, else 0.
  double factor(int64_t row, int64_t keys, int64_t j) const {
    if (p == 0) return 1;
    const uint64_t element = uint64_t(row * keys + j);
    const kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + base + element / 4);
    return kestrel_philox_bernoulli(block.v[element % 4], 1.0 - p) ? 1.0 / (1.0 - p) : 0.0;
  }
};

// A key-padding mask (N, Tk) over the case's batch entries: two heads per sample where the batch is even,
// one otherwise; key j of sample n is padding where (j + n) % 3 == 0, and sample 0's first two keys are
// (left padding), so with the causal mask some queries see only padding, one or two keys of it (they
// then weigh it evenly).
struct KeyPadding {
  int64_t samples = 0;        // 0: no mask
  std::vector<double> mask;   // (samples, keys), 1 at padding
  static KeyPadding of(const Case& c) {
    KeyPadding k;
    k.samples = c.batch % 2 == 0 && c.batch > 0 ? c.batch / 2 : std::max<int64_t>(c.batch, 1);
    for (int64_t n = 0; n < k.samples; ++n)
      for (int64_t j = 0; j < c.keys; ++j) k.mask.push_back((j + n) % 3 == 0 || (n == 0 && j < 2) ? 1.0 : 0.0);
    return k;
  }
  // What batch entry b's score of key j gets added (plugin.h 1.9).
  double bias(const Case& c, int64_t b, int64_t j) const {
    return samples == 0 ? 0.0 : KESTREL_KEY_PADDING_SCORE * mask[size_t((b / (c.batch / samples)) * c.keys + j)];
  }
};

// Double-precision attention of one batch entry's rows, and its gradients for a given dout.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Case& c, const Dropout& drop, const KeyPadding& padding, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& dout) {
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
        p[j] = s * scale + padding.bias(c, b, j);
        top = std::max(top, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < seen; ++j) sum += std::exp(p[j] - top);
      r.lse[row] = top + std::log(sum);
      double delta = 0;
      for (int64_t j = 0; j < seen; ++j) {
        p[j] = std::exp(p[j] - top) / sum;  // not exp(p - lse): a row of padded keys' lse lost log(sum)
        const double m = drop.factor(row, tk, j);  // the weight is p m; its gradient dp, p's m dp
        dp[j] = 0;
        for (int64_t e = 0; e < d; ++e) {
          r.out[row * d + e] += p[j] * m * v[size_t((b * tk + j) * d + e)];
          dp[j] += m * dout[size_t(row * d + e)] * v[size_t((b * tk + j) * d + e)];
        }
        delta += p[j] * dp[j];
      }
      for (int64_t j = 0; j < seen; ++j) {
        const double ds = p[j] * (dp[j] - delta) * scale, m = drop.factor(row, tk, j);
        for (int64_t e = 0; e < d; ++e) {
          r.dq[row * d + e] += ds * k[size_t((b * tk + j) * d + e)];
          r.dk[(b * tk + j) * d + e] += ds * qi[e];
          r.dv[(b * tk + j) * d + e] += p[j] * m * dout[size_t(row * d + e)];
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
  // Dropout (1.8) on a few of them: a quarter of the weights, a seed, an offset and a counter base. The
  // seed has both key words and the counters cross 2^32 (a block counter's high word changes).
  const Dropout none, quarter{0.25, 0x5eed00000007ULL, (uint64_t{1} << 32) - 7, 3};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Case& c : cases)
      for (const Dropout* drop : {&none, &quarter})
        for (bool padded : {false, true})
        for (bool heads : {false, true})
        for (bool backward : {false, true}) {
          if (drop->p > 0 && (c.batch == 0 || c.queries == 0 || c.keys == 0 || c.depth == 16)) continue;
          if (padded && drop->p > 0 && c.causal) continue;  // one padded dropout case per shape is enough
          if (heads && (c.batch % 2 != 0 || c.batch == 0)) continue;
          const KeyPadding padding = padded ? KeyPadding::of(c) : KeyPadding{};
          const std::string shape = fmt::format("({}, {}, {}, {})", c.batch, c.queries, c.keys, c.depth);
          const std::string name = case_name({backward ? "backward" : "forward", std::string(dtype_name(dtype)), shape,
                                              c.causal ? "causal" : "full", drop->p > 0 ? "dropout" : "all weights",
                                              padded ? fmt::format("keys of {} samples padded", padding.samples)
                                                     : "no padding"});
          r.run(heads ? name + "/heads of a packed projection" : name, false, [&] {
                  const int64_t qn = c.batch * c.queries * c.depth, kn = c.batch * c.keys * c.depth;
                  auto q = r.values(qn, -1, 1, dtype), k = r.values(kn, -1, 1, dtype), v = r.values(kn, -1, 1, dtype);
                  auto dout = r.values(qn, -1, 1, dtype);
                  const Shape q_shape{c.batch, c.queries, c.depth}, k_shape{c.batch, c.keys, c.depth};
                  auto p = abi_init<kestrel_attention_params>();
                  p.scale = 1.0 / std::sqrt(double(c.depth));
                  p.causal = c.causal ? 1 : 0;
                  p.dropout = drop->p;
                  p.seed = drop->seed;
                  p.offset = drop->offset;
                  p.key_padding = padded ? 1 : 0;
                  // With `heads` (plugin ABI 1.13) every (B, T, D) operand is a (B / 2, 2, T, D) view: the
                  // middle third of a (B / 2, T, 3 * 2D) tensor's columns, as multi-head attention's packed
                  // projection holds its keys.
                  auto place = [&](const Shape& rows_shape, const std::vector<double>* values) {
                    if (!heads)
                      return values ? r.upload(rows_shape, *values, dtype) : Tensor::empty(rows_shape, dtype, r.device());
                    const int64_t n = c.batch / 2, rows = rows_shape[1], d = c.depth;
                    Tensor packed = Tensor::zeros({n, rows, 6 * d}, dtype, r.device());
                    Tensor view = packed.slice(2, 2 * d, 4 * d).unflatten(2, {2, d}).permute({0, 2, 1, 3});
                    if (values) view.copy_from(r.upload({n, 2, rows, d}, *values, dtype));
                    return view;
                  };
                  const Tensor tq = place(q_shape, &q), tk = place(k_shape, &k), tv = place(k_shape, &v);
                  std::vector<Tensor> extra;  // the key-padding mask, the counter base
                  if (padded) extra.push_back(r.upload({padding.samples, c.keys}, padding.mask, dtype));
                  if (drop->p > 0) extra.push_back(Tensor::full({}, double(drop->base), DType::i64, r.device()));
                  auto with_extra = [&](std::vector<Tensor> inputs) {
                    inputs.insert(inputs.end(), extra.begin(), extra.end());
                    return inputs;
                  };
                  Tensor out = place(q_shape, nullptr);
                  Tensor lse = Tensor::empty({c.batch, c.queries}, statistics_of(dtype), r.device());
                  ops::launch(r.device(), op_of(KESTREL_OP_ATTENTION, &p, with_extra({tq, tk, tv}), {out, lse}));
                  const Reference want = reference(c, *drop, padding, q, k, v, dout);
                  const Tolerance tol = tolerance_for(dtype, 8);
                  if (!backward) {
                    r.expect_close(out, want.out, tol, "output");
                    r.expect_close(lse, want.lse, tolerance_for(statistics_of(dtype), 16), "log-sum-exp");
                    return;
                  }
                  Tensor dq = place(q_shape, nullptr), dk = place(k_shape, nullptr), dv = place(k_shape, nullptr);
                  ops::launch(r.device(), op_of(KESTREL_OP_ATTENTION_BACKWARD, &p,
                                                with_extra({place(q_shape, &dout), tq, tk, tv, out, lse}),
                                                {dq, dk, dv}));
                  r.expect_close(dq, want.dq, tol, "dq");
                  r.expect_close(dk, want.dk, tol, "dk");
                  r.expect_close(dv, want.dv, tol, "dv");
                });
        }
}

}  // namespace kestrel::conformance
