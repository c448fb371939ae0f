// Accounting on real SQLite files: the runs of jobs (job_runs) across
// restarts, requeues and cancellations, GPU-ms by hand, history and usage
// queries with scope and paging, and that the runs rebuilt from the log (by
// appending it again, or by the migration's backfill) are the same rows.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include "store/store.hpp"
#include "store_test_util.hpp"
#include "topo/common/event_json.hpp"

using namespace topo;
using namespace topo::store;
using store::testing::MakeTestTopology;
using store::testing::TempDir;

namespace {

Store OpenOk(const std::string& path, const OpenOptions& options = {}) {
  core::Result<Store> s = Store::Open(path, options);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return std::move(s).value();
}

core::JobRequest Request(int gpus, std::string tenant, std::string user) {
  core::JobRequest r;
  r.spec.gpus = gpus;
  r.spec.parallelism.tp = 4;
  r.spec.parallelism.dp = gpus / 4;
  r.tenant = std::move(tenant);
  r.user = std::move(user);
  return r;
}

// Every job_runs row as text, by job and run: what "the same rows" means.
std::string DumpRuns(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  std::string out;
  const char* sql =
      "SELECT job, run, start_ms, ifnull(end_ms, '-'), gpus, nodes, ranks, "
      "ifnull(end_reason, '-'), ifnull(exit_code, '-'), ifnull(gpu_ms, '-'), start_seq, "
      "ifnull(end_seq, '-') FROM job_runs ORDER BY job, run";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) {
    out = std::string("<error: ") + sqlite3_errmsg(db) + ">";
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int c = 0; c < 12; ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        out += t != nullptr ? reinterpret_cast<const char*>(t) : "<null>";
        out += c == 11 ? "\n" : "|";
      }
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

std::vector<std::string> Keys(const std::vector<UsageRow>& rows) {
  std::vector<std::string> out;
  for (const UsageRow& r : rows) out.push_back(r.key);
  return out;
}

std::vector<JobId> Ids(const std::vector<JobRow>& rows) {
  std::vector<JobId> out;
  for (const JobRow& r : rows) out.push_back(r.id);
  return out;
}

const UsageRow* Find(const std::vector<UsageRow>& rows, const std::string& key) {
  for (const UsageRow& r : rows) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("runs: a rank's exit decided when its attribution window ends keeps its status") {
  // Two 8-GPU jobs on two nodes each. Job 1's rank exits 7 and the window
  // ends with its nodes up: an application failure decided at a tick, its
  // run's exit status the rank's. Job 2's rank exits 9 and a node of the job
  // is lost within the window: that node's incident, no exit status.
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  core::SchedulerCore core(topo, testing::MakeTestConfig(false));
  REQUIRE(core.config().attribution_window == 5000);
  core::TimeMs now = 0;
  auto step = [&](core::Event e) {
    std::vector<core::Command> commands = core.Step(e, now);
    LogEntry entry{now, "test", std::move(e), std::move(commands)};
    core::Result<AppendResult> r = store.Append(topo, std::span(&entry, 1));
    REQUIRE_MESSAGE(r.ok(), r.message());
  };
  step(core::JobSubmitted{1, Request(8, "org/a", "ada")});
  step(core::JobSubmitted{2, Request(8, "org/a", "ada")});
  REQUIRE(core.job(2)->state == core::JobState::kRunning);
  now = 10000;
  step(core::RankExited{1, 5, 7});
  step(core::RankExited{2, 5, 9});
  now = 11000;
  step(core::NodeStateRequested{core.job(2)->ranks[0].node, core::NodeState::kDown, "lost"});
  now = 15000;
  step(core::Tick{});
  REQUIRE(core.job(1)->state == core::JobState::kQueued);
  std::vector<JobRunRow> runs = store.ListJobRuns(std::vector<JobId>{1, 2}).value();
  REQUIRE(runs.size() >= 2);
  CHECK(runs[0].job == 1);
  CHECK(runs[0].end_ms == 15000);
  CHECK(runs[0].exit_code == 7);
  CHECK(runs[0].end_reason.find("rank 5 exited with status 7") != std::string::npos);
  const JobRunRow& two = runs[0].job == 2 ? runs[0] : runs[1];
  CHECK(two.job == 2);
  CHECK(two.end_ms == 11000);
  CHECK_FALSE(two.exit_code.has_value());
}

TEST_CASE("runs: a restart, a requeue and a cancel each end a run, GPU-ms by hand") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  core::SchedulerConfig config = testing::MakeTestConfig(false);
  // The rank's exit below is an application failure at once (the GPU-ms
  // are counted by hand from it), not held for its attribution window.
  config.attribution_window = 0;
  core::SchedulerCore core(topo, config);
  core::TimeMs now = 0;
  auto step = [&](core::Event e) {
    std::vector<core::Command> commands = core.Step(e, now);
    LogEntry entry{now, "test", std::move(e), std::move(commands)};
    core::Result<AppendResult> r = store.Append(topo, std::span(&entry, 1));
    REQUIRE_MESSAGE(r.ok(), r.message());
  };
  step(core::TenantConfigured{{"org/a", 0, -1, 0, 0, 1.0}});
  step(core::TenantConfigured{{"org/b", 0, -1, 0, 0, 1.0}});
  step(core::TenantConfigured{{"lab", 0, -1, 4, 0, 1.0}});  // jobs of at most 4 GPUs run

  now = 60000;
  step(core::JobSubmitted{1, Request(8, "org/a", "ada")});  // starts: 8 GPUs, 2 nodes
  REQUIRE(core.job(1)->state == core::JobState::kRunning);
  now = 120000;
  step(core::JobSubmitted{2, Request(4, "org/b", "bob")});  // starts: 4 GPUs, 1 node
  now = 130000;
  step(core::JobSubmitted{3, Request(8, "lab", "carol")});  // waits: over lab's job size
  REQUIRE(core.job(3)->state == core::JobState::kQueued);
  now = 300000;
  step(core::RankExited{2, 0, 139});  // requeued with a 10 s backoff
  REQUIRE(core.job(2)->state == core::JobState::kQueued);
  now = 310000;
  step(core::Tick{});  // the backoff is over: starts again
  REQUIRE(core.job(2)->state == core::JobState::kRunning);
  now = 400000;
  step(core::JobCancelled{2, "cancelled by bob"});
  now = 500000;
  step(core::JobCancelled{3, "cancelled by carol"});
  now = 660000;
  const core::GpuSlot lost = core.job(1)->ranks[0];
  step(core::GpuEvent{lost.node, lost.gpu, core::GpuEventKind::kXid, 79});
  REQUIRE(core.job(1)->restarts == 1);
  {
    // While the second run goes on it has no end, and counts up to now.
    std::vector<JobRunRow> runs = store.ListJobRuns(std::vector<JobId>{1}).value();
    REQUIRE(runs.size() == 2);
    CHECK(runs[1].end_ms == -1);
    CHECK(runs[1].end_reason.empty());
    CHECK(runs[1].GpuMsAt(720000) == 60000 * 8);
    CHECK(runs[1].ranks_json == common::GpuSlotsToJson(core.job(1)->ranks, topo).dump());
  }
  now = 1860000;
  step(core::JobFinished{1, 0});

  std::vector<JobRunRow> runs = store.ListJobRuns(std::vector<JobId>{1, 2, 3}).value();
  REQUIRE(runs.size() == 4);
  // Job 1: 600 s on 8 GPUs until the XID, then 1200 s on 8 GPUs.
  CHECK(runs[0].job == 1);
  CHECK(runs[0].run == 1);
  CHECK(runs[0].start_ms == 60000);
  CHECK(runs[0].end_ms == 660000);
  CHECK(runs[0].gpus == 8);
  CHECK(runs[0].nodes == 2);
  CHECK(runs[0].end_reason == "restarted after xid 79 on " + topo.node(lost.node).name + " GPU " +
                                  std::to_string(lost.gpu));
  CHECK_FALSE(runs[0].exit_code.has_value());
  CHECK(runs[0].gpu_ms == 4800000);
  CHECK(runs[1].run == 2);
  CHECK(runs[1].start_ms == 660000);
  CHECK(runs[1].end_ms == 1860000);
  CHECK(runs[1].end_reason == "completed");
  CHECK(runs[1].exit_code == 0);
  CHECK(runs[1].gpu_ms == 9600000);
  CHECK(runs[1].ranks_json.find("\"" + topo.node(lost.node).name + "\"," +
                                std::to_string(lost.gpu) + "]") == std::string::npos);
  // Job 2: 180 s on 4 GPUs until rank 0 failed, 90 s after its backoff.
  CHECK(runs[2].job == 2);
  CHECK(runs[2].start_ms == 120000);
  CHECK(runs[2].end_ms == 300000);
  CHECK(runs[2].exit_code == 139);
  CHECK(runs[2].end_reason.find("rank 0 exited with status 139") != std::string::npos);
  CHECK(runs[2].gpu_ms == 720000);
  CHECK(runs[3].run == 2);
  CHECK(runs[3].start_ms == 310000);
  CHECK(runs[3].end_ms == 400000);
  CHECK(runs[3].end_reason == "cancelled");
  CHECK(runs[3].gpu_ms == 360000);

  const JobRow j1 = *store.GetJob(1).value();
  CHECK(j1.runs == 2);
  CHECK(j1.last_run_nodes == 2);
  CHECK(j1.ended_gpu_ms == 14400000);  // 4 GPU-hours
  const JobRow j3 = *store.GetJob(3).value();
  CHECK(j3.runs == 0);
  CHECK(j3.last_run_nodes == 0);
  CHECK(j3.ended_gpu_ms == 0);

  SUBCASE("usage over everything, by tenant") {
    UsageQuery q;
    q.since = 0;
    q.until = 2000000;
    q.now_ms = 2000000;
    std::vector<UsageRow> rows = store.Usage(q).value();
    CHECK(Keys(rows) == std::vector<std::string>{"lab", "org/a", "org/b"});
    const UsageRow& a = *Find(rows, "org/a");
    CHECK(a.gpu_ms == 14400000);
    CHECK(a.submitted == 1);
    CHECK(a.completed == 1);
    CHECK(a.failed == 0);
    CHECK(a.started == 1);
    CHECK(a.queue_wait_ms_total == 0);
    const UsageRow& b = *Find(rows, "org/b");
    CHECK(b.gpu_ms == 1080000);
    CHECK(b.cancelled == 1);
    const UsageRow& lab = *Find(rows, "lab");
    CHECK(lab.gpu_ms == 0);
    CHECK(lab.submitted == 1);
    CHECK(lab.cancelled == 1);
    CHECK(lab.started == 0);
  }
  SUBCASE("usage clips runs to the window") {
    UsageQuery q;
    q.since = 600000;
    q.until = 1000000;
    q.now_ms = 2000000;
    std::vector<UsageRow> rows = store.Usage(q).value();
    // 60 s of run 1 and 340 s of run 2, on 8 GPUs; nothing else happened.
    REQUIRE(Keys(rows) == std::vector<std::string>{"org/a"});
    CHECK(rows[0].gpu_ms == 400000 * 8);
    CHECK(rows[0].submitted == 0);
    CHECK(rows[0].completed == 0);
  }
  SUBCASE("usage is scoped and pages by key") {
    UsageQuery q;
    q.since = 0;
    q.until = 2000000;
    q.now_ms = 2000000;
    q.scope = {TenantScope::Kind::kSubtree, "org"};
    CHECK(Keys(store.Usage(q).value()) == std::vector<std::string>{"org/a", "org/b"});
    q.scope = {TenantScope::Kind::kTenant, "org/b"};
    CHECK(Keys(store.Usage(q).value()) == std::vector<std::string>{"org/b"});
    q.scope = {TenantScope::Kind::kSubtree, "or"};  // not a prefix of "org/..."
    CHECK(store.Usage(q).value().empty());
    q.scope = {};
    q.by = UsageKey::kUser;
    q.limit = 2;
    CHECK(Keys(store.Usage(q).value()) == std::vector<std::string>{"ada", "bob"});
    q.after_key = "bob";
    CHECK(Keys(store.Usage(q).value()) == std::vector<std::string>{"carol"});
    q.after_key = "carol";
    CHECK(store.Usage(q).value().empty());
  }
  SUBCASE("history filters by window, state, user, scope, and pages by id") {
    HistoryQuery q;
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{1, 2, 3});
    q.since = 450000;  // job 2 had ended before
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{1, 3});
    q.since.reset();
    q.until = 125000;  // job 3 was submitted after
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{1, 2});
    q.until.reset();
    q.states = {core::JobState::kCancelled};
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{2, 3});
    q.user = "bob";
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{2});
    q = {};
    q.scope = {TenantScope::Kind::kSubtree, "org"};
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{1, 2});
    q.tenant = "lab";  // outside the scope: nothing
    CHECK(store.ListHistory(q).value().empty());
    q = {};
    q.limit = 2;
    CHECK(Ids(store.ListHistory(q).value()) == std::vector<JobId>{1, 2});
    q.after_id = 2;
    std::vector<JobRow> page = store.ListHistory(q).value();
    REQUIRE(Ids(page) == std::vector<JobId>{3});
    CHECK(page[0].state == core::JobState::kCancelled);
  }
}

