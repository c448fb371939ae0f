// Event sourcing: a core rebuilt by Replay from the file equals the core that
// wrote it (every job record, the cluster, the queue, and the decisions it
// makes next), and the materialized job rows match the core's records.

#include <doctest/doctest.h>

#include <sstream>

#include "store/store.hpp"
#include "store_test_util.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"

using namespace topo;
using namespace topo::store;
using store::testing::MakeTestConfig;
using store::testing::MakeTestTopology;
using store::testing::TempDir;
using store::testing::Workload;

namespace {

std::string Describe(const core::JobRecord& j, const core::Topology& t) {
  std::ostringstream o;
  o << "state=" << core::JobStateName(j.state) << " reason=" << j.reason
    << " submit=" << j.submit_time << " first=" << j.first_start << " last=" << j.last_start
    << " end=" << j.end_time << " ranks=" << common::GpuSlotsToJson(j.ranks, t).dump()
    << " spares=" << common::NodeListToJson(j.spares, t).dump() << " restarts=" << j.restarts
    << " preemptions=" << j.preemptions << " ckpt=" << j.checkpoint_step << "@" << j.checkpoint_time
    << " productive=" << j.productive_ms << " lost=" << j.lost_gpu_ms
    << " deadline=" << j.preempt_deadline << " borrowed=" << j.borrowed
    << " head=" << j.requeued_at_head << " request=" << common::JobRequestToJson(j.request).dump();
  return o.str();
}

std::string Describe(const core::SchedulerCore& core) {
  const core::ClusterState& c = core.cluster();
  const core::Topology& t = c.topology();
  std::ostringstream o;
  for (const auto& [id, job] : core.jobs()) o << "job " << id << ": " << Describe(job, t) << "\n";
  for (core::NodeId n = 0; n < t.node_count(); ++n) {
    o << t.node(n).name << " " << core::NodeStateName(c.node_state(n)) << " busy=" << c.busy_mask(n)
      << " failed=" << c.failed_mask(n) << " degraded=" << c.degraded_mask(n) << "\n";
  }
  o << "waiting:";
  for (core::JobId id : core.WaitingJobs()) o << " " << id;
  o << "\nwakeup=" << core.NextWakeup() << "\n";
  for (const core::TenantConfig& tc : testing::TestTenants()) {
    o << tc.name << " usage=" << core.TenantUsage(tc.name) << "\n";
  }
  return o.str();
}

std::string CommandsJson(const std::vector<core::Command>& commands, const core::Topology& t) {
  nlohmann::json out = nlohmann::json::array();
  for (const core::Command& c : commands) out.push_back(common::CommandToJson(c, t));
  return out.dump();
}

struct RunResult {
  int64_t events = 0;
  int requeued_restarts = 0;  // jobs whose restart count the rows cannot see
};

// Drives a core with `count` seeded events, logging them in batches of 1..16
// entries; then replays the file into a new core and compares.
RunResult RunAndReplay(uint64_t seed, int count, bool heartbeats) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  const core::Topology topo = MakeTestTopology();
  const core::SchedulerConfig config = MakeTestConfig(heartbeats);
  core::SchedulerCore original(topo, config);
  core::Rng batch_rng(seed * 7919);
  RunResult result;
  {
    core::Result<Store> opened = Store::Open(path);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    Store store = std::move(opened).value();
    std::vector<LogEntry> batch;
    auto flush = [&] {
      core::Result<AppendResult> r = store.Append(topo, batch);
      REQUIRE_MESSAGE(r.ok(), r.message());
      batch.clear();
    };
    core::TimeMs now = 0;
    for (const core::TenantConfig& t : testing::TestTenants()) {
      core::Event e = core::TenantConfigured{t};
      batch.push_back({now, "admin", e, original.Step(e, now)});
    }
    Workload workload(topo, seed, 1, heartbeats);
    size_t batch_size = 1 + batch_rng.Below(16);
    for (int i = 0; i < count; ++i) {
      core::Event e = workload.Next(original, now);
      batch.push_back({now, "test", e, original.Step(e, now)});
      if (batch.size() >= batch_size) {
        flush();
        batch_size = 1 + batch_rng.Below(16);
      }
    }
    flush();
    result.events = store.LastSeq();
    REQUIRE(result.events == count + 3);
  }

  core::Result<Store> reopened = Store::Open(path);
  REQUIRE_MESSAGE(reopened.ok(), reopened.message());
  Store store = std::move(reopened).value();
  core::SchedulerCore rebuilt(topo, config);
  core::Result<ReplayReport> report = store.Replay(rebuilt);
  REQUIRE_MESSAGE(report.ok(), report.message());
  CHECK(report.value().last_seq == result.events);
  CHECK(report.value().events == result.events);
  CHECK(report.value().diverged == 0);
  CHECK(Describe(rebuilt) == Describe(original));

