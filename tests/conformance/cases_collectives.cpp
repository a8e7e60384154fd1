// Collectives (optional entries; required once a backend offers them), at the world size this process
// was launched with: 1 in the plain suite, 2-4 under mpirun (ctest's conformance_collectives_np*). Each
// rank's values are small multiples of 1/4, so every sum is exact in any order and the reference is exact.
#include <fmt/format.h>

#include "harness.hpp"
#include "kestrel/distributed.h"

namespace kestrel::conformance {

namespace {

// Rank `rank`'s element i of a case's tensor: the same formula on every rank, so each can compute the
// others' values. Whole numbers; the float cases scale them by 1/4 (still exact).
double value_of(int64_t rank, int64_t i, uint64_t salt) {
  return double(int64_t((uint64_t(i) * 7 + uint64_t(rank) * 13 + salt) % 29) - 14);
}

std::vector<double> values_of(int64_t rank, int64_t count, uint64_t salt) {
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = value_of(rank, i, salt);
  return out;
}

}  // namespace

void collective_cases(Runner& r) {
  const bool offered = ProcessGroup::supported(r.device());
  const double timeout = 60;
  std::unique_ptr<ProcessGroup> group;
  auto get_group = [&]() -> ProcessGroup& {
    if (!group) group = std::make_unique<ProcessGroup>(r.device(), World::get(), timeout);
    return *group;
  };
  const int64_t world = World::get().size(), rank = World::get().rank();

  for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
    const double scale = dtype == DType::i64 ? 1.0 : 0.25;
    auto values_of = [&](int64_t k, int64_t count, uint64_t salt) {
      std::vector<double> out(count);
      for (int64_t i = 0; i < count; ++i) out[i] = value_of(k, i, salt) * scale;
      return out;
    };
    auto value_of = [&](int64_t k, int64_t i, uint64_t salt) { return kestrel::conformance::value_of(k, i, salt) * scale; };
    const bool required = offered && r.required(dtype == DType::f32, {dtype});
    for (int64_t n : {1, 1000, 100003}) {
      r.run(fmt::format("all_reduce_sum/{}/{}", dtype_name(dtype), n), required, [&] {
        ProcessGroup& g = get_group();
        Tensor t = r.upload({n}, values_of(rank, n, 1), dtype);
        g.all_reduce_sum(t);
        g.wait("all-reduce");
        std::vector<double> want(n, 0.0);
        for (int64_t k = 0; k < world; ++k)
          for (int64_t i = 0; i < n; ++i) want[i] += value_of(k, i, 1);
        r.expect_close(t, want, Tolerance{0, 0});
      });
    }
    r.run(fmt::format("broadcast/{}/every root", dtype_name(dtype)), required, [&] {
      ProcessGroup& g = get_group();
      for (int64_t root = 0; root < world; ++root) {
        Tensor t = r.upload({3, 257}, values_of(rank, 3 * 257, 2 + root), dtype);
        g.broadcast(t, int(root));
        g.wait("broadcast");
        r.expect_close(t, values_of(root, 3 * 257, 2 + root), Tolerance{0, 0}, fmt::format("from root {}", root));
      }
    });
    r.run(fmt::format("reduce_scatter_sum/{}", dtype_name(dtype)), required, [&] {
      ProcessGroup& g = get_group();
      const int64_t n = 4099;
      Tensor in = r.upload({world * n}, values_of(rank, world * n, 3), dtype);
      Tensor out = Tensor::empty({n}, dtype, r.device());
      g.reduce_scatter_sum(in, out);
      g.wait("reduce-scatter");
      std::vector<double> want(n, 0.0);
      for (int64_t k = 0; k < world; ++k)
        for (int64_t i = 0; i < n; ++i) want[i] += value_of(k, rank * n + i, 3);
      r.expect_close(out, want, Tolerance{0, 0});
    });
    r.run(fmt::format("all_gather/{}", dtype_name(dtype)), required, [&] {
      ProcessGroup& g = get_group();
      const int64_t n = 1031;
      Tensor in = r.upload({n}, values_of(rank, n, 4), dtype);
      Tensor out = Tensor::empty({world * n}, dtype, r.device());
      g.all_gather(in, out);
      g.wait("all-gather");
      std::vector<double> want;
      for (int64_t k = 0; k < world; ++k)
        for (double v : values_of(k, n, 4)) want.push_back(v);
      r.expect_close(out, want, Tolerance{0, 0});
    });
  }

