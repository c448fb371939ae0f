// Partitions and reservations (node_sets.hpp) alone and in the scheduler,
// hand-computed on a 64-GPU tree.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::core {
namespace {

using testing::MakeJob;
using testing::MakeRegular;

// 4 leaves of 2 nodes x 8 GPUs: n0 n1 | n2 n3 | n4 n5 | n6 n7.
Topology Tiny() { return MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8); }

SchedulerConfig Config() {
  SchedulerConfig c = SchedulerConfig::ForStack("toposched").value();
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;
  return c;
}

JobRequest Request(int gpus, TimeMs limit, std::string partition = "", std::string reservation = "",
                   std::string tenant = "default") {
  JobRequest r;
  r.spec = MakeJob(gpus, gpus >= 8 ? 8 : gpus);
  r.time_limit = limit;
  r.tenant = std::move(tenant);
  r.checkpoint_interval = -1;
  r.partition = std::move(partition);
  r.reservation = std::move(reservation);
  return r;
}

std::set<std::string> NodesOf(const Topology& t, const JobRecord& j) {
  std::set<std::string> out;
  for (const GpuSlot& g : j.ranks) out.insert(t.node(g.node).name);
  return out;
}

template <typename T>
std::vector<T> Only(const std::vector<Command>& cmds) {
  std::vector<T> out;
  for (const Command& c : cmds) {
    if (const T* t = std::get_if<T>(&c)) out.push_back(*t);
  }
  return out;
}

PartitionConfig Part(std::string name, std::vector<std::string> nodes) {
  PartitionConfig p;
  p.name = std::move(name);
  p.nodes = std::move(nodes);
  return p;
}

ReservationConfig Res(std::string name, std::vector<std::string> nodes, TimeMs start, TimeMs end,
                      bool maintenance = false) {
  ReservationConfig r;
  r.name = std::move(name);
  r.nodes = std::move(nodes);
  r.start = start;
  r.end = end;
  r.maintenance = maintenance;
  return r;
}

TEST_CASE("node sets: every field is checked at the boundary, naming it") {
  const Topology t = Tiny();
  struct Row {
    const char* what;
    PartitionConfig p;
    const char* field;
  };
  auto with = [](auto f) {
    PartitionConfig p = Part("gpu", {"n0"});
    f(p);
    return p;
  };
  const std::vector<Row> rows = {
      {"empty name", with([](auto& p) { p.name = ""; }), "name"},
      {"a name of 65 bytes", with([](auto& p) { p.name = std::string(65, 'a'); }), "name"},
      {"a name with a slash", with([](auto& p) { p.name = "a/b"; }), "name"},
      {"a name starting with -", with([](auto& p) { p.name = "-x"; }), "name"},
      {"a NUL in the name", with([](auto& p) { p.name = std::string("a\0b", 3); }), "name"},
      {"no nodes", with([](auto& p) { p.nodes.clear(); }), "nodes"},
      {"an unknown node", with([](auto& p) { p.nodes = {"n99"}; }), "nodes"},
      {"an empty node name", with([](auto& p) { p.nodes = {""}; }), "nodes"},
      {"100,001 nodes", with([](auto& p) { p.nodes.assign(kMaxSelectionNames + 1, "n0"); }),
       "nodes"},
      {"a negative max_time", with([](auto& p) { p.max_time = -1; }), "max_time"},
      {"a negative default_time", with([](auto& p) { p.default_time = -5; }), "default_time"},
      {"default past max", with([](auto& p) {
         p.max_time = kHour;
         p.default_time = 2 * kHour;
       }),
       "default_time"},
      {"negative max_gpus", with([](auto& p) { p.max_gpus = -8; }), "max_gpus"},
      {"tier 1001", with([](auto& p) { p.priority_tier = 1001; }), "priority_tier"},
      {"tier -1001", with([](auto& p) { p.priority_tier = -1001; }), "priority_tier"},
      {"an empty tenant", with([](auto& p) { p.tenants = {""}; }), "tenants"},
      {"a tenant ending in /", with([](auto& p) { p.tenants = {"org/"}; }), "tenants"},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    Status s = ValidatePartition(row.p, t);
    CHECK_FALSE(s.ok());
    CHECK(s.field() == row.field);
  }
  CHECK(ValidatePartition(Part("gpu.a-1_x", {"n0", "n1"}), t).ok());

  ReservationConfig r = Res("r", {"n0"}, kHour, 2 * kHour);
  CHECK(ValidateReservation(r, t).ok());
  r.end = r.start;
  CHECK(ValidateReservation(r, t).field() == "end");
  r.end = 2 * kHour;
  r.start = -1;
  CHECK(ValidateReservation(r, t).field() == "start");
  r.start = kHour;
  r.nodes = {"nX"};
  CHECK(ValidateReservation(r, t).field() == "nodes");
}

