#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/fill.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

Topology Tiny() { return std::move(GenerateTopology("tiny")).value(); }

SimJob Job(int64_t index, TimeMs submit, TimeMs duration, int gpus, int tp = 1, int pp = 1) {
  SimJob j;
  j.index = index;
  j.submit = submit;
  j.duration = duration;
  j.request.spec = MakeJob(gpus, tp, pp);
  j.request.time_limit = DefaultTimeLimit(duration);
  return j;
}

SimReport Run(const Topology& topo, std::string_view stack, const SimWorkload& w,
              const SimOptions& options = {}) {
  Result<SimReport> r = RunSimulation(topo, stack, w, options);
  REQUIRE(r.ok());
  return std::move(r).value();
}

void CheckNoAnomalies(const SimReport& r) {
  for (const auto& [anomaly, n] : r.anomalies) {
    const std::string& what = anomaly;  // a structured binding cannot be captured (clang 14)
    CAPTURE(what);
    CHECK(n == 0);
  }
}

}  // namespace

TEST_CASE("PlacementScorer agrees with core::Evaluate") {
  Rng rng(7);
  const std::vector<Topology> topologies = {
      Tiny(), MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {4, 2, 2}, 2, 4),
      MakeRegular({"node", "leaf"}, 0, {3}, 5, 8)};
  for (const Topology& topo : topologies) {
    PlacementScorer scorer(topo);
    for (int trial = 0; trial < 60; ++trial) {
      const int shape = static_cast<int>(rng.Below(4));
      JobSpec job = shape == 0   ? MakeJob(8, 8)
                    : shape == 1 ? MakeJob(16, 4, 2)
                    : shape == 2 ? MakeJob(32, 4, 2, 2)
                                 : MakeJob(4, 2);
      if (job.gpus > topo.total_gpus()) continue;
      // A placer's answer on a partly filled cluster, or a random rank map.
      ClusterState state(topo);
      FillCluster(state, 0.3, rng.Next());
      std::vector<GpuSlot> ranks;
      Placement p = MakePlacer(trial % 2 ? "toposched" : "first-fit")->Place(job, state);
      if (p.placed() && trial % 3 != 0) {
        ranks = p.ranks;
      } else {
        std::vector<GpuSlot> all;
        for (NodeId n = 0; n < topo.node_count(); ++n) {
          for (int g = 0; g < topo.node(n).gpus; ++g) all.push_back({n, g});
        }
        for (int r = 0; r < job.gpus; ++r) {
          const size_t k = r + rng.Below(all.size() - r);
          std::swap(all[r], all[k]);
          ranks.push_back(all[r]);
        }
      }
      const PlacementMetrics want = Evaluate(job, topo, ranks);
      const PlacementScorer::Score got = scorer.Evaluate(job, ranks);
      CHECK(got.required_met == want.required_met);
      REQUIRE(got.leaf_span_ratio.has_value() == want.leaf_span_ratio.has_value());
      if (want.leaf_span_ratio)
        CHECK(*got.leaf_span_ratio == doctest::Approx(*want.leaf_span_ratio));
      REQUIRE(got.comm_cost_ratio.has_value() == want.comm_cost_ratio.has_value());
      if (want.comm_cost_ratio)
        CHECK(*got.comm_cost_ratio == doctest::Approx(*want.comm_cost_ratio));
    }
  }
}

TEST_CASE("offered load and rescaling arrivals to a target load") {
  // 2 jobs x 8 GPUs x 100 s over an arrival span of 100 s on 64 GPUs: 0.25.
  std::vector<SimJob> jobs = {Job(0, 1000, 100000, 8), Job(1, 101000, 100000, 8)};
  CHECK(OfferedLoad(jobs, 64) == doctest::Approx(0.25));
  LoadScaling s = ScaleToLoad(jobs, 64, 0.5);
  CHECK(s.offered_before == doctest::Approx(0.25));
  CHECK(s.factor == doctest::Approx(0.5));
  CHECK(s.offered_after == doctest::Approx(0.5));
  CHECK(jobs[0].submit == 1000);  // the first arrival stays put
  CHECK(jobs[1].submit == 51000);
  // One arrival time: the load is undefined and nothing moves.
  std::vector<SimJob> one = {Job(0, 5, 10, 8)};
  CHECK(OfferedLoad(one, 64) == 0);
  CHECK(ScaleToLoad(one, 64, 0.9).factor == 1);
  CHECK(one[0].submit == 5);
}

