// Store::Open's check of the commit mark, and Append's write of it
// (commit_mark.hpp, docs/store.md "The commit mark").

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "store/store_impl.hpp"

namespace topo::store {

using core::Result;
using core::Status;
using internal::CommitMark;
using internal::Statement;

namespace {

constexpr const char* kAcceptFlag = "--accept-data-loss";

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<bool> HasTable(internal::Database& db, const std::string& name) {
  Result<int64_t> n = db.QueryInt(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '" + name + "'");
  if (!n.ok()) return n.status();
  return n.value() == 1;
}

}  // namespace

Result<Store::Impl::MarkCheck> Store::Impl::CheckMark(bool accept) {
  MarkCheck c;
  const std::string mark_path = internal::CommitMarkPath(path);
  // The file may be new or from any schema version: read what exists.
  Result<bool> has_events = HasTable(db, "events");
  Result<bool> has_jobs = HasTable(db, "jobs");
  Result<bool> has_meta = HasTable(db, "meta");
  for (const auto* r : {&has_events, &has_jobs, &has_meta}) {
    if (!r->ok()) return Error("reading the schema", r->status());
  }
  if (has_events.value()) {
    Result<int64_t> seq = db.QueryInt("SELECT COALESCE(MAX(seq), 0) FROM events");
    if (!seq.ok()) return Error("reading the log", seq.status());
    c.store_seq = seq.value();
  }
  if (has_jobs.value()) {
    Result<int64_t> job = db.QueryInt("SELECT COALESCE(MAX(id), 0) FROM jobs");
    if (!job.ok()) return Error("reading jobs", job.status());
    c.store_job = job.value();
  }
  if (has_meta.value()) {
    Result<Statement> q = db.Prepare("SELECT value FROM meta WHERE key = 'store_id'");
    if (!q.ok()) return Error("reading meta", q.status());
    Result<bool> row = q.value().Step();
    if (!row.ok()) return Error("reading meta", row.status());
    if (row.value() && !q.value().Text(0).empty()) c.store_id = q.value().Text(0);
  }

  const std::string seq_text = std::to_string(c.store_seq);
  const std::string as_is =
      "start with " + std::string(kAcceptFlag) + " to take the log as it is (seq " + seq_text + ")";
  std::string problem;  // why the store cannot be trusted, for the error
  std::string lost;     // the same, for DataLoss::message
  int64_t mark_seq = -1;
  Result<std::optional<internal::ReadMark>> read = internal::ReadCommitMark(mark_path);
  if (!read.ok()) {
    problem = "its commit mark is damaged (" + read.message() +
              "), so whether acknowledged events were lost cannot be told. Check the disk (dmesg, "
              "smartctl), then restore a backup (docs/operations.md, Restore) or " +
              as_is;
    lost = "the commit mark was damaged (" + read.message() + ")";
  } else if (!read.value()) {
    if (c.store_id) {
      problem = "its commit mark " + mark_path + " is missing, but this store (id " + *c.store_id +
                ") had one: the state directory is incomplete (copied without it?), so whether "
                "acknowledged events were lost cannot be told. Copy the whole state directory, "
                "restore a backup with `topo-scheduler restore`, or " +
                as_is;
      lost = "the commit mark was missing";
    }
  } else {
    c.read = read.value();
    const CommitMark& m = c.read->mark;
    mark_seq = m.seq;
    if (c.store_id && m.store_id != *c.store_id) {
      c.foreign = true;
      problem = "its commit mark " + mark_path + " belongs to another store (id " + m.store_id +
                ", this one is " + *c.store_id +
                "): the store file was replaced by hand. Put a backup in place with "
                "`topo-scheduler restore`, or " +
                as_is;
      lost = "the commit mark belonged to another store (id " + m.store_id + ", at seq " +
             std::to_string(m.seq) + ")";
      mark_seq = -1;
    } else if (m.seq > c.store_seq) {
      const std::string range =
          m.seq == c.store_seq + 1
              ? "event " + std::to_string(m.seq) + " is"
              : "events " + std::to_string(c.store_seq + 1) + ".." + std::to_string(m.seq) + " are";
      problem = "its log ends at seq " + seq_text + ", but its commit mark " + mark_path +
                " says seq " + std::to_string(m.seq) + " was committed and acknowledged: " + range +
                " lost (the write-ahead log " + path +
                "-wal ends early: a torn copy or a failing disk). Restore the newest backup "
                "(docs/operations.md, Restore), or start with " +
                kAcceptFlag + " to run on the " + seq_text + " events that are left";
      lost = range + " lost (the log ended at seq " + seq_text + ", its commit mark said " +
             std::to_string(m.seq) + ")";
    }
  }
  if (problem.empty()) return c;
  if (!accept) return Error("opening", problem);
  DataLoss loss;
  loss.store_seq = c.store_seq;
  loss.mark_seq = mark_seq;
  loss.message = "accepted (" + std::string(kAcceptFlag) + "): " + lost +
                 "; the commit mark now says seq " + seq_text;
  c.loss = std::move(loss);
  return c;
}

Status Store::Impl::KeepMark(const MarkCheck& c) {
  const std::string mark_path = internal::CommitMarkPath(path);
  CommitMark current;
  if (c.store_id) {
    current.store_id = *c.store_id;
  } else if (c.read && !c.read->mark.store_id.empty()) {
    // A mark made before the store's id was recorded (a crash in between).
    current.store_id = c.read->mark.store_id;
  } else {
    current.store_id = internal::NewStoreId();
  }
  current.seq = last_seq;
  current.max_job_id = c.store_job;
  if (c.read && !c.foreign) {
    current.max_job_id = std::max(current.max_job_id, c.read->mark.max_job_id);
  }
  // A new or replaced file for a missing, damaged or foreign mark and after
  // an accepted loss; else writes in place, which needs no new blocks.
  int newest_slot = 0;
  if (!c.read || c.loss) {
    if (Status s = internal::ResetCommitMark(mark_path, current); !s.ok()) {
      return Error("writing the commit mark", s);
    }
  } else {
    newest_slot = c.read->newest_slot;
  }
  Result<internal::CommitMarkWriter> writer =
      internal::CommitMarkWriter::Open(mark_path, newest_slot);
  if (!writer.ok()) return Error("opening the commit mark", writer.status());
  mark = std::make_unique<internal::CommitMarkWriter>(std::move(writer).value());
  if (c.read && !c.loss && (c.read->mark != current || !c.read->both_valid)) {
    // The store is ahead (a crash between a commit and its mark), or a slot
    // was torn: both are repaired by writing the store's state.
    if (Status s = mark->Write(current); !s.ok()) return Error("writing the commit mark", s);
  }
  store_id = current.store_id;
  max_job_id = current.max_job_id;
  // The id goes into the store only once the mark that carries it is on
  // disk, so a store with an id always had a mark.
  if (!c.store_id) {
    Result<Statement> q = db.Prepare(
        "INSERT INTO meta(key, value) VALUES ('store_id', ?1) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    if (!q.ok()) return Error("writing meta \"store_id\"", q.status());
    if (Status s = q.value().Bind(1, current.store_id).Run(); !s.ok()) {
      return Error("writing meta \"store_id\"", s);
    }
  }
  if (c.loss) {
    accepted_loss = c.loss;
    const nlohmann::json detail = {{"store_seq", c.loss->store_seq},
                                   {"mark_seq", c.loss->mark_seq},
                                   {"max_job_id", current.max_job_id},
                                   {"message", c.loss->message}};
    Result<Statement> q = db.Prepare(
        "INSERT INTO audit(time_ms, actor, action, detail) VALUES (?1, 'scheduler', "
        "'store.data_loss_accepted', ?2)");
    if (!q.ok()) return Error("recording the accepted loss", q.status());
    if (Status s = q.value().Bind(1, WallClockMs()).Bind(2, detail.dump()).Run(); !s.ok()) {
      return Error("recording the accepted loss", s);
    }
  }
  return Status::Ok();
}

Status Store::Impl::WriteMark() {
  if (mark == nullptr) return Status::Ok();
  return mark->Write(CommitMark{store_id, last_seq, max_job_id});
}

}  // namespace topo::store