TEST_CASE("node sets: a tenant is admitted by its own name or one above it") {
  CHECK(TenantAllowed({}, "anyone"));
  CHECK(TenantAllowed({"org"}, "org"));
  CHECK(TenantAllowed({"org"}, "org/team/user"));
  CHECK_FALSE(TenantAllowed({"org"}, "organic"));
  CHECK_FALSE(TenantAllowed({"org/team"}, "org"));
  CHECK(TenantAllowed({"a", "org/team"}, "org/team/x"));
}

TEST_CASE("node sets: one default partition, no overlapping reservations") {
  const Topology t = Tiny();
  NodeSets sets(t);
  PartitionConfig a = Part("a", {"n0", "n1"});
  a.is_default = true;
  REQUIRE(sets.ConfigurePartition(a).ok());
  PartitionConfig b = Part("b", {"n1", "n2"});  // a node may be in several
  REQUIRE(sets.ConfigurePartition(b).ok());
  b.is_default = true;
  Status second = sets.ConfigurePartition(b);
  CHECK(second.code() == ErrorCode::kConflict);
  CHECK(second.message().find("'a'") != std::string::npos);
  CHECK(sets.PartitionsOf(t.FindNode("n1")) == std::vector<std::string>{"a", "b"});

  REQUIRE(sets.ConfigureReservation(Res("r1", {"n3", "n4"}, kHour, 3 * kHour)).ok());
  Status overlap = sets.ConfigureReservation(Res("r2", {"n4"}, 2 * kHour, 4 * kHour));
  CHECK(overlap.code() == ErrorCode::kConflict);
  CHECK(overlap.message().find("n4") != std::string::npos);
  // Back to back on the same node is no overlap.
  CHECK(sets.ConfigureReservation(Res("r2", {"n4"}, 3 * kHour, 4 * kHour)).ok());
  CHECK(sets.NextChange(0, kMinute) == kHour);
  CHECK(sets.NextChange(kHour, kMinute) == 3 * kHour);
  CHECK(sets.RemoveEnded(3 * kHour) == std::vector<std::string>{"r1"});
  CHECK(sets.reservation("r1") == nullptr);
  CHECK(sets.DeletePartition("zz").code() == ErrorCode::kNotFound);
}

TEST_CASE("node sets: a submission is admitted only within its partition's rules") {
  const Topology t = Tiny();
  NodeSets sets(t);
  CHECK(sets.Admit(Request(8, kHour), 0).ok());  // no partitions: every node
  PartitionConfig p = Part("short", {"n0", "n1"});
  p.max_time = 2 * kHour;
  p.max_gpus = 8;
  p.tenants = {"org"};
  REQUIRE(sets.ConfigurePartition(p).ok());

  Status no_default = sets.Admit(Request(8, kHour, "", "", "org/x"), 0);
  CHECK(no_default.field() == "partition");
  CHECK(no_default.message().find("short") != std::string::npos);
  Status unknown = sets.Admit(Request(8, kHour, "long", "", "org/x"), 0);
  CHECK(unknown.code() == ErrorCode::kNotFound);
  CHECK(unknown.message().find("short") != std::string::npos);  // the ones there are
  Status tenant = sets.Admit(Request(8, kHour, "short", "", "other"), 0);
  CHECK(tenant.code() == ErrorCode::kForbidden);
  CHECK(sets.Admit(Request(16, kHour, "short", "", "org/x"), 0).field() == "spec.gpus");
  CHECK(sets.Admit(Request(8, 3 * kHour, "short", "", "org/x"), 0).field() == "time_limit");
  CHECK(sets.Admit(Request(8, 2 * kHour, "short", "", "org/x"), 0).ok());

  // A job with no limit gets the partition's bound when it has no default.
  CHECK(sets.BaseTimeLimit(Request(8, 0, "short"), 24 * kHour) == 2 * kHour);
  p.default_time = 30 * kMinute;
  REQUIRE(sets.ConfigurePartition(p).ok());
  CHECK(sets.BaseTimeLimit(Request(8, 0, "short"), 24 * kHour) == 30 * kMinute);
  CHECK(sets.BaseTimeLimit(Request(8, kHour, "short"), 24 * kHour) == kHour);

  ReservationConfig r = Res("win", {"n0"}, kHour, 2 * kHour);
  r.tenants = {"org/a"};
  REQUIRE(sets.ConfigureReservation(r).ok());
  CHECK(sets.Admit(Request(8, kHour, "short", "nope", "org/a"), 0).code() == ErrorCode::kNotFound);
  CHECK(sets.Admit(Request(8, kHour, "short", "win", "org/b"), 0).code() == ErrorCode::kForbidden);
  CHECK(sets.Admit(Request(8, kHour, "short", "win", "org/a"), 0).ok());
  CHECK(sets.Admit(Request(8, kHour, "short", "win", "org/a"), 2 * kHour).field() == "reservation");
  // The reservation holds 8 GPUs: a 16-GPU job never fits in it.
  p.max_gpus = 0;
  REQUIRE(sets.ConfigurePartition(p).ok());
  CHECK(sets.Admit(Request(16, kHour, "short", "win", "org/a"), 0).code() ==
        ErrorCode::kInfeasible);
}

