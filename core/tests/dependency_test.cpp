// Job dependencies (afterok / afterany / afternotok) and job arrays with a
// throttle, driven by hand with a controlled clock.

#include <doctest/doctest.h>

#include <string>

#include "test_util.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

SchedulerConfig Config() {
  SchedulerConfig c = SchedulerConfig::ForStack("toposched").value();
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;
  return c;
}

JobRequest Request(int gpus, std::vector<Dependency> deps = {}) {
  JobRequest r;
  r.spec = MakeJob(gpus, 1);
  r.time_limit = kHour;
  r.checkpoint_interval = -1;
  r.dependencies = std::move(deps);
  return r;
}

// 4 nodes x 8 GPUs under one leaf.
Topology Small() { return MakeRegular({"node", "leaf"}, 0, {4}, 1, 8); }

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("dependency kinds are met by the states a job ends in") {
  CHECK(DependencyMet(DependencyKind::kAfterOk, JobState::kCompleted));
  CHECK(!DependencyMet(DependencyKind::kAfterOk, JobState::kFailed));
  CHECK(!DependencyMet(DependencyKind::kAfterOk, JobState::kCancelled));
  CHECK(DependencyMet(DependencyKind::kAfterNotOk, JobState::kFailed));
  CHECK(DependencyMet(DependencyKind::kAfterNotOk, JobState::kCancelled));
  CHECK(DependencyMet(DependencyKind::kAfterNotOk, JobState::kRejected));
  CHECK(!DependencyMet(DependencyKind::kAfterNotOk, JobState::kCompleted));
  for (JobState s :
       {JobState::kCompleted, JobState::kFailed, JobState::kCancelled, JobState::kRejected}) {
    CHECK(DependencyMet(DependencyKind::kAfterAny, s));
  }
  DependencyKind k{};
  CHECK(ParseDependencyKind("afternotok", k));
  CHECK(k == DependencyKind::kAfterNotOk);
  CHECK(!ParseDependencyKind("after", k));
  CHECK(!ParseDependencyKind("singleton", k));
}

