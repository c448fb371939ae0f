// The store on real SQLite files: open and migrations, the log, the
// materialized tables, users and tokens, meta, and the error paths.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <fstream>
#include <map>
#include <string>

#include "store/store.hpp"
#include "store_test_util.hpp"
#include "topo/common/auth_json.hpp"
#include "topo/common/event_json.hpp"

using namespace topo;
using namespace topo::store;
using store::testing::MakeTestTopology;
using store::testing::TempDir;

namespace {

// Direct SQL on the file, as another process (the sqlite3 shell) would.
class RawDb {
 public:
  explicit RawDb(const std::string& path) { sqlite3_open(path.c_str(), &db_); }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    CAPTURE(sql);
    CHECK_MESSAGE(rc == SQLITE_OK, (error != nullptr ? error : ""));
    sqlite3_free(error);
  }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    std::string out = "<no row>";
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out = t != nullptr ? reinterpret_cast<const char*>(t) : "<null>";
    }
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

Store OpenOk(const std::string& path, const OpenOptions& options = {}) {
  core::Result<Store> s = Store::Open(path, options);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return std::move(s).value();
}

core::JobRequest SmallRequest(int gpus = 4, std::string tenant = "lab") {
  core::JobRequest r;
  r.spec.gpus = gpus;
  r.spec.parallelism.tp = 4;
  r.spec.parallelism.dp = gpus / 4;
  r.tenant = std::move(tenant);
  r.user = "ada";
  return r;
}

size_t CountEvents(Store& store, const core::Topology& t, int64_t from = 1) {
  size_t n = 0;
  core::Status s = store.ReadEvents(from, t, [&](const StoredEvent&) {
    ++n;
    return core::Status::Ok();
  });
  REQUIRE_MESSAGE(s.ok(), s.message());
  return n;
}

}  // namespace

TEST_CASE("a fresh file gets the whole schema, WAL mode and the default tenant") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    Store store = OpenOk(path);
    CHECK(store.SchemaVersion() == EmbeddedMigrations().back().version);
    CHECK(store.LastSeq() == 0);
    CHECK(store.MaxJobId().value() == 0);
    std::vector<core::TenantConfig> tenants = store.ListTenants().value();
    REQUIRE(tenants.size() == 1);
    CHECK(common::TenantConfigToJson(tenants[0]) ==
          common::TenantConfigToJson(core::TenantConfig{"default"}));
  }
  RawDb raw(path);
  CHECK(raw.Text("PRAGMA journal_mode") == "wal");
  CHECK(raw.Text("PRAGMA application_id") == std::to_string(0x746f706f));
  std::string versions;
  for (const Migration& m : EmbeddedMigrations()) {
    versions += (versions.empty() ? "" : ",") + std::to_string(m.version) + ":" + m.name;
  }
  CHECK(raw.Text("SELECT group_concat(version || ':' || name) FROM schema_version") == versions);
  CHECK(versions.rfind("1:init,2:job_events_audit,3:unix_user,", 0) == 0);
  CHECK(versions.find(":job_runs") != std::string::npos);
  CHECK(versions.find(":snapshots") != std::string::npos);
  CHECK(versions.find(":tenant_accounts") != std::string::npos);
  for (const char* table :
       {"events", "jobs", "tenants", "nodes", "gpu_health", "users", "tokens", "meta", "job_events",
        "audit", "job_runs", "snapshots", "tenant_accounts"}) {
    CAPTURE(table);
    CHECK(raw.Text(std::string("SELECT count(*) FROM sqlite_master WHERE name = '") + table +
                   "'") == "1");
  }
}

TEST_CASE("reopening keeps everything and applies no migration twice") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  const core::Topology topo = MakeTestTopology();
  {
    Store store = OpenOk(path);
    LogEntry e{5, "user:ada", core::JobSubmitted{1, SmallRequest()}, {}};
    REQUIRE(store.Append(topo, std::span(&e, 1)).ok());
    REQUIRE(store.SetMeta("topology", "{}").ok());
  }
  Store store = OpenOk(path);
  CHECK(store.LastSeq() == 1);
  CHECK(store.LastTime() == 5);
  CHECK(store.GetMeta("topology").value() == "{}");
  CHECK(store.GetJob(1).value().has_value());
  RawDb raw(path);
  CHECK(raw.Text("SELECT count(*) FROM schema_version") ==
        std::to_string(EmbeddedMigrations().size()));
}

TEST_CASE("a schema newer than the binary knows is refused, unchanged") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  { OpenOk(path); }
  {
    RawDb raw(path);
    raw.Exec("INSERT INTO schema_version(version, name, applied_ms) VALUES (70, 'future', 0)");
  }
  core::Result<Store> s = Store::Open(path);
  REQUIRE_FALSE(s.ok());
  CAPTURE(s.message());
  CHECK(s.message().find(path) != std::string::npos);
  CHECK(s.message().find("schema version is 70") != std::string::npos);
  CHECK(s.message().find("(1.." + std::to_string(EmbeddedMigrations().back().version) + ")") !=
        std::string::npos);
  CHECK(s.message().find("newer release") != std::string::npos);
  RawDb raw(path);
  CHECK(raw.Text("SELECT MAX(version) FROM schema_version") == "70");
}

