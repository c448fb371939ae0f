// /v1/tenants: quotas and shares per tenant (cluster-admins set them).

#include "daemon/api/handlers.hpp"
#include "daemon/api/unix_accounts.hpp"
#include "topo/common/event_json.hpp"

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

Json TenantView(const ServiceState& s, const core::TenantConfig& t,
                const store::TenantAccounts& grant) {
  Json out = common::TenantConfigToJson(t);
  out.erase("placement_wait_ms");  // the API speaks seconds, like PUT
  out["placement_wait_s"] = t.placement_wait < 0 ? -1 : t.placement_wait / core::kSecond;
  int running = 0;
  if (s.driver.core() != nullptr) {
    for (const auto& [id, j] : s.driver.core()->jobs()) {
      if (j.request.tenant != t.name) continue;
      running += j.state == core::JobState::kRunning || j.state == core::JobState::kPreempting;
    }
  }
  out["usage_gpus"] = s.driver.core() != nullptr ? s.driver.core()->TenantUsage(t.name) : 0;
  out["running_jobs"] = running;
  out["queued_jobs"] = s.driver.waiting().OfTenant(t.name);
  // What its tenant-admins may map users to (api/unix_accounts.hpp).
  out["unix_accounts"] = grant.accounts;
  out["unix_group"] = grant.unix_group;
  return out;
}

bool TenantExists(const ServiceState& s, const std::string& name) {
  if (name == "default") return true;
  if (s.driver.core() != nullptr) return s.driver.core()->tenant(name) != nullptr;
  Result<std::vector<core::TenantConfig>> all = s.driver.store().ListTenants();
  if (!all.ok()) return false;
  return std::any_of(all.value().begin(), all.value().end(),
                     [&](const core::TenantConfig& t) { return t.name == name; });
}

// The tenant the path names ({name*}: "org/team"), or the error.
Result<std::string> TenantOfPath(const Route& route) {
  const std::string& name = route.param("name");
  if (!ValidTenantName(name)) {
    return Invalid("\"" + name.substr(0, 130) +
                   "\" is not a tenant name: segments of a-z 0-9 _ . - (starting with a letter or "
                   "digit) joined by /, at most 8 deep and 128 bytes");
  }
  return name;
}

}  // namespace

Answer ListTenants(const ServiceState& s, const Caller& caller, const Route&) {
  Result<std::vector<core::TenantConfig>> all = s.driver.store().ListTenants();
  if (!all.ok()) return StoreFailed(all.status());
  Result<std::vector<store::TenantAccounts>> grants = s.driver.store().ListTenantAccounts();
  if (!grants.ok()) return StoreFailed(grants.status());
  std::map<std::string, store::TenantAccounts> grant_of;
  for (store::TenantAccounts& g : grants.value()) grant_of[g.tenant] = std::move(g);
  Json out = Json::array();
  for (const core::TenantConfig& t : all.value()) {
    if (!caller.InScope(t.name)) continue;
    const core::TenantConfig* live =
        s.driver.core() != nullptr ? s.driver.core()->tenant(t.name) : nullptr;
    auto g = grant_of.find(t.name);
    out.push_back(
        TenantView(s, live != nullptr ? *live : t,
                   g != grant_of.end() ? g->second : store::TenantAccounts{t.name, {}, {}}));
  }
  return JsonAnswer(200, Json{{"tenants", std::move(out)}});
}

Answer ShowTenant(const ServiceState& s, const Caller& caller, const Route& route) {
  Result<std::string> name = TenantOfPath(route);
  if (!name.ok()) return name.status();
  if (!caller.InScope(name.value()) || !TenantExists(s, name.value())) {
    return NotFound("no tenant " + name.value() + " that you can see");
  }
  const core::TenantConfig* live =
      s.driver.core() != nullptr ? s.driver.core()->tenant(name.value()) : nullptr;
  Result<store::TenantAccounts> grant = s.driver.store().GetTenantAccounts(name.value());
  if (!grant.ok()) return StoreFailed(grant.status());
  return JsonAnswer(200, TenantView(s, live != nullptr ? *live : core::TenantConfig{name.value()},
                                    grant.value()));
}

Answer PutTenant(ServiceState& s, const Caller& caller, const Route& route) {
  Result<std::string> name = TenantOfPath(route);
  if (!name.ok()) return name.status();
  if (!caller.cluster_admin()) return AdminOnly("setting tenants and quotas");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(
          body, {"guaranteed_gpus", "borrow_limit_gpus", "max_job_gpus", "max_running_jobs",
                 "max_queued_jobs", "shares", "placement_wait_s", "unix_accounts", "unix_group"});
      !e.ok()) {
    return e;
  }
  const core::TenantConfig* live = s.driver.core()->tenant(name.value());
  core::TenantConfig t = live != nullptr ? *live : core::TenantConfig{name.value()};
  const int64_t kMax = 100'000'000;
  struct Count {
    const char* field;
    int64_t lo;
    int* member;
  };
  for (const Count& c : {Count{"guaranteed_gpus", 0, &t.guaranteed_gpus},
                         Count{"borrow_limit_gpus", -1, &t.borrow_limit_gpus},
                         Count{"max_job_gpus", 0, &t.max_job_gpus},
                         Count{"max_running_jobs", 0, &t.max_running_jobs},
                         Count{"max_queued_jobs", 0, &t.max_queued_jobs}}) {
    int64_t v = *c.member;
    if (Status e = IntField(body, c.field, c.lo, kMax, v); !e.ok()) return e;
    *c.member = static_cast<int>(v);
  }
  if (body.contains("placement_wait_s")) {
    // -1: the tenant's jobs never wait for a faster placement; 0: the
    // cluster's placement_wait_s.
    int64_t v = 0;
    if (Status e = IntField(body, "placement_wait_s", -1, 7ll * 86400, v); !e.ok()) return e;
    t.placement_wait = v < 0 ? -1 : v * core::kSecond;
  }
  if (auto it = body.find("shares"); it != body.end()) {
    if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > 1e6) {
      return Invalid("shares must be a number in (0, 1000000]", "shares");
    }
    t.shares = it->get<double>();
  }
  Result<store::TenantAccounts> old_grant = s.driver.store().GetTenantAccounts(name.value());
  if (!old_grant.ok()) return StoreFailed(old_grant.status());
  store::TenantAccounts grant = old_grant.value();
  if (Status e = ReadGrantFields(body, grant); !e.ok()) return e;
  if (grant != old_grant.value()) {
    // Outside the event log, like users (replicated with them in HA).
    if (Status st = s.driver.store().SetTenantAccounts(grant); !st.ok()) return StoreFailed(st);
    s.Audit(caller, "tenant.accounts",
            {{"tenant", grant.tenant},
             {"unix_accounts", grant.accounts},
             {"unix_group", grant.unix_group},
             {"was",
              {{"unix_accounts", old_grant.value().accounts},
               {"unix_group", old_grant.value().unix_group}}}});
  }
  s.driver.Step(core::TenantConfigured{t}, s.Actor(caller));
  return JsonAnswer(live != nullptr ? 200 : 201,
                    TenantView(s, *s.driver.core()->tenant(name.value()), grant));
}

}  // namespace topo::daemon
