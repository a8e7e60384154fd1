// Capture and replay (optional entries; required once a backend offers them) and random draws whose
// counter base lives in device memory (ABI 1.1), which captured training steps rely on.
#include <fmt/format.h>

#include "harness.hpp"
#include "kestrel/graph.h"
#include "kestrel/philox.h"

namespace kestrel::conformance {

void capture_cases(Runner& r) {
  const bool offered = CapturedGraph::supported(r.device());

  r.run("random/counter_base/f32", false, [&] {
    Tensor base = Tensor::full({}, 4000, DType::i64, r.device()), t = Tensor::empty({999}, DType::f32, r.device());
    {
      ops::CounterBaseScope scope(base, 1000);
      ops::random_(t, KESTREL_DISTRIBUTION_BERNOULLI, 77, 1003, 0.4, 0.0);  // draws at 4000 + 3
    }
    std::vector<double> want;
    for (int64_t i = 0; i < t.numel(); ++i)
      want.push_back(kestrel_philox_bernoulli(kestrel_philox4x32_10(77, 4003 + i / 4).v[i % 4], 0.4));
    r.expect_close(t, want, Tolerance{0, 0});
  });

  // A chain of dependent ops with a temporary allocated and freed inside, replayed with new inputs:
  // each replay must see the previous launches' results (ordering) and the inputs written since.
  r.run("replay/chain/f32", offered, [&] {
    const int64_t n = 3000;
    std::vector<double> xs = r.values(n, -2, 2, DType::f32);
    Tensor x = r.upload({n}, xs, DType::f32), acc = Tensor::zeros({n}, DType::f32, r.device());
    CapturedGraph graph = CapturedGraph::capture(r.device(), [&] {
      Tensor squared = ops::binary(KESTREL_BINARY_MUL, x, x);
      Tensor shifted = ops::unary(KESTREL_UNARY_AFFINE, squared, 0.5, 1.0);
      ops::binary_(KESTREL_BINARY_ADD, acc, acc, shifted);
    });
    std::vector<double> want(n, 0.0);
    for (int replay = 0; replay < 3; ++replay) {
      for (int64_t i = 0; i < n; ++i) want[i] += double(float(0.5 * double(float(xs[i] * xs[i])) + 1.0));
      graph.replay();
      x.copy_from(ops::unary(KESTREL_UNARY_NEG, x));  // eager work between replays: the next one must see it
      for (double& v : xs) v = -v;
    }
    r.expect_close(acc, want, tolerance_for(DType::f32, 4));
  });

  r.run("replay/gemm_and_copy/f32", offered, [&] {
    std::vector<double> a = r.values(16 * 24, -1, 1, DType::f32), b = r.values(24 * 8, -1, 1, DType::f32);
    Tensor ta = r.upload({16, 24}, a, DType::f32), tb = r.upload({24, 8}, b, DType::f32);
    Tensor out = Tensor::zeros({16, 8}, DType::f32, r.device()), copy = Tensor::zeros({16, 8}, DType::f32, r.device());
    CapturedGraph graph = CapturedGraph::capture(r.device(), [&] {
      ops::gemm_(out, ta, tb, 1.0, 1.0);
      copy.copy_from(out);
    });
    graph.replay();
    graph.replay();
    std::vector<double> want(16 * 8, 0.0);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        double sum = 0;
        for (int k = 0; k < 24; ++k) sum += a[i * 24 + k] * b[k * 8 + j];
        want[i * 8 + j] = 2 * sum;
      }
    r.expect_close(copy, want, tolerance_for(DType::f32, 24));
  });
}

}  // namespace kestrel::conformance
