// Failures never fail healthy jobs: batches of node changes, restarts only
// onto healthy nodes, infrastructure vs application failures, and the
// restart backoff, each against hand-computed expectations.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

SchedulerConfig SimConfig() {
  SchedulerConfig c = SchedulerConfig::ForStack("toposched").value();
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;
  // The backoff tests count an application failure from the rank's exit;
  // the attribution window has its own (AttributionConfig).
  c.attribution_window = 0;
  return c;
}

// SimConfig with the default attribution window.
SchedulerConfig AttributionConfig() {
  SchedulerConfig c = SimConfig();
  c.attribution_window = SchedulerConfig{}.attribution_window;
  return c;
}

JobRequest Request(int gpus, int tp, TimeMs limit = 10 * kHour, int spares = 0) {
  JobRequest r;
  r.spec = MakeJob(gpus, tp);
  r.spec.spares = spares;
  r.time_limit = limit;
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

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::set<NodeId> NodesOf(const std::vector<GpuSlot>& ranks) {
  std::set<NodeId> nodes;
  for (const GpuSlot& s : ranks) nodes.insert(s.node);
  return nodes;
}

bool Healthy(const SchedulerCore& core, NodeId n) {
  return core.cluster().node_state(n) == NodeState::kUp && core.cluster().failed_gpus(n) == 0;
}

// Every start and restart of `cmds` (the output of one step) puts its ranks
// and spares on nodes that are up with no failed GPU. No step changes a
// node after recovering a job, so the state after the step is the state the
// restart was decided in.
void CheckStartsOnHealthyNodes(const SchedulerCore& core, const std::vector<Command>& cmds) {
  auto check = [&](JobId id, const std::vector<GpuSlot>& ranks, const std::vector<NodeId>& spares) {
    CAPTURE(id);
    for (NodeId n : NodesOf(ranks)) {
      CAPTURE(n);
      CHECK(Healthy(core, n));
    }
    for (NodeId n : spares) {
      CAPTURE(n);
      CHECK(Healthy(core, n));
    }
  };
  for (const StartJob& s : Only<StartJob>(cmds)) check(s.id, s.ranks, s.spares);
  for (const RestartJob& r : Only<RestartJob>(cmds)) check(r.id, r.ranks, r.spares);
}

// 288 nodes of 8 GPUs: a node is an HBD, 8 nodes a leaf, 6 leaves a spine,
// 6 spines.
Topology Cluster288() { return MakeRegular({"node", "leaf", "spine"}, 0, {8, 6}, 6, 8); }

}  // namespace

TEST_CASE("287 of 288 nodes lost in one batch: no job fails, all wait, all come back") {
  const Topology topo = Cluster288();
  REQUIRE(topo.node_count() == 288);
  SchedulerCore core(topo, SimConfig());
  // Six jobs of 48 nodes fill the cluster; each has its own checkpoint.
  for (JobId id = 1; id <= 6; ++id) core.Step(JobSubmitted{id, Request(384, 8)}, 0);
  for (JobId id = 1; id <= 6; ++id) {
    REQUIRE(core.job(id)->state == JobState::kRunning);
    core.Step(CheckpointCompleted{id, 100 * id}, 20 * kMinute);
  }
  REQUIRE(core.cluster().total_busy_gpus() == 2304);
  const NodeId survivor = core.job(6)->ranks.back().node;

  // Half the agents' connections close first: those nodes turn suspect,
  // which moves no job; the other half just go silent.
  TimeMs now = kHour;
  for (NodeId n = 0; n < 288; n += 2) {
    if (n == survivor) continue;
    auto cmds = core.Step(NodeStateRequested{n, NodeState::kSuspect, "agent disconnected"}, now);
    CHECK(Only<StopJob>(cmds).empty());
  }
  for (JobId id = 1; id <= 6; ++id) CHECK(core.job(id)->state == JobState::kRunning);

  // Then the liveness check declares them all down at once.
  NodeStatesRequested batch;
  for (NodeId n = 0; n < 288; ++n) {
    if (n != survivor) batch.requests.push_back({n, NodeState::kDown, "agent disconnected"});
  }
  now += 2 * kSecond;
  auto cmds = core.Step(batch, now);
  CHECK(Only<StopJob>(cmds).size() == 6);  // each job stopped once
  CHECK(Only<RestartJob>(cmds).empty());   // nowhere healthy to go
  CHECK(Only<StartJob>(cmds).empty());
  CHECK(Only<NodeStateChanged>(cmds).size() == 287);
  CHECK(core.cluster().total_busy_gpus() == 0);
  for (JobId id = 1; id <= 6; ++id) {
    CAPTURE(id);
    const JobRecord& job = *core.job(id);
    CAPTURE(job.reason);
    CHECK(job.state == JobState::kQueued);
    CHECK(job.restarts == 1);
    CHECK(job.app_failures == 0);
    CHECK(job.checkpoint_step == 100 * id);
    // Why it waits, and how it will restart.
    CHECK(Has(job.reason, "287 nodes down"));
    CHECK(Has(job.reason, "restarts from checkpoint step " + std::to_string(100 * id)));
  }
  const JobId head = core.WaitingJobs().front();
  CAPTURE(core.job(head)->reason);
  CHECK(Has(core.job(head)->reason,
            "waiting for resources: needs 384 GPUs; 8 GPUs free now; 287 nodes down"));
  for (const JobStateChanged& c : Only<JobStateChanged>(cmds)) {
    CHECK(c.state == JobState::kQueued);
    CHECK(Has(c.reason, "are down"));
  }

  // The agents come back, some registering again, some with a heartbeat.
  std::map<JobId, StartJob> starts;
  for (NodeId n = 0; n < 288; ++n) {
    if (n == survivor) continue;
    now += 10;
    const Event back = n % 2 == 0 ? Event{NodeStateRequested{n, NodeState::kUp, "registered"}}
                                  : Event{Heartbeat{n}};
    cmds = core.Step(back, now);
    CheckStartsOnHealthyNodes(core, cmds);
    CHECK(Only<RestartJob>(cmds).empty());
    for (const StartJob& s : Only<StartJob>(cmds)) {
      CHECK(starts.emplace(s.id, s).second);
    }
  }
  REQUIRE(starts.size() == 6);
  for (const auto& [job_id, start] : starts) {
    const JobId id = job_id;  // a structured binding cannot be captured (clang 14)
    CAPTURE(id);
    CHECK(core.job(id)->state == JobState::kRunning);
    CHECK(start.launch.checkpoint_step == 100 * id);  // from its newest checkpoint
    CHECK(start.launch.restart_count == 1);
    CHECK(start.ranks.size() == 384);
  }
  CHECK(core.cluster().total_busy_gpus() == 2304);
  for (const auto& [id, job] : core.jobs()) CHECK(job.state != JobState::kFailed);
}

