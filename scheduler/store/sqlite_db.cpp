// RAII over the SQLite C API (sqlite_db.hpp).

#include "store/sqlite_db.hpp"

#include <utility>

namespace topo::store::internal {

using core::Result;
using core::Status;

namespace {

std::string Message(sqlite3* db, int rc) {
  std::string m = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return m + " (SQLite code " + std::to_string(rc) + ")";
}

}  // namespace

// ---------------------------------------------------------------- Statement

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), bind_rc_(other.bind_rc_) {
  other.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_rc_ = other.bind_rc_;
  }
  return *this;
}

Statement& Statement::Bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  int rc = sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::BindNull(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::BindTimeOrNull(int index, int64_t value) {
  return value < 0 ? BindNull(index) : Bind(index, value);
}

Result<bool> Statement::Step() {
  if (bind_rc_ != SQLITE_OK) return Status::Error("binding a parameter: " + Message(db_, bind_rc_));
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Status::Error(Message(db_, rc));
}

Status Statement::Run() {
  for (;;) {
    Result<bool> row = Step();
    if (!row.ok()) {
      Reset();
      return row.status();
    }
    if (!row.value()) break;
  }
  Reset();
  return Status::Ok();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
}

int64_t Statement::Int64(int column) const { return sqlite3_column_int64(stmt_, column); }

int64_t Statement::Int64OrMinusOne(int column) const {
  return IsNull(column) ? -1 : sqlite3_column_int64(stmt_, column);
}

std::string Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Statement::Blob(int column) const {
  const void* bytes = sqlite3_column_blob(stmt_, column);
  if (bytes == nullptr) return {};
  return std::string(static_cast<const char*>(bytes),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int Statement::Changes() const { return sqlite3_changes(db_); }

// ---------------------------------------------------------------- Database

Database::~Database() { sqlite3_close_v2(db_); }

Database::Database(Database&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Result<Database> Database::Open(const std::string& path, bool read_only) {
  sqlite3* db = nullptr;
  // NOMUTEX: one owner per connection; the store is not shared between
  // threads.
  const int flags =
      (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
      SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = Message(db, rc);
    sqlite3_close_v2(db);
    return Status::Error(m);
  }
  sqlite3_extended_result_codes(db, 1);
  return Database(db);
}

Status Database::Exec(std::string_view sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string m = error != nullptr ? std::string(error) : Message(db_, rc);
  sqlite3_free(error);
  return Status::Error(m + " (SQLite code " + std::to_string(rc) + ")");
}

Result<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return Status::Error("preparing \"" + std::string(sql.substr(0, 60)) +
                         "\": " + Message(db_, rc));
  }
  return Statement(db_, stmt);
}

Result<int64_t> Database::QueryInt(std::string_view sql) {
  Result<Statement> st = Prepare(sql);
  if (!st.ok()) return st.status();
  Result<bool> row = st.value().Step();
  if (!row.ok()) return row.status();
  if (!row.value()) return Status::Error("no row from \"" + std::string(sql) + "\"");
  return st.value().Int64(0);
}

Result<std::string> Database::QueryText(std::string_view sql) {
  Result<Statement> st = Prepare(sql);
  if (!st.ok()) return st.status();
  Result<bool> row = st.value().Step();
  if (!row.ok()) return row.status();
  if (!row.value()) return Status::Error("no row from \"" + std::string(sql) + "\"");
  return st.value().Text(0);
}

bool Database::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

std::string Database::LastError() const { return sqlite3_errmsg(db_); }

// ---------------------------------------------------------------- Transaction

Result<Transaction> Transaction::Begin(Database& db) {
  if (Status s = db.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ != nullptr && db_->InTransaction()) (void)db_->Exec("ROLLBACK");
}

Status Transaction::Commit() {
  Database* db = std::exchange(db_, nullptr);
  Status s = db->Exec("COMMIT");
  if (!s.ok() && db->InTransaction()) (void)db->Exec("ROLLBACK");
  return s;
}

}  // namespace topo::store::internal