  // Materialized rows against the records of the core that wrote them.
  for (const auto& [job_id, job_rec] : original.jobs()) {
    // Structured bindings cannot be captured (clang 14): CAPTURE is a lambda.
    const core::JobId id = job_id;
    const core::JobRecord& rec = job_rec;
    CAPTURE(id);
    CAPTURE(Describe(rec, topo));
    std::optional<JobRow> row = store.GetJob(id).value();
    REQUIRE(row.has_value());
    CHECK(row->state == rec.state);
    CHECK(row->tenant == rec.request.tenant);
    CHECK(row->user == rec.request.user);
    CHECK(row->priority == rec.request.priority);
    CHECK(row->spec_json == common::JobSpecToJson(rec.request.spec).dump());
    CHECK(row->submit_ms == rec.submit_time);
    CHECK(row->start_ms == rec.first_start);
    CHECK(row->last_start_ms == rec.last_start);
    CHECK(row->end_ms == rec.end_time);
    CHECK(row->checkpoint_step == rec.checkpoint_step);
    CHECK(row->checkpoint_ms == rec.checkpoint_time);
    CHECK(row->ranks_json == common::GpuSlotsToJson(rec.ranks, topo).dump());
    CHECK(row->spares_json == common::NodeListToJson(rec.spares, topo).dump());
    // A requeue after a failure counts a restart without a command (see
    // docs/store.md, "Gaps"); a RestartJob brings the row up to date.
    CHECK(row->restarts <= rec.restarts);
    if (row->restarts != rec.restarts) ++result.requeued_restarts;
    if (core::IsTerminal(rec.state)) CHECK(row->reason == rec.reason);
  }
  CHECK(store.ListJobs({}).value().size() == original.jobs().size());
  std::vector<NodeRow> nodes = store.ListNodes().value();
  for (const NodeRow& n : nodes) {
    CHECK(n.state == original.cluster().node_state(topo.FindNode(n.name)));
  }

  // Same hidden state too (fairshare, timers): the next decisions agree.
  core::TimeMs now = store.LastTime();
  Workload more(topo, seed + 1000, store.MaxJobId().value() + 1, heartbeats);
  for (int i = 0; i < 100; ++i) {
    core::Event e = more.Next(original, now);
    CHECK(CommandsJson(rebuilt.Step(e, now), topo) == CommandsJson(original.Step(e, now), topo));
  }
  CHECK(Describe(rebuilt) == Describe(original));
  return result;
}

}  // namespace

TEST_CASE("replay rebuilds the core exactly after hundreds of seeded events") {
  int64_t events = 0;
  int gaps = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    RunResult r = RunAndReplay(seed, 400, /*heartbeats=*/false);
    events += r.events;
    gaps += r.requeued_restarts;
  }
  CHECK(events == 4 * 403);
  MESSAGE("jobs whose restart count lags in the table: " << gaps);
}

TEST_CASE("replay rebuilds the core exactly with heartbeats and node timeouts") {
  for (uint64_t seed = 11; seed <= 12; ++seed) {
    CAPTURE(seed);
    RunAndReplay(seed, 500, /*heartbeats=*/true);
  }
}

TEST_CASE("replay under another config reports where decisions diverge") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  core::Result<Store> opened = Store::Open(dir.File("state.db"));
  REQUIRE(opened.ok());
  Store store = std::move(opened).value();
  core::SchedulerCore original(topo, MakeTestConfig(false));
  Workload workload(topo, 5, 1, false);
  core::TimeMs now = 0;
  std::vector<LogEntry> batch;
  for (int i = 0; i < 200; ++i) {
    core::Event e = workload.Next(original, now);
    batch.push_back({now, "test", e, original.Step(e, now)});
  }
  REQUIRE(store.Append(topo, batch).ok());

  core::SchedulerConfig other = core::SchedulerConfig::ForStack("fifo-firstfit").value();
  other.heartbeats_required = false;
  core::SchedulerCore different(topo, other);
  core::Result<ReplayReport> report = store.Replay(different);
  REQUIRE(report.ok());
  CHECK(report.value().events == 200);
  CHECK(report.value().diverged > 0);
  CHECK(report.value().first_diverged_seq > 0);

  // A core that already stepped is refused.
  core::Result<ReplayReport> again = store.Replay(original);
  REQUIRE_FALSE(again.ok());
  CHECK(again.message().find("replay into a new one") != std::string::npos);
}

TEST_CASE("replay over a topology without a logged node names the event and the node") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  core::Result<Store> opened = Store::Open(dir.File("state.db"));
  REQUIRE(opened.ok());
  Store store = std::move(opened).value();
  LogEntry e{1, "agent:n15", core::Heartbeat{topo.FindNode("n15")}, {}};
  REQUIRE(store.Append(topo, std::span(&e, 1)).ok());

  core::TopologyBuilder b("smaller", {"node", "leaf"}, 0);
  b.AddNode("n0", b.AddDomain("leaf0", 1, core::TopologyBuilder::kTop), 4);
  const core::Topology smaller = std::move(b).Build().value();
  core::SchedulerCore core(smaller, MakeTestConfig(false));
  core::Result<ReplayReport> report = store.Replay(core);
  REQUIRE_FALSE(report.ok());
  CAPTURE(report.message());
  CHECK(report.message().find("replaying event 1") != std::string::npos);
  CHECK(report.message().find("unknown node \"n15\"") != std::string::npos);
}
