// SchedulerCore policies, each driven by hand with a controlled clock.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

SchedulerConfig SimConfig(std::string stack = "toposched") {
  SchedulerConfig c = SchedulerConfig::ForStack(stack).value();
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;  // no periodic requests unless a test wants them
  return c;
}

JobRequest Request(int gpus, int tp = 1, TimeMs limit = kHour, std::string tenant = "default",
                   int priority = 0) {
  JobRequest r;
  r.spec = MakeJob(gpus, tp);
  r.time_limit = limit;
  r.tenant = std::move(tenant);
  r.priority = priority;
  r.checkpoint_interval = -1;
  return r;
}

template <typename T>
std::vector<T> Only(const std::vector<Command>& cmds) {
  std::vector<T> out;
  for (const Command& c : cmds) {
    if (const T* t = std::get_if<T>(&c)) out.push_back(*t);
  }
  return out;
}

// 4 leaves of 2 nodes x 8 GPUs (16 GPUs per leaf), 2 spines: 64 GPUs.
Topology Tiny() { return MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8); }

}  // namespace

TEST_CASE("a submitted job starts at once when it fits, and finishes") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  auto cmds = core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  auto starts = Only<StartJob>(cmds);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].ranks.size() == 16);
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.cluster().total_busy_gpus() == 16);
  cmds = core.Step(JobFinished{1, 0}, 10 * kMinute);
  CHECK(core.job(1)->state == JobState::kCompleted);
  CHECK(core.job(1)->productive_ms == 10 * kMinute);
  CHECK(core.cluster().total_busy_gpus() == 0);
}

TEST_CASE("impossible jobs are rejected at submission, with the reason") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  JobRequest moe = Request(64, 8);
  moe.spec.parallelism.ep = 8;  // EP blocks of 64 required in 8-GPU HBDs
  moe.spec.parallelism.dp = 8;
  moe.spec.constraints[static_cast<int>(GroupKind::kEp)] = {Strength::kRequired, "hbd"};
  core.Step(JobSubmitted{1, moe}, 0);
  CHECK(core.job(1)->state == JobState::kRejected);
  CHECK(core.job(1)->reason.find("infeasible") != std::string::npos);
  core.Step(JobSubmitted{2, Request(128, 8)}, 0);
  CHECK(core.job(2)->state == JobState::kRejected);
  JobRequest bad = Request(16, 8);
  bad.spec.parallelism.dp = 5;
  core.Step(JobSubmitted{3, bad}, 0);
  CHECK(core.job(3)->state == JobState::kRejected);
}

TEST_CASE("EASY backfill: small jobs fill the hole but never delay the head's reservation") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  // 48 GPUs busy until t=60 min.
  core.Step(JobSubmitted{1, Request(48, 8, 60 * kMinute)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  // Head: needs all 64, must wait for job 1 (reservation at t=60).
  core.Step(JobSubmitted{2, Request(64, 8, 60 * kMinute)}, kMinute);
  CHECK(core.job(2)->state == JobState::kQueued);
  // A short job that ends before t=60 backfills.
  auto cmds = core.Step(JobSubmitted{3, Request(8, 8, 30 * kMinute)}, 2 * kMinute);
  CHECK(core.job(3)->state == JobState::kRunning);
  // A long job that would hold GPUs past t=60 does not (the head needs them all).
  core.Step(JobSubmitted{4, Request(8, 8, 120 * kMinute)}, 3 * kMinute);
  CHECK(core.job(4)->state == JobState::kQueued);
  CHECK(core.job(4)->reason.find("reservation") != std::string::npos);
  // At t=60 job 1 ends (its limit): the head starts on time.
  core.Step(JobFinished{3, 0}, 20 * kMinute);
  core.Step(JobFinished{1, 0}, 60 * kMinute);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->first_start == 60 * kMinute);
  CHECK(core.job(4)->state == JobState::kQueued);
}

TEST_CASE("a long job backfills when it keeps off the reserved GPUs") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(48, 8, 60 * kMinute)}, 0);
  // Head needs 32 GPUs: 16 free now, so it waits for job 1 and reserves 32.
  core.Step(JobSubmitted{2, Request(32, 8, 60 * kMinute)}, kMinute);
  REQUIRE(core.job(2)->state == JobState::kQueued);
  // 64 - 32 reserved leaves room: a long 8-GPU job may start on GPUs the
  // reservation does not need.
  core.Step(JobSubmitted{3, Request(8, 8, 10 * kHour)}, 2 * kMinute);
  CHECK(core.job(3)->state == JobState::kRunning);
  core.Step(JobFinished{1, 0}, 60 * kMinute);
  CHECK(core.job(2)->state == JobState::kRunning);
}

TEST_CASE("FIFO without backfill: nothing passes the blocked head") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig("fifo-firstfit"));
  core.Step(JobSubmitted{1, Request(48, 8)}, 0);
  core.Step(JobSubmitted{2, Request(64, 8)}, 1);
  core.Step(JobSubmitted{3, Request(8, 8)}, 2);
  CHECK(core.job(3)->state == JobState::kQueued);
}

TEST_CASE("quotas: limits are never exceeded and the reason names the limit") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  TenantConfig a{"a", 16, 16, 32, 2, 1.0};  // guaranteed 16, may borrow 16 more
  core.Step(TenantConfigured{a}, 0);
  core.Step(JobSubmitted{1, Request(16, 8, kHour, "a")}, 0);
  core.Step(JobSubmitted{2, Request(16, 8, kHour, "a")}, 0);
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->borrowed);
  CHECK(core.TenantUsage("a") == 32);
  core.Step(JobSubmitted{3, Request(8, 8, kHour, "a")}, 0);
  CHECK(core.job(3)->state == JobState::kQueued);
  CHECK(core.job(3)->reason.find("max_running_jobs") != std::string::npos);
  core.Step(JobSubmitted{4, Request(48, 8, kHour, "a")}, 0);
  CHECK(core.job(4)->reason.find("max_job_gpus") != std::string::npos);
  core.Step(JobFinished{1, 0}, kMinute);  // one running: count ok, GPUs 16 + 8 <= 32
  CHECK(core.job(3)->state == JobState::kRunning);
  CHECK(core.TenantUsage("a") == 24);
  // Limit of GPUs: raise the job cap, keep guaranteed + borrow = 32.
  a.max_running_jobs = 0;
  a.max_job_gpus = 0;
  core.Step(TenantConfigured{a}, 2 * kMinute);
  core.Step(JobSubmitted{5, Request(16, 8, kHour, "a")}, 2 * kMinute);
  CHECK(core.job(5)->state == JobState::kQueued);
  CHECK(core.job(5)->reason.find("limit of 32") != std::string::npos);
  CHECK(core.TenantUsage("a") <= 32);
}