TEST_CASE("migrations apply in order, once, and a failing one changes nothing") {
  TempDir dir;
  const std::string path = dir.File("m.db");
  // The store's own schema first: Open reads its tables after migrating.
  const Migration init = EmbeddedMigrations()[0];
  const Migration index = EmbeddedMigrations()[1];
  const Migration v2[] = {init, index};
  const Migration v4[] = {
      init,
      index,
      {3, "three", "CREATE TABLE t1(x INTEGER); ALTER TABLE t1 ADD COLUMN y TEXT;"},
      {4, "four", "INSERT INTO t1 VALUES (1, 'a'); CREATE TABLE t3(z INTEGER);"}};
  const Migration bad[] = {
      init,
      index,
      {3, "three", ""},
      {4, "four", ""},
      {5, "broken", "CREATE TABLE t4(z INTEGER); INSERT INTO missing VALUES (1);"}};
  {
    OpenOptions o;
    o.migrations = v2;
    CHECK(OpenOk(path, o).SchemaVersion() == 2);
  }
  {
    OpenOptions o;
    o.migrations = v4;
    CHECK(OpenOk(path, o).SchemaVersion() == 4);
    CHECK(OpenOk(path, o).SchemaVersion() == 4);  // again: nothing to apply
  }
  {
    OpenOptions o;
    o.migrations = bad;
    core::Result<Store> s = Store::Open(path, o);
    REQUIRE_FALSE(s.ok());
    CAPTURE(s.message());
    CHECK(s.message().find("migration 0005_broken.sql") != std::string::npos);
    CHECK(s.message().find("missing") != std::string::npos);
  }
  RawDb raw(path);
  CHECK(raw.Text("SELECT group_concat(version) FROM schema_version") == "1,2,3,4");
  CHECK(raw.Text("SELECT y FROM t1") == "a");
  CHECK(raw.Text("SELECT count(*) FROM sqlite_master WHERE name = 't4'") == "0");
}

TEST_CASE("a file that is not a toposched store is refused") {
  TempDir dir;
  SUBCASE("another application's database") {
    const std::string path = dir.File("other.db");
    {
      RawDb raw(path);
      raw.Exec("CREATE TABLE accounts(id INTEGER)");
    }
    core::Result<Store> s = Store::Open(path);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("not a toposched store") != std::string::npos);
    RawDb raw(path);
    CHECK(raw.Text("SELECT count(*) FROM sqlite_master WHERE name = 'events'") == "0");
  }
  SUBCASE("not a database at all") {
    const std::string path = dir.File("notes.txt");
    std::ofstream(path) << "these are not the pages you are looking for\n"
                        << std::string(4096, 'x');
    core::Result<Store> s = Store::Open(path);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(path) != std::string::npos);
  }
  SUBCASE("a directory that does not exist") {
    core::Result<Store> s = Store::Open(dir.File("no/such/dir/state.db"));
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("no/such/dir/state.db") != std::string::npos);
  }
}

TEST_CASE("appended events read back with their seq, time, actor and commands") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  const core::NodeId n3 = topo.FindNode("n3");
  std::vector<LogEntry> batch = {
      {10,
       "user:ada",
       core::JobSubmitted{1, SmallRequest()},
       {core::JobStateChanged{1, core::JobState::kQueued, "submitted"},
        core::StartJob{1, {{n3, 0}, {n3, 1}, {n3, 2}, {n3, 3}}, {}, {}},
        core::JobStateChanged{1, core::JobState::kRunning, "running"}}},
      {20, "agent:n3", core::Heartbeat{n3}, {}},
      {15,
       "agent:n3",
       core::GpuEvent{n3, 2, core::GpuEventKind::kXid, 79},
       {core::GpuHealthChanged{n3, 2, core::GpuHealth::kFailed, "XID 79"},
        core::DrainNode{n3, "n3 GPU 2 failed (XID 79)"}}},
      {30, "scheduler", core::Tick{}, {}},
  };
  core::Result<AppendResult> r = store.Append(topo, batch);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r.value().first_seq == 1);
  CHECK(r.value().last_seq == 4);
  CHECK(store.LastSeq() == 4);
  CHECK(store.LastTime() == 30);

  std::vector<StoredEvent> read;
  REQUIRE(store
              .ReadEvents(1, topo,
                          [&](const StoredEvent& e) {
                            read.push_back(e);
                            return core::Status::Ok();
                          })
              .ok());
  REQUIRE(read.size() == batch.size());
  const core::TimeMs expected_time[] = {10, 20, 20, 30};  // 15 is raised to 20
  for (size_t i = 0; i < read.size(); ++i) {
    CAPTURE(i);
    CHECK(read[i].seq == static_cast<int64_t>(i) + 1);
    CHECK(read[i].entry.time_ms == expected_time[i]);
    CHECK(read[i].entry.actor == batch[i].actor);
    CHECK(common::EventToJson(read[i].entry.event, topo) ==
          common::EventToJson(batch[i].event, topo));
    REQUIRE(read[i].entry.commands.size() == batch[i].commands.size());
    for (size_t c = 0; c < batch[i].commands.size(); ++c) {
      CHECK(common::CommandToJson(read[i].entry.commands[c], topo) ==
            common::CommandToJson(batch[i].commands[c], topo));
    }
  }
  CHECK(CountEvents(store, topo, 3) == 2);
  CHECK(CountEvents(store, topo, 5) == 0);

  // The callback's error stops the read and comes back.
  int calls = 0;
  core::Status stop = store.ReadEvents(1, topo, [&](const StoredEvent&) {
    ++calls;
    return core::Status::Error("enough");
  });
  CHECK(calls == 1);
  CHECK(stop.message() == "enough");

  // The next batch continues the numbering; an empty batch writes nothing.
  CHECK(store.Append(topo, {}).value().last_seq == 4);
  LogEntry more{40, "scheduler", core::Tick{}, {}};
  CHECK(store.Append(topo, std::span(&more, 1)).value().first_seq == 5);

  // Materialized in the same transaction.
  std::optional<JobRow> job = store.GetJob(1).value();
  REQUIRE(job.has_value());
  CHECK(job->state == core::JobState::kRunning);
  CHECK(job->start_ms == 10);
  CHECK(job->ranks_json == R"([["n3",0],["n3",1],["n3",2],["n3",3]])");
  std::vector<GpuHealthRow> health = store.GpuHealthHistory("n3").value();
  REQUIRE(health.size() == 1);
  CHECK(health[0].gpu == 2);
  CHECK(health[0].health == core::GpuHealth::kFailed);
  CHECK(health[0].seq == 3);
  CHECK(health[0].time_ms == 20);
}

