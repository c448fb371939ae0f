#pragma once
// Online backup and restore of the store (topo-scheduler backup / restore),
// through SQLite's backup API: a backup is a consistent copy of the database
// as of one committed transaction, taken while the daemon runs (WAL lets a
// reader copy while the daemon writes). docs/operations.md.

#include <string>

#include "topo/core/status.hpp"

namespace topo::store {

struct BackupInfo {
  int schema_version = 0;
  int64_t jobs = 0;
  int64_t events = 0;
};

// Copies the store at `db_path` into a new file `out_path` (mode 0600; refused
// when it exists), written beside it under a temporary name and renamed when
// complete, so a crash leaves no half backup under that name. Checks the copy
// (integrity, schema version) before it is renamed.
core::Result<BackupInfo> BackupStore(const std::string& db_path, const std::string& out_path);

// Checks that `file` is a toposched store this binary can open (a newer
// schema version is refused, naming both versions) and copies it into
// STATE_DIR/topo.db. A state directory that already holds a store is refused
// unless `force`; the daemon must not run on it (the caller holds its lock).
core::Result<BackupInfo> RestoreStore(const std::string& file, const std::string& state_dir,
                                      bool force);

}  // namespace topo::store