TEST_CASE("FitEpConstraint relaxes EP only where the HBD cannot hold a block") {
  const Topology hgx = Tiny();  // HBD = 8-GPU node; leaf 16; spine 32
  JobSpec moe = MakeJob(64, 8, 1, 8);
  FitEpConstraint(moe, hgx);
  const TierConstraint& c = moe.constraint(GroupKind::kEp);
  CHECK(c.strength == Strength::kPreferred);
  CHECK(c.tier == "cluster");  // no tier below the root holds 64 GPUs
  CHECK(moe.constraint(GroupKind::kTp).strength == Strength::kRequired);

  JobSpec small_moe = MakeJob(32, 2, 1, 8);  // blocks of 16 GPUs: a leaf of tiny
  FitEpConstraint(small_moe, hgx);
  CHECK(small_moe.constraint(GroupKind::kEp).tier == "leaf");

  const Topology nvl = MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {18, 2, 2}, 1, 4);
  JobSpec fits = MakeJob(64, 8, 1, 8);
  FitEpConstraint(fits, nvl);
  CHECK(fits.constraint(GroupKind::kEp).strength == Strength::kAuto);  // required in the rack
  CHECK(fits.constraint(GroupKind::kEp).tier == "hbd");
}

TEST_CASE("workload K: the layout rule, MoE one in three, tenants round-robin") {
  const Topology topo = MakeRegular({"node", "leaf", "pod"}, 0, {8, 8}, 4, 8);  // 2,048 GPUs
  std::vector<KalosRow> rows;
  for (int i = 0; i < 30; ++i) {
    KalosRow r;
    r.index = 100 + i;
    r.submit_s = i * 10;
    r.duration_s = 60.5;
    r.gpus = i % 3 == 0 ? 2 : i % 3 == 1 ? 64 : 512;
    r.pretrain = i % 3 == 2 || i == 1;
    rows.push_back(r);
  }
  rows[5].gpus = 296;  // 8 x 37: no PP 4
  KalosOptions options;
  SimWorkload w = BuildKalosWorkload(rows, topo, options);
  REQUIRE(w.jobs.size() == rows.size());
  REQUIRE(w.tenants.size() == 4);
  int moe = 0, pp4 = 0;
  std::map<std::string, int> per_tenant;
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const SimJob& j = w.jobs[i];
    const JobSpec& s = j.request.spec;
    CAPTURE(i);
    REQUIRE(ValidateJobSpec(s).ok());
    CHECK(j.index == rows[i].index);
    CHECK(j.submit == rows[i].submit_s * 1000);
    CHECK(j.duration == 60500);
    CHECK(s.parallelism.tp == (s.gpus >= 8 ? 8 : 1));
    const bool want_pp = rows[i].pretrain && s.gpus >= 256 && s.gpus % 32 == 0;
    CHECK(s.parallelism.pp == (want_pp ? 4 : 1));
    pp4 += want_pp;
    if (s.parallelism.ep > 1) {
      ++moe;
      CHECK(want_pp);
      CHECK(s.parallelism.ep == 8);
      CHECK(s.constraint(GroupKind::kEp).strength == Strength::kPreferred);
    }
    ++per_tenant[j.request.tenant];
  }
  CHECK(pp4 == 9);
  CHECK(moe == 3);  // one in three of 9
  for (const TenantConfig& t : w.tenants) {
    CHECK(t.guaranteed_gpus == 512);
    CHECK(per_tenant[t.name] >= 7);
    CHECK(per_tenant[t.name] <= 8);
  }
  // Deterministic for a seed; another seed picks other jobs.
  SimWorkload again = BuildKalosWorkload(rows, topo, options);
  options.seed = 2;
  SimWorkload other = BuildKalosWorkload(rows, topo, options);
  bool same = true, differs = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    same = same && again.jobs[i].request.tenant == w.jobs[i].request.tenant &&
           again.jobs[i].request.spec.parallelism.ep == w.jobs[i].request.spec.parallelism.ep;
    differs = differs || other.jobs[i].request.tenant != w.jobs[i].request.tenant;
  }
  CHECK(same);
  CHECK(differs);
}

