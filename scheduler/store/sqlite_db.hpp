#pragma once
// A thin RAII layer over the SQLite C API for the store: a connection, a
// prepared statement, a transaction. Errors are core::Status values with
// SQLite's message; nothing throws. Not thread-safe: one owner per
// connection (the store's).

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::store::internal {

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters count from 1, as in SQL (?1, ?2, ...). A bind error (a
  // programming error) is kept and returned by the next Step.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::string_view text);
  // Bytes as a BLOB (a snapshot): never read as text.
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);
  // value < 0 binds NULL (the store writes "never" as NULL, reads it as -1).
  Statement& BindTimeOrNull(int index, int64_t value);

  // One step: true with a row to read, false when done.
  core::Result<bool> Step();
  // Steps to the end, ignoring rows, then resets.
  core::Status Run();
  // Back to the start with no parameters bound; ends any read it holds.
  void Reset();

  int64_t Int64(int column) const;
  // NULL reads as -1.
  int64_t Int64OrMinusOne(int column) const;
  std::string Text(int column) const;
  std::string Blob(int column) const;
  bool IsNull(int column) const;
  // Rows changed by the last completed insert, update or delete.
  int Changes() const;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

class Database {
 public:
  Database() = default;
  ~Database();
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Opens (creating if absent) the file at path for reading and writing,
  // or an existing file for reading only.
  static core::Result<Database> Open(const std::string& path, bool read_only = false);

  // Runs one or more statements with no parameters.
  core::Status Exec(std::string_view sql);
  core::Result<Statement> Prepare(std::string_view sql);
  // The single integer or text that a one-row query gives.
  core::Result<int64_t> QueryInt(std::string_view sql);
  core::Result<std::string> QueryText(std::string_view sql);
  // True inside an explicit transaction.
  bool InTransaction() const;
  std::string LastError() const;
  sqlite3* get() const { return db_; }

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE (takes the write lock now, so a commit cannot fail on a
// lock taken later); rolls back on destruction unless committed.
class Transaction {
 public:
  static core::Result<Transaction> Begin(Database& db);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  // After an error SQLite may already have rolled back; either way the
  // transaction is over.
  core::Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

}  // namespace topo::store::internal