TEST_CASE("fairshare converges to the configured shares on a saturated two-tenant load") {
  Topology topo = Tiny();
  SchedulerConfig config = SimConfig();
  config.fairshare_half_life = 2 * kHour;
  SchedulerCore core(topo, config);
  core.Step(TenantConfigured{TenantConfig{"big", 0, -1, 0, 0, 3.0}}, 0);
  core.Step(TenantConfigured{TenantConfig{"small", 0, -1, 0, 0, 1.0}}, 0);
  // Both tenants keep 40 jobs of 16 GPUs queued; each runs 10 minutes.
  JobId next = 1;
  std::map<std::string, double> gpu_ms;
  std::map<JobId, TimeMs> end;
  TimeMs now = 0;
  auto top_up = [&] {
    for (const char* t : {"big", "small"}) {
      int queued = 0;
      for (JobId id : core.WaitingJobs()) queued += core.job(id)->request.tenant == t;
      while (queued++ < 40) {
        for (const Command& c : core.Step(JobSubmitted{next++, Request(16, 8, kHour, t)}, now)) {
          if (auto* s = std::get_if<StartJob>(&c)) end[s->id] = now + 10 * kMinute;
        }
      }
    }
  };
  top_up();
  while (now < 48 * kHour) {
    // The next completion.
    auto it = std::min_element(end.begin(), end.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
    now = it->second;
    JobId done = it->first;
    end.erase(it);
    if (now > 24 * kHour) gpu_ms[core.job(done)->request.tenant] += 16.0 * 10 * kMinute;
    for (const Command& c : core.Step(JobFinished{done, 0}, now)) {
      if (auto* s = std::get_if<StartJob>(&c)) end[s->id] = now + 10 * kMinute;
    }
    top_up();
    core.TakeFinishedJobs();
  }
  const double share = gpu_ms["big"] / (gpu_ms["big"] + gpu_ms["small"]);
  CHECK(share == doctest::Approx(0.75).epsilon(0.05));
}

TEST_CASE("TakeFinishedJobs hands over each ended job once, in id order, and keeps the rest") {
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {2, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  for (JobId id = 1; id <= 6; ++id) core.Step(JobSubmitted{id, Request(4, 4, kHour, "x")}, 0);
  core.Step(JobSubmitted{7, Request(64, 8, kHour, "x")}, 0);  // larger than the cluster
  // Ends in another order than the ids: 5 completes, 2 is cancelled, 3 fails.
  core.Step(JobFinished{5, 0}, kMinute);
  core.Step(JobCancelled{2, "not needed"}, kMinute);
  core.Step(JobFinished{3, 1}, 2 * kMinute);
  // Before the snapshot is taken and restored: a restored core hands over the
  // ended jobs it holds too.
  SchedulerCore restored(topo, SimConfig());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  for (SchedulerCore* c : {&core, &restored}) {
    std::vector<JobId> ids;
    for (const JobRecord& r : c->TakeFinishedJobs()) ids.push_back(r.id);
    CHECK(ids == std::vector<JobId>{2, 3, 5, 7});
    CHECK(c->TakeFinishedJobs().empty());
    CHECK(c->job(3) == nullptr);
    REQUIRE(c->job(1) != nullptr);
    CHECK(c->job(1)->state == JobState::kRunning);
  }
  core.Step(JobFinished{1, 0}, 3 * kMinute);
  std::vector<JobRecord> later = core.TakeFinishedJobs();
  REQUIRE(later.size() == 1);
  CHECK(later[0].id == 1);
  CHECK(later[0].state == JobState::kCompleted);
}

TEST_CASE("preemption frees a placement that meets the required constraints") {
  // HBDs of 2 nodes x 4 GPUs (8 GPUs), 2 HBDs per leaf, 2 leaves: 32 GPUs.
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {2, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  // Four low-priority jobs of 4 GPUs each take one node of every HBD...
  for (JobId id = 1; id <= 4; ++id) core.Step(JobSubmitted{id, Request(4, 4, kHour, "x", 0)}, 0);
  // ...and 4 more fill the other nodes.
  for (JobId id = 5; id <= 8; ++id) core.Step(JobSubmitted{id, Request(4, 4, kHour, "x", 0)}, 0);
  REQUIRE(core.cluster().total_busy_gpus() == 32);
  // A high-priority TP-8 job needs one whole HBD (two nodes): two victims in
  // the same HBD, not any two.
  auto cmds = core.Step(JobSubmitted{9, Request(8, 8, kHour, "y", 10)}, kMinute);
  auto asks = Only<RequestCheckpoint>(cmds);
  REQUIRE(asks.size() == 2);
  std::set<DomainId> hbds;
  for (const auto& a : asks) {
    CHECK(core.job(a.id)->state == JobState::kPreempting);
    hbds.insert(topo.Ancestor(core.job(a.id)->ranks[0].node, topo.hbd_tier()));
  }
  CHECK(hbds.size() == 1);
  // One victim checkpoints at once and stops; the other runs out its grace.
  core.Step(CheckpointCompleted{asks[0].id, 7}, 2 * kMinute);
  CHECK(core.job(asks[0].id)->state == JobState::kQueued);
  CHECK(core.job(9)->state == JobState::kQueued);
  cmds = core.Step(Tick{}, kMinute + core.config().preempt_grace);
  CHECK(core.job(asks[1].id)->state == JobState::kQueued);
  REQUIRE(core.job(9)->state == JobState::kRunning);
  PlacementMetrics m = Evaluate(core.job(9)->request.spec, topo, core.job(9)->ranks);
  CHECK(m.required_met);
  CHECK(core.job(asks[1].id)->lost_gpu_ms > 0);
  CHECK(core.job(asks[0].id)->lost_gpu_ms == 0);
}

TEST_CASE("preemption weighs the victims' restart cost against the preemptor's wait") {
  Topology topo = Tiny();
  SchedulerConfig config = SimConfig();
  config.preempt_restart_cost = 10 * kMinute;
  // A low-priority job holds the whole cluster until its limit at 62 min.
  SchedulerCore late(topo, config);
  late.Step(JobSubmitted{1, Request(64, 8, 62 * kMinute, "x", 0)}, 0);
  // At 55 min a high-priority job would wait 7 min (7.5 GPU-h): less than the
  // victim's cost, 10 min of restart plus 55 min of work since its start (it
  // never checkpoints) on each of its 64 GPUs (69.3 GPU-h). Nobody stops.
  auto cmds = late.Step(JobSubmitted{2, Request(64, 8, kHour, "y", 10)}, 55 * kMinute);
  CHECK(Only<RequestCheckpoint>(cmds).empty());
  CHECK(late.job(1)->state == JobState::kRunning);
  CHECK(late.job(2)->reason.find("not preempting") != std::string::npos);
  CHECK(late.job(2)->reason.find("would cost 69.3 GPU-h, more than the 7.5 GPU-h") !=
        std::string::npos);
  // The same job at 1 min would wait an hour: the victim is preempted.
  SchedulerCore early(topo, config);
  early.Step(JobSubmitted{1, Request(64, 8, 62 * kMinute, "x", 0)}, 0);
  cmds = early.Step(JobSubmitted{2, Request(64, 8, kHour, "y", 10)}, kMinute);
  CHECK(Only<RequestCheckpoint>(cmds).size() == 1);
  CHECK(early.job(1)->state == JobState::kPreempting);
  CHECK(early.job(2)->reason.find("preempting") == 0);
}

TEST_CASE("preemption takes jobs that checkpointed recently before those that cannot have") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  // Job 1 checkpoints every 30 min and just did; job 2 never checkpoints
  // but started later, so it has less work at risk.
  JobRequest checkpointing = Request(32, 8, 10 * kHour, "x", 0);
  checkpointing.checkpoint_interval = 30 * kMinute;
  core.Step(JobSubmitted{1, checkpointing}, 0);
  core.Step(JobSubmitted{2, Request(32, 8, 10 * kHour, "x", 0)}, 20 * kMinute);
  core.Step(CheckpointCompleted{1, 5}, 25 * kMinute);
  REQUIRE(core.cluster().total_busy_gpus() == 64);
  auto cmds = core.Step(JobSubmitted{3, Request(32, 8, kHour, "y", 10)}, 40 * kMinute);
  auto asks = Only<RequestCheckpoint>(cmds);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].id == 1);
  CHECK(core.job(2)->state == JobState::kRunning);
  // (When no recent checkpointer frees a placement the others are taken:
  // "preemption frees a placement that meets the required constraints".)
}

TEST_CASE("a job preempted preempt_protect_after times is not preempted again") {
  Topology topo = Tiny();
  SchedulerConfig config = SimConfig();
  config.preempt_protect_after = 1;
  SchedulerCore core(topo, config);
  core.Step(JobSubmitted{1, Request(64, 8, 10 * kHour, "x", 0)}, 0);
  auto cmds = core.Step(JobSubmitted{2, Request(64, 8, kHour, "y", 10)}, kMinute);
  REQUIRE(Only<RequestCheckpoint>(cmds).size() == 1);
  core.Step(CheckpointCompleted{1, 3}, 2 * kMinute);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(1)->preemptions == 1);
  core.Step(JobFinished{2, 0}, 20 * kMinute);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  // A second high-priority job finds job 1 protected and waits, saying so.
  cmds = core.Step(JobSubmitted{3, Request(64, 8, kHour, "y", 10)}, 21 * kMinute);
  CHECK(Only<RequestCheckpoint>(cmds).empty());
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.job(3)->state == JobState::kQueued);
  CHECK(core.job(3)->reason.find("preempted 1 times already are protected") != std::string::npos);
}