TEST_CASE("jobs are found by their submitter's client_request_id, again and again") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  std::vector<LogEntry> batch;
  for (core::JobId id = 1; id <= 4; ++id) {
    core::JobRequest r = SmallRequest();
    r.user = id == 4 ? "bob" : "ada";
    r.client_request_id = id <= 2 ? "sweep-1" : (id == 3 ? "one" : "sweep-1");
    batch.push_back({id, "user:" + r.user, core::JobSubmitted{id, r}, {}});
  }
  REQUIRE(store.Append(topo, batch).ok());
  for (int round = 0; round < 2; ++round) {  // the prepared statement is reused
    CHECK(store.JobsByClientRequest("ada", "sweep-1").value() == std::vector<core::JobId>{1, 2});
    CHECK(store.JobsByClientRequest("ada", "one").value() == std::vector<core::JobId>{3});
    CHECK(store.JobsByClientRequest("bob", "sweep-1").value() == std::vector<core::JobId>{4});
    CHECK(store.JobsByClientRequest("bob", "one").value().empty());
  }
}

TEST_CASE("a job's partition and reservation are kept with its row, the sets' events logged") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  const std::string node = topo.node(0).name;
  {
    Store store = OpenOk(dir.File("state.db"));
    core::JobRequest in = SmallRequest();
    in.partition = "gpu";
    in.reservation = "maint";
    core::JobRequest only = SmallRequest();
    only.reservation = "maint";
    core::PartitionConfig p;
    p.name = "gpu";
    p.nodes = {node};
    core::ReservationConfig r;
    r.name = "maint";
    r.nodes = {node};
    r.start = 1000;
    r.end = 2000;
    std::vector<LogEntry> batch = {
        {1, "user:admin", core::PartitionConfigured{p}, {}},
        {1, "user:admin", core::ReservationConfigured{r}, {}},
        {2, "user:ada", core::JobSubmitted{1, in}, {}},
        {2, "user:ada", core::JobSubmitted{2, SmallRequest()}, {}},
        {2, "user:ada", core::JobSubmitted{3, only}, {}},
        {3, "user:admin", core::PartitionDeleted{"gpu"}, {}},
        {3, "user:admin", core::ReservationDeleted{"maint"}, {}},
    };
    REQUIRE(store.Append(topo, batch).ok());
    const JobRow one = store.GetJob(1).value().value();
    CHECK(one.partition == "gpu");
    CHECK(one.reservation == "maint");
    CHECK(store.GetJob(2).value()->partition.empty());
    CHECK(store.GetJob(3).value()->partition.empty());
    CHECK(store.GetJob(3).value()->reservation == "maint");
    JobQuery q;
    q.include_terminal = true;
    std::vector<JobRow> rows = store.ListJobs(q).value();
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].partition == "gpu");
    HistoryQuery h;
    std::vector<JobRow> history = store.ListHistory(h).value();
    REQUIRE(history.size() == 3);
    CHECK(history[0].reservation == "maint");
    // The sets live in the log (and the core's snapshots), not in tables.
    std::vector<std::string> kinds;
    REQUIRE(store
                .ReadEvents(1, topo,
                            [&](const StoredEvent& e) {
                              kinds.emplace_back(common::EventTypeName(e.entry.event));
                              return core::Status::Ok();
                            })
                .ok());
    CHECK(kinds == std::vector<std::string>{"partition_configured", "reservation_configured",
                                            "job_submitted", "job_submitted", "job_submitted",
                                            "partition_deleted", "reservation_deleted"});
  }
  // A store migrated only up to version 7 reads jobs without the columns.
  std::vector<Migration> old;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version <= 7) old.push_back(m);
  }
  OpenOptions o;
  o.migrations = old;
  Store before = OpenOk(dir.File("v7.db"), o);
  CHECK(before.SchemaVersion() == 7);
  std::vector<LogEntry> batch = {{1, "user:ada", core::JobSubmitted{1, SmallRequest()}, {}}};
  core::JobRequest named = SmallRequest();
  named.partition = "gpu";
  batch.push_back({1, "user:ada", core::JobSubmitted{2, named}, {}});
  REQUIRE(before.Append(topo, batch).ok());
  CHECK(before.GetJob(2).value()->partition.empty());
  JobQuery q;
  CHECK(before.ListJobs(q).value().size() == 2);
}