TEST_CASE("workload S: seeded, valid, heavy-tailed, at the target load") {
  const Topology topo = std::move(GenerateTopology("meta-24k")).value();
  SyntheticOptions options;
  options.jobs = 5000;
  SimWorkload w = GenerateSynthetic(topo, options);
  REQUIRE(w.jobs.size() == 5000);
  CHECK(w.tenants.size() == 8);
  int total_guarantee = 0;
  for (const TenantConfig& t : w.tenants) total_guarantee += t.guaranteed_gpus;
  CHECK(total_guarantee == topo.total_gpus());
  CHECK(OfferedLoad(w.jobs, topo.total_gpus()) == doctest::Approx(0.9).epsilon(0.001));
  std::map<int, int> sizes;
  int moe = 0;
  TimeMs last = -1;
  for (const SimJob& j : w.jobs) {
    const JobSpec& s = j.request.spec;
    REQUIRE(ValidateJobSpec(s).ok());
    CHECK(s.gpus >= 8);
    CHECK(s.gpus <= 16384);
    CHECK((s.gpus & (s.gpus - 1)) == 0);
    CHECK(j.duration >= kMinute);
    CHECK(j.duration <= 7 * 24 * kHour);
    CHECK(j.submit >= last);
    last = j.submit;
    ++sizes[s.gpus];
    moe += s.parallelism.ep > 1;
  }
  CHECK(sizes[8] > 2000);  // about half
  CHECK(sizes[8] < 3000);
  int large = 0;
  for (const auto& [g, n] : sizes) large += g >= 512 ? n : 0;
  CHECK(large > 30);  // about 1.6 %
  CHECK(large < 130);
  CHECK(moe > 0);
  SimWorkload again = GenerateSynthetic(topo, options);
  for (size_t i = 0; i < w.jobs.size(); i += 97) {
    CHECK(again.jobs[i].submit == w.jobs[i].submit);
    CHECK(again.jobs[i].duration == w.jobs[i].duration);
    CHECK(again.jobs[i].request.spec.gpus == w.jobs[i].request.spec.gpus);
  }
}

TEST_CASE("one job alone: no wait, JCT = duration, utilization = its share") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 5000, 10 * kMinute, 16, 8)};
  for (const std::string& stack : SchedulerConfig::StackNames()) {
    CAPTURE(stack);
    SimReport r = Run(topo, stack, w);
    CheckNoAnomalies(r);
    CHECK(r.stack == stack);
    CHECK(r.completed == 1);
    CHECK(r.unfinished == 0);
    CHECK(*r.mean_jct_s == doctest::Approx(600));
    CHECK(*r.p95_jct_s == doctest::Approx(600));
    CHECK(*r.mean_queue_delay_s == 0);
    CHECK_FALSE(r.mean_queue_delay_large_s.has_value());
    CHECK_FALSE(r.ettr_large.has_value());
    CHECK(*r.utilization == doctest::Approx(16.0 / 64));
    CHECK(*r.required_met == 1.0);
    CHECK(r.placements == 1);
    REQUIRE(r.job_results.size() == 1);
    CHECK(r.job_results[0].state == JobState::kCompleted);
    CHECK(r.job_results[0].productive_ms == 10 * kMinute);
    CHECK(r.job_results[0].end == 5000 + 10 * kMinute);
  }
}