TEST_CASE("while a preemptor waits for its victims, backfill keeps off the GPUs it preempted for") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  // Low-priority jobs: 1 (32 GPUs) and 2 (24 GPUs) to 10 h; 8 GPUs free.
  core.Step(JobSubmitted{1, Request(32, 8, 10 * kHour, "x", 0)}, 0);
  core.Step(JobSubmitted{2, Request(24, 8, 10 * kHour, "x", 0)}, 0);
  REQUIRE(core.cluster().total_busy_gpus() == 56);
  // A high-priority 40-GPU job needs the 8 free GPUs and job 1's 32.
  auto cmds = core.Step(JobSubmitted{3, Request(40, 8, kHour, "y", 10)}, kMinute);
  auto asks = Only<RequestCheckpoint>(cmds);
  REQUIRE(asks.size() == 1);
  REQUIRE(asks[0].id == 1);
  // Before the victim stops, an 8-GPU job of 1 h arrives. The plan made
  // before the preemption started job 3 at 10 h, and a 1 h job "ends before
  // it": it would have taken the free GPUs job 3 preempted for, and job 3
  // would have preempted job 2 next. The plan now has job 3 start when job
  // 1's grace ends, so the small job waits.
  cmds = core.Step(JobSubmitted{4, Request(8, 8, kHour, "z", 0)}, 2 * kMinute);
  CHECK(Only<StartJob>(cmds).empty());
  CHECK(core.job(4)->state == JobState::kQueued);
  CHECK(core.EstimatedStart(3) == kMinute + core.config().preempt_grace);
  cmds = core.Step(CheckpointCompleted{1, 4}, 2 * kMinute);
  CHECK(Only<RequestCheckpoint>(cmds).empty());
  CHECK(core.job(3)->state == JobState::kRunning);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->preemptions == 0);
}

namespace {

// Tiny() with one 8-GPU job per node, in node order; the jobs on nodes 3 and
// 7 have ended, so a 16-GPU job now would span both spines (the root's 2:1
// oversubscribed fabric). The job on node 2 ends by its limit at 10 min.
std::unique_ptr<SchedulerCore> TwoFreeNodesAcrossSpines(const Topology& topo,
                                                        SchedulerConfig config) {
  auto core = std::make_unique<SchedulerCore>(topo, config);
  for (JobId id = 1; id <= 8; ++id) {
    core->Step(JobSubmitted{id, Request(8, 8, id == 3 ? 10 * kMinute : 10 * kHour, "x")}, 0);
  }
  for (JobId id = 1; id <= 8; ++id) REQUIRE(core->job(id)->ranks[0].node == id - 1);
  core->Step(JobFinished{4, 0}, kMinute);
  core->Step(JobFinished{8, 0}, kMinute);
  return core;
}

// A data-parallel job whose gradient all-reduce dominates its step: on the
// oversubscribed root fabric it runs about half as fast as inside a leaf.
JobRequest CommBound(TimeMs placement_wait) {
  JobRequest r = Request(16, 8, 10 * kHour, "y");
  ModelSpec m;
  m.parameters = 70e9;
  m.layers = 80;
  m.hidden = 8192;
  m.sequence = 256;
  m.global_batch = 2;
  r.spec.model = m;
  r.placement_wait = placement_wait;
  return r;
}

}  // namespace

TEST_CASE("a job waits a bounded time for a faster placement when waiting finishes it sooner") {
  Topology topo = Tiny();
  auto core = TwoFreeNodesAcrossSpines(topo, SimConfig());
  auto cmds = core->Step(JobSubmitted{9, CommBound(30 * kMinute)}, 2 * kMinute);
  CHECK(Only<StartJob>(cmds).empty());
  REQUIRE(core->job(9)->state == JobState::kQueued);
  CHECK(core->job(9)->reason.find("waiting for a faster placement") == 0);
  CHECK(core->job(9)->reason.find("once job 3 ends (in 8 min)") != std::string::npos);
  // The wait is bounded: the core asks to be woken when the bound ends.
  CHECK(core->NextWakeup() <= 32 * kMinute);
  // Job 3 ends: the job starts inside one leaf, on nodes 2 and 3.
  core->Step(JobFinished{3, 0}, 9 * kMinute);
  REQUIRE(core->job(9)->state == JobState::kRunning);
  std::set<NodeId> nodes;
  for (const GpuSlot& g : core->job(9)->ranks) nodes.insert(g.node);
  CHECK(nodes == std::set<NodeId>{2, 3});
}

TEST_CASE("a job does not wait for a faster placement beyond its bound, or without one") {
  Topology topo = Tiny();
  // Its bound (5 min) ends before job 3 does: it starts now, across spines.
  auto bounded = TwoFreeNodesAcrossSpines(topo, SimConfig());
  bounded->Step(JobSubmitted{9, CommBound(5 * kMinute)}, 2 * kMinute);
  CHECK(bounded->job(9)->state == JobState::kRunning);
  // The config's bound (30 min by default) applies to jobs that give none.
  auto by_default = TwoFreeNodesAcrossSpines(topo, SimConfig());
  by_default->Step(JobSubmitted{9, CommBound(0)}, 2 * kMinute);
  CHECK(by_default->job(9)->state == JobState::kQueued);
  // No bound anywhere: it starts now.
  SchedulerConfig off = SimConfig();
  off.placement_wait = 0;
  auto unbounded = TwoFreeNodesAcrossSpines(topo, off);
  unbounded->Step(JobSubmitted{9, CommBound(0)}, 2 * kMinute);
  CHECK(unbounded->job(9)->state == JobState::kRunning);
  // The tenant's bound applies to its jobs that give none.
  auto tenant = TwoFreeNodesAcrossSpines(topo, off);
  TenantConfig y;
  y.name = "y";
  y.placement_wait = kHour;
  tenant->Step(TenantConfigured{y}, kMinute);
  tenant->Step(JobSubmitted{9, CommBound(0)}, 2 * kMinute);
  CHECK(tenant->job(9)->state == JobState::kQueued);
  // A job's own "never" (< 0) overrides its tenant's bound.
  auto never = TwoFreeNodesAcrossSpines(topo, off);
  never->Step(TenantConfigured{y}, kMinute);
  never->Step(JobSubmitted{9, CommBound(-1)}, 2 * kMinute);
  CHECK(never->job(9)->state == JobState::kRunning);
}

TEST_CASE("a job waiting for a faster placement starts when its bound ends") {
  Topology topo = Tiny();
  auto core = TwoFreeNodesAcrossSpines(topo, SimConfig());
  core->Step(JobSubmitted{9, CommBound(9 * kMinute)}, 2 * kMinute);
  REQUIRE(core->job(9)->state == JobState::kQueued);
  // 11 min: the bound (2 + 9 min) has ended; job 3 still runs until 10 min
  // by its limit... which the core enforces first, so move before it.
  core->Step(Tick{}, 11 * kMinute - 1);
  CHECK(core->job(9)->state == JobState::kRunning);
}

TEST_CASE("EstimatedStart: the blocked head's reservation start, nothing for other jobs") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(48, 8, 60 * kMinute)}, 0);
  core.Step(JobSubmitted{2, Request(64, 8, 60 * kMinute)}, kMinute);
  REQUIRE(core.job(2)->state == JobState::kQueued);
  // Job 1 ends by its limit at 60 min; then all 64 GPUs are free.
  CHECK(core.EstimatedStart(2) == 60 * kMinute);
  CHECK_FALSE(core.EstimatedStart(1).has_value());   // running
  CHECK_FALSE(core.EstimatedStart(99).has_value());  // unknown
  // Held: no estimate; released, the head has it again.
  core.Step(JobHoldChanged{2, true}, 2 * kMinute);
  CHECK_FALSE(core.EstimatedStart(2).has_value());
  core.Step(JobHoldChanged{2, false}, 3 * kMinute);
  CHECK(core.EstimatedStart(2) == 60 * kMinute);
  // Behind the head: queued, but the plan says nothing of its start.
  core.Step(JobSubmitted{3, Request(8, 8, 120 * kMinute)}, 4 * kMinute);
  REQUIRE(core.job(3)->state == JobState::kQueued);
  CHECK_FALSE(core.EstimatedStart(3).has_value());
  // A job backfilled into the hole keeps the head's reservation.
  core.Step(JobSubmitted{4, Request(8, 8, 30 * kMinute)}, 5 * kMinute);
  REQUIRE(core.job(4)->state == JobState::kRunning);
  CHECK(core.EstimatedStart(2) == 60 * kMinute);
  // Job 1 ends early: the head starts and has no estimate any more.
  core.Step(JobFinished{4, 0}, 20 * kMinute);
  core.Step(JobFinished{1, 0}, 40 * kMinute);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->first_start == 40 * kMinute);
  CHECK_FALSE(core.EstimatedStart(2).has_value());
}

