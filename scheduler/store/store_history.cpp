// Accounting reads: the runs of jobs, job history and usage per tenant or
// user, over the job_runs table and the jobs indexes of
// schema/sql/0004_job_runs.sql.

#include <algorithm>
#include <map>

#include "store/store_impl.hpp"
#include "topo/common/event_json.hpp"

namespace topo::store {
namespace {

using core::Result;
using core::Status;
using internal::Statement;
using Json = nlohmann::json;

// The scope as SQL over the column `tenant`, its parameters numbered from
// `first` ("1" when the scope is everything). A subtree is a range, not a
// LIKE: tenant names may hold '_', and a range uses the index.
struct ScopeSql {
  std::string where = "1";
  std::vector<std::string> params;
};

ScopeSql ScopeWhere(const TenantScope& scope, int first, std::string_view column = "tenant") {
  ScopeSql out;
  const std::string c(column);
  const std::string a = "?" + std::to_string(first);
  switch (scope.kind) {
    case TenantScope::Kind::kAll:
      break;
    case TenantScope::Kind::kTenant:
      out.where = c + " = " + a;
      out.params = {scope.tenant};
      break;
    case TenantScope::Kind::kSubtree: {
      const std::string b = "?" + std::to_string(first + 1);
      const std::string d = "?" + std::to_string(first + 2);
      // '0' is the character after '/': "org/" <= t < "org0" is "org/...".
      out.where = "(" + c + " = " + a + " OR (" + c + " >= " + b + " AND " + c + " < " + d + "))";
      out.params = {scope.tenant, scope.tenant + "/", scope.tenant + "0"};
      break;
    }
  }
  return out;
}

void BindScope(Statement& q, const ScopeSql& scope, int first) {
  for (size_t i = 0; i < scope.params.size(); ++i) {
    q.Bind(first + static_cast<int>(i), scope.params[i]);
  }
}

JobRunRow ReadRun(const Statement& q) {
  JobRunRow r;
  r.job = q.Int64(0);
  r.run = static_cast<int>(q.Int64(1));
  r.start_ms = q.Int64(2);
  r.end_ms = q.Int64OrMinusOne(3);
  r.gpus = static_cast<int>(q.Int64(4));
  r.nodes = static_cast<int>(q.Int64(5));
  r.ranks_json = q.Text(6);
  r.end_reason = q.IsNull(7) ? std::string() : q.Text(7);
  if (!q.IsNull(8)) r.exit_code = static_cast<int>(q.Int64(8));
  r.gpu_ms = q.IsNull(9) ? 0 : q.Int64(9);
  return r;
}

}  // namespace

Result<std::vector<JobRunRow>> Store::ListJobRuns(std::span<const JobId> jobs) {
  if (jobs.empty() || !impl_->has_job_runs) return std::vector<JobRunRow>{};
  Result<Statement> q = impl_->db.Prepare(
      "SELECT job, run, start_ms, end_ms, gpus, nodes, ranks, end_reason, exit_code, gpu_ms "
      "FROM job_runs WHERE job IN (SELECT value FROM json_each(?1)) ORDER BY job, run");
  if (!q.ok()) return impl_->Error("reading job runs", q.status());
  Json ids = Json::array();
  for (JobId id : jobs) ids.push_back(id);
  q.value().Bind(1, ids.dump());
  Result<std::vector<JobRunRow>> rows = Collect<JobRunRow>(q.value(), ReadRun);
  if (!rows.ok()) return impl_->Error("reading job runs", rows.status());
  return rows;
}

Result<std::vector<JobRow>> Store::ListHistory(const HistoryQuery& query) {
  if (!impl_->has_job_runs) return impl_->Error("listing history", "the schema has no job_runs");
  // ?1 after, ?2 limit, ?3 tenant, ?4 user, ?5 states (JSON array),
  // ?6 since, ?7 until, ?8.. the scope.
  std::string sql = "SELECT " + JobColumns(true, impl_->has_node_sets) + " FROM jobs WHERE id > ?1";
  if (query.tenant) sql += " AND tenant = ?3";
  if (query.user) sql += " AND user = ?4";
  if (!query.states.empty()) sql += " AND state IN (SELECT value FROM json_each(?5))";
  if (query.since) sql += " AND (end_ms >= ?6 OR end_ms IS NULL)";
  if (query.until) sql += " AND submit_ms < ?7";
  const ScopeSql scope = ScopeWhere(query.scope, 8);
  sql += " AND " + scope.where + " ORDER BY id LIMIT ?2";
  Result<Statement> q = impl_->db.Prepare(sql);
  if (!q.ok()) return impl_->Error("listing history", q.status());
  Statement& st = q.value();
  st.Bind(1, query.after_id).Bind(2, query.limit);
  if (query.tenant) st.Bind(3, *query.tenant);
  if (query.user) st.Bind(4, *query.user);
  if (!query.states.empty()) {
    Json states = Json::array();
    for (core::JobState s : query.states) states.push_back(core::JobStateName(s));
    st.Bind(5, states.dump());
  }
  if (query.since) st.Bind(6, *query.since);
  if (query.until) st.Bind(7, *query.until);
  BindScope(st, scope, 8);
  Result<std::vector<JobRow>> rows = Collect<JobRow>(st, ReadJobRowAt);
  if (!rows.ok()) return impl_->Error("listing history", rows.status());
  return rows;
}

Result<std::vector<UsageRow>> Store::Usage(const UsageQuery& query) {
  if (!impl_->has_job_runs) return impl_->Error("reporting usage", "the schema has no job_runs");
  const std::string key = query.by == UsageKey::kTenant ? "j.tenant" : "j.user";
  // ?1 since, ?2 until, ?3 now, ?4 after key, ?5 limit, ?6.. the scope.
  const ScopeSql scope = ScopeWhere(query.scope, 6, "j.tenant");
  const std::string common =
      " AND " + key + " > ?4 AND " + scope.where + " GROUP BY " + key + " ORDER BY " + key;
  // Each part pages by key on its own; the first `limit` keys of their
  // union are among the first `limit` of some part, so merging them and
  // keeping the first `limit` is exact.
  const std::string parts[] = {
      // GPU-ms of every run that overlaps the window, clipped to it.
      "SELECT " + key +
          ", SUM(MAX(0, MIN(COALESCE(r.end_ms, ?3), ?2) - MAX(r.start_ms, ?1)) * r.gpus) "
          "FROM job_runs r JOIN jobs j ON j.id = r.job "
          "WHERE r.start_ms < ?2 AND (r.end_ms > ?1 OR r.end_ms IS NULL)" +
          common + " LIMIT ?5",
      "SELECT " + key + ", COUNT(*) FROM jobs j WHERE j.submit_ms >= ?1 AND j.submit_ms < ?2" +
          common + " LIMIT ?5",
      "SELECT " + key +
          ", SUM(j.state = 'completed'), SUM(j.state = 'failed'), SUM(j.state = 'cancelled') "
          "FROM jobs j WHERE j.end_ms >= ?1 AND j.end_ms < ?2" +
          common + " LIMIT ?5",
      "SELECT " + key +
          ", COUNT(*), SUM(j.start_ms - j.submit_ms), MAX(j.start_ms - j.submit_ms) "
          "FROM jobs j WHERE j.start_ms >= ?1 AND j.start_ms < ?2" +
          common + " LIMIT ?5",
  };
  std::map<std::string, UsageRow> rows;
  for (size_t part = 0; part < std::size(parts); ++part) {
    Result<Statement> q = impl_->db.Prepare(parts[part]);
    if (!q.ok()) return impl_->Error("reporting usage", q.status());
    Statement& st = q.value();
    st.Bind(1, query.since).Bind(2, query.until).Bind(3, query.now_ms);
    st.Bind(4, query.after_key).Bind(5, query.limit);
    BindScope(st, scope, 6);
    for (;;) {
      Result<bool> more = st.Step();
      if (!more.ok()) return impl_->Error("reporting usage", more.status());
      if (!more.value()) break;
      UsageRow& row = rows[st.Text(0)];
      row.key = st.Text(0);
      switch (part) {
        case 0:
          row.gpu_ms = st.Int64(1);
          break;
        case 1:
          row.submitted = st.Int64(1);
          break;
        case 2:
          row.completed = st.Int64(1);
          row.failed = st.Int64(2);
          row.cancelled = st.Int64(3);
          break;
        default:
          row.started = st.Int64(1);
          row.queue_wait_ms_total = st.Int64(2);
          row.queue_wait_ms_max = st.Int64(3);
          break;
      }
    }
  }
  std::vector<UsageRow> out;
  for (auto& [k, row] : rows) {
    if (static_cast<int>(out.size()) == query.limit) break;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace topo::store