TEST_CASE("a batch is applied whole before recovery: no restart onto a node it takes down") {
  // 4 leaves of 2 nodes x 8 GPUs. A one-node job; the free node beside it
  // (same leaf) is the nearest replacement, and the batch takes it down too.
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  auto run = [&](bool batched) {
    SchedulerCore core(topo, SimConfig());
    core.Step(JobSubmitted{1, Request(8, 8)}, 0);
    const NodeId home = core.job(1)->ranks[0].node;
    const NodeId beside =
        topo.domain(topo.Ancestor(home, 1)).node_begin == home ? home + 1 : home - 1;
    REQUIRE(topo.Ancestor(beside, 1) == topo.Ancestor(home, 1));
    const std::vector<NodeStateRequested> lost = {{home, NodeState::kDown, "agent silent"},
                                                  {beside, NodeState::kDown, "agent silent"}};
    std::vector<RestartJob> restarts;
    if (batched) {
      auto cmds = core.Step(NodeStatesRequested{lost}, kMinute);
      CheckStartsOnHealthyNodes(core, cmds);
      restarts = Only<RestartJob>(cmds);
    } else {
      for (const NodeStateRequested& e : lost) {
        auto cmds = core.Step(e, kMinute);
        auto r = Only<RestartJob>(cmds);
        restarts.insert(restarts.end(), r.begin(), r.end());
      }
    }
    for (const RestartJob& r : restarts) {
      CHECK(NodesOf(r.ranks).count(home) == 0);
    }
    if (batched) {
      REQUIRE(restarts.size() == 1);
      CHECK(NodesOf(restarts[0].ranks).count(beside) == 0);
      CHECK(core.job(1)->restarts == 1);
      CHECK(core.job(1)->reason == "restarted after node " + topo.node(home).name +
                                       " is down from the beginning (no checkpoint)");
    } else {
      // One at a time, the first restart goes beside, and moves again.
      REQUIRE(restarts.size() == 2);
      CHECK(NodesOf(restarts[0].ranks).count(beside) == 1);
      CHECK(core.job(1)->restarts == 2);
    }
  };
  run(true);
  run(false);
}

TEST_CASE("the same loss as single events fails no job either, and lands nothing on a lost node") {
  // Without the batch each down is recovered alone; a restart may then land
  // on a node the next event takes down, but only on a node that was up.
  const Topology topo = Cluster288();
  SchedulerCore core(topo, SimConfig());
  for (JobId id = 1; id <= 6; ++id) core.Step(JobSubmitted{id, Request(384, 8)}, 0);
  const NodeId survivor = core.job(6)->ranks.back().node;
  TimeMs now = kHour;
  for (NodeId n = 0; n < 288; ++n) {
    if (n == survivor) continue;
    auto cmds = core.Step(NodeStateRequested{n, NodeState::kDown, "lost"}, now += 10);
    CheckStartsOnHealthyNodes(core, cmds);
  }
  for (JobId id = 1; id <= 6; ++id) {
    CAPTURE(id);
    CHECK(core.job(id)->state == JobState::kQueued);
    CHECK(Has(core.job(id)->reason, "287 nodes down"));
  }
}

TEST_CASE("a restart never uses a suspect spare, and moves off a draining node") {
  // HBDs of 4 nodes x 4 GPUs, 2 HBDs per leaf, 2 leaves: 16 nodes. A TP-8
  // job of 16 GPUs takes 4 nodes (two HBD-local pairs) and one spare.
  const Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SUBCASE("suspect spare") {
    SchedulerCore core(topo, SimConfig());
    auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(16, 8, kHour, 1)}, 0));
    REQUIRE(start.size() == 1);
    REQUIRE(start[0].spares.size() == 1);
    const NodeId spare = start[0].spares[0];
    core.Step(NodeStateRequested{spare, NodeState::kSuspect, "agent disconnected"}, kMinute);
    const NodeId lost = start[0].ranks[0].node;
    auto cmds = core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 2 * kMinute);
    auto restarts = Only<RestartJob>(cmds);
    REQUIRE(restarts.size() == 1);
    const std::set<NodeId> nodes = NodesOf(restarts[0].ranks);
    CHECK(nodes.count(spare) == 0);
    CHECK(nodes.count(lost) == 0);
    CHECK(std::count(restarts[0].spares.begin(), restarts[0].spares.end(), spare) == 0);
    CheckStartsOnHealthyNodes(core, cmds);
    CHECK(Evaluate(core.job(1)->request.spec, topo, core.job(1)->ranks).required_met);
  }
  SUBCASE("draining node of the job") {
    SchedulerCore core(topo, SimConfig());
    auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(16, 8)}, 0));
    REQUIRE(start.size() == 1);
    const std::set<NodeId> nodes_of_job = NodesOf(start[0].ranks);
    const std::vector<NodeId> mine(nodes_of_job.begin(), nodes_of_job.end());
    REQUIRE(mine.size() == 4);
    // An admin drains one node: the job keeps running there until the agent
    // evacuates it.
    core.Step(NodeStateRequested{mine[1], NodeState::kDrained, "maintenance"}, kMinute);
    REQUIRE(core.cluster().node_state(mine[1]) == NodeState::kDraining);
    // Another node of the job is lost first: the restart leaves both.
    auto cmds = core.Step(NodeStateRequested{mine[0], NodeState::kDown, "lost"}, 2 * kMinute);
    auto restarts = Only<RestartJob>(cmds);
    REQUIRE(restarts.size() == 1);
    const std::set<NodeId> nodes = NodesOf(restarts[0].ranks);
    CHECK(nodes.count(mine[0]) == 0);
    CHECK(nodes.count(mine[1]) == 0);
    CheckStartsOnHealthyNodes(core, cmds);
    // Nothing is left on the drained node, so its drain completes.
    CHECK(core.cluster().node_state(mine[1]) == NodeState::kDrained);
  }
}