TEST_CASE("EstimatedStart: the plan searches past its first tries for the first end that fits") {
  // Every node holds two 4-GPU jobs: one ending at hour k + 1, one at hour
  // 10 + k (node k). The head needs two whole nodes (TP 8 in a node): 16 GPUs
  // are free after the 4th end, but no node is whole until the 9th and two
  // are not until the 10th (hour 11). The search places after the 4th to
  // 7th ends one by one, then searches the rest: that path must find hour 11.
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  JobId id = 1;
  for (int k = 0; k < 8; ++k) {
    core.Step(JobSubmitted{id++, Request(4, 1, (k + 1) * kHour)}, 0);
    core.Step(JobSubmitted{id++, Request(4, 1, (10 + k) * kHour)}, 0);
  }
  std::map<NodeId, std::set<TimeMs>> limits_by_node;
  for (JobId j = 1; j < id; ++j) {
    REQUIRE(core.job(j)->state == JobState::kRunning);
    limits_by_node[core.job(j)->ranks.front().node].insert(core.job(j)->request.time_limit);
  }
  REQUIRE(limits_by_node.size() == 8);  // two jobs on each node
  core.Step(JobSubmitted{id, Request(16, 8, kHour)}, kMinute);
  REQUIRE(core.job(id)->state == JobState::kQueued);
  // The oracle: release the running jobs by their limits, one end at a
  // time, and ask the placer after each.
  std::vector<std::pair<TimeMs, JobId>> ends;
  for (JobId j = 1; j < id; ++j) ends.push_back({core.job(j)->request.time_limit, j});
  std::sort(ends.begin(), ends.end());
  ClusterState future = core.cluster();
  std::unique_ptr<Placer> placer = MakePlacer("toposched");
  std::optional<TimeMs> first_fit;
  for (const auto& [end, j] : ends) {
    REQUIRE(future.Release(core.job(j)->ranks).ok());
    if (placer->Place(core.job(id)->request.spec, future).placed()) {
      first_fit = end;
      break;
    }
  }
  REQUIRE(first_fit == 11 * kHour);
  CHECK(core.EstimatedStart(id) == 11 * kHour);
}

TEST_CASE("EstimatedStart: none without a foreseeable start or without backfill") {
  Topology topo = Tiny();
  // A failed GPU: the 64-GPU job can never have all 64 until it is cleared.
  SchedulerCore broken(topo, SimConfig());
  broken.Step(GpuEvent{0, 3, GpuEventKind::kXid, 79}, 0);
  broken.Step(JobSubmitted{1, Request(64, 8)}, kMinute);
  REQUIRE(broken.job(1)->state == JobState::kQueued);
  CHECK_FALSE(broken.EstimatedStart(1).has_value());
  // FIFO without backfill makes no reservation.
  SchedulerCore fifo(topo, SimConfig("fifo-firstfit"));
  fifo.Step(JobSubmitted{1, Request(48, 8, 60 * kMinute)}, 0);
  fifo.Step(JobSubmitted{2, Request(64, 8)}, kMinute);
  REQUIRE(fifo.job(2)->state == JobState::kQueued);
  CHECK_FALSE(fifo.EstimatedStart(2).has_value());
}

TEST_CASE("EstimatedStart: a head waiting for a faster placement, the end it waits for") {
  Topology topo = Tiny();
  auto core = TwoFreeNodesAcrossSpines(topo, SimConfig());
  core->Step(JobSubmitted{9, CommBound(30 * kMinute)}, 2 * kMinute);
  REQUIRE(core->job(9)->reason.find("waiting for a faster placement") == 0);
  // Job 3 ends by its limit at 10 min.
  CHECK(core->EstimatedStart(9) == 10 * kMinute);
  // Never earlier than now.
  core->Step(Tick{}, 10 * kMinute - 1);
  CHECK(core->EstimatedStart(9) == 10 * kMinute);
}

TEST_CASE("borrowed capacity is reclaimed when the plan would break the guarantee's promise") {
  Topology topo = Tiny();
  // Tenants a and b are guaranteed 32 GPUs each. a runs one 8-GPU job (to
  // 24 h) when `a_runs`; b borrows the rest with 8-GPU jobs whose limits end
  // at 90 min. At 1 min a's 16-GPU job arrives, within a's guarantee: the
  // plan starts it at 90 min, 89 min after its submission.
  auto borrowed_cluster = [&](SchedulerCore& core, bool a_runs) {
    core.Step(TenantConfigured{TenantConfig{"a", 32, -1, 0, 0, 1}}, 0);
    core.Step(TenantConfigured{TenantConfig{"b", 32, -1, 0, 0, 1}}, 0);
    if (a_runs) core.Step(JobSubmitted{9, Request(8, 8, 24 * kHour, "a")}, 0);
    for (JobId id = 1; id <= (a_runs ? 7 : 8); ++id) {
      core.Step(JobSubmitted{id, Request(8, 8, 90 * kMinute, "b")}, 0);
    }
    REQUIRE(core.cluster().total_busy_gpus() == 64);
  };
  SUBCASE("a 40 min job would wait 89 min, over twice its limit: two borrowed jobs are reclaimed") {
    SchedulerCore core(topo, SimConfig());
    borrowed_cluster(core, true);
    auto cmds = core.Step(JobSubmitted{10, Request(16, 8, 40 * kMinute, "a")}, kMinute);
    auto asks = Only<RequestCheckpoint>(cmds);
    REQUIRE(asks.size() == 2);
    for (const auto& a : asks) CHECK(core.job(a.id)->borrowed);
    CHECK(core.job(10)->reason.find("preempting") == 0);
    core.Step(CheckpointCompleted{asks[0].id, 1}, 2 * kMinute);
    core.Step(CheckpointCompleted{asks[1].id, 1}, 2 * kMinute);
    CHECK(core.job(10)->state == JobState::kRunning);
  }
  SUBCASE("a 1 h job would wait 89 min, within twice its limit: reclaim waits for its deadline") {
    SchedulerCore core(topo, SimConfig());
    borrowed_cluster(core, true);
    const TimeMs grace = core.config().preempt_grace;
    auto cmds = core.Step(JobSubmitted{10, Request(16, 8, kHour, "a")}, kMinute);
    CHECK(Only<RequestCheckpoint>(cmds).empty());
    CHECK(core.job(10)->reason.find(
              "not preempting; borrowed GPUs are reclaimed in 58 min if jobs ending before their "
              "limits have not made room: the plan starts it in 89 min, past its time limit "
              "(60 min) of its submission but within twice that") != std::string::npos);
    // The deadline wakes the core, though nothing else happens by then.
    CHECK(core.NextWakeup() == kMinute + kHour - grace);
    cmds = core.Step(Tick{}, kMinute + kHour - grace - 1);
    CHECK(Only<RequestCheckpoint>(cmds).empty());
    cmds = core.Step(Tick{}, kMinute + kHour - grace);
    auto asks = Only<RequestCheckpoint>(cmds);
    REQUIRE(asks.size() == 2);
    for (const auto& a : asks) CHECK(core.job(a.id)->borrowed);
    // The victims have run 59 min without a checkpoint: stopping them costs
    // more than the 31 min of waiting left, but the promise is owed.
    CHECK(core.job(10)->reason.find("preempting") == 0);
    CHECK(core.job(10)->reason.find("; due to start within its time limit (60 min) of its "
                                    "submission)") != std::string::npos);
    // The victims do not checkpoint: they stop at the end of their grace,
    // and the job starts within its limit of its submission.
    core.Step(Tick{}, kMinute + kHour);
    REQUIRE(core.job(10)->state == JobState::kRunning);
    CHECK(core.job(10)->last_start == kMinute + kHour);
  }
  SUBCASE("the same 1 h job: borrowed jobs that end early make room, and none restarts") {
    SchedulerCore core(topo, SimConfig());
    borrowed_cluster(core, true);
    core.Step(JobSubmitted{10, Request(16, 8, kHour, "a")}, kMinute);
    core.Step(JobFinished{1, 0}, 30 * kMinute);
    core.Step(JobFinished{2, 0}, 30 * kMinute);
    REQUIRE(core.job(10)->state == JobState::kRunning);
    CHECK(core.job(10)->last_start == 30 * kMinute);
    for (JobId id = 3; id <= 7; ++id) CHECK(core.job(id)->preemptions == 0);
  }
  SUBCASE("a 2 h job would wait 89 min, within its limit: nothing stops, it starts at 90 min") {
    SchedulerCore core(topo, SimConfig());
    borrowed_cluster(core, true);
    auto cmds = core.Step(JobSubmitted{10, Request(16, 8, 2 * kHour, "a")}, kMinute);
    CHECK(Only<RequestCheckpoint>(cmds).empty());
    CHECK(core.job(10)->state == JobState::kQueued);
    CHECK(core.job(10)->reason.find("not preempting; borrowed GPUs are not reclaimed while the "
                                    "plan starts it within its time limit (120 min) of its "
                                    "submission (in 89 min)") != std::string::npos);
    CHECK(core.EstimatedStart(10) == 90 * kMinute);
    // b's jobs reach their limits at 90 min: a's job starts then.
    core.Step(Tick{}, 90 * kMinute);
    CHECK(core.job(10)->state == JobState::kRunning);
    CHECK(core.job(10)->last_start == 90 * kMinute);
  }
  SUBCASE("a tenant that holds none of its guarantee reclaims at once, even for a 2 h job") {
    SchedulerCore core(topo, SimConfig());
    borrowed_cluster(core, false);
    auto cmds = core.Step(JobSubmitted{10, Request(16, 8, 2 * kHour, "a")}, kMinute);
    CHECK(Only<RequestCheckpoint>(cmds).size() == 2);
    CHECK(core.job(10)->reason.find("preempting") == 0);
  }
}