TEST_CASE("two jobs that do not fit together: the second waits for the first") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, 100 * kSecond, 48, 8), Job(1, 10 * kSecond, 50 * kSecond, 32, 8)};
  SimOptions options;
  options.large_gpus = 32;
  SimReport r = Run(topo, "fifo-firstfit", w, options);
  CheckNoAnomalies(r);
  CHECK(r.completed == 2);
  // Job 1 waits 90 s, ends at 150 s: JCTs 100 and 140.
  CHECK(*r.mean_queue_delay_s == doctest::Approx(45));
  CHECK(*r.mean_queue_delay_large_s == doctest::Approx(45));
  CHECK(*r.mean_jct_s == doctest::Approx(120));
  CHECK(*r.p95_jct_s == doctest::Approx(140));
  // Both are under 64 GPUs. Without the wait their mean JCT would be their
  // mean duration, 75 s: the bound no policy goes below.
  CHECK(r.jct_by_size[0].jobs == 2);
  CHECK(*r.jct_by_size[0].mean_jct_s == doctest::Approx(120));
  CHECK(*r.jct_by_size[0].bound_jct_s == doctest::Approx(75));
  CHECK_FALSE(r.jct_by_size[2].bound_jct_s.has_value());
  CHECK(*r.utilization == doctest::Approx((48.0 * 100 + 32.0 * 50) / (64.0 * 150)));
  CHECK(r.allocated_gpu_hours == doctest::Approx((48.0 * 100 + 32.0 * 50) / 3600));
}

TEST_CASE("preemption tally: victims, their restarts and their wait to restart") {
  // Two tenants guaranteed 32 GPUs each on the 64 GPUs of tiny. Team b
  // fills the cluster (its second job borrows team a's guarantee); team a's
  // job at 10 min reclaims the borrowed 32 GPUs. The victim checkpoints on
  // request (30 s), stops at 10.5 min, and restarts when team a's 1 h job
  // ends at 70.5 min: one preemption, one restart, 60 min x 32 GPUs waited.
  const Topology topo = Tiny();
  SimWorkload w;
  w.tenants = {TenantConfig{.name = "a", .guaranteed_gpus = 32},
               TenantConfig{.name = "b", .guaranteed_gpus = 32}};
  w.jobs = {Job(0, 0, 4 * kHour, 32, 8), Job(1, kSecond, 4 * kHour, 32, 8),
            Job(2, 10 * kMinute, kHour, 32, 8)};
  w.jobs[0].request.tenant = "b";
  w.jobs[1].request.tenant = "b";
  w.jobs[2].request.tenant = "a";
  SimReport r = Run(topo, "toposched", w);
  CheckNoAnomalies(r);
  CHECK(r.completed == 3);
  CHECK(r.preemptions == 1);
  CHECK(r.preempted_borrowed == 1);
  CHECK(r.preempted_gpus == 32);
  CHECK(r.preemption_restarts == 1);
  CHECK(r.restarts == 1);
  CHECK(r.preempted_wait_gpu_ms == doctest::Approx(32.0 * 60 * kMinute));
  CHECK(r.job_results[2].first_start == 10 * kMinute + 30 * kSecond);
  // slurm-tree never preempts: nothing to count.
  SimReport slurm = Run(topo, "slurm-tree", w);
  CHECK(slurm.preemptions == 0);
  CHECK(slurm.preempted_wait_gpu_ms == 0);
}

TEST_CASE("a job that can never fit is rejected and measured nowhere") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, kMinute, 128, 8), Job(1, 0, kMinute, 8, 8)};
  SimReport r = Run(topo, "toposched", w);
  CHECK(r.rejected == 1);
  CHECK(r.completed == 1);
  CHECK(r.placements == 1);
  CHECK(r.job_results[0].state == JobState::kRejected);
  CHECK(r.job_results[0].first_start == -1);
}