TEST_CASE("draining a job's spare node gives the spare back: the drain ends, the job runs on") {
  // As above: a TP-8 job of 16 GPUs on 4 nodes of 4 GPUs, one spare node.
  const Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {4, 2}, 2, 4);
  SchedulerCore core(topo, SimConfig());
  auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(16, 8, kHour, 1)}, 0));
  REQUIRE(start.size() == 1);
  REQUIRE(start[0].spares.size() == 1);
  const NodeId spare = start[0].spares[0];
  CHECK(core.TenantUsage("default") == 16 + 4);
  auto cmds = core.Step(NodeStateRequested{spare, NodeState::kDraining, "rack removed"}, kMinute);
  // No restart, no stop: the ranks never ran there.
  CHECK(Only<RestartJob>(cmds).empty());
  CHECK(Only<StopJob>(cmds).empty());
  CHECK(core.cluster().node_state(spare) == NodeState::kDrained);
  CHECK(core.cluster().busy_mask(spare) == 0);
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.job(1)->spares.empty());
  CHECK(core.job(1)->ranks == start[0].ranks);
  CHECK(core.TenantUsage("default") == 16);
  // The job still ends normally and gives back exactly what it holds.
  core.Step(JobFinished{1, 0}, 2 * kMinute);
  CHECK(core.job(1)->state == JobState::kCompleted);
  CHECK(core.TenantUsage("default") == 0);
  CHECK(core.cluster().total_busy_gpus() == 0);
}

TEST_CASE("a rank exiting 127 restarts after 10, 20, 40 ... s and fails at the limit") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerConfig config = SimConfig();
  REQUIRE(config.max_app_failures == 10);
  REQUIRE(config.restart_backoff_initial == 10 * kSecond);
  REQUIRE(config.restart_backoff_max == 10 * kMinute);
  SchedulerCore core(topo, config);
  core.Step(JobSubmitted{1, Request(8, 8)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  core.Step(CheckpointCompleted{1, 5}, kMinute);

  // Failure k waits 10 s * 2^(k-1), at most 10 min.
  const TimeMs delays[] = {10 * kSecond,  20 * kSecond,  40 * kSecond,  80 * kSecond, 160 * kSecond,
                           320 * kSecond, 600 * kSecond, 600 * kSecond, 600 * kSecond};
  const std::string shown[] = {"10 s",  "20 s",   "40 s",   "80 s",  "160 s",
                               "320 s", "10 min", "10 min", "10 min"};
  TimeMs now = 2 * kMinute;
  for (int k = 1; k <= 9; ++k) {
    CAPTURE(k);
    const TimeMs delay = delays[k - 1];
    auto cmds = core.Step(RankExited{1, 3, 127}, now);
    CHECK(Only<StopJob>(cmds).size() == 1);
    CHECK(Only<RestartJob>(cmds).empty());
    CHECK(Only<StartJob>(cmds).empty());
    const JobRecord& job = *core.job(1);
    CHECK(job.state == JobState::kQueued);  // waits holding nothing
    CHECK(core.cluster().total_busy_gpus() == 0);
    CHECK(job.app_failures == k);
    CHECK(job.restart_at == now + delay);
    CHECK(job.reason == "requeued: restarting in " + shown[k - 1] +
                            " after rank 3 exited with status 127 (failure " + std::to_string(k) +
                            " of 10)");
    CHECK(core.NextWakeup() == now + delay);
    // Not a moment before its time, even with a pass.
    cmds = core.Step(Tick{}, now + delay - 1);
    CHECK(Only<StartJob>(cmds).empty());
    CHECK(core.job(1)->state == JobState::kQueued);
    cmds = core.Step(Tick{}, now + delay);
    auto starts = Only<StartJob>(cmds);
    REQUIRE(starts.size() == 1);
    CHECK(starts[0].launch.checkpoint_step == 5);
    CHECK(starts[0].launch.restart_count == core.job(1)->restarts);
    CHECK(core.job(1)->state == JobState::kRunning);
    CHECK(core.job(1)->restart_at == -1);
    now += delay + 30 * kSecond;
    if (k == 3) {
      // Infrastructure failures in between count for nothing: a lost node
      // restarts the job at once elsewhere, and so does a node that could
      // not start it.
      const NodeId lost = core.job(1)->ranks[0].node;
      cmds = core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, now);
      REQUIRE(Only<RestartJob>(cmds).size() == 1);
      CHECK(Only<RestartJob>(cmds)[0].ranks[0].node != lost);
      CHECK(core.job(1)->app_failures == 3);
      const NodeId refused = core.job(1)->ranks[0].node;
      cmds = core.Step(JobLaunchFailed{1, refused, "port in use", false}, now + kSecond);
      REQUIRE(Only<RestartJob>(cmds).size() == 1);
      CHECK(NodesOf(Only<RestartJob>(cmds)[0].ranks).count(refused) == 0);
      CHECK(core.job(1)->app_failures == 3);
      CHECK(core.job(1)->state == JobState::kRunning);
      core.Step(NodeStateRequested{lost, NodeState::kUp, "back"}, now + 2 * kSecond);
      now += 30 * kSecond;
    }
  }
  // The tenth in a row without a new checkpoint fails it, with the status.
  auto cmds = core.Step(RankExited{1, 3, 127}, now);
  CHECK(Only<StopJob>(cmds).size() == 1);
  const JobRecord& job = *core.job(1);
  CHECK(job.state == JobState::kFailed);
  CHECK(Has(job.reason, "rank 3 exited with status 127"));
  CHECK(Has(job.reason, "failure 10 of 10"));
  CHECK(core.NextWakeup() == kNever);
  CHECK(core.cluster().total_busy_gpus() == 0);
}