TEST_CASE("scheduler: a job of a partition runs only on its nodes, and waits when they are busy") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  PartitionConfig p = Part("left", {"n0", "n1", "n2", "n3"});
  p.is_default = true;
  core.Step(PartitionConfigured{p}, 0);
  core.Step(PartitionConfigured{Part("right", {"n4", "n5", "n6", "n7"})}, 0);
  core.Step(JobSubmitted{1, Request(16, kHour, "right")}, 0);
  core.Step(JobSubmitted{2, Request(16, kHour)}, 0);  // the default: left
  core.Step(JobSubmitted{3, Request(32, kHour, "right")}, 0);
  CHECK(NodesOf(t, *core.job(1)) == std::set<std::string>{"n4", "n5"});
  CHECK(NodesOf(t, *core.job(2)) == std::set<std::string>{"n0", "n1"});
  // 16 GPUs of the cluster's 32 free are left's: job 3 waits for its own.
  CHECK(core.job(3)->state == JobState::kQueued);
  CHECK(core.cluster().total_busy_gpus() == 32);
  // A job larger than its partition is rejected, naming the partition.
  core.Step(JobSubmitted{4, Request(48, kHour, "right")}, 0);
  CHECK(core.job(4)->state == JobState::kRejected);
  CHECK(core.job(4)->reason.find("'right'") != std::string::npos);
  core.Step(JobFinished{1, 0}, kMinute);
  CHECK(core.job(3)->state == JobState::kRunning);
  CHECK(NodesOf(t, *core.job(3)) == std::set<std::string>{"n4", "n5", "n6", "n7"});
}

TEST_CASE("scheduler: backfill never runs a job into a reservation it may not use") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  // n0..n3 reserved from 1 h to 3 h.
  core.Step(ReservationConfigured{Res("train", {"n0", "n1", "n2", "n3"}, kHour, 3 * kHour)}, 0);
  // A 2-h job of 32 GPUs would run into it: it takes the other half.
  core.Step(JobSubmitted{1, Request(32, 2 * kHour)}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  CHECK(NodesOf(t, *core.job(1)) == std::set<std::string>{"n4", "n5", "n6", "n7"});
  // Another long job has nowhere to go: it waits (never rejected) and says why.
  core.Step(JobSubmitted{2, Request(16, 2 * kHour)}, 0);
  CHECK(core.job(2)->state == JobState::kQueued);
  CHECK(core.job(2)->reason.find("reservation 'train', which its time limit") != std::string::npos);
  // A 30-min job ends before the window: it may use the reserved nodes.
  core.Step(JobSubmitted{3, Request(16, 30 * kMinute)}, 0);
  CHECK(core.job(3)->state == JobState::kRunning);
  // Once the window ends, the long job starts there.
  core.Step(JobFinished{3, 0}, 20 * kMinute);
  CHECK(core.job(2)->state == JobState::kQueued);
  core.Step(Tick{}, 3 * kHour);
  CHECK(core.job(2)->state == JobState::kRunning);
  CHECK(core.node_sets().reservation("train") == nullptr);  // ended: gone
}

TEST_CASE(
    "scheduler: a job of a reservation starts in its window, on its nodes, and ends with it") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  ReservationConfig r = Res("demo", {"n6", "n7"}, kHour, 2 * kHour);
  r.tenants = {"org"};
  core.Step(ReservationConfigured{r}, 0);
  core.Step(JobSubmitted{1, Request(16, 10 * kHour, "", "demo", "org/a")}, 0);
  CHECK(core.job(1)->state == JobState::kQueued);
  CHECK(core.job(1)->reason.find("reservation 'demo'") != std::string::npos);
  CHECK(core.NextWakeup() <= kHour);
  core.Step(JobSubmitted{2, Request(16, kHour, "", "demo", "other")}, 0);
  CHECK(core.job(2)->state == JobState::kRejected);  // not its tenant
  core.Step(Tick{}, kHour);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  CHECK(NodesOf(t, *core.job(1)) == std::set<std::string>{"n6", "n7"});
  // Its 10-h limit ends with the window.
  CHECK(core.NextWakeup() <= 2 * kHour);
  auto cmds = core.Step(Tick{}, 2 * kHour);
  CHECK(Only<StopJob>(cmds).size() == 1);
  CHECK(core.job(1)->state == JobState::kFailed);
  CHECK(core.job(1)->reason.find("reservation 'demo' ended") != std::string::npos);
}

