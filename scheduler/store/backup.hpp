#pragma once
// Online backup and restore of the store (topo-scheduler backup / restore),
// through SQLite's backup API: a backup is a consistent copy of the database
// as of one committed transaction, taken while the daemon runs (WAL lets a
// reader copy while the daemon writes). docs/operations.md.

#include <cstdint>
#include <functional>
#include <string>

#include "topo/core/status.hpp"

namespace topo::store {

struct BackupInfo {
  int schema_version = 0;
  int64_t jobs = 0;
  int64_t events = 0;
  int64_t last_seq = 0;  // RestoreStore: the restored log's newest event
  std::string checked;   // RestoreStore: what the RestoreCheck said it did
};

// Rebuilds the scheduler from the store file at `path` as a daemon's start
// does, and says what it did ("replayed N events ..."); an error names the
// event at fault. topo-scheduler's restore passes one (daemon/, which owns
// the rebuild); it may open and migrate the file, not change its log.
using RestoreCheck = std::function<core::Result<std::string>(const std::string& path)>;

// Copies the store at `db_path` into a new file `out_path` (mode 0600; refused
// when it exists), written beside it under a temporary name and renamed when
// complete, so a crash leaves no half backup under that name. Checks the copy
// (integrity, schema version) before it is renamed.
core::Result<BackupInfo> BackupStore(const std::string& db_path, const std::string& out_path);

// Puts the backup `file` in place as STATE_DIR/topo.db, after checking a
// copy of it (STATE_DIR/topo.db.restoring): a toposched store that passes
// SQLite's integrity check, of a schema version this binary knows (a newer
// one is refused, naming both versions), that opens and migrates, and, when
// `check` is given, from which it rebuilds the scheduler (the replay checks
// that the log runs on without a gap from its epoch's start or from the
// snapshot it restores, and that every event it steps reads back). Any
// error leaves the state directory as it was. Then the copy replaces the
// store (its -wal and -shm go) and gets a commit mark at its newest event
// (commit_mark.hpp), so the daemon starts on it without --accept-data-loss.
// A state directory that already holds a store is refused unless `force`;
// the daemon must not run on it (the caller holds its lock). An interrupted
// restore may leave either store with a mark that does not fit it: run the
// restore again.
core::Result<BackupInfo> RestoreStore(const std::string& file, const std::string& state_dir,
                                      bool force, const RestoreCheck& check = {});

}  // namespace topo::store
