// StepTimeModel: the same figures as the free functions, cached per shape,
// and the saturated view of oversubscribed fabrics by hand.

#include <doctest/doctest.h>

#include <algorithm>

#include "test_util.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/step_model.hpp"

using namespace topo::core;
using testing::MakeJob;

namespace {

// Two 8-GPU nodes in two leaves under a 2:1 oversubscribed root.
Topology TwoLeaves() { return testing::OversubscribedLeaves(2); }

}  // namespace

TEST_CASE("step model: predictions equal PredictPlacement, shapes cached once") {
  const Topology topo = GenerateTopology("nvl72-64k").value();
  StepTimeModel steps(topo);
  ClusterState state(topo);
  auto placer = MakePlacer("slurm-tree");
  for (JobSpec job : {MakeJob(512, 8, 8), MakeJob(64, 8, 1, 8), MakeJob(1024, 8, 4)}) {
    Placement p = placer->Place(job, state);
    REQUIRE(p.placed());
    StepPrediction want = PredictPlacement(job, topo, p.ranks).value();
    std::optional<StepPrediction> got = steps.Predict(job, p.ranks);
    REQUIRE(got.has_value());
    CHECK(got->step.total_s == want.step.total_s);
    CHECK(got->ideal.total_s == want.ideal.total_s);
    CHECK(got->slowdown == want.slowdown);
    CHECK(steps.StepSeconds(job, p.ranks, LinkLoad::kIdle) == want.step.total_s);
    CHECK(steps.IdealSeconds(job) == want.ideal.total_s);
  }
  CHECK(steps.cached_shapes() == 3);
  (void)steps.IdealSeconds(MakeJob(512, 8, 8));
  CHECK(steps.cached_shapes() == 3);
  JobSpec bad = MakeJob(16, 8);
  bad.model = ModelSpec{};
  bad.model->parameters = 1e9;  // a custom model without layers: unresolvable
  std::vector<GpuSlot> ranks;
  for (int i = 0; i < 16; ++i) ranks.push_back({i / 4, i % 4});
  CHECK_FALSE(steps.Predict(bad, ranks).has_value());
  CHECK(steps.IdealSeconds(bad) == 0);
}

TEST_CASE("step model: the saturated view shares an oversubscribed fabric by hand") {
  const Topology topo = TwoLeaves();
  StepTimeModel steps(topo);
  JobSpec job = MakeJob(16);  // dp 16 over both nodes: always across the root
  ModelSpec m;
  m.parameters = 1e9;
  m.layers = 4;
  m.hidden = 1000;
  m.sequence = 100;
  m.micro_batch = 1;
  m.global_batch = 16;
  job.model = m;
  std::vector<GpuSlot> ranks;
  for (int i = 0; i < 16; ++i) ranks.push_back({i / 8, i % 8});
  // By hand (perf_model.cpp): compute, and the exposed reduce-scatter +
  // all-gather of 2 GB with 8 members per leaf, bus bandwidth
  // min(100, 8 x 10 x share) GB/s, share 1 idle, 1/2 saturated.
  const double flops = (6 * 1e9 + 6.0 * 4 * 1000 * 100) * 16 * 100;
  const double compute = flops / (16 * 989e12 * kSustainedFraction);
  auto step = [&](double share) {
    const double bw = std::min(100.0, 8 * 10 * share) * 1e9;
    const double raw = 2.0 * 15 / 16 * 1e9 * 2 / bw + 2.0 * 15 * 5e-6;
    return compute + std::max(0.0, raw - compute);
  };
  CHECK(steps.StepSeconds(job, ranks, LinkLoad::kIdle) == doctest::Approx(step(1)));
  CHECK(steps.StepSeconds(job, ranks, LinkLoad::kSaturated) == doctest::Approx(step(0.5)));
  // The ideal crosses the root as well (no leaf holds 16 GPUs).
  CHECK(steps.IdealSeconds(job, LinkLoad::kSaturated) == doctest::Approx(step(0.5)));
  CHECK(steps.Predict(job, ranks, LinkLoad::kSaturated)->slowdown == doctest::Approx(1.0));
}