TEST_CASE("a GPU failure: the work since the last checkpoint is lost, then the job resumes") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, 2 * kHour, 16, 8)};
  // A GPU under the job fails at 50 min. The job checkpoints every 30 min on
  // its own (saving 30 min of work), or when the core asks, every 30 min, the
  // checkpoint then completing 30 s later (saving 30.5 min).
  const std::pair<CheckpointMode, TimeMs> modes[] = {
      {CheckpointMode::kPeriodic, 30 * kMinute},
      {CheckpointMode::kOnRequest, 30 * kMinute + 30 * kSecond}};
  for (const auto& [mode, saved] : modes) {
    for (const std::string& stack : SchedulerConfig::StackNames()) {
      CAPTURE(stack);
      const int mode_number = static_cast<int>(mode);  // (clang 14: no binding in a capture)
      CAPTURE(mode_number);
      SimOptions options;
      options.ettr_gpus = 16;
      options.checkpoints = mode;
      // GPU 0 of some node under the job: try each node until one hits.
      bool hit = false;
      for (NodeId n = 0; n < topo.node_count() && !hit; ++n) {
        options.scripted_failures = {ScriptedFailure{50 * kMinute, n, 0, kHour}};
        SimReport r = Run(topo, stack, w, options);
        if (r.failures_hit_jobs == 0) continue;
        hit = true;
        CheckNoAnomalies(r);
        CHECK(r.failures_injected == 1);
        CHECK(r.completed == 1);
        const SimJobResult& j = r.job_results[0];
        CHECK(j.interruptions == 1);
        CHECK(j.restarts == 1);
        CHECK(j.placements == 2);
        CHECK(j.productive_ms == 2 * kHour);
        CHECK(j.lost_failure_gpu_ms == doctest::Approx(16.0 * (50 * kMinute - saved)));
        CHECK(r.lost_gpu_hours == doctest::Approx(16.0 * (50 * kMinute - saved) / kHour));
        // Restarted at once (a free node) from the checkpoint.
        CHECK(j.end == 50 * kMinute + 2 * kHour - saved);
        CHECK(*r.ettr_large == doctest::Approx(static_cast<double>(2 * kHour) / j.end));
      }
      CHECK(hit);
    }
  }
}

TEST_CASE("a node going down while idle hits nobody, and repairs bring it back") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, kHour, 64, 8), Job(1, 2 * kHour, kHour, 64, 8)};
  SimOptions options;
  // Down between the jobs, repaired after 3 h: job 1 waits until 4 h.
  options.scripted_failures = {ScriptedFailure{90 * kMinute, 3, -1, 150 * kMinute}};
  SimReport r = Run(topo, "toposched", w, options);
  CheckNoAnomalies(r);
  CHECK(r.failures_hit_jobs == 0);
  CHECK(r.completed == 2);
  CHECK(r.job_results[1].first_start == 4 * kHour);
}

TEST_CASE("the llama3 model: seeded, the same failures for every stack, work still completes") {
  const Topology topo = Tiny();
  SyntheticOptions s;
  s.jobs = 60;
  s.max_gpus = 32;
  s.load = 0.7;
  SimWorkload w = GenerateSynthetic(topo, s);
  SimOptions options;
  options.failures = *FailureModel::ByName("llama3");
  options.failures.gpu_hours_per_interruption = 20;  // one failure per ~20 min on 64 GPUs
  // With the speed model too, where slow placements stretch runs.
  for (bool speed_model : {false, true}) {
    options.speed_model = speed_model;
    CAPTURE(speed_model);
    std::map<std::string, SimReport> reports;
    for (const std::string& stack : SchedulerConfig::StackNames()) {
      SimReport r = Run(topo, stack, w, options);
      CAPTURE(stack);
      CHECK(r.failures_injected > 5);
      CHECK(r.failures_hit_jobs > 0);
      CHECK(r.lost_gpu_hours > 0);
      CHECK(r.completed + r.failed == 60);
      CHECK(r.unfinished == 0);
      std::array<double, 3> durations{};
      for (const SimJobResult& j : r.job_results) {
        if (j.state != JobState::kCompleted) continue;
        CHECK(j.productive_ms == w.jobs[j.id - 1].duration);
        durations[j.gpus < 64                   ? 0
                  : j.gpus < options.large_gpus ? 1
                                                : 2] +=
            static_cast<double>(j.productive_ms) / kSecond;
      }
      // The bound is the completed jobs' mean duration, and waits, failures
      // and slow placements only add to it.
      for (size_t c = 0; c < r.jct_by_size.size(); ++c) {
        CAPTURE(c);
        const SimReport::SizeClass& k = r.jct_by_size[c];
        if (k.jobs == 0) {
          CHECK_FALSE(k.bound_jct_s.has_value());
          continue;
        }
        CHECK(*k.bound_jct_s == doctest::Approx(durations[c] / static_cast<double>(k.jobs)));
        CHECK(*k.bound_jct_s <= *k.mean_jct_s);
      }
      CHECK(r.jct_by_size[0].jobs > 0);
      reports.emplace(stack, std::move(r));
    }
    // Replays are deterministic.
    SimReport again = Run(topo, "toposched", w, options);
    const SimReport& first = reports.at("toposched");
    CHECK(again.events == first.events);
    CHECK(again.lost_gpu_hours == first.lost_gpu_hours);
    CHECK(*again.mean_jct_s == *first.mean_jct_s);
  }
}

