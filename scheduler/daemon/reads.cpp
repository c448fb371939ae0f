// Reads off the strand (reads.hpp): the pool of read-only connections and
// the event log, audit log and whoami routes.

#include "daemon/reads.hpp"

#include "daemon/service_internal.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::JobId;
using core::Result;
using core::Status;

// ---------------------------------------------------------------- pool

ReadPool::Lease::~Lease() {
  if (pool_ != nullptr && store_ != nullptr) pool_->Return(std::move(store_));
}

Result<ReadPool::Lease> ReadPool::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !idle_.empty() || open_ < size_; });
  if (!idle_.empty()) {
    std::unique_ptr<store::Store> store = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(store));
  }
  ++open_;
  lock.unlock();
  store::OpenOptions options;
  options.read_only = true;
  Result<store::Store> opened = store::Store::Open(path_, options);
  if (!opened.ok()) {
    std::lock_guard relock(mu_);
    --open_;
    cv_.notify_one();
    return Status::Error(opened.message(), ErrorCode::kUnavailable);
  }
  return Lease(this, std::make_unique<store::Store>(std::move(opened).value()));
}

void ReadPool::Return(std::unique_ptr<store::Store> store) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(store));
  cv_.notify_one();
}

// ---------------------------------------------------------------- routes

namespace {

HttpResponse Audit(store::Store& store, const Caller& caller, int64_t after, int64_t limit) {
  if (!caller.cluster_admin()) return Error(403, "the audit log needs a cluster-admin token");
  Result<std::vector<store::AuditRow>> rows = store.ListAudit(after, int(limit));
  if (!rows.ok()) return StoreFailed(rows.status());
  Json out = Json::array();
  for (const store::AuditRow& a : rows.value()) {
    out.push_back({{"seq", a.seq},
                   {"time_ms", a.time_ms},
                   {"actor", a.actor},
                   {"action", a.action},
                   {"detail", Json::parse(a.detail, nullptr, false)}});
  }
  return JsonResponse(200, Json{{"audit", std::move(out)}});
}

HttpResponse Events(store::Store& store, const Caller& caller, const Route& route, int64_t after,
                    int64_t limit) {
  const TenantOf tenant_of = [&](int64_t id) -> std::optional<std::string> {
    Result<std::optional<store::JobRow>> row = store.GetJob(id);
    if (!row.ok() || !row.value()) return std::nullopt;
    return row.value()->tenant;
  };
  store::EventQuery q;
  q.limit = static_cast<int>(limit);
  if (route.query.count("job")) {
    HttpResponse err;
    std::optional<int64_t> job = QueryInt(route, "job", 1, INT64_MAX, 0, err);
    if (!job) return err;
    std::optional<std::string> tenant = tenant_of(*job);
    if (!tenant || !caller.InScope(*tenant)) {
      return Error(404, "no job " + std::to_string(*job) + " that you can see");
    }
    q.job = *job;
  }
  Json out = Json::array();
  int64_t scanned_to = after;
  // Callers who see part of the log page through it until they have
  // `limit` visible events, at most 20 pages of `limit` per request;
  // scanned_to says where to go on.
  for (int page = 0; page < 20 && static_cast<int64_t>(out.size()) < limit; ++page) {
    q.after_seq = scanned_to;
    Result<std::vector<store::RawEvent>> events = store.ListEvents(q);
    if (!events.ok()) return StoreFailed(events.status());
    if (events.value().empty()) break;
    for (const store::RawEvent& e : events.value()) {
      scanned_to = e.seq;
      std::optional<ScopedEvent> seen =
          ScopeEvent(caller, Json::parse(e.body, nullptr, false), e.actor, tenant_of);
      if (!seen) continue;
      out.push_back({{"seq", e.seq},
                     {"time_ms", e.time_ms},
                     {"actor", std::move(seen->actor)},
                     {"event", std::move(seen->event)},
                     {"commands", std::move(seen->commands)}});
      if (static_cast<int64_t>(out.size()) == limit) break;
    }
  }
  return JsonResponse(
      200,
      Json{{"events", std::move(out)}, {"scanned_to", scanned_to}, {"last_seq", store.LastSeq()}});
}

}  // namespace

HttpResponse ServeRead(store::Store& store, const Caller& caller, const Route& route) {
  const std::string& what = route.path[0];
  if (what == "whoami") {
    return JsonResponse(200, Json{{"user", caller.user.name},
                                  {"tenant", caller.user.tenant},
                                  {"role", store::RoleName(caller.user.role)},
                                  {"unix_user", caller.user.unix_user}});
  }
  HttpResponse err;
  std::optional<int64_t> after = QueryInt(route, "after", 0, INT64_MAX, 0, err);
  if (!after) return err;
  std::optional<int64_t> limit = QueryInt(route, "limit", 1, 10000, 1000, err);
  if (!limit) return err;
  if (what == "audit") return Audit(store, caller, *after, *limit);
  return Events(store, caller, route, *after, *limit);
}

}  // namespace topo::daemon