  // Collectives queued back to back run in order and all complete by one wait; the compute stream's
  // work issued before each is what it reads.
  r.run("ordered/chain/f32", offered, [&] {
    ProcessGroup& g = get_group();
    Tensor a = r.upload({5000}, values_of(rank, 5000, 5), DType::f32);
    Tensor b = ops::unary(KESTREL_UNARY_AFFINE, a, 2.0, 0.0);  // computed before the collective reads it
    g.all_reduce_sum(a);
    g.all_reduce_sum(b);
    g.broadcast(b, int(world - 1));
    g.wait("chain");
    std::vector<double> want_a(5000, 0.0);
    for (int64_t k = 0; k < world; ++k)
      for (int64_t i = 0; i < 5000; ++i) want_a[i] += value_of(k, i, 5);
    std::vector<double> want_b = want_a;
    for (double& v : want_b) v *= 2;
    r.expect_close(a, want_a, Tolerance{0, 0}, "a");
    r.expect_close(b, want_b, Tolerance{0, 0}, "b");
  });

  // One collective's result is the next one's input (ZeRO-1's sum of a shard, then the gather of the
  // shards), and the device goes on computing while they travel.
  r.run("ordered/reduce_scatter_then_all_gather/f32", offered, [&] {
    ProcessGroup& g = get_group();
    const int64_t n = 3001;
    Tensor in = r.upload({world * n}, values_of(rank, world * n, 6), DType::f32);
    Tensor shard = Tensor::empty({n}, DType::f32, r.device());
    Tensor whole = Tensor::empty({world * n}, DType::f32, r.device());
    g.reduce_scatter_sum(in, shard);
    Tensor meanwhile = ops::unary(KESTREL_UNARY_AFFINE, in, 3.0, 1.0);
    g.all_gather(shard, whole);
    g.wait("reduce-scatter, then all-gather");
    std::vector<double> want(size_t(world * n), 0.0), want_meanwhile = values_of(rank, world * n, 6);
    for (int64_t k = 0; k < world; ++k)
      for (int64_t i = 0; i < world * n; ++i) want[i] += value_of(k, i, 6);
    for (double& v : want_meanwhile) v = 3 * v + 1;
    r.expect_close(whole, want, Tolerance{0, 0}, "gathered sums");
    r.expect_close(meanwhile, want_meanwhile, Tolerance{0, 0}, "computed meanwhile");
  });

  // An f16 sum, which a transport may refuse (MPI has no f16 sum; NCCL has), leaves nothing behind that
  // the next collective could trip on: the broadcast after it gets root's values.
  r.run("f16_sum_then_broadcast", offered && r.required(true, {DType::f16}), [&] {
    ProcessGroup& g = get_group();
    const int64_t n = 4099;
    Tensor sum = r.upload({n}, values_of(rank, n, 7), DType::f16);
    bool summed = true;
    try {
      g.all_reduce_sum(sum);
    } catch (const Unsupported&) {
      summed = false;
    }
    Tensor sent = r.upload({n}, values_of(rank, n, 8), DType::f16);
    g.broadcast(sent, 0);
    g.wait("f16 sum, then broadcast");
    if (summed) {
      std::vector<double> want(size_t(n), 0.0);
      for (int64_t k = 0; k < world; ++k)
        for (int64_t i = 0; i < n; ++i) want[i] += value_of(k, i, 7);
      r.expect_close(sum, want, Tolerance{0, 0}, "sum");
    }
    r.expect_close(sent, values_of(0, n, 8), Tolerance{0, 0}, "broadcast");
  });
}

}  // namespace kestrel::conformance