TEST_CASE("a batch with an entry that would not read back writes nothing") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  LogEntry good{1, "scheduler", core::Tick{}, {}};
  REQUIRE(store.Append(topo, std::span(&good, 1)).ok());

  core::JobRequest invalid = SmallRequest();
  invalid.spec.parallelism.tp = 3;  // 3 does not divide 4 GPUs
  std::vector<std::pair<LogEntry, std::string>> cases = {
      {{2, "agent", core::Heartbeat{999}, {}}, "node"},
      {{2, "user:ada", core::JobSubmitted{2, invalid}, {}}, "request.spec"},
      {{2, "scheduler", core::Tick{}, {core::DrainNode{-1, "x"}}}, "commands[0]"},
      {{2, "user:\xff\xfe", core::Tick{}, {}}, "UTF-8"},
      {{2, "user:ada", core::JobCancelled{1, "bad \xc3"}, {}}, "UTF-8"},
  };
  for (auto& [entry, where] : cases) {
    std::vector<LogEntry> batch = {good, entry};
    core::Result<AppendResult> r = store.Append(topo, batch);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(where) != std::string::npos);
    CHECK(r.message().find("batch entry 1") != std::string::npos);
    CHECK(store.LastSeq() == 1);
  }
  CHECK(CountEvents(store, topo) == 1);
}

TEST_CASE("a batch commits only when before_commit agrees, which sees it unwritten to others") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  const std::string path = dir.File("state.db");
  Store store = OpenOk(path);
  std::vector<LogEntry> batch = {{1, "user:ada", core::JobSubmitted{1, SmallRequest()}, {}},
                                 {2, "scheduler", core::Tick{}, {}}};

  // Refused: the transaction rolls back, the refusal is returned as it is.
  int calls = 0;
  std::string seen_by_others;
  core::Result<AppendResult> r = store.Append(topo, batch, [&] {
    ++calls;
    // The rows are written in the open transaction, not committed: another
    // connection (a reader, the sqlite3 shell) sees none of them.
    seen_by_others = RawDb(path).Text("SELECT count(*) FROM events");
    return core::Status::Error("the replicated log did not take seq 1-2",
                               core::ErrorCode::kUnavailable);
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "the replicated log did not take seq 1-2");
  CHECK(calls == 1);
  CHECK(seen_by_others == "0");
  CHECK(store.LastSeq() == 0);
  CHECK(CountEvents(store, topo) == 0);
  CHECK(RawDb(path).Text("SELECT count(*) FROM jobs") == "0");

  // The same batch again, agreed: committed whole under the same seqs.
  r = store.Append(topo, batch, [&] {
    ++calls;
    return core::Status::Ok();
  });
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(calls == 2);
  CHECK(r.value().first_seq == 1);
  CHECK(r.value().last_seq == 2);
  CHECK(CountEvents(store, topo) == 2);
  CHECK(RawDb(path).Text("SELECT count(*) FROM jobs") == "1");

  // A batch that fails before the commit never asks.
  core::JobRequest invalid = SmallRequest();
  invalid.spec.parallelism.tp = 3;
  std::vector<LogEntry> bad = {{3, "user:ada", core::JobSubmitted{2, invalid}, {}}};
  r = store.Append(topo, bad, [&] {
    ++calls;
    return core::Status::Ok();
  });
  CHECK_FALSE(r.ok());
  CHECK(calls == 2);
  CHECK(store.LastSeq() == 2);
}