TEST_CASE("fairshare holds a job back at most fairshare_max_wait after it became eligible") {
  // Tenant a's job 1 holds the whole cluster for 10 h, so a's usage is far
  // above b's. a's job 2 queues at 1 h, b's job 3 at 1 h 1 min. Fairshare
  // alone would put 3 first for as long as b has jobs waiting.
  Topology topo = Tiny();
  auto run = [&](TimeMs max_wait, bool hold_2) {
    SchedulerConfig config = SimConfig();
    config.fairshare_max_wait = max_wait;
    auto core = std::make_unique<SchedulerCore>(topo, config);
    core->Step(JobSubmitted{1, Request(64, 8, 10 * kHour, "a")}, 0);
    core->Step(JobSubmitted{2, Request(64, 8, 4 * kHour, "a")}, kHour);
    if (hold_2) core->Step(JobHoldChanged{2, true}, kHour);
    core->Step(JobSubmitted{3, Request(64, 8, 4 * kHour, "b")}, kHour + kMinute);
    return core;
  };
  SUBCASE("without the bound, b's younger job goes first") {
    auto core = run(0, false);
    CHECK(core->NextWakeup() == 10 * kHour);  // job 1's limit
    core->Step(JobFinished{1, 0}, 10 * kHour);
    CHECK(core->job(3)->state == JobState::kRunning);
    CHECK(core->job(2)->state == JobState::kQueued);
  }
  SUBCASE("with a 2 h bound, a's job ranks first from 3 h, and the core wakes for it") {
    auto core = run(2 * kHour, false);
    CHECK(core->WaitingJobs() == std::vector<JobId>{3, 2});
    CHECK(core->NextWakeup() == 3 * kHour);
    core->Step(Tick{}, 3 * kHour);
    CHECK(core->WaitingJobs() == std::vector<JobId>{2, 3});
    // Job 3 is overdue a minute later; then age decides between them.
    CHECK(core->NextWakeup() == 3 * kHour + kMinute);
    core->Step(Tick{}, 3 * kHour + kMinute);
    CHECK(core->NextWakeup() == 10 * kHour);
    core->Step(JobFinished{1, 0}, 10 * kHour);
    CHECK(core->job(2)->state == JobState::kRunning);
    CHECK(core->job(3)->state == JobState::kQueued);
  }
  SUBCASE("time on hold does not count: the bound runs from the release") {
    auto core = run(2 * kHour, true);
    core->Step(JobHoldChanged{2, false}, 5 * kHour);
    CHECK(core->WaitingJobs() == std::vector<JobId>{3, 2});
    CHECK(core->NextWakeup() == 7 * kHour);
    // A snapshot keeps when the job became eligible again, and the wake-up.
    SchedulerConfig config = SimConfig();
    config.fairshare_max_wait = 2 * kHour;
    SchedulerCore restored(topo, config);
    REQUIRE(restored.Restore(core->Snapshot()).ok());
    CHECK(restored.Snapshot() == core->Snapshot());
    CHECK(restored.NextWakeup() == 7 * kHour);
    for (SchedulerCore* c : {core.get(), &restored}) {
      c->Step(Tick{}, 7 * kHour - 1);
      CHECK(c->WaitingJobs() == std::vector<JobId>{3, 2});
      c->Step(Tick{}, 7 * kHour);
      CHECK(c->WaitingJobs() == std::vector<JobId>{2, 3});
    }
    // A format 4 snapshot has no bound: it restores with fairshare alone,
    // as the core that wrote it ran.
    SchedulerCore old(topo, config);
    REQUIRE(old.Restore(core->Snapshot(4)).ok());
    CHECK(old.config().fairshare_max_wait == 0);
    CHECK(old.WaitingJobs() == std::vector<JobId>{3, 2});
  }
}

TEST_CASE("reclaim takes only what a tenant holds beyond its guarantee now") {
  // Guarantees: a 32, b 24, c 16 (64 GPUs). b starts five 8-GPU jobs: 1-3
  // within its guarantee, 4 and 5 borrowed; a runs job 9 and c jobs 11-12,
  // all within their guarantees. Every limit is 24 h. Then b's earlier jobs
  // end: jobs 4 and 5 stay marked borrowed, but b holds less than they
  // borrowed. At 11 min a's 24-GPU job (a: 8 + 24 = 32, within its
  // guarantee, 20 min limit: the plan breaks its promise widely) finds too
  // few GPUs free.
  Topology topo = Tiny();
  auto setup = [&](SchedulerCore& core, int b_ended) {
    core.Step(TenantConfigured{TenantConfig{"a", 32, -1, 0, 0, 1}}, 0);
    core.Step(TenantConfigured{TenantConfig{"b", 24, -1, 0, 0, 1}}, 0);
    core.Step(TenantConfigured{TenantConfig{"c", 16, -1, 0, 0, 1}}, 0);
    for (JobId id = 1; id <= 5; ++id) {
      core.Step(JobSubmitted{id, Request(8, 8, 24 * kHour, "b")}, 0);
    }
    core.Step(JobSubmitted{9, Request(8, 8, 24 * kHour, "a")}, 0);
    core.Step(JobSubmitted{11, Request(8, 8, 24 * kHour, "c")}, 0);
    core.Step(JobSubmitted{12, Request(8, 8, 24 * kHour, "c")}, 0);
    REQUIRE(core.cluster().total_busy_gpus() == 64);
    REQUIRE(core.job(4)->borrowed);
    REQUIRE(core.job(5)->borrowed);
    REQUIRE_FALSE(core.job(3)->borrowed);
    for (JobId id = 1; id <= b_ended; ++id) core.Step(JobFinished{id, 0}, 10 * kMinute);
  };
  SUBCASE("a tenant back at its guarantee loses nothing, whatever its jobs borrowed once") {
    SchedulerCore core(topo, SimConfig());
    setup(core, 2);  // b holds 24 = its guarantee; 16 GPUs free
    REQUIRE(core.TenantUsage("b") == 24);
    auto cmds = core.Step(JobSubmitted{10, Request(24, 8, 20 * kMinute, "a")}, 11 * kMinute);
    CHECK(Only<RequestCheckpoint>(cmds).empty());
    CHECK(core.job(10)->state == JobState::kQueued);
    for (JobId id : {3, 4, 5, 11, 12}) CHECK(core.job(id)->preemptions == 0);
  }
  SUBCASE("one 8-GPU job of a tenant 8 over its guarantee may go, not two") {
    SchedulerCore core(topo, SimConfig());
    setup(core, 1);  // b holds 32, 8 over; 8 GPUs free
    REQUIRE(core.TenantUsage("b") == 32);
    auto cmds = core.Step(JobSubmitted{10, Request(24, 8, 20 * kMinute, "a")}, 11 * kMinute);
    // Two victims would be needed; b can give one back.
    CHECK(Only<RequestCheckpoint>(cmds).empty());
    CHECK(core.job(10)->reason.find("not preempting: no set of preemptible jobs frees a "
                                    "placement") != std::string::npos);
    // With 16 GPUs free, that one is enough.
    cmds = core.Step(JobFinished{12, 0}, 12 * kMinute);
    auto asks = Only<RequestCheckpoint>(cmds);
    REQUIRE(asks.size() == 1);
    CHECK(core.job(asks[0].id)->request.tenant == "b");
  }
}