TEST_CASE(
    "scheduler: a maintenance reservation checkpoints a job that would overrun it and moves it") {
  const Topology t = Tiny();
  SchedulerConfig c = Config();
  c.preempt_grace = 5 * kMinute;  // the checkpoint lead
  SchedulerCore core(t, c);
  // A 10-h job on n0, n1 (the compact choice).
  core.Step(JobSubmitted{1, Request(16, 10 * kHour)}, 0);
  REQUIRE(NodesOf(t, *core.job(1)) == std::set<std::string>{"n0", "n1"});
  core.Step(ReservationConfigured{Res("fw", {"n0", "n1"}, kHour, 2 * kHour, true)}, 0);
  CHECK(core.NextWakeup() <= kHour - 5 * kMinute);
  auto cmds = core.Step(Tick{}, kHour - 5 * kMinute);
  auto asks = Only<RequestCheckpoint>(cmds);
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].id == 1);
  CHECK(asks[0].reason.find("maintenance reservation 'fw'") != std::string::npos);
  core.Step(CheckpointCompleted{1, 42}, kHour - 2 * kMinute);
  cmds = core.Step(Tick{}, kHour);
  // Requeued at the start, and restarted at once off the reserved nodes,
  // from its checkpoint: an infrastructure stop, never a failure.
  CHECK(Only<StopJob>(cmds).size() == 1);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  const std::set<std::string> now = NodesOf(t, *core.job(1));
  CHECK(now.count("n0") == 0);
  CHECK(now.count("n1") == 0);
  CHECK(core.job(1)->checkpoint_step == 42);
  auto starts = Only<StartJob>(cmds);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].launch.checkpoint_step == 42);
  // A job that ends before the window is left alone.
  SchedulerCore other(t, c);
  other.Step(JobSubmitted{1, Request(16, 30 * kMinute)}, 0);
  other.Step(ReservationConfigured{Res("fw", {"n0", "n1"}, kHour, 2 * kHour, true)}, 0);
  CHECK(Only<RequestCheckpoint>(other.Step(Tick{}, kHour - 5 * kMinute)).empty());
}

TEST_CASE("scheduler: a higher tier goes first and preempts only preemptible partitions") {
  const Topology t = Tiny();
  const std::vector<std::string> all = {"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"};
  for (bool preemptible : {true, false}) {
    INFO("preemptible " << preemptible);
    SchedulerCore core(t, Config());
    PartitionConfig lo = Part("lo", all);
    lo.preemptible = preemptible;
    PartitionConfig hi = Part("hi", all);
    hi.priority_tier = 10;
    core.Step(PartitionConfigured{lo}, 0);
    core.Step(PartitionConfigured{hi}, 0);
    core.Step(JobSubmitted{1, Request(64, 10 * kHour, "lo")}, 0);
    REQUIRE(core.job(1)->state == JobState::kRunning);
    core.Step(JobSubmitted{2, Request(64, kHour, "lo")}, kMinute);
    core.Step(JobSubmitted{3, Request(64, kHour, "hi")}, 2 * kMinute);
    // The higher tier is ahead of the older job of the lower one.
    const std::vector<JobId> order = core.WaitingJobs();
    REQUIRE(order.size() == 2);
    CHECK(order[0] == 3);
    CHECK(core.job(1)->state == (preemptible ? JobState::kPreempting : JobState::kRunning));
  }
}

TEST_CASE("scheduler: deleting a set rejects its waiting jobs, a check names the jobs first") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  core.Step(PartitionConfigured{Part("p", {"n0"})}, 0);
  core.Step(JobSubmitted{1, Request(8, kHour, "p")}, 0);
  core.Step(JobSubmitted{2, Request(8, kHour, "p")}, 0);
  REQUIRE(core.job(2)->state == JobState::kQueued);
  Status busy = core.CheckNodeSetChange(PartitionDeleted{"p"});
  CHECK(busy.code() == ErrorCode::kConflict);
  CHECK(busy.message().find("1, 2") != std::string::npos);
  CHECK(core.CheckNodeSetChange(PartitionDeleted{"q"}).code() == ErrorCode::kNotFound);
  core.Step(PartitionDeleted{"p"}, kMinute);
  CHECK(core.job(2)->state == JobState::kRejected);
  CHECK(core.job(2)->reason.find("deleted") != std::string::npos);
  CHECK(core.job(1)->state == JobState::kRunning);  // running ones keep running
}

