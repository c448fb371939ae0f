// Snapshots and compaction on a real SQLite file: a core restored from a
// stored snapshot and replayed from there equals a full replay of the log
// (compared through the canonical snapshot bytes of both), before and after
// compaction deletes the events the snapshots cover.

#include <doctest/doctest.h>

#include "store/store.hpp"
#include "store_test_util.hpp"

using namespace topo;
using namespace topo::store;
using store::testing::MakeTestConfig;
using store::testing::MakeTestTopology;
using store::testing::TempDir;
using store::testing::Workload;

namespace {

constexpr int kFormat = static_cast<int>(core::SchedulerCore::kSnapshotVersion);

// Drives a core as the daemon does (batches, then TakeFinishedJobs), with a
// snapshot after the batches that end at the given event counts; returns the
// core's final snapshot.
std::string Drive(Store& store, const core::Topology& topo, const core::SchedulerConfig& config,
                  uint64_t seed, int count, std::vector<int> snapshot_after) {
  core::SchedulerCore core(topo, config);
  std::vector<LogEntry> batch;
  core::TimeMs now = 0;
  for (const core::TenantConfig& t : testing::TestTenants()) {
    core::Event e = core::TenantConfigured{t};
    batch.push_back({now, "admin", e, core.Step(e, now)});
  }
  Workload workload(topo, seed, 1, config.heartbeats_required);
  for (int i = 1; i <= count; ++i) {
    core::Event e = workload.Next(core, now);
    batch.push_back({now, "test", e, core.Step(e, now)});
    if (batch.size() >= 7 || i == count) {
      core::Result<AppendResult> r = store.Append(topo, batch);
      REQUIRE_MESSAGE(r.ok(), r.message());
      batch.clear();
      core.TakeFinishedJobs();
      if (!snapshot_after.empty() && i >= snapshot_after.front()) {
        snapshot_after.erase(snapshot_after.begin());
        REQUIRE(store.WriteSnapshot(kFormat, core.Snapshot(), 1000 + i).ok());
      }
    }
  }
  return core.Snapshot();
}

// The state a full replay of the log rebuilds.
std::string FullReplay(Store& store, const core::Topology& topo,
                       const core::SchedulerConfig& config) {
  core::SchedulerCore core(topo, config);
  core::Result<ReplayReport> r = store.Replay(core);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().diverged == 0);
  core.TakeFinishedJobs();
  return core.Snapshot();
}

// The state a restore of `row` plus the tail rebuilds.
std::string RestoreAndReplay(Store& store, const SnapshotRow& row, const core::Topology& topo,
                             const core::SchedulerConfig& config) {
  core::SchedulerCore core(topo, config);
  core::Status s = core.Restore(row.state);
  REQUIRE_MESSAGE(s.ok(), s.message());
  core::Result<ReplayReport> r = store.ReplayAfter(core, row.seq);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().diverged == 0);
  CHECK(r.value().events == store.LastSeq() - row.seq);
  core.TakeFinishedJobs();
  return core.Snapshot();
}

JobQuery AllJobs() {
  JobQuery q;
  q.limit = 100000;
  return q;
}

}  // namespace

TEST_CASE("snapshot + the events after it rebuild what a full replay does") {
  const core::Topology topo = MakeTestTopology();
  for (bool heartbeats : {false, true}) {
    CAPTURE(heartbeats);
    const core::SchedulerConfig config = MakeTestConfig(heartbeats);
    TempDir dir;
    Store store = Store::Open(dir.File("state.db")).value();
    const std::string live = Drive(store, topo, config, 17, 1200, {300, 600, 900});
    const std::string full = FullReplay(store, topo, config);
    CHECK(full == live);
    std::vector<SnapshotRow> rows = store.Snapshots().value();
    REQUIRE(rows.size() == static_cast<size_t>(kKeptSnapshots));  // the oldest was pruned
    CHECK(rows[0].seq > rows[1].seq);
    CHECK(rows[0].format == kFormat);
    CHECK(rows[0].seq < store.LastSeq());
    for (const SnapshotRow& row : rows) {
      CAPTURE(row.seq);
      CHECK(RestoreAndReplay(store, row, topo, config) == full);
    }
    // A snapshot of the newest event exists once only.
    core::SchedulerCore rebuilt(topo, config);
    REQUIRE(store.Replay(rebuilt).ok());
    rebuilt.TakeFinishedJobs();
    REQUIRE(store.WriteSnapshot(kFormat, rebuilt.Snapshot(), 1).ok());
    REQUIRE(store.WriteSnapshot(kFormat, rebuilt.Snapshot(), 2).ok());
    rows = store.Snapshots().value();
    CHECK(rows[0].seq == store.LastSeq());
    CHECK(rows[0].created_ms == 1);
    CHECK(RestoreAndReplay(store, rows[0], topo, config) == full);
    CHECK(store.Snapshots(rows[0].seq + 1).value().empty());
  }
}