TEST_CASE("a job within its guarantee starts within its time limit of its submission") {
  // Whatever the borrowers' limits, a guaranteed 16-GPU job with a 1 h limit
  // of a tenant that already runs a job starts by submission + 1 h (+ the
  // victims' grace when it reclaims): it waits when the plan keeps that, else
  // it reclaims.
  Topology topo = Tiny();
  for (TimeMs borrow_limit :
       {20 * kMinute, 59 * kMinute, 61 * kMinute, 90 * kMinute, 2 * kHour, 3 * kHour, 24 * kHour}) {
    CAPTURE(borrow_limit);
    SchedulerCore core(topo, SimConfig());
    core.Step(TenantConfigured{TenantConfig{"a", 32, -1, 0, 0, 1}}, 0);
    core.Step(TenantConfigured{TenantConfig{"b", 32, -1, 0, 0, 1}}, 0);
    core.Step(JobSubmitted{9, Request(8, 8, 48 * kHour, "a")}, 0);
    for (JobId id = 1; id <= 7; ++id) {
      core.Step(JobSubmitted{id, Request(8, 8, borrow_limit, "b")}, 0);
    }
    REQUIRE(core.TenantUsage("b") == 56);
    const TimeMs submit = kMinute;
    core.Step(JobSubmitted{10, Request(16, 8, kHour, "a")}, submit);
    // Victims never checkpoint (Request): they stop at their grace deadline.
    for (TimeMs t = submit; t <= submit + kHour + core.config().preempt_grace; t += kMinute) {
      core.Step(Tick{}, t);
      if (core.job(10)->state == JobState::kRunning) break;
    }
    REQUIRE(core.job(10)->state == JobState::kRunning);
    CHECK(core.job(10)->last_start - submit <= kHour + core.config().preempt_grace);
    // Borrowers that end within the hour anyway are waited for, not preempted.
    int preempted = 0;
    for (JobId id = 1; id <= 7; ++id) preempted += core.job(id)->preemptions;
    CHECK((preempted == 0) == (borrow_limit <= kHour + submit));
  }
}

TEST_CASE("a failed GPU drains its node and the job restarts on the nearest spare") {
  // HBDs of 4 nodes x 4 GPUs; a TP-8 job spans two nodes of one HBD.
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  JobRequest r = Request(16, 8);
  r.spec.spares = 1;
  auto cmds = core.Step(JobSubmitted{1, r}, 0);
  auto start = Only<StartJob>(cmds);
  REQUIRE(start.size() == 1);
  REQUIRE(start[0].spares.size() == 1);
  const NodeId spare = start[0].spares[0];
  core.Step(CheckpointCompleted{1, 100}, 30 * kMinute);
  const NodeId victim = start[0].ranks[0].node;
  cmds = core.Step(GpuEvent{victim, 0, GpuEventKind::kXid, 79}, 40 * kMinute);
  CHECK(Only<DrainNode>(cmds).size() == 1);
  // The job moved off the node in the same step, so it is drained at once.
  CHECK(core.cluster().node_state(victim) == NodeState::kDrained);
  auto restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].launch.checkpoint_step == 100);
  CHECK(restarts[0].launch.restart_count == 1);
  std::set<NodeId> nodes;
  for (const GpuSlot& s : restarts[0].ranks) nodes.insert(s.node);
  CHECK(nodes.count(victim) == 0);
  CHECK(nodes.count(spare) == 1);
  const JobRecord* job = core.job(1);
  CHECK(Evaluate(job->request.spec, topo, job->ranks).required_met);
  CHECK(job->lost_gpu_ms == doctest::Approx(16.0 * 10 * kMinute));
  // Repair brings it back.
  core.Step(JobFinished{1, 0}, kHour);
  core.Step(GpuEvent{victim, 0, GpuEventKind::kCleared, 0}, 2 * kHour);
  CHECK(core.cluster().node_state(victim) == NodeState::kUp);
}

TEST_CASE("a job over several drained nodes moves when rank 0's node is evacuated") {
  // HBDs of 4 nodes x 4 GPUs; a TP-8 x DP-2 job of 16 GPUs spans four nodes.
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(16, 8)}, 0));
  REQUIRE(start.size() == 1);
  std::vector<NodeId> mine;
  for (const GpuSlot& s : start[0].ranks) {
    if (std::find(mine.begin(), mine.end(), s.node) == mine.end()) mine.push_back(s.node);
  }
  REQUIRE(mine.size() == 4);
  const NodeId lead = start[0].ranks[0].node;
  core.Step(CheckpointCompleted{1, 7}, 10 * kMinute);
  NodeStatesRequested drain;
  for (NodeId n : mine) drain.requests.push_back({n, NodeState::kDrained, "rack out"});
  core.Step(drain, 11 * kMinute);
  // Another node's agent reports first: the job waits for rank 0's node,
  // whose report of the drain's checkpoint is still on its way.
  for (NodeId n : mine) {
    if (n == lead) continue;
    auto cmds = core.Step(NodeEvacuated{n, "agent stopped its ranks"}, 12 * kMinute);
    CHECK(Only<RestartJob>(cmds).empty());
  }
  CHECK(core.job(1)->restarts == 0);
  core.Step(CheckpointCompleted{1, 9}, 12 * kMinute);
  auto cmds = core.Step(NodeEvacuated{lead, "agent stopped its ranks"}, 12 * kMinute);
  auto restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].launch.checkpoint_step == 9);
  for (const GpuSlot& slot : restarts[0].ranks) {
    CHECK(std::find(mine.begin(), mine.end(), slot.node) == mine.end());
  }
  for (NodeId n : mine) CHECK(core.cluster().node_state(n) == NodeState::kDrained);
}

TEST_CASE("a job over drained nodes moves at once when rank 0's node is lost meanwhile") {
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(16, 8)}, 0));
  REQUIRE(start.size() == 1);
  const NodeId lead = start[0].ranks[0].node;
  NodeId other = -1;
  for (const GpuSlot& s : start[0].ranks) {
    if (s.node != lead) other = s.node;
  }
  core.Step(NodeStatesRequested{{{lead, NodeState::kDrained, "rack out"},
                                 {other, NodeState::kDrained, "rack out"}}},
            kMinute);
  // Rank 0's node goes down: the job restarts then, not at an evacuation.
  auto cmds = core.Step(NodeStateRequested{lead, NodeState::kDown, "lost"}, 2 * kMinute);
  CHECK(Only<RestartJob>(cmds).size() == 1);
  cmds = core.Step(NodeEvacuated{other, "agent stopped its ranks"}, 3 * kMinute);
  CHECK(Only<RestartJob>(cmds).empty());
  CHECK(core.job(1)->restarts == 1);
}

TEST_CASE("an evacuated drained node's jobs restart elsewhere from their checkpoint") {
  // HBDs of 4 nodes x 4 GPUs; a TP-8 job spans two nodes of one HBD.
  Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(8, 8)}, 0));
  REQUIRE(start.size() == 1);
  const NodeId node = start[0].ranks[0].node;
  core.Step(CheckpointCompleted{1, 7}, 10 * kMinute);
  // An agent's evacuation of a node nobody drained changes nothing.
  auto cmds = core.Step(NodeEvacuated{node, "stray"}, 11 * kMinute);
  CHECK(Only<RestartJob>(cmds).empty());
  CHECK(core.job(1)->restarts == 0);
  // Drained by request: the job keeps running until the agent has stopped it.
  cmds = core.Step(NodeStateRequested{node, NodeState::kDrained, "maintenance"}, 12 * kMinute);
  CHECK(Only<DrainNode>(cmds).size() == 1);
  CHECK(Only<RestartJob>(cmds).empty());
  CHECK(core.cluster().node_state(node) == NodeState::kDraining);
  core.Step(CheckpointCompleted{1, 8}, 13 * kMinute);
  cmds = core.Step(NodeEvacuated{node, "agent stopped its ranks"}, 13 * kMinute);
  auto restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].launch.checkpoint_step == 8);
  CHECK(restarts[0].launch.restart_count == 1);
  for (const GpuSlot& slot : restarts[0].ranks) CHECK(slot.node != node);
  CHECK(Evaluate(core.job(1)->request.spec, topo, core.job(1)->ranks).required_met);
  CHECK(core.cluster().node_state(node) == NodeState::kDrained);
  CHECK(core.job(1)->reason.find("was drained") != std::string::npos);
  // The drained node keeps the admin's reason, not how the drain ended.
  const auto states = Only<NodeStateChanged>(cmds);
  REQUIRE_FALSE(states.empty());
  CHECK(states.back().node == node);
  CHECK(states.back().state == NodeState::kDrained);
  CHECK(states.back().reason == "maintenance");
  // Resumed, then drained again with no job on it: the new reason, at once.
  cmds = core.Step(NodeStateRequested{node, NodeState::kUp, "resumed"}, 14 * kMinute);
  CHECK(core.cluster().node_state(node) == NodeState::kUp);
  cmds = core.Step(NodeStateRequested{node, NodeState::kDrained, "bad cable"}, 15 * kMinute);
  REQUIRE_FALSE(Only<NodeStateChanged>(cmds).empty());
  CHECK(Only<NodeStateChanged>(cmds).back().reason == "bad cable");
}