TEST_CASE("a new checkpoint resets the count of application failures and the backoff") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(8, 8)}, 0);
  TimeMs now = kMinute;
  for (int k = 1; k <= 3; ++k) {
    core.Step(RankExited{1, 0, 1}, now);
    now = core.NextWakeup();
    core.Step(Tick{}, now);
    REQUIRE(core.job(1)->state == JobState::kRunning);
  }
  CHECK(core.job(1)->app_failures == 3);
  core.Step(CheckpointCompleted{1, 40}, now + kMinute);
  CHECK(core.job(1)->app_failures == 0);
  core.Step(RankExited{1, 0, 1}, now + 2 * kMinute);
  CHECK(core.job(1)->restart_at == now + 2 * kMinute + 10 * kSecond);
  CHECK(Has(core.job(1)->reason, "(failure 1 of 10)"));
}

TEST_CASE("backoff 0 restarts at once in place, the limit still holds") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerConfig config = SimConfig();
  config.restart_backoff_initial = 0;
  config.max_app_failures = 3;
  SchedulerCore core(topo, config);
  auto start = Only<StartJob>(core.Step(JobSubmitted{1, Request(8, 8)}, 0));
  REQUIRE(start.size() == 1);
  for (int k = 1; k <= 2; ++k) {
    auto cmds = core.Step(RankExited{1, 2, 134}, k * kMinute);
    auto restarts = Only<RestartJob>(cmds);
    REQUIRE(restarts.size() == 1);
    CHECK(restarts[0].ranks == start[0].ranks);  // its nodes are healthy: it stays
    CHECK(restarts[0].launch.restart_count == k);
    CHECK(core.job(1)->restart_at == -1);
    CHECK(core.job(1)->state == JobState::kRunning);
  }
  core.Step(RankExited{1, 2, 134}, 3 * kMinute);
  CHECK(core.job(1)->state == JobState::kFailed);
  CHECK(Has(core.job(1)->reason, "status 134 (failure 3 of 3"));
}

TEST_CASE("infrastructure failures never fail a job, however many without a checkpoint") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(8, 8)}, 0);
  TimeMs now = kMinute;
  for (int i = 1; i <= 30; ++i) {
    CAPTURE(i);
    const NodeId n = core.job(1)->ranks[0].node;
    auto cmds = i % 2 == 0 ? core.Step(NodeStateRequested{n, NodeState::kDown, "lost"}, now)
                           : core.Step(GpuEvent{n, 0, GpuEventKind::kXid, 79}, now);
    CHECK(Only<RestartJob>(cmds).size() == 1);
    CheckStartsOnHealthyNodes(core, cmds);
    core.Step(GpuEvent{n, 0, GpuEventKind::kCleared, 0}, now + kSecond);
    core.Step(NodeStateRequested{n, NodeState::kUp, "repaired"}, now + kSecond);
    now += kMinute;
  }
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.job(1)->restarts == 30);
  CHECK(core.job(1)->app_failures == 0);
}

TEST_CASE("transient launch failures: off the node at once, then with a growing backoff") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(8, 8)}, 0);
  const NodeId first = core.job(1)->ranks[0].node;
  auto cmds = core.Step(JobLaunchFailed{1, first, "disk full", false}, kSecond);
  auto restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].ranks[0].node != first);
  const TimeMs delays[] = {10 * kSecond, 20 * kSecond, 40 * kSecond};
  TimeMs now = 2 * kSecond;
  for (int k = 2; k <= 4; ++k) {
    CAPTURE(k);
    cmds = core.Step(JobLaunchFailed{1, core.job(1)->ranks[0].node, "disk full", false}, now);
    CHECK(Only<StopJob>(cmds).size() == 1);
    CHECK(core.job(1)->state == JobState::kQueued);
    CHECK(core.NextWakeup() == now + delays[k - 2]);
    CHECK(Has(core.job(1)->reason, "launch failure " + std::to_string(k) + " in a row"));
    now += delays[k - 2];
    CHECK(Only<StartJob>(core.Step(Tick{}, now)).size() == 1);
  }
  CHECK(core.job(1)->launch_failures == 4);
  CHECK(core.job(1)->app_failures == 0);
  core.Step(CheckpointCompleted{1, 9}, now + kMinute);
  CHECK(core.job(1)->launch_failures == 0);
}