TEST_CASE("scheduler: reservation nodes are chosen whole, compact and apart from others") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  Result<std::vector<std::string>> a = core.ChooseReservationNodes(16, kHour, 2 * kHour, "");
  REQUIRE(a.ok());
  REQUIRE(a.value().size() == 2);
  // Both in one leaf.
  CHECK(t.Ancestor(t.FindNode(a.value()[0]), 1) == t.Ancestor(t.FindNode(a.value()[1]), 1));
  core.Step(ReservationConfigured{Res("a", a.value(), kHour, 2 * kHour)}, 0);
  Result<std::vector<std::string>> b = core.ChooseReservationNodes(16, 90 * kMinute, 3 * kHour, "");
  REQUIRE(b.ok());
  for (const std::string& n : b.value()) {
    CHECK(std::find(a.value().begin(), a.value().end(), n) == a.value().end());
  }
  CHECK(core.ChooseReservationNodes(65, kHour, 2 * kHour, "").status().field() == "gpus");
  CHECK(core.ChooseReservationNodes(8, kHour, 2 * kHour, "none").status().code() ==
        ErrorCode::kNotFound);
}

TEST_CASE("snapshot: partitions, reservations and a request's sets round-trip (version 9)") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  PartitionConfig p = Part("p", {"n0", "n1", "n2"});
  p.max_time = 5 * kHour;
  p.tenants = {"org"};
  p.priority_tier = 3;
  p.preemptible = true;
  p.is_default = true;
  core.Step(PartitionConfigured{p}, 0);
  core.Step(ReservationConfigured{Res("m", {"n2"}, kHour, 2 * kHour, true)}, 0);
  core.Step(JobSubmitted{1, Request(8, kHour, "p", "", "org/a")}, 0);
  core.Step(Tick{}, kHour - 30 * kSecond);
  const std::string bytes = core.Snapshot();
  SchedulerCore again(t, Config());
  REQUIRE(again.Restore(bytes).ok());
  CHECK(again.Snapshot() == bytes);
  REQUIRE(again.node_sets().partition("p") != nullptr);
  CHECK(*again.node_sets().partition("p") == p);
  CHECK(again.node_sets().reservation("m")->maintenance);
  CHECK(again.job(1)->request.partition == "p");
  CHECK(again.NextWakeup() == core.NextWakeup());
  // Version 8 knew no sets: they are left out.
  SchedulerCore old(t, Config());
  REQUIRE(old.Restore(core.Snapshot(8)).ok());
  CHECK(old.node_sets().empty());
  // Version 9 has them; the running job counts in its default partition.
  SchedulerCore v9(t, Config());
  REQUIRE(v9.Restore(core.Snapshot(9)).ok());
  REQUIRE(v9.node_sets().partition("p") != nullptr);
  CHECK(v9.job(1)->quota_partition == core.job(1)->quota_partition);
  CHECK(v9.Snapshot() == core.Snapshot());
}

