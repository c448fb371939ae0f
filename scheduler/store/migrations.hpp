#pragma once
// Schema migrations, embedded at build time from schema/sql/NNNN_name.sql
// (scheduler/store/embed_sql.cmake).

#include <span>

namespace topo::store {

struct Migration {
  int version;       // NNNN of the file name: 1, 2, ... without gaps
  const char* name;  // the rest of the name, e.g. "init"
  const char* sql;   // statements run in the migration's transaction
};

// Every migration this binary knows, by ascending version.
std::span<const Migration> EmbeddedMigrations();

}  // namespace topo::store