TEST_CASE("jobs, tenants and nodes follow a real core's commands") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  Store store = OpenOk(dir.File("state.db"));
  core::SchedulerCore core(topo, testing::MakeTestConfig(false));
  core::TimeMs now = 0;
  auto step = [&](core::Event e) {
    std::vector<core::Command> commands = core.Step(e, now);
    LogEntry entry{now, "test", std::move(e), std::move(commands)};
    core::Result<AppendResult> r = store.Append(topo, std::span(&entry, 1));
    REQUIRE_MESSAGE(r.ok(), r.message());
  };
  // Its limits in a partition (none configured here) ride in the row's JSON.
  step(core::TenantConfigured{{"lab", 8, 0, 8, 1, 1.0, 0, 0, {{"gpu", {16, 8, 2}}}}});
  step(core::JobSubmitted{1, SmallRequest(4, "lab")});
  now += core::kMinute;
  step(core::JobSubmitted{2, SmallRequest(4, "lab")});  // waits: one running job at most
  step(core::JobSubmitted{3, SmallRequest(64, "other")});
  now += core::kMinute;
  step(core::CheckpointCompleted{1, 100});
  const core::NodeId n = core.job(1)->ranks[0].node;
  step(core::GpuEvent{n, core.job(1)->ranks[0].gpu, core::GpuEventKind::kOffBus, 0});
  now += core::kMinute;
  step(core::JobFinished{1, 0});

  for (core::JobId id : {1, 2, 3}) {
    CAPTURE(id);
    const core::JobRecord& rec = *core.job(id);
    std::optional<JobRow> row = store.GetJob(id).value();
    REQUIRE(row.has_value());
    CHECK(row->state == rec.state);
    CHECK(row->tenant == rec.request.tenant);
    CHECK(row->submit_ms == rec.submit_time);
    CHECK(row->start_ms == rec.first_start);
    CHECK(row->last_start_ms == rec.last_start);
    CHECK(row->end_ms == rec.end_time);
    CHECK(row->restarts == rec.restarts);
    CHECK(row->checkpoint_step == rec.checkpoint_step);
    CHECK(row->ranks_json == common::GpuSlotsToJson(rec.ranks, topo).dump());
  }
  CHECK(store.GetJob(1).value()->restarts == 1);  // restarted off the failed GPU
  CHECK(store.GetJob(1).value()->checkpoint_step == 100);
  CHECK(store.GetJob(1).value()->state == core::JobState::kCompleted);
  CHECK(store.GetJob(2).value()->state == core::JobState::kRunning);
  CHECK_FALSE(store.GetJob(4).value().has_value());
  CHECK(store.MaxJobId().value() == 3);

  JobQuery lab;
  lab.tenant = "lab";
  CHECK(store.ListJobs(lab).value().size() == 2);
  JobQuery live;
  live.include_terminal = false;
  std::vector<JobRow> rows = store.ListJobs(live).value();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == 2);
  JobQuery page;
  page.after_id = 1;
  page.limit = 1;
  rows = store.ListJobs(page).value();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == 2);

  std::vector<core::TenantConfig> tenants = store.ListTenants().value();
  REQUIRE(tenants.size() == 2);
  CHECK(tenants[1].name == "lab");
  CHECK(tenants[1].max_running_jobs == 1);
  CHECK(tenants[1].partitions == std::map<std::string, core::PartitionLimits>{{"gpu", {16, 8, 2}}});

  std::vector<NodeRow> nodes = store.ListNodes().value();
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].name == topo.node(n).name);
  CHECK(nodes[0].state == core.cluster().node_state(n));

  // The per-job index: exactly the events whose event or commands name the job.
  for (core::JobId id : {1, 2, 3}) {
    CAPTURE(id);
    EventQuery q;
    q.job = id;
    std::vector<RawEvent> mine = store.ListEvents(q).value();
    std::vector<int64_t> expected;
    const std::vector<RawEvent> log = store.ListEvents(EventQuery{}).value();
    for (const RawEvent& e : log) {
      const nlohmann::json body = nlohmann::json::parse(e.body);
      bool names = body["event"].value("id", core::JobId{0}) == id;
      for (const nlohmann::json& c : body["commands"]) names |= c.value("id", core::JobId{0}) == id;
      if (names) expected.push_back(e.seq);
    }
    std::vector<int64_t> got;
    for (const RawEvent& e : mine) got.push_back(e.seq);
    CHECK(got == expected);
    CHECK_FALSE(got.empty());
  }
  EventQuery paged;
  paged.after_seq = 2;
  paged.limit = 2;
  std::vector<RawEvent> page2 = store.ListEvents(paged).value();
  REQUIRE(page2.size() == 2);
  CHECK(page2[0].seq == 3);
  CHECK(page2[1].seq == 4);
  // The newest first, below before_seq and above after_seq, alone and with
  // the per-job index.
  const std::vector<RawEvent> log = store.ListEvents(EventQuery{}).value();
  REQUIRE(log.size() >= 5);
  EventQuery newest;
  newest.newest_first = true;
  newest.limit = 2;
  std::vector<RawEvent> top = store.ListEvents(newest).value();
  REQUIRE(top.size() == 2);
  CHECK(top[0].seq == log.back().seq);
  CHECK(top[1].seq == log[log.size() - 2].seq);
  newest.before_seq = 4;
  newest.after_seq = 1;
  newest.limit = 10;
  top = store.ListEvents(newest).value();
  REQUIRE(top.size() == 2);
  CHECK(top[0].seq == 3);
  CHECK(top[1].seq == 2);
  EventQuery job_newest;
  job_newest.job = 1;
  job_newest.newest_first = true;
  job_newest.limit = 1;
  EventQuery job_all;
  job_all.job = 1;
  const std::vector<RawEvent> job_log = store.ListEvents(job_all).value();
  top = store.ListEvents(job_newest).value();
  REQUIRE(top.size() == 1);
  CHECK(top[0].seq == job_log.back().seq);
  job_newest.before_seq = job_log.back().seq;
  top = store.ListEvents(job_newest).value();
  REQUIRE((job_log.size() < 2 || top.size() == 1));
  if (job_log.size() >= 2) CHECK(top[0].seq == job_log[job_log.size() - 2].seq);
}

