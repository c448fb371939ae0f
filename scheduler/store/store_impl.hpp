#pragma once
// Store's internals, split over store.cpp (open, migrations, append, read,
// replay), store_tables.cpp (materialized tables and their queries) and
// store_auth.cpp (users, tokens, meta).

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/commit_mark.hpp"
#include "store/sqlite_db.hpp"
#include "store/store.hpp"

namespace topo::store {

// Steps q to the end, collecting read(q) for each row.
template <typename Row, typename ReadRow>
core::Result<std::vector<Row>> Collect(internal::Statement& q, ReadRow read) {
  std::vector<Row> rows;
  for (;;) {
    core::Result<bool> row = q.Step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    rows.push_back(read(q));
  }
  return rows;
}

// The jobs columns that JobRow is read from, and the reader
// (store_tables.cpp): "SELECT " + JobColumns() + " FROM jobs ...".
std::string JobColumns(bool has_job_runs, bool has_node_sets);
JobRow ReadJobRowAt(const internal::Statement& q);

// Statements of the write path, prepared once per connection.
struct WriteStatements {
  internal::Statement insert_event;
  internal::Statement insert_job;
  internal::Statement job_request_id;
  internal::Statement job_node_sets;  // a job's partition and reservation
  // Not a write: the strand's idempotency check of every submission that
  // carries a client_request_id (Store::JobsByClientRequest).
  internal::Statement jobs_by_request;
  internal::Statement job_checkpoint;
  internal::Statement job_start;
  internal::Statement job_restart;
  internal::Statement job_stop;
  internal::Statement job_state;
  internal::Statement upsert_tenant;
  internal::Statement upsert_node;
  internal::Statement insert_gpu_health;
  internal::Statement insert_job_event;
  internal::Statement run_open;
  internal::Statement run_close;
};

// One entry of a batch, encoded before the transaction starts.
struct EncodedEntry {
  std::string kind;
  nlohmann::json event;
  nlohmann::json commands;  // array, parallel to LogEntry::commands
  std::string body;         // {"event": ..., "commands": [...]}
};

class Store::Impl {
 public:
  std::string path;
  internal::Database db;
  int schema_version = 0;
  bool read_only = false;
  // The schema has job_runs (0004_job_runs.sql); tests that migrate to an
  // older version run without it.
  bool has_job_runs = false;
  // jobs.client_request_id (0006_client_request_id.sql), likewise.
  bool has_client_request_id = false;
  // jobs.partition and jobs.reservation (0008_job_node_sets.sql), likewise.
  bool has_node_sets = false;
  int64_t last_seq = 0;
  TimeMs last_time = 0;
  WriteStatements write;
  // The commit mark (commit_mark.hpp), kept by Append; null when opened
  // without one (read-only, or OpenOptions::commit_mark off).
  std::unique_ptr<internal::CommitMarkWriter> mark;
  std::string store_id;  // meta "store_id", which the mark carries
  JobId max_job_id = 0;  // the largest ever committed, an accepted loss's included
  std::optional<DataLoss> accepted_loss;
  // The status of each job's newest non-zero rank exit whose run is still
  // open: the core may decide it is an application failure only when its
  // attribution window ends, at a tick that carries no exit status; the run
  // closed then gets this one (store_tables.cpp). In memory: a daemon
  // restarted inside the window leaves that run's exit_code null.
  std::unordered_map<core::JobId, int64_t> held_exit_codes;

  // "store PATH: what: problem"
  core::Status Error(std::string_view what, std::string_view problem) const {
    return core::Status::Error("store " + path + ": " + std::string(what) + ": " +
                               std::string(problem));
  }
  core::Status Error(std::string_view what, const core::Status& cause) const {
    return Error(what, cause.message());
  }

  // Sets has_job_runs, has_client_request_id and has_node_sets from the
  // file's schema
  // (store.cpp).
  core::Status DetectJobRuns();
  // store.cpp: feeds the events from from_seq through core; fresh: the core
  // must not have stepped yet (else it holds a restored snapshot).
  core::Result<ReplayReport> ReplayLog(core::SchedulerCore& core, int64_t from_seq, bool fresh);

  // store_mark.cpp: Open's two steps for the commit mark. CheckMark runs
  // before the migrations (a refused store is left as it was) and refuses a
  // store behind its mark unless accept; KeepMark, after them, brings the
  // mark to the store and opens its writer.
  struct MarkCheck {
    std::optional<internal::ReadMark> read;  // the file's newest record
    std::optional<std::string> store_id;     // the store's meta "store_id"
    int64_t store_seq = 0;
    int64_t store_job = 0;
    bool foreign = false;  // the mark belongs to another store
    std::optional<DataLoss> loss;
  };
  core::Result<MarkCheck> CheckMark(bool accept);
  core::Status KeepMark(const MarkCheck& check);
  // After a commit up to last_seq: the mark follows.
  core::Status WriteMark();

  // store_tables.cpp
  core::Status PrepareWriteStatements();
  // The effects of one logged entry on the materialized tables.
  // REQUIRES: inside the Append transaction.
  core::Status Materialize(const core::Topology& topology, const LogEntry& entry,
                           const EncodedEntry& encoded, int64_t seq, TimeMs time);
};

}  // namespace topo::store