TEST_CASE("afterok waits, with the reason, and starts when its job succeeds") {
  Topology topo = Small();
  SchedulerCore core(topo, Config());
  core.Step(JobSubmitted{1, Request(8)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  core.Step(JobSubmitted{2, Request(8, {{DependencyKind::kAfterOk, 1}})}, kMinute);
  // Free GPUs do not start it.
  CHECK(core.job(2)->state == JobState::kQueued);
  CHECK(core.job(2)->reason == "waiting for job 1 to succeed");
  auto cmds = core.Step(JobFinished{1, 0}, 10 * kMinute);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(2)->waiting_on.empty());
}

TEST_CASE("a dependency that can no longer be met cancels the job, and the cancel cascades") {
  Topology topo = Small();
  SchedulerCore core(topo, Config());
  core.Step(JobSubmitted{1, Request(8)}, 0);
  core.Step(JobSubmitted{2, Request(8, {{DependencyKind::kAfterOk, 1}})}, 0);
  core.Step(JobSubmitted{3, Request(8, {{DependencyKind::kAfterOk, 2}})}, 0);
  core.Step(JobSubmitted{4, Request(8, {{DependencyKind::kAfterNotOk, 2}})}, 0);
  CHECK(core.job(3)->reason == "waiting for job 2 to succeed");
  CHECK(core.job(4)->reason == "waiting for job 2 to fail");
  core.Step(JobFinished{1, 3}, kMinute);  // exit status 3: failed
  REQUIRE(core.job(1)->state == JobState::kFailed);
  CHECK(core.job(2)->state == JobState::kCancelled);
  CHECK(core.job(2)->reason == "dependency never satisfied: job 1 failed (afterok)");
  CHECK(core.job(3)->state == JobState::kCancelled);
  CHECK(Contains(core.job(3)->reason, "job 2 cancelled (afterok)"));
  // afternotok of a cancelled job is met: it runs.
  CHECK(core.job(4)->state == JobState::kRunning);
}

TEST_CASE("afterany starts after any end, several dependencies must all hold") {
  Topology topo = Small();
  SchedulerCore core(topo, Config());
  core.Step(JobSubmitted{1, Request(8)}, 0);
  core.Step(JobSubmitted{2, Request(8)}, 0);
  core.Step(
      JobSubmitted{3, Request(8, {{DependencyKind::kAfterAny, 1}, {DependencyKind::kAfterOk, 2}})},
      0);
  CHECK(core.job(3)->reason == "waiting for job 1 to end (and 1 more dependencies)");
  core.Step(JobCancelled{1, "by hand"}, kMinute);
  CHECK(core.job(3)->state == JobState::kQueued);
  CHECK(core.job(3)->reason == "waiting for job 2 to succeed");
  core.Step(JobFinished{2, 0}, 2 * kMinute);
  CHECK(core.job(3)->state == JobState::kRunning);
}

TEST_CASE("dependencies on ended, unknown or own jobs are decided at submission") {
  Topology topo = Small();
  SchedulerCore core(topo, Config());
  core.Step(JobSubmitted{1, Request(8)}, 0);
  core.Step(JobFinished{1, 0}, kMinute);  // completed, still held by the core
  core.Step(JobSubmitted{2, Request(8, {{DependencyKind::kAfterOk, 1}})}, 2 * kMinute);
  CHECK(core.job(2)->state == JobState::kRunning);
  core.Step(JobSubmitted{3, Request(8, {{DependencyKind::kAfterNotOk, 1}})}, 2 * kMinute);
  CHECK(core.job(3)->state == JobState::kCancelled);
  CHECK(core.job(3)->reason == "dependency never satisfied: job 1 completed (afternotok)");
  core.Step(JobSubmitted{4, Request(8, {{DependencyKind::kAfterOk, 99}})}, 2 * kMinute);
  CHECK(core.job(4)->state == JobState::kRejected);
  CHECK(Contains(core.job(4)->reason, "job 99, which the scheduler does not know"));
  core.Step(JobSubmitted{5, Request(8, {{DependencyKind::kAfterOk, 5}})}, 2 * kMinute);
  CHECK(core.job(5)->state == JobState::kRejected);
}

TEST_CASE("an array's throttle bounds its running tasks, the next starts as one ends") {
  Topology topo = Small();  // room for 4 one-node tasks
  SchedulerCore core(topo, Config());
  for (JobId id = 10; id < 16; ++id) {
    JobRequest r = Request(8);
    r.array_job = 10;
    r.array_task = static_cast<int>(id - 10);
    r.array_throttle = 2;
    core.Step(JobSubmitted{id, r}, 0);
  }
  int running = 0;
  for (JobId id = 10; id < 16; ++id) running += core.job(id)->state == JobState::kRunning;
  CHECK(running == 2);
  CHECK(core.job(10)->state == JobState::kRunning);
  CHECK(core.job(11)->state == JobState::kRunning);
  CHECK(core.job(12)->reason == "array throttle: 2 tasks of array 10 running (at most 2 at once)");
  // An unrelated job still uses the free nodes.
  core.Step(JobSubmitted{20, Request(16)}, kMinute);
  CHECK(core.job(20)->state == JobState::kRunning);
  core.Step(JobFinished{10, 0}, 2 * kMinute);
  CHECK(core.job(12)->state == JobState::kRunning);
  CHECK(core.job(13)->state == JobState::kQueued);
  // A snapshot keeps the count: the restored core throttles alike.
  SchedulerCore restored(topo, Config());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  core.Step(JobFinished{11, 0}, 3 * kMinute);
  restored.Step(JobFinished{11, 0}, 3 * kMinute);
  CHECK(restored.Snapshot() == core.Snapshot());
  CHECK(core.job(13)->state == JobState::kRunning);
  CHECK(core.job(14)->state == JobState::kQueued);
}

TEST_CASE("a snapshot keeps what a job still waits on") {
  Topology topo = Small();
  SchedulerCore core(topo, Config());
  core.Step(JobSubmitted{1, Request(8)}, 0);
  core.Step(JobSubmitted{2, Request(8)}, 0);
  core.Step(
      JobSubmitted{3, Request(8, {{DependencyKind::kAfterOk, 1}, {DependencyKind::kAfterOk, 2}})},
      0);
  core.Step(JobFinished{1, 0}, kMinute);
  SchedulerCore restored(topo, Config());
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  REQUIRE(restored.job(3) != nullptr);
  CHECK(restored.job(3)->waiting_on.size() == 1);
  restored.Step(JobFinished{2, 1}, 2 * kMinute);
  CHECK(restored.job(3)->state == JobState::kCancelled);
  CHECK(restored.job(3)->reason == "dependency never satisfied: job 2 failed (afterok)");
}