TEST_CASE("a start no agent acknowledged requeues the job as an infrastructure failure") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  const std::vector<NodeId> nodes = {core.job(1)->ranks[0].node, core.job(1)->ranks[8].node};
  // The first: requeued, and started again in the same step (no backoff).
  auto cmds = core.Step(StartUnacknowledged{1, nodes, 600 * kSecond}, 600 * kSecond);
  REQUIRE(Only<StopJob>(cmds).size() == 1);
  std::vector<JobStateChanged> changed = Only<JobStateChanged>(cmds);
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].state == JobState::kQueued);
  CHECK(changed[0].reason == "requeued: nodes " + topo.node(nodes[0]).name + " and " +
                                 topo.node(nodes[1]).name +
                                 "' agents did not acknowledge its start within 10 min (launch "
                                 "failure 1 in a row; these do not count toward the failure "
                                 "limit)");
  REQUIRE(Only<StartJob>(cmds).size() == 1);
  CHECK(Only<StartJob>(cmds)[0].launch.restart_count == 1);
  CHECK(core.job(1)->restarts == 1);
  CHECK(core.job(1)->app_failures == 0);
  // The second in a row waits out the launch failures' backoff, queued.
  const NodeId one = core.job(1)->ranks[0].node;
  cmds = core.Step(StartUnacknowledged{1, {one}, 30 * kSecond}, 630 * kSecond);
  CHECK(core.job(1)->state == JobState::kQueued);
  CHECK(Has(core.job(1)->reason, "restarting in 10 s after node " + topo.node(one).name +
                                     "'s agent did not acknowledge its start within 30 s"));
  CHECK(core.NextWakeup() == 640 * kSecond);
  // Not running: ignored.
  CHECK(core.Step(StartUnacknowledged{1, {one}, 30 * kSecond}, 631 * kSecond).empty());
  CHECK(Only<StartJob>(core.Step(Tick{}, 640 * kSecond)).size() == 1);
  CHECK(core.job(1)->restarts == 2);
  CHECK(core.job(1)->app_failures == 0);
  CHECK(core.job(1)->state == JobState::kRunning);
}

TEST_CASE("heartbeat timeouts of one check are one batch: each job recovered once") {
  // 4 leaves of 2 nodes x 8 GPUs. A 16-GPU job on two nodes; both stop
  // beating, with four idle nodes; two nodes keep beating.
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerConfig config = SimConfig();
  config.heartbeats_required = true;
  SchedulerCore core(topo, config);
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    core.Step(NodeStateRequested{n, NodeState::kUp, "registered"}, 0);
  }
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  const std::set<NodeId> mine = NodesOf(core.job(1)->ranks);
  REQUIRE(mine.size() == 2);
  std::vector<NodeId> beating;
  for (NodeId n = 0; n < topo.node_count() && beating.size() < 2; ++n) {
    if (!mine.count(n)) beating.push_back(n);
  }
  std::vector<Command> all;
  for (TimeMs t = kSecond; t <= config.heartbeat_down_after; t += kSecond) {
    for (NodeId n : beating) {
      auto c = core.Step(Heartbeat{n}, t);
      all.insert(all.end(), c.begin(), c.end());
    }
  }
  CHECK(Only<StopJob>(all).empty());
  auto restarts = Only<RestartJob>(all);
  REQUIRE(restarts.size() == 1);
  CHECK(NodesOf(restarts[0].ranks) == std::set<NodeId>(beating.begin(), beating.end()));
  CHECK(Has(core.job(1)->reason, "nodes "));
  CHECK(Has(core.job(1)->reason, " are down"));
}

TEST_CASE("a cleared GPU brings its node up only when nothing else keeps it drained") {
  Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, SimConfig());
  auto reason_of = [](const std::vector<Command>& cmds) {
    std::vector<NodeStateChanged> changed = Only<NodeStateChanged>(cmds);
    REQUIRE(changed.size() == 1);
    return changed[0];
  };
  // Two failed GPUs: clearing one leaves the node drained by the other, and
  // its reason says which.
  core.Step(GpuEvent{0, 5, GpuEventKind::kXid, 79}, 0);
  core.Step(GpuEvent{0, 6, GpuEventKind::kXid, 79}, 1);
  core.Step(GpuEvent{0, 7, GpuEventKind::kXid, 74}, 2);
  REQUIRE(core.cluster().node_state(0) == NodeState::kDrained);
  NodeStateChanged c = reason_of(core.Step(GpuEvent{0, 5, GpuEventKind::kCleared, 0}, 3));
  CHECK(c.state == NodeState::kDrained);
  CHECK(c.reason == "n0 GPUs 6 and 7 failed");
  c = reason_of(core.Step(GpuEvent{0, 7, GpuEventKind::kCleared, 0}, 4));
  CHECK(c.reason == "n0 GPU 6 failed");
  c = reason_of(core.Step(GpuEvent{0, 6, GpuEventKind::kCleared, 0}, 5));
  CHECK(c.state == NodeState::kUp);
  CHECK(c.reason == "n0 GPU 6 repaired");
  // An admin's drain outlives the GPU: a drain of the node its failure
  // drained takes over its reason, and the clear keeps it drained by it.
  core.Step(GpuEvent{1, 2, GpuEventKind::kXid, 79}, 6);
  c = reason_of(core.Step(NodeStateRequested{1, NodeState::kDrained, "PSU swap"}, 7));
  CHECK(c.state == NodeState::kDrained);
  CHECK(c.reason == "PSU swap");
  c = reason_of(core.Step(GpuEvent{1, 2, GpuEventKind::kCleared, 0}, 8));
  CHECK(c.state == NodeState::kDrained);
  CHECK(c.reason == "PSU swap");
  CHECK(core.cluster().gpu_health(1, 2) == GpuHealth::kHealthy);
  core.Step(NodeStateRequested{1, NodeState::kUp, "resumed"}, 9);
  CHECK(core.cluster().node_state(1) == NodeState::kUp);
  // A resume of an admin-drained node whose GPU is still failed: it stays
  // drained, and its reason is now the GPU, not the admin's old words.
  core.Step(GpuEvent{3, 4, GpuEventKind::kXid, 79}, 9);
  core.Step(NodeStateRequested{3, NodeState::kDrained, "PSU swap"}, 9);
  c = reason_of(core.Step(NodeStateRequested{3, NodeState::kUp, "resumed"}, 9));
  CHECK(c.state == NodeState::kDrained);
  CHECK(c.reason == "n3 GPU 4 failed");
  // A healthy GPU "cleared" changes nothing.
  CHECK(core.Step(GpuEvent{2, 0, GpuEventKind::kCleared, 0}, 10).empty());
}