TEST_CASE("without a replacement a failed job requeues at the head (slurm-tree) or tail (fifo)") {
  Topology topo = Tiny();
  for (const char* stack : {"slurm-tree", "fifo-firstfit"}) {
    CAPTURE(stack);
    SchedulerCore core(topo, SimConfig(stack));
    core.Step(JobSubmitted{1, Request(64, 8)}, 0);
    core.Step(JobSubmitted{2, Request(8, 8)}, 1);
    REQUIRE(core.job(1)->state == JobState::kRunning);
    core.Step(CheckpointCompleted{1, 5}, 10 * kMinute);
    auto cmds = core.Step(NodeStateRequested{3, NodeState::kDown, "lost"}, 20 * kMinute);
    CHECK(Only<StopJob>(cmds).size() == 1);
    const std::vector<JobId> order = core.WaitingJobs();
    // Job 2 took the free GPUs in the same pass; job 1 waits for the node.
    if (std::string(stack) == "slurm-tree") {
      CHECK(core.job(1)->requeued_at_head);
    } else {
      CHECK_FALSE(core.job(1)->requeued_at_head);
    }
    CHECK(core.job(1)->state == JobState::kQueued);
    CHECK(core.job(1)->checkpoint_step == 5);
    CHECK(core.job(1)->lost_gpu_ms == doctest::Approx(64.0 * 10 * kMinute));
  }
}

TEST_CASE("with no free node a failed gang takes the node of a small job, when that costs less") {
  Topology topo = Tiny();  // 8 nodes of 8 GPUs
  // Job 1 (56 GPUs, checkpointed at 10 min) and job 2 (8 GPUs, started at
  // 5 min, never checkpoints) fill the cluster; at 20 min a node of job 1 is
  // lost. No node is free and job 1 cannot be placed afresh.
  auto full = [&](SchedulerConfig config, int victim_gpus, int priority, TimeMs victim_limit) {
    auto core = std::make_unique<SchedulerCore>(topo, config);
    core->Step(JobSubmitted{1, Request(64 - victim_gpus, 8, 10 * kHour, "x", 0)}, 0);
    core->Step(JobSubmitted{2, Request(victim_gpus, 8, victim_limit, "y", priority)}, 5 * kMinute);
    core->Step(CheckpointCompleted{1, 5}, 10 * kMinute);
    REQUIRE(core->cluster().total_busy_gpus() == 64);
    return core;
  };
  const NodeId lost = 0;  // job 1 starts first, on the lowest nodes
  SUBCASE("job 2 would hold its node 10 h: it is stopped and job 1 restarts on its node") {
    auto core = full(SimConfig(), 8, 0, 10 * kHour);
    REQUIRE(core->job(1)->ranks[0].node == lost);
    const NodeId taken = core->job(2)->ranks[0].node;
    auto cmds = core->Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 20 * kMinute);
    auto restarts = Only<RestartJob>(cmds);
    REQUIRE(restarts.size() == 1);
    CHECK(restarts[0].id == 1);
    std::set<NodeId> nodes;
    for (const GpuSlot& g : restarts[0].ranks) nodes.insert(g.node);
    CHECK(nodes.count(lost) == 0);
    CHECK(nodes.count(taken) == 1);
    CHECK(Evaluate(core->job(1)->request.spec, topo, core->job(1)->ranks).required_met);
    CHECK(core->job(1)->reason.find("on nodes of preempted job(s) 2") != std::string::npos);
    auto stops = Only<StopJob>(cmds);
    REQUIRE(stops.size() == 1);
    CHECK(stops[0].id == 2);
    CHECK(core->job(2)->state == JobState::kQueued);
    CHECK(core->job(2)->preemptions == 1);
    // It is told why (preempting, then queued at its age's place).
    bool told = false;
    for (const auto& c : Only<JobStateChanged>(cmds)) {
      told |= c.id == 2 && c.state == JobState::kPreempting &&
              c.reason.find("preempted for job 1") == 0;
    }
    CHECK(told);
    // Its 15 min since its start are lost: it never checkpointed.
    CHECK(core->job(2)->lost_gpu_ms == doctest::Approx(8.0 * 15 * kMinute));
  }
  SUBCASE("job 2 ends in 5 min: waiting costs less than stopping it, job 1 requeues") {
    // Job 2 started at 5 min with a 40 min limit; the loss comes at 40 min.
    // Job 1 would wait 5 min x 56 GPUs = 4.7 GPU-h; stopping job 2 costs
    // 8 GPUs x (10 min restart + 35 min at risk) = 6 GPU-h: not worth it.
    auto core = full(SimConfig(), 8, 0, 40 * kMinute);
    core->Step(CheckpointCompleted{1, 6}, 30 * kMinute);
    auto cmds = core->Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 40 * kMinute);
    CHECK(Only<RestartJob>(cmds).empty());
    CHECK(core->job(1)->state == JobState::kQueued);
    CHECK(core->job(2)->state == JobState::kRunning);
  }
  SUBCASE("a victim larger than the GPUs lost is never taken") {
    auto core = full(SimConfig(), 16, 0, 10 * kHour);
    core->Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 20 * kMinute);
    CHECK(core->job(1)->state == JobState::kQueued);
    CHECK(core->job(2)->state == JobState::kRunning);
  }
  SUBCASE("a victim of higher priority is never taken") {
    auto core = full(SimConfig(), 8, 5, 10 * kHour);
    core->Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 20 * kMinute);
    CHECK(core->job(1)->state == JobState::kQueued);
    CHECK(core->job(2)->state == JobState::kRunning);
  }
  SUBCASE("without preemption nothing is taken") {
    SchedulerConfig config = SimConfig();
    config.preemption = false;
    auto core = full(config, 8, 0, 10 * kHour);
    core->Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 20 * kMinute);
    CHECK(core->job(1)->state == JobState::kQueued);
    CHECK(core->job(2)->state == JobState::kRunning);
  }
}

TEST_CASE("missed heartbeats: up -> suspect -> down, then recovery") {
  Topology topo = Tiny();
  SchedulerConfig config = SimConfig();
  config.heartbeats_required = true;
  SchedulerCore core(topo, config);
  CHECK(core.cluster().node_state(0) == NodeState::kDown);  // until it registers
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    core.Step(NodeStateRequested{n, NodeState::kUp, "registered"}, 0);
  }
  core.Step(JobSubmitted{1, Request(8, 8)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  const NodeId n = core.job(1)->ranks[0].node;
  std::vector<Command> cmds;
  for (TimeMs t = kSecond; t <= config.heartbeat_down_after; t += kSecond) {
    for (NodeId m = 0; m < topo.node_count(); ++m) {
      if (m == n) continue;
      auto c = core.Step(Heartbeat{m}, t);
      cmds.insert(cmds.end(), c.begin(), c.end());
    }
    if (t == 4 * kSecond) {
      CHECK(core.cluster().node_state(n) == NodeState::kSuspect);
      CHECK(core.NextWakeup() == 7 * kSecond);  // the others would turn suspect
    }
  }
  CHECK(core.cluster().node_state(n) == NodeState::kDown);
  auto restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].ranks[0].node != n);
  // The node comes back when it beats again.
  core.Step(Heartbeat{n}, 20 * kSecond);
  CHECK(core.cluster().node_state(n) == NodeState::kUp);
}

TEST_CASE("GPU events classify by XID") {
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kXid, 79}) == GpuHealth::kFailed);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kXid, 48}) == GpuHealth::kFailed);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kXid, 94}) == GpuHealth::kDegraded);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kXid, 13}) == std::nullopt);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kThermal, 0}) == GpuHealth::kDegraded);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kEccSingleBit, 5}) == std::nullopt);
  CHECK(ClassifyGpuEvent({0, 0, GpuEventKind::kCleared, 0}) == GpuHealth::kHealthy);
}