TEST_CASE("scheduler: a tenant at its limit in one partition waits there, and runs elsewhere") {
  const Topology t = Tiny();
  SchedulerCore core(t, Config());
  PartitionConfig gb = Part("gb", {"n0", "n1", "n2", "n3"});  // 32 GPUs
  gb.is_default = true;
  core.Step(PartitionConfigured{gb}, 0);
  core.Step(PartitionConfigured{Part("h", {"n4", "n5", "n6", "n7"})}, 0);
  TenantConfig a{"org/a"};
  a.partitions["gb"] = {.max_gpus = 16};
  a.partitions["h"] = {.max_job_gpus = 16};
  core.Step(TenantConfigured{a}, 0);

  // Job 1 names no partition: it runs in the default one, gb, and counts there.
  core.Step(JobSubmitted{1, Request(8, kHour, "", "", "org/a")}, 0);
  core.Step(JobSubmitted{2, Request(8, kHour, "gb", "", "org/a")}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  CHECK(core.job(1)->quota_partition == "gb");
  // 16 of its 16 GPUs there: the third waits, though gb has 16 GPUs free.
  core.Step(JobSubmitted{3, Request(8, kHour, "gb", "", "org/a")}, 0);
  CHECK(core.job(3)->state == JobState::kQueued);
  CHECK(core.job(3)->reason ==
        "quota: tenant 'org/a' holds 16 of its 16 GPUs in partition 'gb' (max_gpus); the job "
        "would hold 8 more");
  // Another partition runs its jobs, up to its own limits there.
  core.Step(JobSubmitted{4, Request(16, kHour, "h", "", "org/a")}, 0);
  CHECK(core.job(4)->state == JobState::kRunning);
  core.Step(JobSubmitted{5, Request(24, kHour, "h", "", "org/a")}, 0);
  CHECK(core.job(5)->reason ==
        "quota: the job asks for 24 GPUs, over tenant 'org/a' max_job_gpus 16 in partition 'h'");
  // Another tenant is not held by org/a's limits in gb.
  core.Step(JobSubmitted{6, Request(8, kHour, "gb", "", "org/b")}, 0);
  CHECK(core.job(6)->state == JobState::kRunning);
  using Use = std::map<std::string, QuotaLedger::PartitionUse>;
  CHECK(core.TenantPartitionUsage("org/a") == Use{{"gb", {16, 2}}, {"h", {16, 1}}});
  CHECK(core.TenantPartitionUsage("org/b") == Use{{"gb", {8, 1}}});

  // The default moves to h while job 1 runs: its stop still frees gb.
  gb.is_default = false;
  core.Step(PartitionConfigured{gb}, kMinute);
  PartitionConfig h = Part("h", {"n4", "n5", "n6", "n7"});
  h.is_default = true;
  core.Step(PartitionConfigured{h}, kMinute);
  CHECK(core.job(3)->state == JobState::kQueued);
  core.Step(JobFinished{1, 0}, 2 * kMinute);
  CHECK(core.job(3)->state == JobState::kRunning);  // 8 freed in gb: it fits its 16 again
  CHECK(core.TenantPartitionUsage("org/a") == Use{{"gb", {16, 2}}, {"h", {16, 1}}});

  // Snapshot version 10 carries the limits and where each job counts.
  const std::string bytes = core.Snapshot();
  SchedulerCore again(t, Config());
  REQUIRE(again.Restore(bytes).ok());
  CHECK(again.Snapshot() == bytes);
  CHECK(again.tenant("org/a")->partitions == a.partitions);
  CHECK(again.job(3)->quota_partition == "gb");
  CHECK(again.TenantPartitionUsage("org/a") == core.TenantPartitionUsage("org/a"));
  CHECK(again.TenantPartitionUsage("org/b") == core.TenantPartitionUsage("org/b"));
  CHECK(again.job(5)->reason == core.job(5)->reason);
  // Both hold org/a's next job in gb back alike.
  core.Step(JobSubmitted{7, Request(16, kHour, "gb", "", "org/a")}, 3 * kMinute);
  again.Step(JobSubmitted{7, Request(16, kHour, "gb", "", "org/a")}, 3 * kMinute);
  CHECK(again.job(7)->reason == core.job(7)->reason);
  CHECK(again.job(7)->reason.find("holds 16 of its 16 GPUs in partition 'gb'") !=
        std::string::npos);

  // Version 9 knew no per-partition limits: the tenant has none, and each
  // running job counts in its partition as the sets give it (every one
  // here names its own).
  SchedulerCore v9(t, Config());
  REQUIRE(v9.Restore(core.Snapshot(9)).ok());
  CHECK(v9.tenant("org/a")->partitions.empty());
  CHECK(v9.job(3)->quota_partition == "gb");
  CHECK(v9.TenantPartitionUsage("org/a") == core.TenantPartitionUsage("org/a"));
  CHECK(v9.Snapshot(9) == core.Snapshot(9));
}

TEST_CASE("a topology change carries partitions and reservations by node name") {
  const Topology t = Tiny();
  // The same tree without n7.
  TopologyBuilder b("tiny-v2", {"node", "leaf", "spine"}, 0);
  int n = 0;
  for (int sp = 0; sp < 2; ++sp) {
    const int spine = b.AddDomain("spine" + std::to_string(sp), 2, TopologyBuilder::kTop);
    for (int l = 0; l < 2; ++l) {
      const int leaf = b.AddDomain("leaf" + std::to_string(sp * 2 + l), 1, spine);
      for (int i = 0; i < 2; ++i, ++n) {
        if (n != 7) b.AddNode("n" + std::to_string(n), leaf, 8);
      }
    }
  }
  const Topology next = std::move(b).Build().value();
  SchedulerCore core(t, Config());
  core.Step(PartitionConfigured{Part("p", {"n6", "n7"})}, 0);
  core.Step(ReservationConfigured{Res("only7", {"n7"}, kHour, 2 * kHour)}, 0);
  core.Step(ReservationConfigured{Res("keep", {"n0", "n7"}, 3 * kHour, 4 * kHour)}, 0);
  REQUIRE(core.node_sets().reservations().size() == 2);
  Result<std::string> onto = core.SnapshotOnto(next);
  REQUIRE(onto.ok());
  SchedulerCore after(next, Config());
  REQUIRE(after.Restore(onto.value()).ok());
  REQUIRE(after.node_sets().partition("p") != nullptr);
  CHECK(after.node_sets().partition("p")->nodes == std::vector<std::string>{"n6"});
  CHECK(after.node_sets().reservation("only7") == nullptr);  // every node of it is gone
  REQUIRE(after.node_sets().reservation("keep") != nullptr);
  CHECK(after.node_sets().reservation("keep")->nodes == std::vector<std::string>{"n0"});
}

TEST_CASE(
    "mixed cluster: a job that accepts two GPU types waits for the faster part when that finishes "
    "sooner") {
  // Two H100 nodes and two A100 nodes, each its own leaf.
  TopologyBuilder b("two-types", {"node", "leaf"}, 0);
  for (int i = 0; i < 4; ++i) {
    const int leaf = b.AddDomain("l" + std::to_string(i), 1, TopologyBuilder::kTop);
    b.AddNode("n" + std::to_string(i), leaf, 8, i < 2 ? "H100" : "A100");
  }
  const Topology t = std::move(b).Build().value();
  REQUIRE(t.part_count() == 2);
  SchedulerCore core(t, Config());
  // The H100 nodes are busy for 10 more minutes.
  JobRequest filler = Request(16, 10 * kMinute);
  filler.spec.selection.gpu_types = {"H100"};
  core.Step(JobSubmitted{1, filler}, 0);
  REQUIRE(core.job(1)->state == JobState::kRunning);
  JobRequest r = Request(8, 10 * kHour);
  r.spec.model = ModelSpec{};
  r.spec.model->preset = "llama3-8b";
  r.spec.selection.gpu_types = {"H100", "A100"};
  core.Step(JobSubmitted{2, r}, kMinute);
  // On A100 now it would finish hours later than on H100 in 9 minutes.
  CHECK(core.job(2)->state == JobState::kQueued);
  CHECK(core.job(2)->reason.find("faster placement") != std::string::npos);
  core.Step(JobFinished{1, 0}, 10 * kMinute);
  REQUIRE(core.job(2)->state == JobState::kRunning);
  CHECK(t.node(core.job(2)->ranks[0].node).gpu_model == "H100");
}

TEST_CASE(
    "property: no job ever takes work outside its partition or inside another's reservation") {
  const Topology t = Tiny();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    Rng rng(seed);
    SchedulerCore core(t, Config());
    // Two overlapping partitions and up to three reservations at random.
    core.Step(PartitionConfigured{Part("a", {"n0", "n1", "n2", "n3", "n4", "n5"})}, 0);
    core.Step(PartitionConfigured{Part("b", {"n2", "n3", "n4", "n5", "n6", "n7"})}, 0);
    std::vector<ReservationConfig> made;
    for (int i = 0; i < 3; ++i) {
      const int first = static_cast<int>(rng.Range(0, 6));
      const TimeMs start = rng.Range(0, 8) * kHour;
      ReservationConfig r = Res("r" + std::to_string(i),
                                {"n" + std::to_string(first), "n" + std::to_string(first + 1)},
                                start, start + rng.Range(1, 4) * kHour, rng.Below(2) == 0);
      if (core.CheckNodeSetChange(ReservationConfigured{r}).ok()) {
        core.Step(ReservationConfigured{r}, 0);
        made.push_back(r);
      }
    }
    TimeMs now = 0;
    JobId next = 1;
    for (int step = 0; step < 200; ++step) {
      now += rng.Range(1, 40) * kMinute;
      const uint64_t what = rng.Below(4);
      if (what <= 1) {
        const int gpus = std::vector<int>{4, 8, 16}[rng.Below(3)];
        const std::string part = rng.Below(2) == 0 ? "a" : "b";
        std::string res;
        if (!made.empty() && rng.Below(4) == 0) res = made[rng.Below(made.size())].name;
        core.Step(JobSubmitted{next++, Request(gpus, rng.Range(1, 6) * kHour, part, res)}, now);
      } else if (what == 2 && next > 1) {
        const JobId id = static_cast<JobId>(rng.Range(1, static_cast<int64_t>(next - 1)));
        const JobRecord* j = core.job(id);
        if (j && j->state == JobState::kRunning) {
          core.Step(JobFinished{id, 0}, now);
        } else {
          core.Step(Tick{}, now);
        }
      } else {
        core.Step(Tick{}, now);
      }
      // Every running job: on nodes of its partition; inside a reservation's
      // window only on that reservation's nodes if it is its own.
      for (const auto& [id, j] : core.jobs()) {
        if (j.state != JobState::kRunning) continue;
        const PartitionConfig* p = core.node_sets().partition(j.request.partition);
        for (const GpuSlot& g : j.ranks) {
          if (p != nullptr) CHECK(core.node_sets().InPartition(*p, g.node));
          for (const auto& [name, r] : core.node_sets().reservations()) {
            if (!(r.start <= now && now < r.end) || !core.node_sets().InReservation(r, g.node)) {
              continue;
            }
            // Another job on its nodes in the window started before it and
            // ends by its start, unless the reservation is its own.
            if (j.request.reservation == name) continue;
            CHECK(j.last_start < r.start);
            CHECK_FALSE(r.maintenance);  // a maintenance window moved it off
          }
        }
        if (!j.request.reservation.empty()) {
          if (const ReservationConfig* r = core.node_sets().reservation(j.request.reservation)) {
            CHECK(j.last_start >= r->start);
            for (const GpuSlot& g : j.ranks) CHECK(core.node_sets().InReservation(*r, g.node));
          }
        }
      }
    }
  }
}

