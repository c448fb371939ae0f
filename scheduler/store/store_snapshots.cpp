// Store: snapshots of the scheduling core and compaction of the event log
// (docs/store.md, Snapshots and compaction).

#include <exception>

#include "store/store_impl.hpp"

namespace topo::store {
namespace {

using core::Result;
using core::Status;
using internal::Statement;
using internal::Transaction;

Status WriteSnapshotRow(Store::Impl& impl, int format, std::string_view state, TimeMs created_ms) {
  if (impl.last_seq == 0) return impl.Error("writing a snapshot", "the event log is empty");
  if (state.empty()) return impl.Error("writing a snapshot", "the state is empty");
  Result<Transaction> tx = Transaction::Begin(impl.db);
  if (!tx.ok()) return impl.Error("writing a snapshot", tx.status());
  Result<Statement> insert = impl.db.Prepare(
      "INSERT OR IGNORE INTO snapshots(seq, time_ms, format, created_ms, state) "
      "VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!insert.ok()) return impl.Error("writing a snapshot", insert.status());
  insert.value().Bind(1, impl.last_seq).Bind(2, impl.last_time).Bind(3, format);
  insert.value().Bind(4, created_ms).BindBlob(5, state);
  if (Status s = insert.value().Run(); !s.ok()) return impl.Error("writing a snapshot", s);
  Result<Statement> prune = impl.db.Prepare(
      "DELETE FROM snapshots WHERE seq NOT IN "
      "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?1)");
  if (!prune.ok()) return impl.Error("pruning snapshots", prune.status());
  if (Status s = prune.value().Bind(1, kKeptSnapshots).Run(); !s.ok()) {
    return impl.Error("pruning snapshots", s);
  }
  if (Status s = tx.value().Commit(); !s.ok()) return impl.Error("committing a snapshot", s);
  return Status::Ok();
}

Result<int64_t> CompactBatch(Store::Impl& impl, TimeMs before_ms, int limit) {
  if (limit <= 0) return int64_t{0};
  Result<int64_t> kept =
      impl.db.QueryInt("SELECT CASE WHEN count(*) >= " + std::to_string(kKeptSnapshots) +
                       " THEN MIN(seq) ELSE 0 END FROM "
                       "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT " +
                       std::to_string(kKeptSnapshots) + ")");
  if (!kept.ok()) return impl.Error("compacting", kept.status());
  if (kept.value() <= 1) return int64_t{0};
  // Times never decrease along the log, so the events due are a prefix of
  // it: the batch ends at `cut`, and everything up to it goes.
  Result<Statement> last = impl.db.Prepare(
      "SELECT COALESCE(MAX(seq), 0) FROM (SELECT seq FROM events WHERE seq < ?1 AND "
      "time_ms < ?2 ORDER BY seq LIMIT ?3)");
  if (!last.ok()) return impl.Error("compacting", last.status());
  last.value().Bind(1, kept.value()).Bind(2, before_ms).Bind(3, limit);
  Result<bool> row = last.value().Step();
  if (!row.ok()) return impl.Error("compacting", row.status());
  const int64_t cut = row.value() ? last.value().Int64(0) : 0;
  last.value().Reset();
  if (cut <= 0) return int64_t{0};
  Result<Transaction> tx = Transaction::Begin(impl.db);
  if (!tx.ok()) return impl.Error("compacting", tx.status());
  int64_t deleted = 0;
  for (const char* sql :
       {"DELETE FROM job_events WHERE seq <= ?1", "DELETE FROM events WHERE seq <= ?1"}) {
    Result<Statement> del = impl.db.Prepare(sql);
    if (!del.ok()) return impl.Error("compacting", del.status());
    if (Status s = del.value().Bind(1, cut).Run(); !s.ok()) return impl.Error("compacting", s);
    deleted = del.value().Changes();
  }
  if (Status s = tx.value().Commit(); !s.ok()) return impl.Error("committing a compaction", s);
  return deleted;
}

}  // namespace

Status Store::WriteSnapshot(int format, std::string_view state, TimeMs created_ms) {
  try {
    return WriteSnapshotRow(*impl_, format, state, created_ms);
  } catch (const std::exception& e) {
    return impl_->Error("writing a snapshot", e.what());
  }
}

Result<std::vector<SnapshotRow>> Store::Snapshots(int64_t min_seq) {
  Result<Statement> q = impl_->db.Prepare(
      "SELECT seq, time_ms, format, created_ms, state FROM snapshots WHERE seq >= ?1 "
      "ORDER BY seq DESC");
  if (!q.ok()) return impl_->Error("reading snapshots", q.status());
  q.value().Bind(1, min_seq);
  Result<std::vector<SnapshotRow>> rows = Collect<SnapshotRow>(q.value(), [](const Statement& s) {
    return SnapshotRow{s.Int64(0), s.Int64(1), static_cast<int>(s.Int64(2)), s.Int64(3), s.Blob(4)};
  });
  if (!rows.ok()) return impl_->Error("reading snapshots", rows.status());
  return rows;
}

Result<ReplayReport> Store::ReplayAfter(core::SchedulerCore& core, int64_t after_seq) {
  try {
    return impl_->ReplayLog(core, std::max<int64_t>(0, after_seq) + 1, /*fresh=*/false);
  } catch (const std::exception& e) {
    return impl_->Error("replaying", e.what());
  }
}

Result<int64_t> Store::FirstSeq() {
  Result<int64_t> first = impl_->db.QueryInt("SELECT COALESCE(MIN(seq), 0) FROM events");
  if (!first.ok()) return impl_->Error("reading the log", first.status());
  return first.value();
}

Result<int64_t> Store::CompactEvents(TimeMs before_ms, int limit) {
  try {
    return CompactBatch(*impl_, before_ms, limit);
  } catch (const std::exception& e) {
    return impl_->Error("compacting", e.what());
  }
}

}  // namespace topo::store