TEST_CASE("audit rows and multi-key meta are durable and ordered") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    Store store = OpenOk(path);
    REQUIRE(store.AppendAudit(10, "user:root", "user.create", R"({"user":"ada"})").ok());
    REQUIRE(store.AppendAudit(20, "user:root", "token.revoke", R"({"id":"abc"})").ok());
    const std::pair<std::string, std::string> kv[] = {{"a", "1"}, {"b", "2"}};
    REQUIRE(store.SetMetas(kv).ok());
  }
  Store store = OpenOk(path);
  std::vector<AuditRow> rows = store.ListAudit(0, 10).value();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].action == "user.create");
  CHECK(rows[1].time_ms == 20);
  CHECK(store.ListAudit(rows[0].seq, 10).value().size() == 1);
  // The newest N, oldest first.
  REQUIRE(store.AppendAudit(30, "user:root", "gpu.clear", R"({"node":"n0","gpu":3})").ok());
  std::vector<AuditRow> last = store.ListAudit(0, 2, /*newest_last_n=*/true).value();
  REQUIRE(last.size() == 2);
  CHECK(last[0].action == "token.revoke");
  CHECK(last[1].action == "gpu.clear");
  CHECK(store.ListAudit(last[0].seq, 5, true).value().size() == 1);
  CHECK(store.GetMeta("a").value() == "1");
  CHECK(store.GetMeta("b").value() == "2");
}

TEST_CASE("a token made by the caller (HA replicas share one admin token)") {
  TempDir dir;
  Store store = OpenOk(dir.File("state.db"));
  CHECK(store.CreateUser({"admin", "default", Role::kClusterAdmin, 1, "admin"}).ok());
  const std::string token = "topo_" + std::string(64, 'a');
  IssuedToken t = store.CreateTokenFromText("admin", token, 5).value();
  CHECK(t.token == token);
  CHECK(t.id.size() == 12);
  std::optional<User> who = store.Authenticate(token).value();
  REQUIRE(who.has_value());
  CHECK(who->name == "admin");
  for (const std::string& bad : {"topo_" + std::string(63, 'a'), "topo_" + std::string(64, 'A'),
                                 "xopo_" + std::string(64, 'a'), std::string()}) {
    CHECK(store.CreateTokenFromText("admin", bad, 5).message().find("64 lowercase hex digits") !=
          std::string::npos);
  }
  CHECK(store.CreateTokenFromText("nobody", "topo_" + std::string(64, 'b'), 5)
            .message()
            .find("no user \"nobody\"") != std::string::npos);
}

TEST_CASE("users and tokens: create, authenticate, revoke, delete") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  Store store = OpenOk(path);
  CHECK(store.CreateUser({"ada", "org/a", Role::kTenantAdmin, 1, "ada"}).ok());
  CHECK(store.CreateUser({"bob", "org/b", Role::kUser, 2, "bob"}).ok());
  core::Status dup = store.CreateUser({"ada", "org/b", Role::kUser, 3, "ada"});
  CHECK(dup.message().find("user \"ada\" already exists") != std::string::npos);
  CHECK(store.CreateUser({"", "org/a", Role::kUser, 3, "x"}).message().find("needs a name") !=
        std::string::npos);
  CHECK(store.CreateUser({"eve", "", Role::kUser, 3, "eve"}).message().find("needs a tenant") !=
        std::string::npos);
  CHECK(
      store.CreateUser({"eve", "org/a", Role::kUser, 3, ""}).message().find("needs a unix_user") !=
      std::string::npos);
  CHECK(store.UpdateUser({"bob", "org/a", Role::kClusterAdmin, 0, "robert"}).ok());
  CHECK(store.UpdateUser({"nobody", "org/a", Role::kUser, 0, "x"}).message().find("no user") !=
        std::string::npos);
  CHECK(store.GetUser("bob").value()->role == Role::kClusterAdmin);
  CHECK(store.GetUser("bob").value()->unix_user == "robert");
  CHECK(store.GetUser("bob").value()->created_ms == 2);
  CHECK_FALSE(store.GetUser("nobody").value().has_value());
  CHECK(store.ListUsers().value().size() == 2);
  CHECK(store.ListUsers("org/a").value().size() == 2);
  CHECK(store.ListUsers("org/b").value().empty());

  IssuedToken t1 = store.CreateToken("ada", 100).value();
  IssuedToken t2 = store.CreateToken("ada", 200).value();
  IssuedToken t3 = store.CreateToken("bob", 300).value();
  CHECK(t1.token.rfind("topo_", 0) == 0);
  CHECK(t1.token.size() == 5 + 64);
  CHECK(t1.token != t2.token);
  CHECK(t1.id == Sha256Hex(t1.token).substr(0, 12));
  CHECK(store.CreateToken("nobody", 0).message().find("no user \"nobody\"") != std::string::npos);

  CHECK(store.Authenticate(t1.token).value()->name == "ada");
  CHECK(store.Authenticate(t3.token).value()->tenant == "org/a");
  CHECK_FALSE(store.Authenticate("topo_" + std::string(64, '0')).value().has_value());
  CHECK_FALSE(store.Authenticate("").value().has_value());
  CHECK_FALSE(store.Authenticate(Sha256Hex(t1.token)).value().has_value());  // the hash is no key

  std::vector<TokenInfo> ada = store.ListTokens("ada").value();
  REQUIRE(ada.size() == 2);
  CHECK(ada[0].id == t1.id);
  CHECK(ada[0].created_ms == 100);
  CHECK_FALSE(ada[0].revoked);

  CHECK(store.RevokeToken(t1.id).ok());
  CHECK_FALSE(store.Authenticate(t1.token).value().has_value());
  CHECK(store.Authenticate(t2.token).value().has_value());
  CHECK(store.RevokeToken(t1.id).ok());  // again: still revoked
  CHECK(store.RevokeToken(t2.token).ok());
  CHECK_FALSE(store.Authenticate(t2.token).value().has_value());
  CHECK(store.ListTokens("ada").value()[1].revoked);
  CHECK(store.RevokeToken("abc").message().find("at least 8") != std::string::npos);
  CHECK(store.RevokeToken("ABCDEF0123").message().find("hex") != std::string::npos);
  CHECK(store.RevokeToken("0000000000000000").message().find("no token") != std::string::npos);

  // The file holds hashes, never tokens.
  {
    RawDb raw(path);
    CHECK(raw.Text("SELECT count(*) FROM tokens WHERE hash = '" + Sha256Hex(t3.token) + "'") ==
          "1");
    CHECK(raw.Text("SELECT count(*) FROM tokens WHERE hash LIKE '%" + t3.token.substr(5, 20) +
                   "%' OR user LIKE '%topo_%'") == "0");
  }
  // Deleting a user deletes their tokens.
  CHECK(store.DeleteUser("bob").ok());
  CHECK_FALSE(store.Authenticate(t3.token).value().has_value());
  CHECK(store.ListTokens().value().size() == 2);
  CHECK(store.DeleteUser("bob").message().find("no user \"bob\"") != std::string::npos);
}