TEST_CASE("runs rebuilt from the log, or backfilled by the migration, are the same rows") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  const core::SchedulerConfig config = testing::MakeTestConfig(false);
  core::SchedulerCore core(topo, config);
  const std::string live = dir.File("live.db");
  std::vector<LogEntry> log;
  {
    Store store = OpenOk(live);
    core::TimeMs now = 0;
    for (const core::TenantConfig& t : testing::TestTenants()) {
      core::Event e = core::TenantConfigured{t};
      log.push_back({now, "admin", e, core.Step(e, now)});
    }
    testing::Workload workload(topo, 17, 1, false);
    for (int i = 0; i < 600; ++i) {
      core::Event e = workload.Next(core, now);
      log.push_back({now, "test", e, core.Step(e, now)});
    }
    // Batches of 7: runs that open and end in one transaction too.
    for (size_t i = 0; i < log.size(); i += 7) {
      const size_t n = std::min<size_t>(7, log.size() - i);
      core::Result<AppendResult> r = store.Append(topo, std::span(log).subspan(i, n));
      REQUIRE_MESSAGE(r.ok(), r.message());
    }

    // Against the core that wrote the log.
    int restarted = 0;
    for (const auto& [job_id, job_rec] : core.jobs()) {
      const core::JobId id = job_id;
      const core::JobRecord& rec = job_rec;
      CAPTURE(id);
      std::vector<JobRunRow> runs = store.ListJobRuns(std::vector<JobId>{id}).value();
      if (rec.first_start < 0) {
        CHECK(runs.empty());
        continue;
      }
      REQUIRE_FALSE(runs.empty());
      restarted += runs.size() > 1 ? 1 : 0;
      CHECK(runs.front().start_ms == rec.first_start);
      CHECK(runs.back().start_ms == rec.last_start);
      const bool holds =
          rec.state == core::JobState::kRunning || rec.state == core::JobState::kPreempting;
      for (size_t i = 0; i < runs.size(); ++i) {
        CAPTURE(i);
        CHECK(runs[i].run == static_cast<int>(i) + 1);
        if (holds && i + 1 == runs.size()) {
          CHECK(runs[i].end_ms == -1);
          CHECK(runs[i].ranks_json == common::GpuSlotsToJson(rec.ranks, topo).dump());
        } else {
          CHECK(runs[i].end_ms >= runs[i].start_ms);
          CHECK(runs[i].gpu_ms == (runs[i].end_ms - runs[i].start_ms) * runs[i].gpus);
          CHECK_FALSE(runs[i].end_reason.empty());
        }
      }
      // A job can end while it waits (cancelled after a requeue): no later.
      if (core::IsTerminal(rec.state)) CHECK(runs.back().end_ms <= rec.end_time);
    }
    CHECK(restarted > 0);  // the workload did move jobs
  }
  const std::string runs = DumpRuns(live);
  REQUIRE(runs.find("<error") == std::string::npos);

  SUBCASE("appending the log again to a new file") {
    const std::string again = dir.File("again.db");
    Store store = OpenOk(again);
    Store source = OpenOk(live);
    std::vector<LogEntry> read;
    core::Status s = source.ReadEvents(1, topo, [&](const StoredEvent& e) {
      read.push_back(e.entry);
      return core::Status::Ok();
    });
    REQUIRE_MESSAGE(s.ok(), s.message());
    REQUIRE(store.Append(topo, read).ok());
    CHECK(DumpRuns(again) == runs);
  }
  SUBCASE("a store of the schema before job_runs, migrated") {
    const std::string old = dir.File("old.db");
    std::vector<Migration> before;
    for (const Migration& m : EmbeddedMigrations()) {
      if (std::string_view(m.name) == "job_runs") break;
      before.push_back(m);
    }
    REQUIRE(before.size() < EmbeddedMigrations().size());  // job_runs is among them
    {
      OpenOptions o;
      o.migrations = before;
      Store store = OpenOk(old, o);
      REQUIRE(store.Append(topo, log).ok());
      CHECK(store.GetJob(1).value()->runs == 0);  // nothing to read them from yet
    }
    Store migrated = OpenOk(old);
    CHECK(DumpRuns(old) == runs);
    CHECK(migrated.GetJob(1).value()->runs == OpenOk(live).GetJob(1).value()->runs);
  }
}