TEST_CASE("property: over random failures no restart lands on an unhealthy node") {
  const Topology topo = MakeRegular({"node", "hbd", "leaf"}, 1, {2, 2}, 2, 4);
  int restarts = 0, backoffs = 0, failed = 0;  // the sequences reach every path
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    Rng rng(seed);
    SchedulerConfig config = SimConfig();
    config.max_app_failures = 4;
    SchedulerCore core(topo, config);
    TimeMs now = 0;
    JobId next = 1;
    std::map<JobId, int> app_failures_seen;
    const NodeState states[] = {NodeState::kUp, NodeState::kSuspect, NodeState::kDown,
                                NodeState::kDrained};
    for (int i = 0; i < 500; ++i) {
      now += static_cast<TimeMs>(rng.Below(30 * kSecond));
      std::vector<JobId> running;
      for (const auto& [id, job] : core.jobs()) {
        if (job.state == JobState::kRunning) running.push_back(id);
      }
      const uint64_t kind = rng.Below(100);
      auto node = [&] { return static_cast<NodeId>(rng.Below(topo.node_count())); };
      Event e = Tick{};
      if (kind < 25) {
        const int tp = std::array<int, 3>{1, 4, 8}[rng.Below(3)];
        JobRequest r =
            Request(tp * static_cast<int>(rng.Range(1, 3)), tp, kHour, rng.Below(4) == 0 ? 1 : 0);
        e = JobSubmitted{next++, r};
      } else if (kind < 35 && !running.empty()) {
        e = JobFinished{running[rng.Below(running.size())], 0};
      } else if (kind < 45 && !running.empty()) {
        e = CheckpointCompleted{running[rng.Below(running.size())], i};
      } else if (kind < 55 && !running.empty()) {
        const JobId id = running[rng.Below(running.size())];
        ++app_failures_seen[id];
        e = RankExited{id, 0, 127};
      } else if (kind < 60 && !running.empty()) {
        const JobId id = running[rng.Below(running.size())];
        e = JobLaunchFailed{id, core.job(id)->ranks[0].node, "busy port", false};
      } else if (kind < 75) {
        e = NodeStateRequested{node(), states[rng.Below(4)], "random"};
      } else if (kind < 85) {
        NodeStatesRequested batch;
        const int size = static_cast<int>(rng.Range(2, 6));
        for (int k = 0; k < size; ++k) {
          batch.requests.push_back({node(), states[rng.Below(4)], "random batch"});
        }
        e = batch;
      } else if (kind < 92) {
        const int codes[] = {79, 48, 94};
        e = GpuEvent{node(), static_cast<int>(rng.Below(4)), GpuEventKind::kXid,
                     codes[rng.Below(3)]};
      } else if (kind < 96) {
        e = GpuEvent{node(), static_cast<int>(rng.Below(4)), GpuEventKind::kCleared, 0};
      } else {
        e = Heartbeat{node()};
      }
      const std::vector<Command> cmds = core.Step(e, now);
      CheckStartsOnHealthyNodes(core, cmds);
      restarts += static_cast<int>(Only<RestartJob>(cmds).size());
      CHECK(core.NextWakeup() > now);
      for (const JobStateChanged& c : Only<JobStateChanged>(cmds)) {
        if (c.state != JobState::kFailed) continue;
        // Only application failures at the limit (or the time limit) fail.
        CAPTURE(c.reason);
        CHECK((Has(c.reason, "of 4 without a new checkpoint") || Has(c.reason, "time limit")));
        ++failed;
        if (Has(c.reason, "of 4")) CHECK(app_failures_seen[c.id] >= 4);
      }
      // Waiting out a backoff holds nothing and is due in the future.
      for (const JobStateChanged& c : Only<JobStateChanged>(cmds)) {
        backoffs += Has(c.reason, "restarting in");
      }
      for (const auto& [id, job] : core.jobs()) {
        if (job.restart_at < 0) continue;
        CHECK(job.restart_at > now);
        CHECK(job.ranks.empty());
        CHECK(core.NextWakeup() <= job.restart_at);
      }
    }
  }
  CHECK(restarts > 50);
  CHECK(backoffs > 50);
  CHECK(failed > 0);
}

TEST_CASE("attribution: a rank's exit just before its job's node is lost is that node's") {
  // 16 GPUs of tp 8 on nodes a (rank 0) and b. Rank 9 on b exits 1 at 10 s
  // (its collective failed as a vanished); a's agent disconnects at 11 s (a
  // turns suspect): one incident, a's, restarted at once off a, no failure
  // counted, and nothing more when the window would have ended.
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerConfig config = AttributionConfig();
  REQUIRE(config.attribution_window == 5 * kSecond);
  SchedulerCore core(topo, config);
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  const NodeId a = core.job(1)->ranks[0].node, b = core.job(1)->ranks[9].node;
  REQUIRE(a != b);
  CHECK(core.Step(RankExited{1, 9, 1}, 10 * kSecond).empty());
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.NextWakeup() == 15 * kSecond);
  auto cmds =
      core.Step(NodeStateRequested{a, NodeState::kSuspect, "agent disconnected"}, 11 * kSecond);
  std::vector<RestartJob> restarts = Only<RestartJob>(cmds);
  REQUIRE(restarts.size() == 1);
  CHECK_FALSE(NodesOf(restarts[0].ranks).count(a));
  CHECK(core.job(1)->restarts == 1);
  CHECK(core.job(1)->app_failures == 0);
  CHECK(Has(core.job(1)->reason, "restarted after node " + topo.node(a).name +
                                     " is suspect (rank 9 exited with status 1 meanwhile)"));
  CHECK(core.Step(Tick{}, 15 * kSecond).empty());
  CHECK(core.job(1)->state == JobState::kRunning);
  CHECK(core.job(1)->app_failures == 0);
  (void)b;
}