TEST_CASE("hardware failures faster than the job checkpoints never fail it: one restart each") {
  // Infrastructure failures never count against a job (scheduler.hpp): a job
  // on hardware that fails every ~2 minutes keeps waiting and restarting
  // until the replay's horizon, once per failure that hits it, never in a
  // loop of its own.
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, 10 * kHour, 64, 8)};
  SimOptions options;
  options.failures = *FailureModel::ByName("llama3");
  options.failures.gpu_hours_per_interruption = 2;  // one every ~2 min on 64 GPUs
  options.failures.repair_median = kMinute;
  options.horizon_after_last_submit = 12 * kHour;
  SimReport r = Run(topo, "toposched", w, options);
  CHECK(r.failed == 0);
  CHECK(r.unfinished == 1);
  const SimJobResult& j = r.job_results[0];
  CHECK(j.state != JobState::kFailed);
  CHECK(j.interruptions > 100);
  CHECK(j.restarts >= 1);
  CHECK(j.restarts <= j.interruptions);
  CHECK(r.lost_gpu_hours > 0);
  CHECK(r.anomalies.count("replay stopped at the horizon with jobs unfinished") == 1);
}

TEST_CASE("RunSimulation: errors for bad input, aggregates only on request") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, 0, 8)};
  Result<SimReport> r = RunSimulation(topo, "toposched", w, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("duration 0 ms must be positive") != std::string::npos);
  w.jobs = {Job(3, -1, 10, 8)};
  r = RunSimulation(topo, "toposched", w, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("job 3: submit time -1 ms is negative") != std::string::npos);
  w.jobs = {Job(0, 0, 10, 8)};
  r = RunSimulation(topo, "no-such-stack", w, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("unknown policy stack 'no-such-stack'") != std::string::npos);
  SimOptions bad;
  bad.scripted_failures = {ScriptedFailure{0, 99, 0, kHour}};
  r = RunSimulation(topo, "toposched", w, bad);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("node 99") != std::string::npos);

  SimOptions lean;
  lean.keep_job_results = false;
  r = RunSimulation(topo, "toposched", w, lean);
  REQUIRE(r.ok());
  CHECK(r.value().job_results.empty());
  CHECK(r.value().completed == 1);

  SimWorkload empty;
  r = RunSimulation(topo, "toposched", empty, {});
  REQUIRE(r.ok());
  CHECK_FALSE(r.value().utilization.has_value());
  CHECK_FALSE(r.value().mean_jct_s.has_value());
}

namespace {

// One tier of leaves of 8-GPU nodes: `leaves` names each leaf and how many
// nodes it holds (node names are the leaf's name and an index).
Topology Leaves(const std::vector<std::pair<std::string, int>>& leaves) {
  TopologyBuilder b("change", {"node", "leaf"}, 0);
  for (const auto& [name, nodes] : leaves) {
    const int leaf = b.AddDomain(name, 1, TopologyBuilder::kTop);
    for (int i = 0; i < nodes; ++i) b.AddNode(name + "-n" + std::to_string(i), leaf, 8);
  }
  return std::move(b).Build().value();
}

SimJob TenantJob(int64_t index, TimeMs submit, TimeMs duration, int gpus, std::string tenant) {
  SimJob j = Job(index, submit, duration, gpus, 8);
  j.request.tenant = std::move(tenant);
  return j;
}

}  // namespace