TEST_CASE("periodic checkpoint requests and time limits") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  JobRequest r = Request(8, 8, 2 * kHour);
  r.checkpoint_interval = 30 * kMinute;
  core.Step(JobSubmitted{1, r}, 0);
  CHECK(core.NextWakeup() == 30 * kMinute);
  auto cmds = core.Step(Tick{}, 30 * kMinute);
  CHECK(Only<RequestCheckpoint>(cmds).size() == 1);
  core.Step(CheckpointCompleted{1, 1}, 31 * kMinute);
  CHECK(core.NextWakeup() == 61 * kMinute);
  cmds = core.Step(Tick{}, 2 * kHour);
  CHECK(core.job(1)->state == JobState::kFailed);
  CHECK(core.job(1)->reason.find("time limit") != std::string::npos);
  CHECK(core.cluster().total_busy_gpus() == 0);
}

TEST_CASE("cancel, hold and release") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(64, 8)}, 0);
  core.Step(JobSubmitted{2, Request(8, 8)}, 0);
  core.Step(JobHoldChanged{2, true}, 1);
  CHECK(core.job(2)->state == JobState::kHeld);
  core.Step(JobCancelled{1, "user"}, 2);
  CHECK(core.job(1)->state == JobState::kCancelled);
  CHECK(core.job(2)->state == JobState::kHeld);
  core.Step(JobHoldChanged{2, false}, 3);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.TakeFinishedJobs().size() == 1);
  CHECK(core.job(1) == nullptr);
}

TEST_CASE("fairshare does not depend on how time is split into steps") {
  Topology topo = Tiny();
  SchedulerCore a(topo, SimConfig());
  SchedulerCore b(topo, SimConfig());
  for (SchedulerCore* core : {&a, &b}) {
    core->Step(TenantConfigured{TenantConfig{"x", 0, -1, 0, 0, 1.0}}, 0);
    core->Step(TenantConfigured{TenantConfig{"y", 0, -1, 0, 0, 1.0}}, 0);
    core->Step(JobSubmitted{1, Request(48, 8, 10 * kHour, "x")}, 0);
    core->Step(JobSubmitted{2, Request(16, 8, 10 * kHour, "y")}, 0);
  }
  // Only `a` sees a tick every minute for five hours.
  for (TimeMs t = kMinute; t < 5 * kHour; t += kMinute) a.Step(Tick{}, t);
  for (SchedulerCore* core : {&a, &b}) {
    core->Step(JobFinished{1, 0}, 5 * kHour);
    core->Step(JobFinished{2, 0}, 5 * kHour);
    // Both tenants queue jobs that cannot all run: x used 3x more, so y goes first.
    core->Step(JobSubmitted{10, Request(64, 8, kHour, "x")}, 5 * kHour);
    core->Step(JobSubmitted{11, Request(64, 8, kHour, "x")}, 5 * kHour);
    core->Step(JobSubmitted{12, Request(64, 8, kHour, "y")}, 5 * kHour);
  }
  CHECK(a.WaitingJobs() == b.WaitingJobs());
  CHECK(a.job(10)->state == JobState::kRunning);  // first come while the cluster was empty
  CHECK(a.WaitingJobs().front() == 12);
}

TEST_CASE("a policy change applies from its event on: grace, backfill, failures") {
  Topology topo = Tiny();
  SchedulerCore core(topo, SimConfig());
  for (JobId id = 1; id <= 4; ++id) core.Step(JobSubmitted{id, Request(16, 8, 10 * kHour, "x")}, 0);
  SchedulingPolicy p = SchedulingPolicy::Of(core.config());
  p.preempt_grace = 10 * kSecond;
  p.max_app_failures = 1;
  core.Step(PolicyChanged{p, "preempt_grace_s", "120", "10"}, kMinute);
  CHECK(core.config().preempt_grace == 10 * kSecond);
  CHECK(SchedulingPolicy::Of(core.config()) == p);
  // A preemption now gets the new grace: the victim stops 10 s later.
  auto cmds = core.Step(JobSubmitted{5, Request(16, 8, kHour, "y", 10)}, 2 * kMinute);
  auto asks = Only<RequestCheckpoint>(cmds);
  REQUIRE(asks.size() == 1);
  CHECK(core.job(asks[0].id)->preempt_deadline == 2 * kMinute + 10 * kSecond);
  CHECK(core.NextWakeup() <= 2 * kMinute + 10 * kSecond);
  core.Step(Tick{}, 2 * kMinute + 10 * kSecond);
  CHECK(core.job(5)->state == JobState::kRunning);
  // The failure policy too: one application failure now fails the job,
  // once its attribution window ends with every node of the job up.
  core.Step(RankExited{5, 0, 1}, 3 * kMinute);
  CHECK(core.job(5)->state == JobState::kRunning);
  core.Step(Tick{}, 3 * kMinute + core.config().attribution_window);
  CHECK(core.job(5)->state == JobState::kFailed);
}

TEST_CASE("backfill: a short job behind 65 waiting gangs starts beside them at the default depth") {
  // 4 nodes of 8 GPUs; a 24-GPU job runs for 10 h on three. The head (32
  // GPUs) waits for it; 64 more gangs of 16 GPUs wait behind it; then an
  // 8-GPU job of 1 h that fits on the free node and ends long before the
  // head's reservation. It is the 65th job behind the head: past the depth
  // of 64 it stays queued next to the idle node; the default looks at it.
  Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 1, 8);
  REQUIRE(SchedulerConfig{}.backfill_depth >= 65);
  for (const int depth : {64, SchedulerConfig{}.backfill_depth}) {
    CAPTURE(depth);
    SchedulerConfig config = SimConfig();
    config.backfill_depth = depth;
    SchedulerCore core(topo, config);
    core.Step(JobSubmitted{1, Request(24, 8, 10 * kHour)}, 0);
    REQUIRE(core.job(1)->state == JobState::kRunning);
    TimeMs t = 1;
    core.Step(JobSubmitted{2, Request(32, 8, 10 * kHour)}, t++);
    for (JobId id = 3; id <= 66; ++id) core.Step(JobSubmitted{id, Request(16, 8, 10 * kHour)}, t++);
    core.Step(JobSubmitted{67, Request(8, 8, kHour)}, t++);
    CHECK(core.job(2)->state == JobState::kQueued);
    CHECK(core.job(66)->state == JobState::kQueued);
    CHECK(core.job(67)->state == (depth == 64 ? JobState::kQueued : JobState::kRunning));
  }
  // The depth is live policy: down to 64, the same job waits again.
  SchedulerCore core(topo, SimConfig());
  SchedulingPolicy p = SchedulingPolicy::Of(core.config());
  p.backfill_depth = 64;
  core.Step(
      PolicyChanged{p, "backfill_depth", std::to_string(SchedulerConfig{}.backfill_depth), "64"},
      0);
  core.Step(JobSubmitted{1, Request(24, 8, 10 * kHour)}, 0);
  TimeMs t = 1;
  core.Step(JobSubmitted{2, Request(32, 8, 10 * kHour)}, t++);
  for (JobId id = 3; id <= 66; ++id) core.Step(JobSubmitted{id, Request(16, 8, 10 * kHour)}, t++);
  core.Step(JobSubmitted{67, Request(8, 8, kHour)}, t++);
  CHECK(core.job(67)->state == JobState::kQueued);
  CHECK(core.config().backfill_depth == 64);

  // A snapshot of format 5 or 6, when the depth was fixed config (64),
  // restores into a core built with today's default and keeps 64; format 7
  // carries the live value.
  SchedulerConfig before = SimConfig();
  before.backfill_depth = 64;
  SchedulerCore older(topo, before);
  older.Step(JobSubmitted{1, Request(8, 8, kHour)}, 0);
  SchedulerCore restored(topo, SimConfig());
  REQUIRE(restored.Restore(older.Snapshot(5)).ok());
  CHECK(restored.config().backfill_depth == 64);
  SchedulerCore restored6(topo, SimConfig());
  REQUIRE(restored6.Restore(older.Snapshot(6)).ok());
  CHECK(restored6.config().backfill_depth == 64);
  CHECK(restored6.config().attribution_window == 0);
  SchedulerCore again(topo, SimConfig());
  REQUIRE(again.Restore(core.Snapshot()).ok());
  CHECK(again.config().backfill_depth == 64);
  CHECK(again.Snapshot() == core.Snapshot());
}
