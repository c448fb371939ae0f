#include "store/backup.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "store/commit_mark.hpp"
#include "store/migrations.hpp"
#include "store/sqlite_db.hpp"
#include "store/store.hpp"

namespace topo::store {

using core::Result;
using core::Status;
using internal::Database;

namespace {

// Copies every page of `from` into `to` in one pass of the backup API.
Status CopyDatabase(sqlite3* from, sqlite3* to) {
  sqlite3_backup* b = sqlite3_backup_init(to, "main", from, "main");
  if (b == nullptr) return Status::Error(sqlite3_errmsg(to));
  int rc = SQLITE_OK;
  // Steps of 256 pages, waiting briefly when the daemon holds a lock.
  do {
    rc = sqlite3_backup_step(b, 256);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(20);
  } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) return Status::Error(sqlite3_errstr(rc));
  return Status::Ok();
}

// What a copy holds, after checking it is a whole toposched store this
// binary can read.
Result<BackupInfo> Inspect(Database& db, const std::string& shown) {
  Result<std::string> ok = db.QueryText("PRAGMA integrity_check");
  if (!ok.ok()) return Status::Error(shown + ": not a readable SQLite database: " + ok.message());
  if (ok.value() != "ok") return Status::Error(shown + ": damaged: " + ok.value());
  Result<int64_t> has = db.QueryInt(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
      "('schema_version', 'events', 'jobs')");
  if (!has.ok() || has.value() != 3) {
    return Status::Error(shown +
                         ": not a toposched store (no schema_version, events and jobs "
                         "tables)");
  }
  BackupInfo info;
  Result<int64_t> v = db.QueryInt("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!v.ok()) return Status::Error(shown + ": " + v.message());
  info.schema_version = static_cast<int>(v.value());
  const int known = EmbeddedMigrations().empty() ? 0 : EmbeddedMigrations().back().version;
  if (info.schema_version > known) {
    return Status::Error(shown + ": schema version " + std::to_string(info.schema_version) +
                         " is newer than this topo-scheduler knows (1.." + std::to_string(known) +
                         "): restore it with the release that wrote it, or a newer one");
  }
  Result<int64_t> jobs = db.QueryInt("SELECT count(*) FROM jobs");
  Result<int64_t> events = db.QueryInt("SELECT count(*) FROM events");
  if (!jobs.ok() || !events.ok()) return Status::Error(shown + ": cannot count jobs and events");
  info.jobs = jobs.value();
  info.events = events.value();
  return info;
}

// Copies `from` (opened read-only) into a fresh file `tmp` (0600), checks the
// copy and renames it to `final_path`.
Result<BackupInfo> CopyTo(const std::string& from, const std::string& from_shown,
                          const std::string& tmp, const std::string& final_path) {
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  // Created 0600 before SQLite opens it, so the copy is never readable by others.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot create " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  auto fail = [&](const std::string& m) -> Result<BackupInfo> {
    std::filesystem::remove(tmp, ec);
    return Status::Error(m);
  };
  Result<BackupInfo> info = Status::Error("not copied");
  {
    Result<Database> src = Database::Open(from, /*read_only=*/true);
    if (!src.ok()) return fail("cannot open " + from_shown + ": " + src.message());
    Result<Database> dst = Database::Open(tmp);
    if (!dst.ok()) return fail("cannot open " + tmp + ": " + dst.message());
    sqlite3_busy_timeout(src.value().get(), 5000);
    if (Status s = CopyDatabase(src.value().get(), dst.value().get()); !s.ok()) {
      return fail("copying " + from_shown + ": " + s.message());
    }
    info = Inspect(dst.value(), from_shown);
    if (!info.ok()) return fail(info.message());
    // The copy is a rollback-journal database; the daemon turns WAL back on.
    if (Status s = dst.value().Exec("PRAGMA journal_mode = DELETE"); !s.ok()) {
      return fail(tmp + ": " + s.message());
    }
  }  // both closed before the rename
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) return fail("cannot rename " + tmp + " to " + final_path + ": " + ec.message());
  return info;
}

// Back to one file with a rollback journal, as CopyTo leaves a copy: a
// store that was opened is in WAL mode, and its -wal must not stay behind
// under the old name when the file is renamed.
Status ToRollbackJournal(const std::string& path) {
  {
    Result<Database> db = Database::Open(path);
    if (!db.ok()) return Status::Error(path + ": " + db.message());
    Result<std::string> mode = db.value().QueryText("PRAGMA journal_mode = DELETE");
    if (!mode.ok()) return Status::Error(path + ": " + mode.message());
    if (mode.value() != "delete") {
      return Status::Error(path + ": SQLite would not leave WAL mode (got \"" + mode.value() +
                           "\")");
    }
  }
  std::error_code ec;
  std::filesystem::remove(path + "-wal", ec);
  std::filesystem::remove(path + "-shm", ec);
  return Status::Ok();
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open " + dir + ": " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::Error("cannot fsync " + dir + ": " + std::strerror(err));
  return Status::Ok();
}

}  // namespace