TEST_CASE("compaction deletes covered, old events in bounded batches and keeps the jobs") {
  const core::Topology topo = MakeTestTopology();
  const core::SchedulerConfig config = MakeTestConfig(false);
  TempDir dir;
  Store store = Store::Open(dir.File("state.db")).value();

  // Nothing is due without two snapshots.
  const std::string live = Drive(store, topo, config, 23, 900, {400});
  CHECK(store.CompactEvents(core::kNever, 100).value() == 0);
  const std::vector<JobRow> jobs_before = store.ListJobs(AllJobs()).value();
  const int64_t last = store.LastSeq();

  // Two snapshots: the older one bounds what may go.
  core::SchedulerCore now_core(topo, config);
  REQUIRE(store.Replay(now_core).ok());
  now_core.TakeFinishedJobs();
  REQUIRE(store.WriteSnapshot(kFormat, now_core.Snapshot(), 2).ok());
  std::vector<SnapshotRow> rows = store.Snapshots().value();
  REQUIRE(rows.size() == 2);
  const int64_t bound = rows[1].seq;

  // Retention: events logged at or after before_ms stay.
  CHECK(store.CompactEvents(0, 100).value() == 0);
  CHECK(store.FirstSeq().value() == 1);

  int64_t deleted = 0, batches = 0;
  for (;;) {
    core::Result<int64_t> n = store.CompactEvents(core::kNever, 100);
    REQUIRE_MESSAGE(n.ok(), n.message());
    if (n.value() == 0) break;
    CHECK(n.value() <= 100);
    deleted += n.value();
    ++batches;
  }
  CHECK(deleted == bound - 1);
  CHECK(batches == (bound - 1 + 99) / 100);
  CHECK(store.FirstSeq().value() == bound);
  CHECK(store.LastSeq() == last);
  // The per-job index went with the events; the rows stay.
  EventQuery q;
  q.limit = 100000;
  core::Result<std::vector<RawEvent>> left = store.ListEvents(q);
  REQUIRE(left.ok());
  for (const RawEvent& e : left.value()) CHECK(e.seq >= bound);
  const std::vector<JobRow> jobs_after = store.ListJobs(AllJobs()).value();
  CHECK(jobs_after.size() == jobs_before.size());
  for (size_t i = 0; i < jobs_after.size() && i < jobs_before.size(); ++i) {
    CHECK(jobs_after[i].id == jobs_before[i].id);
    CHECK(jobs_after[i].state == jobs_before[i].state);
  }
  // Both snapshots still restore to the live state, and so after a reopen.
  for (const SnapshotRow& row : rows) CHECK(RestoreAndReplay(store, row, topo, config) == live);
  Store reopened = Store::Open(dir.File("state.db")).value();
  CHECK(reopened.LastSeq() == last);
  const std::vector<SnapshotRow> kept = reopened.Snapshots().value();
  REQUIRE(!kept.empty());
  CHECK(RestoreAndReplay(reopened, kept[0], topo, config) == live);
}

TEST_CASE("snapshot writes refuse an empty log or state") {
  TempDir dir;
  Store store = Store::Open(dir.File("state.db")).value();
  core::Status s = store.WriteSnapshot(kFormat, "x", 1);
  CHECK(s.message().find("the event log is empty") != std::string::npos);
  const core::Topology topo = MakeTestTopology();
  std::vector<LogEntry> one = {{0, "test", core::Tick{}, {}}};
  REQUIRE(store.Append(topo, one).ok());
  s = store.WriteSnapshot(kFormat, "", 1);
  CHECK(s.message().find("the state is empty") != std::string::npos);
  CHECK(store.Snapshots().value().empty());
}
