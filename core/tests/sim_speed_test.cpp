// The simulator's speed model: a hand-computed two-job contention case, and
// the fixed-duration mode untouched.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "test_util.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/perf_model.hpp"
#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"

using namespace topo::core;

namespace {

// Four 8-GPU nodes, each its own leaf, under one 2:1 oversubscribed root:
// the root fabric carries 32 / 2 = 16 GPUs' worth of traffic at once.
Topology Contended() { return testing::OversubscribedLeaves(4); }

// Pure data parallelism over 16 GPUs (two nodes, always across the root),
// sized so the gradient reduction is mostly exposed.
SimJob DpJob(int64_t index, TimeMs submit, TimeMs duration) {
  SimJob j;
  j.index = index;
  j.submit = submit;
  j.duration = duration;
  j.request.spec.gpus = 16;
  j.request.spec.parallelism.dp = 16;
  ModelSpec m;
  m.parameters = 1e9;
  m.layers = 4;
  m.hidden = 1000;
  m.sequence = 100;
  m.micro_batch = 1;
  m.global_batch = 16;
  j.request.spec.model = m;
  j.request.time_limit = 100 * kHour;
  return j;
}

// The step by hand (perf_model.cpp's formulas): one microbatch per replica,
// compute (6 N + 6 L h s) x 16 x 100 tokens over 16 GPUs, and the exposed
// gradient reduce-scatter + all-gather of 2 GB across the root with 8
// members per leaf: bus bandwidth min(100, 8 x 10 x share) GB/s.
double Step(double share) {
  const double flops = (6 * 1e9 + 6.0 * 4 * 1000 * 100) * 16 * 100;
  const double compute = flops / (16 * 989e12 * kSustainedFraction);
  const double bw = std::min(100.0, 8 * 10 * share) * 1e9;
  const double raw = 2.0 * 15 / 16 * 1e9 * 2 / bw + 2.0 * 15 * 5e-6;
  return compute + std::max(0.0, raw - compute);
}

}  // namespace

TEST_CASE("two jobs sharing an oversubscribed fabric: fair share, then full speed again") {
  const Topology topo = Contended();
  SimWorkload w;
  w.name = "contention";
  w.jobs = {DpJob(0, 0, 100 * kSecond), DpJob(1, 20 * kSecond, 40 * kSecond)};
  SimOptions options;
  options.speed_model = true;
  options.tick_interval = 0;
  options.ettr_gpus = 16;
  SimReport r = RunSimulation(topo, "toposched", w, options).value();
  REQUIRE(r.job_results.size() == 2);
  // Alone, A crosses the root as its ideal placement does: speed 1. With B,
  // 32 GPUs demand a fabric of 16: each gets half.
  const double speed = Step(1.0) / Step(0.5);
  CHECK(speed < 0.9);
  const double b_end = 20 + 40 / speed;
  const double a_end = b_end + (80 - 40);  // A did 40 s of work meanwhile
  CHECK(r.job_results[1].end / 1000.0 == doctest::Approx(b_end).epsilon(1e-4));
  CHECK(r.job_results[0].end / 1000.0 == doctest::Approx(a_end).epsilon(1e-4));
  CHECK(r.job_results[0].productive_ms == 100 * kSecond);
  CHECK(r.goodput.value() == doctest::Approx(140.0 / (a_end - 0 + b_end - 20)).epsilon(1e-3));
  CHECK(r.slow_gpu_hours == doctest::Approx(2 * 16 * (40 / speed - 40) / 3600).epsilon(1e-3));
  // Neither lost work nor waited once started: ETTR 1, though both ran
  // slowly for a while; the work ratio counts the slowness.
  CHECK(r.ettr_large.value() == doctest::Approx(1.0));
  CHECK(r.work_ratio_large.value() ==
        doctest::Approx(140.0 / (a_end - 0 + b_end - 20)).epsilon(1e-3));
  CHECK(r.work_ratio_large.value() < 0.99);
  CHECK(r.anomalies.empty());

  SUBCASE("without the speed model both run their trace durations") {
    options.speed_model = false;
    SimReport off = RunSimulation(topo, "toposched", w, options).value();
    CHECK(off.job_results[1].end == 60 * kSecond);
    CHECK(off.job_results[0].end == 100 * kSecond);
  }
  SUBCASE("half the cross-HBD bandwidth: both ideal and contended steps change") {
    options.cross_hbd_scale = 0.5;
    SimReport half = RunSimulation(topo, "toposched", w, options).value();
    CHECK(half.job_results[1].end > r.job_results[1].end);
  }
}

TEST_CASE("the speed model: a placement slower than the ideal stretches the run") {
  // tiny, TP 8 x DP 2 with whole nodes: the toposched placer keeps both
  // nodes under one leaf (the ideal); nothing slows it.
  const Topology topo = GenerateTopology("tiny").value();
  SimWorkload w;
  SimJob j;
  j.duration = 600 * kSecond;
  j.request.spec.gpus = 16;
  j.request.spec.parallelism.tp = 8;
  j.request.spec.parallelism.dp = 2;
  j.request.time_limit = kHour;
  w.jobs = {j};
  SimOptions options;
  options.speed_model = true;
  SimReport r = RunSimulation(topo, "toposched", w, options).value();
  CHECK(r.job_results[0].end == 600 * kSecond);
  CHECK(r.mean_slowdown.value() == doctest::Approx(1.0));
  CHECK(r.goodput.value() == doctest::Approx(1.0));
}