Result<BackupInfo> BackupStore(const std::string& db_path, const std::string& out_path) {
  if (out_path.empty()) return Status::Error("--out: give the backup file's path");
  struct stat st;
  if (::lstat(out_path.c_str(), &st) == 0) {
    return Status::Error("--out " + out_path + " exists: give a new file (a backup never " +
                         "overwrites one)");
  }
  if (::stat(db_path.c_str(), &st) != 0) {
    return Status::Error("no store at " + db_path + ": give the daemon's --state-dir");
  }
  return CopyTo(db_path, db_path, out_path + ".partial", out_path);
}

Result<BackupInfo> RestoreStore(const std::string& file, const std::string& state_dir, bool force,
                                const RestoreCheck& check) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::Error(file + ": no such backup file");
  }
  const std::string db = state_dir + "/topo.db";
  if (::stat(db.c_str(), &st) == 0 && !force) {
    return Status::Error(state_dir +
                         " already holds a store (topo.db): restore into a new "
                         "--state-dir, or add --force to replace it");
  }
  // Everything is checked on this copy; the state directory's own files
  // change only once it passed.
  const std::string staged = db + ".restoring";
  const std::string staged_mark = internal::CommitMarkPath(staged);
  std::error_code ec;
  auto discard = [&] {
    for (const char* tail : {"", "-wal", "-shm", "-journal", ".partial"}) {
      std::filesystem::remove(staged + tail, ec);
    }
    std::filesystem::remove(staged_mark, ec);
    std::filesystem::remove(staged_mark + ".tmp", ec);
  };
  discard();  // what an interrupted restore left
  Result<BackupInfo> info = CopyTo(file, file, staged + ".partial", staged);
  if (!info.ok()) return info;
  auto refuse = [&](std::string why) -> Result<BackupInfo> {
    discard();
    // A store error names the copy; the backup is what is at fault.
    const std::string prefix = "store " + staged + ": ";
    if (why.starts_with(prefix)) why.erase(0, prefix.size());
    return Status::Error(file + ": not restored: " + why + "; " + db + " was left as it was");
  };
  internal::CommitMark mark;
  {
    OpenOptions options;
    options.commit_mark = false;
    Result<Store> copy = Store::Open(staged, options);
    if (!copy.ok()) return refuse(copy.message());
    Result<std::optional<std::string>> id = copy.value().GetMeta("store_id");
    if (!id.ok()) return refuse(id.message());
    mark.store_id = id.value() && !id.value()->empty() ? *id.value() : internal::NewStoreId();
    if (!id.value() || id.value()->empty()) {
      if (Status s = copy.value().SetMeta("store_id", mark.store_id); !s.ok()) {
        return refuse(s.message());
      }
    }
    mark.seq = copy.value().LastSeq();
    Result<int64_t> job = copy.value().MaxJobId();
    if (!job.ok()) return refuse(job.message());
    mark.max_job_id = job.value();
  }
  info.value().last_seq = mark.seq;
  if (check) {
    Result<std::string> checked = check(staged);
    if (!checked.ok()) return refuse(checked.message());
    info.value().checked = checked.value();
  }
  if (Status s = ToRollbackJournal(staged); !s.ok()) return refuse(s.message());
  if (Status s = internal::ResetCommitMark(staged_mark, mark); !s.ok()) return refuse(s.message());
  // The old store's mark stays until the new store is in place: a restore
  // interrupted before that leaves the old store refused, not short.
  for (const char* tail : {"-wal", "-shm"}) {
    // A replaced store's write-ahead log belongs to the old database.
    std::filesystem::remove(db + tail, ec);
  }
  std::filesystem::rename(staged, db, ec);
  if (ec) return Status::Error("cannot rename " + staged + " to " + db + ": " + ec.message());
  std::filesystem::rename(staged_mark, internal::CommitMarkPath(db), ec);
  if (ec) {
    return Status::Error("cannot rename " + staged_mark + " to " + internal::CommitMarkPath(db) +
                         ": " + ec.message() + "; run the restore again");
  }
  if (Status s = SyncDirectory(state_dir); !s.ok()) return s;
  return info;
}

}  // namespace topo::store
