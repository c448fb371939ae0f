// Store: open and migrate, append, read and replay the event log.

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "store/store_impl.hpp"
#include "topo/common/event_json.hpp"

namespace topo::store {
namespace {

using core::Result;
using core::Status;
using internal::Database;
using internal::Statement;
using internal::Transaction;
using Json = nlohmann::json;

// PRAGMA application_id of a toposched store: "topo" in ASCII.
constexpr int64_t kApplicationId = 0x746f706f;

std::string MigrationName(const Migration& m) {
  std::string v = std::to_string(m.version);
  return std::string(4 - std::min<size_t>(4, v.size()), '0') + v + "_" + m.name + ".sql";
}

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Brings the file to the newest schema of `migrations`, all in one
// transaction: either every pending migration is applied and recorded, or
// none is.
Status Migrate(Store::Impl& impl, std::span<const Migration> migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return impl.Error("migrations", "versions must run 1, 2, ... (a build problem)");
    }
  }
  const int known = migrations.empty() ? 0 : migrations.back().version;
  Database& db = impl.db;
  Result<Transaction> tx = Transaction::Begin(db);
  if (!tx.ok()) return impl.Error("starting the migration", tx.status());
  Result<int64_t> app_id = db.QueryInt("PRAGMA application_id");
  Result<int64_t> has_versions = db.QueryInt(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
  Result<int64_t> tables =
      db.QueryInt("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'");
  for (const auto* r : {&app_id, &has_versions, &tables}) {
    if (!r->ok()) return impl.Error("reading the schema", r->status());
  }
  const bool foreign = (app_id.value() != 0 && app_id.value() != kApplicationId) ||
                       (has_versions.value() == 0 && tables.value() > 0) ||
                       (has_versions.value() == 1 && app_id.value() != kApplicationId);
  if (foreign) {
    return impl.Error("opening",
                      "not a toposched store (it holds other tables, or another application's "
                      "id); point topo-scheduler at its own state file or an empty path");
  }
  if (has_versions.value() == 0) {
    Status s = db.Exec(
        "CREATE TABLE schema_version ("
        "  version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms INTEGER NOT NULL"
        ") STRICT;"
        "PRAGMA application_id = " +
        std::to_string(kApplicationId));
    if (!s.ok()) return impl.Error("creating schema_version", s);
  }
  Result<int64_t> current = db.QueryInt("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!current.ok()) return impl.Error("reading schema_version", current.status());
  if (current.value() > known) {
    return impl.Error("opening",
                      "its schema version is " + std::to_string(current.value()) +
                          ", newer than the versions this topo-scheduler knows (1.." +
                          std::to_string(known) +
                          "): a newer release wrote it. Run a release that knows schema version " +
                          std::to_string(current.value()) +
                          " or later, or restore a backup taken before the upgrade; the file was "
                          "left unchanged");
  }
  Result<Statement> record =
      db.Prepare("INSERT INTO schema_version(version, name, applied_ms) VALUES (?1, ?2, ?3)");
  if (!record.ok()) return impl.Error("recording the migration", record.status());
  for (const Migration& m : migrations) {
    if (m.version <= current.value()) continue;
    if (Status s = db.Exec(m.sql); !s.ok()) {
      return impl.Error("migration " + MigrationName(m), s.message() + "; nothing was changed");
    }
    Status s = record.value().Bind(1, m.version).Bind(2, m.name).Bind(3, WallClockMs()).Run();
    if (!s.ok()) return impl.Error("recording migration " + MigrationName(m), s);
  }
  if (Status s = tx.value().Commit(); !s.ok()) return impl.Error("committing the migration", s);
  impl.schema_version = std::max(known, static_cast<int>(current.value()));
  return Status::Ok();
}

// The event and commands as they will be logged; an error when they would
// not read back.
Status Encode(const core::Topology& topo, const LogEntry& entry, EncodedEntry& out) {
  try {
    (void)Json(entry.actor).dump();
  } catch (const Json::exception& e) {
    return Status::Error(std::string("the actor is not UTF-8 text: ") + e.what());
  }
  try {
    out.kind = common::EventTypeName(entry.event);
    out.event = common::EventToJson(entry.event, topo);
    if (Result<core::Event> back = common::EventFromJson(out.event, topo); !back.ok()) {
      return Status::Error("the event would not read back: " + back.message());
    }
    out.commands = Json::array();
    for (size_t i = 0; i < entry.commands.size(); ++i) {
      Json c = common::CommandToJson(entry.commands[i], topo);
      if (Result<core::Command> back = common::CommandFromJson(c, topo); !back.ok()) {
        return Status::Error("commands[" + std::to_string(i) +
                             "] would not read back: " + back.message());
      }
      out.commands.push_back(std::move(c));
    }
    out.body = Json{{"event", out.event}, {"commands", out.commands}}.dump();
    return Status::Ok();
  } catch (const Json::exception& e) {  // a string that is not UTF-8
    return Status::Error(std::string("cannot be written as JSON: ") + e.what());
  }
}

// Calls fn(seq, time, actor, body) for each logged event from from_seq on.
template <typename Fn>
Status ForEachLogged(Store::Impl& impl, int64_t from_seq, Fn&& fn) {
  Result<Statement> st =
      impl.db.Prepare("SELECT seq, time_ms, actor, body FROM events WHERE seq >= ?1 ORDER BY seq");
  if (!st.ok()) return impl.Error("reading events", st.status());
  Statement& q = st.value();
  q.Bind(1, from_seq);
  for (;;) {
    Result<bool> row = q.Step();
    if (!row.ok()) return impl.Error("reading events", row.status());
    if (!row.value()) return Status::Ok();
    const int64_t seq = q.Int64(0);
    Json body = Json::parse(q.Text(3), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object() || !body.contains("event") ||
        !body.contains("commands") || !body["commands"].is_array()) {
      return impl.Error("event seq " + std::to_string(seq),
                        "body is not {\"event\": ..., \"commands\": [...]}");
    }
    if (Status s = fn(seq, q.Int64(1), q.Text(2), body); !s.ok()) return s;
  }
}

Result<AppendResult> AppendBatch(Store::Impl& impl, const core::Topology& topology,
                                 std::span<const LogEntry> batch,
                                 const std::function<Status()>& before_commit) {
  if (batch.empty()) return AppendResult{impl.last_seq + 1, impl.last_seq};
  // Encode before the transaction: a batch that cannot be logged whole is
  // not logged at all, and the write lock is held only for the writes.
  std::vector<EncodedEntry> encoded(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    if (Status s = Encode(topology, batch[i], encoded[i]); !s.ok()) {
      return impl.Error("appending batch entry " + std::to_string(i) + " (" +
                            std::string(common::EventTypeName(batch[i].event)) + ")",
                        s);
    }
  }
  Result<Transaction> tx = Transaction::Begin(impl.db);
  if (!tx.ok()) return impl.Error("appending", tx.status());
  int64_t seq = impl.last_seq;
  TimeMs time = impl.last_time;
  for (size_t i = 0; i < batch.size(); ++i) {
    ++seq;
    time = std::max(time, batch[i].time_ms);
    Statement& ins = impl.write.insert_event;
    ins.Bind(1, seq).Bind(2, time).Bind(3, batch[i].actor).Bind(4, encoded[i].kind);
    ins.Bind(5, encoded[i].body);
    if (Status s = ins.Run(); !s.ok())
      return impl.Error("appending event " + std::to_string(seq), s);
    if (Status s = impl.Materialize(topology, batch[i], encoded[i], seq, time); !s.ok()) {
      return impl.Error("materializing event " + std::to_string(seq), s);
    }
  }
  if (before_commit) {
    // An error leaves through tx's destructor, which rolls back.
    if (Status s = before_commit(); !s.ok()) return s;
  }
  if (Status s = tx.value().Commit(); !s.ok()) {
    return impl.Error("committing " + std::to_string(batch.size()) + " events", s);
  }
  AppendResult result{impl.last_seq + 1, seq};
  impl.last_seq = seq;
  impl.last_time = time;
  for (const LogEntry& e : batch) {
    if (const auto* submitted = std::get_if<core::JobSubmitted>(&e.event)) {
      impl.max_job_id = std::max(impl.max_job_id, submitted->id);
    }
  }
  // After the commit, before anything is acknowledged (commit_mark.hpp).
  if (Status s = impl.WriteMark(); !s.ok()) {
    return impl.Error("events " + std::to_string(result.first_seq) + ".." + std::to_string(seq) +
                          " are committed but the commit mark could not follow them; do not "
                          "acknowledge them",
                      s);
  }
  return result;
}

Status ReadLog(Store::Impl& impl, int64_t from_seq, const core::Topology& topology,
               const std::function<Status(const StoredEvent&)>& fn) {
  return ForEachLogged(
      impl, from_seq, [&](int64_t seq, TimeMs time, std::string actor, const Json& body) -> Status {
        StoredEvent stored;
        stored.seq = seq;
        stored.entry.time_ms = time;
        stored.entry.actor = std::move(actor);
        Result<core::Event> event = common::EventFromJson(body.at("event"), topology);
        if (!event.ok()) return impl.Error("event seq " + std::to_string(seq), event.status());
        stored.entry.event = std::move(event).value();
        const Json& commands = body.at("commands");
        for (size_t i = 0; i < commands.size(); ++i) {
          Result<core::Command> c = common::CommandFromJson(commands[i], topology);
          if (!c.ok()) {
            return impl.Error(
                "event seq " + std::to_string(seq) + " commands[" + std::to_string(i) + "]",
                c.status());
          }
          stored.entry.commands.push_back(std::move(c).value());
        }
        return fn(stored);
      });
}

// The replay from from_seq expected seq `expected` and found `seq`.
std::string GapMessage(int64_t from_seq, bool fresh, int64_t expected, int64_t seq) {
  const std::string found = std::to_string(seq);
  std::string where;
  if (expected != from_seq) {
    where = "seq " + std::to_string(expected - 1) + " is followed by seq " + found;
  } else if (fresh) {
    where = "the replay begins at seq " + std::to_string(from_seq) +
            " but the first event is seq " + found;
  } else {
    where = "the snapshot at seq " + std::to_string(from_seq - 1) + " is followed by seq " + found;
  }
  const std::string missing = seq == expected + 1 ? "event " + std::to_string(expected) + " is"
                                                  : "events " + std::to_string(expected) + ".." +
                                                        std::to_string(seq - 1) + " are";
  return "the log has a gap: " + where + ", so " + missing + " missing";
}

}  // namespace

Result<ReplayReport> Store::Impl::ReplayLog(core::SchedulerCore& core, int64_t from_seq,
                                            bool fresh) {
  Store::Impl& impl = *this;
  if (fresh && !core.jobs().empty()) {
    return impl.Error("replaying", "the core has already stepped events; replay into a new one");
  }
  const core::Topology& topology = core.cluster().topology();
  ReplayReport report;
  // The events from from_seq on must follow each other without a gap: a
  // missing one would rebuild a core that differs from the one that
  // acknowledged the rest.
  int64_t expected = from_seq;
  Status s =
      ForEachLogged(impl, from_seq,
                    [&](int64_t seq, TimeMs time, const std::string&, const Json& body) -> Status {
                      if (seq != expected) {
                        return impl.Error("replaying", GapMessage(from_seq, fresh, expected, seq));
                      }
                      ++expected;
                      Result<core::Event> event = common::EventFromJson(body.at("event"), topology);
                      if (!event.ok())
                        return impl.Error("replaying event " + std::to_string(seq), event.status());
                      std::vector<core::Command> commands = core.Step(event.value(), time);
                      Json replayed = Json::array();
                      for (const core::Command& c : commands)
                        replayed.push_back(common::CommandToJson(c, topology));
                      if (replayed != body.at("commands")) {
                        if (report.diverged++ == 0) report.first_diverged_seq = seq;
                      }
                      report.last_seq = seq;
                      report.events += 1;
                      return Status::Ok();
                    });
  if (!s.ok()) return s;
  if (report.events == 0 && from_seq > 1) {
    // Nothing from from_seq on: the log must end just before it.
    Result<int64_t> last = impl.db.QueryInt("SELECT COALESCE(MAX(seq), 0) FROM events");
    if (!last.ok()) return impl.Error("replaying", last.status());
    if (last.value() < from_seq - 1) {
      return impl.Error("replaying",
                        "the log ends at seq " + std::to_string(last.value()) + ", before " +
                            (fresh ? "seq " + std::to_string(from_seq - 1) +
                                         ", the last event before its epoch began"
                                   : "the snapshot's seq " + std::to_string(from_seq - 1)) +
                            ": events " + std::to_string(last.value() + 1) + ".." +
                            std::to_string(from_seq - 1) + " are missing");
    }
  }
  return report;
}

Status Store::Impl::DetectJobRuns() {
  Result<int64_t> n =
      db.QueryInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'job_runs'");
  if (!n.ok()) return Error("reading the schema", n.status());
  has_job_runs = n.value() == 1;
  Result<int64_t> c = db.QueryInt(
      "SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'client_request_id'");
  if (!c.ok()) return Error("reading the schema", c.status());
  has_client_request_id = c.value() == 1;
  Result<int64_t> sets =
      db.QueryInt("SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'partition'");
  if (!sets.ok()) return Error("reading the schema", sets.status());
  has_node_sets = sets.value() == 1;
  return Status::Ok();
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Result<Store> Store::Open(const std::string& path, const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->read_only = options.read_only;
  Result<Database> db = Database::Open(path, options.read_only);
  if (!db.ok()) return impl->Error("opening", db.status());
  impl->db = std::move(db).value();
  sqlite3_busy_timeout(impl->db.get(), options.busy_timeout_ms);
  if (options.read_only) {
    const int known = options.migrations.empty() ? 0 : options.migrations.back().version;
    Result<int64_t> version =
        impl->db.QueryInt("SELECT COALESCE(MAX(version), 0) FROM schema_version");
    if (!version.ok()) return impl->Error("opening for reading", version.status());
    if (version.value() < 1 || version.value() > known) {
      return impl->Error("opening for reading",
                         "schema version " + std::to_string(version.value()) +
                             " is not one this binary knows (1.." + std::to_string(known) + ")");
    }
    impl->schema_version = static_cast<int>(version.value());
    if (Status s = impl->DetectJobRuns(); !s.ok()) return s;
    return Store(std::move(impl));
  }
  // Outside any transaction: the journal mode cannot change inside one. WAL
  // sticks to the file once set.
  Result<std::string> mode = impl->db.QueryText("PRAGMA journal_mode = WAL");
  if (!mode.ok()) return impl->Error("opening", mode.status());
  if (mode.value() != "wal") {
    return impl->Error("opening", "SQLite would not use WAL mode (got \"" + mode.value() +
                                      "\"); the directory must let it create " + path +
                                      "-wal and " + path + "-shm");
  }
  // The WAL and its index stay on disk when the store closes: a restart on a
  // full disk then finds them and needs no new blocks to open and read (a
  // fresh index could not be sized there), so it serves reads.
  int persist = 1;
  sqlite3_file_control(impl->db.get(), "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  // FULL: every commit fsyncs the WAL, so an acknowledged write survives a
  // power loss, not only a process crash.
  if (Status s = impl->db.Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON"); !s.ok()) {
    return impl->Error("opening", s);
  }
  // Before the migrations: a store refused for a loss is left as it was.
  Store::Impl::MarkCheck mark_check;
  if (options.commit_mark) {
    Result<Store::Impl::MarkCheck> checked = impl->CheckMark(options.accept_data_loss);
    if (!checked.ok()) return checked.status();
    mark_check = std::move(checked).value();
  }
  if (Status s = Migrate(*impl, options.migrations); !s.ok()) return s;
  Result<int64_t> last_seq = impl->db.QueryInt("SELECT COALESCE(MAX(seq), 0) FROM events");
  Result<int64_t> last_time = impl->db.QueryInt(
      "SELECT COALESCE((SELECT time_ms FROM events ORDER BY seq DESC LIMIT 1), 0)");
  if (!last_seq.ok()) return impl->Error("reading the log", last_seq.status());
  if (!last_time.ok()) return impl->Error("reading the log", last_time.status());
  impl->last_seq = last_seq.value();
  impl->last_time = last_time.value();
  if (Status s = impl->DetectJobRuns(); !s.ok()) return s;
  if (Status s = impl->PrepareWriteStatements(); !s.ok()) return s;
  if (options.commit_mark) {
    if (Status s = impl->KeepMark(mark_check); !s.ok()) return s;
  }
  return Store(std::move(impl));
}

Result<AppendResult> Store::Append(const core::Topology& topology, std::span<const LogEntry> batch,
                                   const std::function<Status()>& before_commit) {
  try {
    return AppendBatch(*impl_, topology, batch, before_commit);
  } catch (const std::exception& e) {  // the transaction, if any, rolled back
    return impl_->Error("appending", e.what());
  }
}

Status Store::ReadEvents(int64_t from_seq, const core::Topology& topology,
                         const std::function<Status(const StoredEvent&)>& fn) {
  try {
    return ReadLog(*impl_, from_seq, topology, fn);
  } catch (const std::exception& e) {
    return impl_->Error("reading events", e.what());
  }
}

Result<ReplayReport> Store::Replay(core::SchedulerCore& core, int64_t from_seq) {
  try {
    return impl_->ReplayLog(core, std::max<int64_t>(1, from_seq), /*fresh=*/true);
  } catch (const std::exception& e) {
    return impl_->Error("replaying", e.what());
  }
}

int64_t Store::LastSeq() const {
  if (impl_->read_only) {
    Result<int64_t> seq = impl_->db.QueryInt("SELECT COALESCE(MAX(seq), 0) FROM events");
    return seq.ok() ? seq.value() : 0;
  }
  return impl_->last_seq;
}
TimeMs Store::LastTime() const { return impl_->last_time; }
const std::optional<DataLoss>& Store::accepted_loss() const { return impl_->accepted_loss; }
int Store::SchemaVersion() const { return impl_->schema_version; }
const std::string& Store::path() const { return impl_->path; }

}  // namespace topo::store