TEST_CASE("a topology change under running jobs: drained, moved from a checkpoint, none fails") {
  const Topology before = Leaves({{"leaf0", 2}, {"leaf1", 2}});
  // As an admin replaces a rack: leaf2 (three nodes) added first, then leaf1
  // removed.
  auto added = std::make_shared<const Topology>(Leaves({{"leaf0", 2}, {"leaf1", 2}, {"leaf2", 3}}));
  auto after = std::make_shared<const Topology>(Leaves({{"leaf0", 2}, {"leaf2", 3}}));
  SimWorkload w;
  w.tenants = {TenantConfig{.name = "a"}, TenantConfig{.name = "b"}};
  w.jobs = {TenantJob(0, 0, 10 * kHour, 16, "a"), TenantJob(1, 0, 10 * kHour, 16, "b"),
            TenantJob(2, 3 * kHour, kHour, 8, "b")};
  SimOptions options;
  options.checkpoint_latency = 30 * kSecond;
  options.checkpoints = CheckpointMode::kOnRequest;
  options.topology_changes = {SimTopologyChange{kHour, added}, SimTopologyChange{2 * kHour, after}};
  for (const std::string& stack : SchedulerConfig::StackNames()) {
    CAPTURE(stack);
    const SimReport r = Run(before, stack, w, options);
    CheckNoAnomalies(r);
    CHECK(r.completed == 3);
    CHECK(r.failed == 0);
    REQUIRE(r.topology_changes.size() == 2);
    // Nothing to drain: applied after the checkpoint latency.
    CHECK(r.topology_changes[0].applied == kHour + 30 * kSecond);
    CHECK(r.topology_changes[0].nodes_added == 3);
    CHECK(r.topology_changes[0].nodes_removed == 0);
    CHECK(r.topology_changes[0].jobs_moved == 0);
    CHECK(r.topology_changes[0].fairshare_kept);
    const SimTopologyChangeResult& c = r.topology_changes[1];
    // Applied once the evacuated job's checkpoint is written.
    CHECK(c.applied == 2 * kHour + 30 * kSecond);
    CHECK(c.nodes_added == 0);
    CHECK(c.nodes_removed == 2);
    CHECK(c.capacity_before == 56);
    CHECK(c.capacity_after == 40);
    // The job on leaf1, and with spares (toposched) the job holding a spare
    // there.
    CHECK(c.jobs_moved >= 1);
    CHECK(c.moved_failed == 0);
    CHECK(c.moved_completed == c.jobs_moved);
    CHECK(c.fairshare_kept);
    // The moved jobs restart from the checkpoint the drain took, so they
    // lose nothing and end when they would have; the job submitted later
    // runs on a new node.
    int moved = 0;
    for (const SimJobResult& j : r.job_results) {
      CAPTURE(j.index);
      CHECK(j.state == JobState::kCompleted);
      CHECK(j.lost_other_gpu_ms == 0);
      CHECK(j.lost_failure_gpu_ms == 0);
      moved += j.topology_moves;
      CHECK(j.restarts == j.topology_moves);
    }
    CHECK(moved == c.jobs_moved);
    CHECK(r.job_results[1].topology_moves + r.job_results[0].topology_moves >= 1);
    CHECK(r.job_results[2].topology_moves == 0);
    CHECK(r.job_results[0].end == 10 * kHour);
    CHECK(r.job_results[1].end == 10 * kHour);
    CHECK(r.job_results[2].first_start == 3 * kHour);
    CHECK(r.job_results[2].end == 4 * kHour);
    // Utilization over the capacity integrated over both versions.
    const double add_at = static_cast<double>(kHour + 30 * kSecond);
    const double remove_at = static_cast<double>(2 * kHour + 30 * kSecond);
    const double capacity =
        32 * add_at + 56 * (remove_at - add_at) + 40 * (10.0 * kHour - remove_at);
    CHECK(*r.utilization == doctest::Approx((16.0 * 2 * 10 + 8) * kHour / capacity));
  }
}