TEST_CASE("users and tokens as one value: exported, taken whole by another store, never half") {
  TempDir dir;
  Store a = OpenOk(dir.File("a.db"));
  CHECK(a.CreateUser({"ada", "org/a", Role::kTenantAdmin, 1, "ada"}).ok());
  CHECK(a.CreateUser({"bob", "org/b", Role::kUser, 2, "robert"}).ok());
  IssuedToken ta = a.CreateToken("ada", 100).value();
  IssuedToken tb = a.CreateToken("bob", 200).value();
  CHECK(a.RevokeToken(tb.id).ok());
  CHECK(a.SetTenantAccounts({"org/a", {"ada", "ada2"}, "lab-a"}).ok());
  const std::string value = a.ExportAuth().value();
  CHECK(value.find(ta.token) == std::string::npos);  // hashes only
  CHECK(value.find(Sha256Hex(ta.token)) != std::string::npos);

  // Another store with users of its own ends with exactly a's.
  Store b = OpenOk(dir.File("b.db"));
  CHECK(b.CreateUser({"eve", "org/e", Role::kUser, 3, "eve"}).ok());
  IssuedToken te = b.CreateToken("eve", 300).value();
  REQUIRE(b.ImportAuth(value).ok());
  CHECK(b.ExportAuth().value() == value);
  CHECK(b.Authenticate(ta.token).value()->name == "ada");
  CHECK_FALSE(b.Authenticate(tb.token).value().has_value());  // revoked stays revoked
  CHECK_FALSE(b.Authenticate(te.token).value().has_value());  // b's own are gone
  CHECK(b.GetUser("bob").value()->unix_user == "robert");
  CHECK_FALSE(b.GetUser("eve").value().has_value());
  // The tenants' granted accounts travel with them.
  CHECK(b.GetTenantAccounts("org/a").value() == TenantAccounts{"org/a", {"ada", "ada2"}, "lab-a"});
  // A value from before grants has none: taking it removes b's.
  {
    TempDir old_dir;
    Store c = OpenOk(old_dir.File("c.db"));
    CHECK(c.SetTenantAccounts({"org/c", {"cy"}, ""}).ok());
    REQUIRE(c.ImportAuth(R"({"users":[],"tokens":[]})").ok());
    CHECK(c.ListTenantAccounts().value().empty());
  }

  // Hostile values: each refused with what is wrong, and b keeps a's.
  const std::string hash(64, 'a');
  const std::string user =
      R"({"name":"x","tenant":"t","role":"user","created_ms":1,"unix_user":"x"})";
  const std::string token =
      R"({"hash":")" + hash + R"(","user":"x","created_ms":1,"revoked":false})";
  const struct {
    std::string value;
    std::string says;
  } bad[] = {
      {"", "not JSON"},
      {"[1]", "must be an object"},
      {R"({"users":[]})", "must both be lists"},
      {R"({"users":{},"tokens":[]})", "must both be lists"},
      {R"({"users":[],"tokens":[],"extra":1})", "unknown field \"extra\""},
      {R"({"users":[1],"tokens":[]})", "users[0] must be an object"},
      {R"({"users":[{"name":"x"}],"tokens":[]})", "users[0]: \"tenant\" must be a string"},
      {R"({"users":[{"name":"","tenant":"t","role":"user","created_ms":1,"unix_user":"x"}],"tokens":[]})",
       "\"name\" must be 1 to 256 bytes"},
      {R"({"users":[{"name":")" + std::string(300, 'n') +
           R"(","tenant":"t","role":"user","created_ms":1,"unix_user":"x"}],"tokens":[]})",
       "\"name\" must be 1 to 256 bytes"},
      {R"({"users":[{"name":"x","tenant":"t","role":"root","created_ms":1,"unix_user":"x"}],"tokens":[]})",
       "\"role\" must be user, tenant-admin or cluster-admin"},
      {R"({"users":[{"name":"x","tenant":"t","role":"user","created_ms":-1,"unix_user":"x"}],"tokens":[]})",
       "\"created_ms\" must be an integer >= 0"},
      {R"({"users":[{"name":"x","tenant":"t","role":"user","created_ms":1,"unix_user":"x","admin":true}],"tokens":[]})",
       "users[0]: unknown field \"admin\""},
      {R"({"users":[)" + user + "," + user + R"(],"tokens":[]})", "appears twice"},
      {R"({"users":[)" + user +
           R"(],"tokens":[{"hash":"ABC","user":"x","created_ms":1,"revoked":false}]})",
       "\"hash\" must be 64 lowercase hex digits"},
      {R"({"users":[)" + user + R"(],"tokens":[{"hash":")" + std::string(64, 'A') +
           R"(","user":"x","created_ms":1,"revoked":false}]})",
       "\"hash\" must be 64 lowercase hex digits"},
      {R"({"users":[],"tokens":[)" + token + "]}", "its user \"x\" is not among the users"},
      {R"({"users":[)" + user + R"(],"tokens":[{"hash":")" + hash +
           R"(","user":"x","created_ms":1,"revoked":0}]})",
       "\"revoked\" must be true or false"},
      {R"({"users":[)" + user + R"(],"tokens":[)" + token + "," + token + "]}", "appears twice"},
      {std::string(common::kMaxAuthBytes + 1, ' '), "more than"},
      {R"({"users":[],"users":[],"tokens":[]})", "duplicate field \"users\""},
      {R"({"users":[],"tokens":[],"tenant_accounts":{}})", "\"tenant_accounts\" must be a list"},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":"a","unix_group":""}]})",
       "tenant_accounts[0]: \"accounts\" must be a list"},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":[""],"unix_group":""}]})",
       "every one of \"accounts\" must be 1 to 256 bytes"},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":[],"unix_group":1}]})",
       "\"unix_group\" must be a string"},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":[]}]})",
       "\"unix_group\" must be a string"},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":[],"unix_group":"","x":1}]})",
       "tenant_accounts[0]: unknown field \"x\""},
      {R"({"users":[],"tokens":[],"tenant_accounts":[{"tenant":"t","accounts":[],"unix_group":"g"},{"tenant":"t","accounts":[],"unix_group":"g"}]})",
       "tenant \"t\" appears twice"},
  };
  for (const auto& b_case : bad) {
    CAPTURE(b_case.says);
    core::Status st = b.ImportAuth(b_case.value);
    CHECK_FALSE(st.ok());
    CHECK(st.message().find(b_case.says) != std::string::npos);
  }
  CHECK(b.ExportAuth().value() == value);
  // An empty value is a valid one: no users, no tokens.
  CHECK(b.ImportAuth(R"({"users":[],"tokens":[]})").ok());
  CHECK(b.ListUsers().value().empty());
}