TEST_CASE("property: what a tenant holds per partition is exact and within its limits") {
  const Topology t = Tiny();
  int held_back = 0;  // jobs seen waiting on a per-partition limit
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    Rng rng(seed);
    SchedulerCore core(t, Config());
    PartitionConfig a = Part("a", {"n0", "n1", "n2", "n3", "n4", "n5"});
    PartitionConfig b = Part("b", {"n2", "n3", "n4", "n5", "n6", "n7"});
    a.is_default = true;
    core.Step(PartitionConfigured{a}, 0);
    core.Step(PartitionConfigured{b}, 0);
    const std::vector<std::string> tenants = {"org/x", "org/y"};
    for (const std::string& name : tenants) {
      TenantConfig c{name};
      for (const char* p : {"a", "b"}) {
        c.partitions[p] = {.max_gpus = static_cast<int>(rng.Range(0, 4)) * 8,
                           .max_job_gpus = rng.Below(3) == 0 ? 8 : 0,
                           .max_running_jobs = static_cast<int>(rng.Range(0, 3))};
      }
      core.Step(TenantConfigured{c}, 0);
    }
    TimeMs now = 0;
    JobId next = 1;
    for (int step = 0; step < 200; ++step) {
      now += rng.Range(1, 40) * kMinute;
      const uint64_t what = rng.Below(6);
      if (what <= 2) {
        const int gpus = std::vector<int>{4, 8, 16}[rng.Below(3)];
        const std::string part = std::vector<std::string>{"", "a", "b"}[rng.Below(3)];
        core.Step(JobSubmitted{next++, Request(gpus, rng.Range(1, 6) * kHour, part, "",
                                               tenants[rng.Below(2)])},
                  now);
      } else if (what == 3 && next > 1) {
        const JobId id = static_cast<JobId>(rng.Range(1, static_cast<int64_t>(next - 1)));
        const JobRecord* j = core.job(id);
        core.Step(j && j->state == JobState::kRunning ? Event{JobFinished{id, 0}} : Event{Tick{}},
                  now);
      } else if (what == 4) {
        // The default moves between a and b while jobs of neither run.
        const bool to_b = core.node_sets().default_partition()->name == "a";
        PartitionConfig off = to_b ? a : b, on = to_b ? b : a;
        off.is_default = false;
        on.is_default = true;
        core.Step(PartitionConfigured{off}, now);
        core.Step(PartitionConfigured{on}, now);
      } else {
        core.Step(Tick{}, now);
      }
      // The oracle: every job holding GPUs, by the partition it counts in.
      std::map<std::string, std::map<std::string, QuotaLedger::PartitionUse>> want;
      for (const auto& [id, j] : core.jobs()) {
        if (j.ranks.empty()) {
          CHECK(j.quota_partition.empty());
          held_back += j.reason.rfind("quota: ", 0) == 0 &&
                       j.reason.find(" in partition '") != std::string::npos;
          continue;
        }
        // Started between the two events of a move, with no default: in none.
        if (j.quota_partition.empty()) continue;
        QuotaLedger::PartitionUse& u = want[j.request.tenant][j.quota_partition];
        u.gpus += static_cast<int>(j.ranks.size());
        u.running += 1;
        const PartitionLimits& l = core.tenant(j.request.tenant)->partitions.at(j.quota_partition);
        if (l.max_job_gpus > 0) CHECK(j.request.spec.gpus <= l.max_job_gpus);
      }
      for (const std::string& name : tenants) {
        CHECK(core.TenantPartitionUsage(name) == want[name]);
        for (const auto& [p, u] : want[name]) {
          const PartitionLimits& l = core.tenant(name)->partitions.at(p);
          if (l.max_gpus > 0) CHECK(u.gpus <= l.max_gpus);
          if (l.max_running_jobs > 0) CHECK(u.running <= l.max_running_jobs);
        }
      }
    }
  }
  CHECK(held_back > 0);
}

}  // namespace
}  // namespace topo::core