TEST_CASE("a topology change that only removes nodes: the moved job waits or takes over") {
  const Topology before = Leaves({{"leaf0", 2}, {"leaf1", 2}});
  auto after = std::make_shared<const Topology>(Leaves({{"leaf0", 2}}));
  SimWorkload w;
  w.jobs = {Job(0, 0, 10 * kHour, 16, 8), Job(1, 0, 10 * kHour, 16, 8)};
  SimOptions options;
  options.checkpoints = CheckpointMode::kOnRequest;
  options.topology_changes = {SimTopologyChange{2 * kHour, after}};
  for (const std::string& stack : SchedulerConfig::StackNames()) {
    CAPTURE(stack);
    const SimReport r = Run(before, stack, w, options);
    CheckNoAnomalies(r);
    CHECK(r.completed == 2);
    CHECK(r.failed == 0);
    REQUIRE(r.topology_changes.size() == 1);
    CHECK(r.topology_changes[0].applied == 2 * kHour + options.checkpoint_latency);
    CHECK(r.topology_changes[0].capacity_after == 16);
    // One job runs to 10 h; the other has 2 h + the checkpoint latency of
    // work kept, less what it loses when, with preemption (toposched), the
    // moved job takes over the other's nodes rather than wait 8 h.
    std::vector<TimeMs> ends = {r.job_results[0].end, r.job_results[1].end};
    std::sort(ends.begin(), ends.end());
    const double lost_ms =
        (r.job_results[0].lost_other_gpu_ms + r.job_results[1].lost_other_gpu_ms) / 16;
    CHECK(ends[0] == 10 * kHour);
    CHECK(static_cast<double>(ends[1]) ==
          doctest::Approx(10.0 * kHour + (8.0 * kHour - options.checkpoint_latency) + lost_ms));
    if (stack != "toposched") CHECK(lost_ms == 0);
  }
}

TEST_CASE("topology changes with failures and the speed model: deterministic, no anomaly") {
  // Eight leaves of 16 nodes; the new version drops leaf7 and adds leaf8.
  std::vector<std::pair<std::string, int>> leaves;
  for (int l = 0; l < 8; ++l) leaves.emplace_back("leaf" + std::to_string(l), 16);
  const Topology before = Leaves(leaves);
  leaves.back() = {"leaf8", 16};
  auto after = std::make_shared<const Topology>(Leaves(leaves));
  SyntheticOptions s;
  s.jobs = 1500;
  s.seed = 3;
  const SimWorkload w = GenerateSynthetic(before, s);
  SimOptions options;
  options.speed_model = true;
  options.failures = *FailureModel::ByName("llama3");
  options.failures.gpu_hours_per_interruption = 5000;  // many failures
  const TimeMs first = w.jobs.front().submit;
  options.topology_changes = {SimTopologyChange{first + 2 * 24 * kHour, after}};
  const SimReport r1 = Run(before, "toposched", w, options);
  const SimReport r2 = Run(before, "toposched", w, options);
  CheckNoAnomalies(r1);
  REQUIRE(r1.topology_changes.size() == 1);
  CHECK(r1.topology_changes[0].applied >= first + 2 * 24 * kHour);
  CHECK(r1.topology_changes[0].fairshare_kept);
  CHECK(r1.topology_changes[0].moved_failed == 0);
  CHECK(r1.topology_changes[0].jobs_moved > 0);
  CHECK(r1.unfinished == 0);
  CHECK(r1.completed + r1.failed + r1.rejected == r1.jobs);
  CHECK(r1.topology_changes[0].applied == r2.topology_changes[0].applied);
  CHECK(r1.utilization == r2.utilization);
  CHECK(r1.events == r2.events);
}

TEST_CASE("RunSimulation: a topology change without a topology or out of order is refused") {
  const Topology topo = Tiny();
  SimWorkload w;
  w.jobs = {Job(0, 0, kHour, 8)};
  SimOptions options;
  options.topology_changes = {SimTopologyChange{kHour, nullptr}};
  CHECK_FALSE(RunSimulation(topo, "toposched", w, options).ok());
  auto next = std::make_shared<const Topology>(Tiny());
  options.topology_changes = {SimTopologyChange{2 * kHour, next}, SimTopologyChange{kHour, next}};
  Result<SimReport> r = RunSimulation(topo, "toposched", w, options);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("order") != std::string::npos);
  options.topology_changes = {SimTopologyChange{-1, next}};
  CHECK_FALSE(RunSimulation(topo, "toposched", w, options).ok());
}