TEST_CASE("granted accounts: set, replaced, removed when empty, listed by tenant") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  Store store = OpenOk(path);
  CHECK(store.GetTenantAccounts("org/a").value() == TenantAccounts{"org/a", {}, ""});
  CHECK(store.SetTenantAccounts({"org/b", {"bo"}, ""}).ok());
  CHECK(store.SetTenantAccounts({"org/a", {"ada", "al"}, "lab"}).ok());
  CHECK(store.SetTenantAccounts({"org/a", {"ada"}, ""}).ok());  // replaces
  CHECK(store.GetTenantAccounts("org/a").value() == TenantAccounts{"org/a", {"ada"}, ""});
  std::vector<TenantAccounts> all = store.ListTenantAccounts().value();
  REQUIRE(all.size() == 2);
  CHECK(all[0].tenant == "org/a");
  CHECK(all[1] == TenantAccounts{"org/b", {"bo"}, ""});
  CHECK(store.SetTenantAccounts({"org/b", {}, ""}).ok());  // an empty grant is none
  CHECK(store.ListTenantAccounts().value().size() == 1);
  {
    RawDb raw(path);
    CHECK(raw.Text("SELECT count(*) FROM tenant_accounts") == "1");
  }
  CHECK_FALSE(store.SetTenantAccounts({"", {"x"}, ""}).ok());
  // Users by account, for the one-tenant rule.
  CHECK(store.CreateUser({"ada", "org/a", Role::kUser, 1, "shared"}).ok());
  CHECK(store.CreateUser({"bob", "org/b", Role::kUser, 2, "shared"}).ok());
  CHECK(store.CreateUser({"cy", "org/b", Role::kUser, 3, "cy"}).ok());
  std::vector<User> on = store.UsersOfUnixUser("shared").value();
  REQUIRE(on.size() == 2);
  CHECK(on[0].name == "ada");
  CHECK(on[1].tenant == "org/b");
  CHECK(store.UsersOfUnixUser("none").value().empty());
}

TEST_CASE("SHA-256 matches the standard test vectors") {
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("roles parse back, and meta values overwrite") {
  for (Role r : {Role::kUser, Role::kTenantAdmin, Role::kClusterAdmin}) {
    CHECK(ParseRole(RoleName(r)) == r);
  }
  CHECK_FALSE(ParseRole("root").has_value());
  TempDir dir;
  Store store = OpenOk(dir.File("state.db"));
  CHECK_FALSE(store.GetMeta("k").value().has_value());
  CHECK(store.SetMeta("k", "1").ok());
  CHECK(store.SetMeta("k", "2").ok());
  CHECK(store.GetMeta("k").value() == "2");
}