TEST_CASE("attribution: a rank's exit while a node of its job is suspect or down is that node's") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, AttributionConfig());
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  const NodeId a = core.job(1)->ranks[0].node;
  core.Step(NodeStateRequested{a, NodeState::kSuspect, "agent disconnected"}, 10 * kSecond);
  REQUIRE(core.job(1)->restarts == 0);  // suspect alone moves nothing
  auto cmds = core.Step(RankExited{1, 9, 134}, 10500);
  REQUIRE(Only<RestartJob>(cmds).size() == 1);
  CHECK(core.job(1)->app_failures == 0);
  CHECK(Has(core.job(1)->reason,
            "node " + topo.node(a).name + " is suspect (rank 9 exited with status 134 meanwhile)"));
  // A lost node taking over a held exit names both.
  const NodeId c = core.job(1)->ranks[0].node;
  CHECK(core.Step(RankExited{1, 2, 1}, 20 * kSecond).empty());
  cmds =
      core.Step(NodeStateRequested{c, NodeState::kDown, "agent silent for 3000 ms"}, 21 * kSecond);
  REQUIRE(Only<RestartJob>(cmds).size() == 1);
  CHECK(Has(core.job(1)->reason,
            "node " + topo.node(c).name + " is down (rank 2 exited with status 1 meanwhile)"));
  CHECK(core.job(1)->app_failures == 0);
}

TEST_CASE("attribution: with every node up through the window, an application failure then") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, AttributionConfig());
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  CHECK(core.Step(RankExited{1, 3, 1}, 10 * kSecond).empty());
  CHECK(core.Step(RankExited{1, 4, 1}, 11 * kSecond).empty());  // the first decides
  CHECK(core.Step(Tick{}, 14999).empty());
  auto cmds = core.Step(Tick{}, 15 * kSecond);
  CHECK(Only<StopJob>(cmds).size() == 1);
  CHECK(core.job(1)->state == JobState::kQueued);
  CHECK(core.job(1)->app_failures == 1);
  CHECK(Has(core.job(1)->reason,
            "restarting in 10 s after rank 3 exited with status 1 (failure 1 of 10)"));
  CHECK(core.NextWakeup() == 25 * kSecond);

  // A job on one node: no other node of it can be lost, and its agent
  // reported the exit: an application failure at once.
  SchedulerCore one(topo, AttributionConfig());
  one.Step(JobSubmitted{1, Request(8, 8)}, 0);
  cmds = one.Step(RankExited{1, 3, 1}, 10 * kSecond);
  CHECK(Only<StopJob>(cmds).size() == 1);
  CHECK(one.job(1)->app_failures == 1);

  // attribution_window 0: at once, as before the window existed.
  SchedulerConfig at_once = AttributionConfig();
  at_once.attribution_window = 0;
  SchedulerCore now(topo, at_once);
  now.Step(JobSubmitted{1, Request(16, 8)}, 0);
  cmds = now.Step(RankExited{1, 3, 1}, 10 * kSecond);
  CHECK(Only<StopJob>(cmds).size() == 1);
  CHECK(now.job(1)->app_failures == 1);
}

TEST_CASE("attribution: a held exit survives a snapshot, and the window is live policy") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, AttributionConfig());
  core.Step(JobSubmitted{1, Request(16, 8)}, 0);
  core.Step(RankExited{1, 3, 1}, 10 * kSecond);
  SchedulerCore restored(topo, AttributionConfig());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  CHECK(restored.Snapshot() == core.Snapshot());
  CHECK(restored.NextWakeup() == 15 * kSecond);
  for (SchedulerCore* c : {&core, &restored}) {
    c->Step(Tick{}, 15 * kSecond);
    CHECK(c->job(1)->app_failures == 1);
  }
  CHECK(restored.Snapshot() == core.Snapshot());
  // An older snapshot has no window: it restores with 0, what its core did.
  SchedulerCore old(topo, AttributionConfig());
  REQUIRE(old.Restore(core.Snapshot(5)).ok());
  CHECK(old.config().attribution_window == 0);

  SchedulingPolicy p = SchedulingPolicy::Of(core.config());
  p.attribution_window = 30 * kSecond;
  core.Step(PolicyChanged{p, "attribution_window_ms", "5000", "30000"}, 16 * kSecond);
  CHECK(core.config().attribution_window == 30 * kSecond);
}

namespace {

// Two leaves of four 8-GPU H100 nodes (HBD = node) and one leaf with a
// marked GB200 rack of eight 4-GPU nodes (HBD = rack).
Topology MixedSmall() {
  TopologyBuilder b("mixed-small", {"node", "rack", "leaf"}, 0);
  for (int l = 0; l < 2; ++l) {
    const int leaf = b.AddDomain("leaf" + std::to_string(l), 2, TopologyBuilder::kTop);
    const int rack = b.AddDomain("hr" + std::to_string(l), 1, leaf);
    for (int i = 0; i < 4; ++i) b.AddNode("h" + std::to_string(l * 4 + i), rack, 8, "H100");
  }
  const int leaf = b.AddDomain("leaf2", 2, TopologyBuilder::kTop);
  const int rack = b.AddDomain("nvl0", 1, leaf);
  b.MarkHbd(rack, TierLink{900, 2, 1});
  for (int i = 0; i < 8; ++i) b.AddNode("g" + std::to_string(i), rack, 4, "GB200");
  return std::move(b).Build().value();
}

}  // namespace

