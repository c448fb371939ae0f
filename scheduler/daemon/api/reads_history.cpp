// Accounting reads off the strand (docs/daemon.md): GET /v1/history and
// GET /v1/reports/usage, over the store's job_runs and jobs indexes, scoped
// in SQL by StoreScope (scope.hpp) and paged.

#include <algorithm>

#include "daemon/api/handlers.hpp"
#include "daemon/api/job_view.hpp"
#include "topo/common/event_json.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::Status;
using core::TimeMs;

namespace {

constexpr int64_t kMaxRows = 1000;
constexpr int64_t kDefaultRows = 100;

double Hours(int64_t gpu_ms) { return static_cast<double>(gpu_ms) / 3600000.0; }

// since= and until= (Unix ms, since <= until), or the 400.
Status Window(const Route& route, std::optional<TimeMs>& since, std::optional<TimeMs>& until) {
  for (auto [key, out] : {std::pair{"since", &since}, std::pair{"until", &until}}) {
    if (!route.query.count(key)) continue;
    Result<int64_t> v = QueryInt(route, key, 0, api::kMaxTimeMs, 0);
    if (!v.ok()) return v.status();
    *out = v.value();
  }
  if (since && until && *since > *until) {
    return Invalid("since must not be after until (both Unix milliseconds)", "since");
  }
  return Status::Ok();
}

}  // namespace

Answer ReadHistory(store::Store& store, const Caller& caller, const Route& route,
                   const ReadContext& context) {
  if (Status bad =
          UnknownParameter(route, {"user", "tenant", "state", "since", "until", "limit", "after"});
      !bad.ok()) {
    return bad;
  }
  store::HistoryQuery q;
  q.scope = StoreScope(caller);
  if (auto it = route.query.find("tenant"); it != route.query.end()) {
    if (!ValidTenantName(it->second)) {
      return Invalid("tenant: not a tenant name (segments of a-z 0-9 _ . - joined by /)", "tenant");
    }
    q.tenant = it->second;
  }
  if (auto it = route.query.find("user"); it != route.query.end()) {
    if (!ValidUserName(it->second)) {
      return Invalid(
          "user: not a user name (1-64 of a-z 0-9 _ . -, '@' after the first); "
          "`topo users` lists them",
          "user");
    }
    q.user = it->second;
  }
  if (auto it = route.query.find("state"); it != route.query.end()) {
    const std::string& v = it->second;
    size_t i = 0;
    while (i <= v.size() && q.states.size() < 16) {
      size_t end = v.find(',', i);
      if (end == std::string::npos) end = v.size();
      const std::string name = v.substr(i, end - i);
      std::optional<core::JobState> state = common::ParseJobState(name);
      if (!state) {
        return Invalid("state: unknown job state \"" + name.substr(0, 40) +
                           "\"; use queued, held, running, preempting, completed, failed, "
                           "cancelled, rejected (comma-separated for several)",
                       "state");
      }
      q.states.push_back(*state);
      i = end + 1;
    }
  }
  if (Status bad = Window(route, q.since, q.until); !bad.ok()) return bad;
  Result<int64_t> limit = QueryInt(route, "limit", 1, kMaxRows, kDefaultRows);
  if (!limit.ok()) return limit.status();
  Result<int64_t> after = QueryInt(route, "after", 0, INT64_MAX, 0);
  if (!after.ok()) return after.status();
  q.after_id = after.value();
  q.limit = static_cast<int>(limit.value()) + 1;  // one more: is there a next page?
  Result<std::vector<store::JobRow>> rows = store.ListHistory(q);
  if (!rows.ok()) return StoreFailed(rows.status());
  const bool more = static_cast<int64_t>(rows.value().size()) > limit.value();
  if (more) rows.value().pop_back();
  std::vector<JobId> ids;
  for (const store::JobRow& r : rows.value()) ids.push_back(r.id);
  Result<std::vector<store::JobRunRow>> runs = store.ListJobRuns(ids);
  if (!runs.ok()) return StoreFailed(runs.status());
  api::JobList list;
  auto run = runs.value().begin();
  for (const store::JobRow& r : rows.value()) {
    auto first = run;
    while (run != runs.value().end() && run->job == r.id) ++run;
    // Defence in depth: the SQL scope and the one rule agree.
    if (!caller.InScope(r.tenant)) continue;
    api::JobView view = RowView(r, context.default_time_limit);
    AddAccounting(view, std::span<const store::JobRunRow>(first, run), context.now);
    list.jobs.push_back(std::move(view));
  }
  if (more) list.next_after = ids.back();
  return TextAnswer(200, api::WriteJobList(list));
}

Answer ReadUsage(store::Store& store, const Caller& caller, const Route& route,
                 const ReadContext& context) {
  const TimeMs now_ms = context.now;
  if (Status bad = UnknownParameter(route, {"by", "since", "until", "limit", "after"}); !bad.ok()) {
    return bad;
  }
  store::UsageQuery q;
  q.scope = StoreScope(caller);
  std::string by = "tenant";
  if (auto it = route.query.find("by"); it != route.query.end()) by = it->second;
  if (by == "tenant") {
    q.by = store::UsageKey::kTenant;
  } else if (by == "user") {
    q.by = store::UsageKey::kUser;
  } else {
    return Invalid("by: unknown grouping \"" + by.substr(0, 40) + "\"; use tenant or user", "by");
  }
  std::optional<TimeMs> since, until;
  if (Status bad = Window(route, since, until); !bad.ok()) return bad;
  q.since = since.value_or(0);
  q.until = until.value_or(std::max<TimeMs>(now_ms, q.since));
  q.now_ms = now_ms;
  Result<int64_t> limit = QueryInt(route, "limit", 1, kMaxRows, kDefaultRows);
  if (!limit.ok()) return limit.status();
  if (auto it = route.query.find("after"); it != route.query.end()) {
    const bool ok =
        q.by == store::UsageKey::kTenant ? ValidTenantName(it->second) : ValidUserName(it->second);
    if (!ok) {
      return Invalid("after: the last " + by + " of the previous page (its next_after)", "after");
    }
    q.after_key = it->second;
  }
  q.limit = static_cast<int>(limit.value()) + 1;
  Result<std::vector<store::UsageRow>> rows = store.Usage(q);
  if (!rows.ok()) return StoreFailed(rows.status());
  const bool more = static_cast<int64_t>(rows.value().size()) > limit.value();
  if (more) rows.value().pop_back();
  Json out = Json::array();
  for (const store::UsageRow& r : rows.value()) {
    out.push_back(
        {{"name", r.key},
         {"gpu_hours", Hours(r.gpu_ms)},
         {"jobs", r.submitted},
         {"completed", r.completed},
         {"failed", r.failed},
         {"cancelled", r.cancelled},
         {"started", r.started},
         {"queue_wait_mean_s",
          r.started > 0 ? Json(r.queue_wait_ms_total / 1000.0 / r.started) : Json(nullptr)},
         {"queue_wait_max_s", r.started > 0 ? Json(r.queue_wait_ms_max / 1000.0) : Json(nullptr)}});
  }
  return JsonAnswer(200,
                    Json{{"by", by},
                         {"since_ms", q.since},
                         {"until_ms", q.until},
                         {"rows", std::move(out)},
                         {"next_after", more ? Json(rows.value().back().key) : Json(nullptr)}});
}

}  // namespace topo::daemon