TEST_CASE("a restart stays on the job's GPU type and part, and remembers the node that failed") {
  const Topology topo = MixedSmall();
  SchedulerCore core(topo, SimConfig());
  JobRequest r = Request(16, 8);
  r.spec.selection.gpu_types = {"H100"};
  core.Step(JobSubmitted{1, r}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  const std::set<NodeId> first = NodesOf(core.job(1)->ranks);
  for (NodeId n : first) CHECK(topo.node(n).gpu_model == "H100");
  // Fill every other free H100 node but one, and leave the GB200 rack free:
  // the restart must take the one H100 node, not GB200 GPUs.
  JobRequest filler = Request(40, 8);
  filler.spec.selection.gpu_types = {"H100"};
  core.Step(JobSubmitted{2, filler}, kMinute);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  const NodeId lost = *first.begin();
  auto cmds = core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 2 * kMinute);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  for (NodeId n : NodesOf(core.job(1)->ranks)) {
    CHECK(topo.node(n).gpu_model == "H100");
    CHECK(n != lost);
  }
  // Remembered beside the spec, which stays as submitted.
  CHECK(core.job(1)->failed_nodes == std::vector<std::string>{topo.node(lost).name});
  CHECK(core.job(1)->request.spec.selection.avoid.empty());
  CHECK(core.job(1)->SpecToPlace().selection.avoid == core.job(1)->failed_nodes);
  // It survives a snapshot.
  SchedulerCore restored(topo, SimConfig());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  CHECK(restored.job(1)->failed_nodes == core.job(1)->failed_nodes);
  CHECK(restored.job(1)->SpecToPlace() == core.job(1)->SpecToPlace());
}

TEST_CASE("a resubmission of the same name avoids the nodes that failed the job before") {
  const Topology topo = MixedSmall();
  SchedulerCore core(topo, SimConfig());
  JobRequest r = Request(16, 8);
  r.spec.name = "train-7b";
  r.user = "ada";
  r.spec.selection.gpu_types = {"H100"};
  core.Step(JobSubmitted{1, r}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  const NodeId lost = *NodesOf(core.job(1)->ranks).begin();
  core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, kMinute);
  REQUIRE(core.job(1)->failed_nodes == std::vector<std::string>{topo.node(lost).name});
  core.Step(JobCancelled{1, "the user gave up"}, 2 * kMinute);
  core.Step(NodeStateRequested{lost, NodeState::kUp, "repaired"}, 3 * kMinute);
  // The same name from the same user: the repaired node is free, but avoided.
  core.Step(JobSubmitted{2, r}, 4 * kMinute);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->failed_nodes == std::vector<std::string>{topo.node(lost).name});
  CHECK(NodesOf(core.job(2)->ranks).count(lost) == 0);
  // Another user's job of that name inherits nothing; so does a snapshot's
  // restore keep what was remembered.
  JobRequest other = r;
  other.user = "bob";
  core.Step(JobSubmitted{3, other}, 5 * kMinute);
  CHECK(core.job(3)->failed_nodes.empty());
  SchedulerCore restored(topo, SimConfig());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  CHECK(restored.Snapshot() == core.Snapshot());
  restored.Step(JobSubmitted{4, r}, 6 * kMinute);
  CHECK(restored.job(4)->failed_nodes == std::vector<std::string>{topo.node(lost).name});
}

TEST_CASE("a job with no GPU type never runs on two models, before or after a restart") {
  const Topology topo = MixedSmall();
  SchedulerCore core(topo, SimConfig());
  core.Step(JobSubmitted{1, Request(32, 4)}, 0);  // fits the rack or four H100 nodes
  REQUIRE(core.job(1)->state == JobState::kRunning);
  auto models = [&] {
    std::set<std::string> m;
    for (const GpuSlot& s : core.job(1)->ranks) m.insert(topo.node(s.node).gpu_model);
    return m;
  };
  CHECK(models().size() == 1);
  const NodeId lost = core.job(1)->ranks.front().node;
  core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, kMinute);
  if (core.job(1)->state == JobState::kRunning) {
    CHECK(models().size() == 1);
    CHECK(NodesOf(core.job(1)->ranks).count(lost) == 0);
  }
}

TEST_CASE("a restart waits for its GPU type rather than take a free node of another") {
  const Topology topo = MixedSmall();
  SchedulerCore core(topo, SimConfig());
  JobRequest r = Request(8, 4);
  r.spec.gpus_per_node = 4;  // 4-GPU pieces: a GB200 node would hold one
  r.spec.selection.gpu_types = {"H100"};
  core.Step(JobSubmitted{1, r}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  // What is left of the H100 part: six whole nodes and two halves.
  JobRequest whole = Request(48, 8);
  whole.spec.selection.gpu_types = {"h100"};
  core.Step(JobSubmitted{2, whole}, kMinute);
  JobRequest halves = r;
  core.Step(JobSubmitted{3, halves}, kMinute);
  int free_h100 = 0;
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    if (topo.node(n).gpu_model == "H100") free_h100 += core.cluster().free_gpus(n);
  }
  REQUIRE(free_h100 == 0);
  const NodeId lost = core.job(1)->ranks.front().node;
  core.Step(NodeStateRequested{lost, NodeState::kDown, "lost"}, 2 * kMinute);
  const JobRecord& job = *core.job(1);
  for (const GpuSlot& s : job.ranks) CHECK(topo.node(s.node).gpu_model == "H100");
  CHECK(job.state == JobState::kQueued);
  CAPTURE(job.reason);
  CHECK(Has(job.reason, "waiting for resources: H100 (HBD node): needs 8 GPUs"));
}
