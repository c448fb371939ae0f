// /v1/tenants: quotas and shares per tenant (cluster-admins set them).

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "daemon/api/handlers.hpp"
#include "daemon/api/unix_accounts.hpp"
#include "topo/common/event_json.hpp"

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

// What the jobs of each tenant hold now, its own and rolled up its tree:
// a tenant's totals include every tenant below it ("org" holds "org/a"'s).
// The core keeps quotas per tenant (flat); this is for people reading.
class UsageTree {
 public:
  struct Counts {
    int64_t usage_gpus = 0, running_jobs = 0, queued_jobs = 0;
    double fairshare_gpu_hours = 0;  // decayed usage, projected to now
    void Add(const Counts& o) {
      usage_gpus += o.usage_gpus;
      running_jobs += o.running_jobs;
      queued_jobs += o.queued_jobs;
      fairshare_gpu_hours += o.fairshare_gpu_hours;
    }
  };

  // REQUIRES: names holds every tenant (not only the caller's).
  UsageTree(const ServiceState& s, const std::vector<std::string>& names) : core_(s.driver.core()) {
    for (const std::string& n : names) own_[n];
    if (s.driver.core() == nullptr) return;
    for (const auto& [id, j] : s.driver.core()->jobs()) {
      if (j.state == core::JobState::kRunning || j.state == core::JobState::kPreempting) {
        own_[j.request.tenant].running_jobs += 1;
      }
    }
    for (auto& [name, c] : own_) {
      c.usage_gpus = s.driver.core()->TenantUsage(name);
      c.fairshare_gpu_hours =
          s.driver.core()->FairshareUsage(name, s.driver.now()) / static_cast<double>(core::kHour);
      c.queued_jobs = s.driver.waiting().OfTenant(name);
    }
  }

  Counts Own(const std::string& tenant) const {
    auto it = own_.find(tenant);
    return it == own_.end() ? Counts{} : it->second;
  }
  // The tenant's and its descendants': the names starting "tenant/", one
  // range of the sorted map ('0' follows '/').
  Counts Subtree(const std::string& tenant) const {
    Counts total = Own(tenant);
    for (auto it = own_.lower_bound(tenant + "/"), end = own_.lower_bound(tenant + "0"); it != end;
         ++it) {
      total.Add(it->second);
    }
    return total;
  }

  // What the tenant's own jobs hold and run per partition, as its
  // per-partition limits count them: {"gb200": {"usage_gpus", "running_jobs"}}.
  Json PartitionUsage(const std::string& tenant) const {
    Json out = Json::object();
    if (core_ == nullptr) return out;
    for (const auto& [name, use] : core_->TenantPartitionUsage(tenant)) {
      out[name] = {{"usage_gpus", use.gpus}, {"running_jobs", use.running}};
    }
    return out;
  }

 private:
  const core::SchedulerCore* core_;
  std::map<std::string, Counts> own_;
};

// The one tenant view (GET and PUT /v1/tenants): the quota (its
// per-partition limits in "partitions"), what it holds with its sub-tenants
// (usage_gpus, running_jobs, queued_jobs) and alone (own_*), its own per
// partition (partition_usage), and the Unix accounts granted to it.
Json TenantView(const core::TenantConfig& t, const UsageTree& usage,
                const store::TenantAccounts& grant) {
  Json out = common::TenantConfigToJson(t);
  out.erase("placement_wait_ms");  // the API speaks seconds, like PUT
  out["placement_wait_s"] = t.placement_wait < 0 ? -1 : t.placement_wait / core::kSecond;
  const UsageTree::Counts all = usage.Subtree(t.name), own = usage.Own(t.name);
  out["usage_gpus"] = all.usage_gpus;
  out["running_jobs"] = all.running_jobs;
  out["queued_jobs"] = all.queued_jobs;
  out["own_usage_gpus"] = own.usage_gpus;
  out["own_running_jobs"] = own.running_jobs;
  out["own_queued_jobs"] = own.queued_jobs;
  out["fairshare_gpu_hours"] = all.fairshare_gpu_hours;
  out["own_fairshare_gpu_hours"] = own.fairshare_gpu_hours;
  out["partition_usage"] = usage.PartitionUsage(t.name);
  // What its tenant-admins may map users to (api/unix_accounts.hpp).
  out["unix_accounts"] = grant.accounts;
  out["unix_group"] = grant.unix_group;
  return out;
}

// Every tenant as the core has it now (the store's list, live values).
Result<std::vector<core::TenantConfig>> AllTenants(const ServiceState& s) {
  Result<std::vector<core::TenantConfig>> all = s.driver.store().ListTenants();
  if (!all.ok()) return all.status();
  for (core::TenantConfig& t : all.value()) {
    const core::TenantConfig* live =
        s.driver.core() != nullptr ? s.driver.core()->tenant(t.name) : nullptr;
    if (live != nullptr) t = *live;
  }
  return all;
}

std::vector<std::string> NamesOf(const std::vector<core::TenantConfig>& tenants) {
  std::vector<std::string> names;
  for (const core::TenantConfig& t : tenants) names.push_back(t.name);
  return names;
}

// The nearest tenant above `name` that exists; "" when none.
std::string ParentOf(const std::string& name, const std::map<std::string, int64_t>& guaranteed) {
  for (size_t at = name.rfind('/'); at != std::string::npos && at > 0;
       at = name.rfind('/', at - 1)) {
    if (guaranteed.count(name.substr(0, at))) return name.substr(0, at);
  }
  return "";
}

// What an admin may not mean, though it is allowed (over-committing can
// be intended): guarantees past the cluster's GPUs, a child's guarantee
// above its parent's, children's guarantees adding up past their parent's.
// `t` is the tenant as the PUT leaves it; `all` every tenant before it.
Json GuaranteeWarnings(const ServiceState& s, const core::TenantConfig& t,
                       const std::vector<core::TenantConfig>& all) {
  std::map<std::string, int64_t> guaranteed;
  for (const core::TenantConfig& o : all) guaranteed[o.name] = o.guaranteed_gpus;
  guaranteed[t.name] = t.guaranteed_gpus;
  Json warnings = Json::array();
  int64_t total = 0;
  for (const auto& [name, g] : guaranteed) total += g;
  const int64_t cluster = s.driver.topology() != nullptr ? s.driver.topology()->total_gpus() : 0;
  if (t.guaranteed_gpus > 0 && total > cluster) {
    warnings.push_back("the tenants' guarantees add up to " + std::to_string(total) +
                       " GPUs, more than the cluster's " + std::to_string(cluster) +
                       ": not every tenant can have its guarantee at once (lower some with "
                       "topo quota set T --guaranteed N, unless over-committing is meant)");
  }
  // The families whose guarantees this PUT changes: t's parent's, and t's.
  std::vector<std::string> parents;
  if (std::string p = ParentOf(t.name, guaranteed); !p.empty()) parents.push_back(p);
  parents.push_back(t.name);
  for (const std::string& parent : parents) {
    const int64_t pg = guaranteed[parent];
    int64_t children = 0;
    std::vector<std::string> above;
    for (const auto& [name, g] : guaranteed) {
      if (ParentOf(name, guaranteed) != parent) continue;
      children += g;
      if (g > pg) above.push_back(name + " (" + std::to_string(g) + ")");
    }
    for (const std::string& child : above) {
      warnings.push_back("tenant " + child + " is guaranteed more GPUs than its parent " + parent +
                         " (" + std::to_string(pg) + ")");
    }
    if (above.empty() && pg > 0 && children > pg) {
      warnings.push_back("the tenants under " + parent + " are guaranteed " +
                         std::to_string(children) + " GPUs together, more than " + parent + "'s " +
                         std::to_string(pg));
    }
  }
  return warnings;
}

// Merges a PUT's "partitions" into `limits`: {PARTITION: {max_gpus?,
// max_job_gpus?, max_running_jobs?} | null}. Each partition named changes
// only the fields given (a new one starts with no limits); null removes the
// partition's limits, and so does leaving every field 0. Errors name the
// field ("partitions.gb200.max_gpus") and the fix.
Status MergePartitionLimits(const Json& body,
                            std::map<std::string, core::PartitionLimits>& limits) {
  auto it = body.find("partitions");
  if (it == body.end()) return Status::Ok();
  const std::string shape =
      "partitions must be an object of partition name -> {\"max_gpus\": N, \"max_job_gpus\": "
      "N, \"max_running_jobs\": N} (0: no limit) or null (remove its limits)";
  if (!it->is_object()) return Invalid(shape + ", not " + it->dump().substr(0, 40), "partitions");
  if (it->size() > core::kMaxTenantPartitions) {
    return Status::Error("partitions: at most " + std::to_string(core::kMaxTenantPartitions) +
                             " partitions in one request (got " + std::to_string(it->size()) + ")",
                         core::ErrorCode::kTooLarge)
        .WithField("partitions");
  }
  for (const auto& [name, value] : it->items()) {
    // (A name past 100 bytes fails the rule as its first 100 do.)
    if (Status s = core::ValidateNodeSetName(name.substr(0, 100), "partitions"); !s.ok()) {
      return Invalid(s.message() + " (a partition name, as topo partition list shows them)",
                     "partitions");
    }
    if (value.is_null()) {
      limits.erase(name);
      continue;
    }
    const std::string path = "partitions." + name;
    if (!value.is_object()) return Invalid(shape + "; " + path + " is " + value.type_name(), path);
    core::PartitionLimits l = limits.count(name) ? limits.at(name) : core::PartitionLimits{};
    struct Field {
      const char* key;
      int* member;
    };
    const Field fields[] = {{"max_gpus", &l.max_gpus},
                            {"max_job_gpus", &l.max_job_gpus},
                            {"max_running_jobs", &l.max_running_jobs}};
    for (const auto& item : value.items()) {
      const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
      if (std::none_of(std::begin(fields), std::end(fields),
                       [&](const Field& f) { return key == f.key; })) {
        return Invalid("unknown field \"" + key.substr(0, 64) + "\" in " + path +
                           "; known fields: max_gpus, max_job_gpus, max_running_jobs",
                       path + "." + key.substr(0, 64));
      }
    }
    for (const Field& f : fields) {
      auto v = value.find(f.key);
      if (v == value.end()) continue;
      const std::string field = path + "." + f.key;
      const bool whole = v->is_number_integer();
      if (!whole || (!v->is_number_unsigned() && v->get<int64_t>() < 0) ||
          v->get<uint64_t>() > static_cast<uint64_t>(core::kMaxPartitionLimit)) {
        return Invalid(field + " must be a whole number in 0.." +
                           std::to_string(core::kMaxPartitionLimit) + " (0: no limit), not " +
                           v->dump().substr(0, 40),
                       field);
      }
      *f.member = v->get<int>();
    }
    if (l == core::PartitionLimits{}) {
      limits.erase(name);
    } else {
      limits[name] = l;
    }
  }
  return core::ValidatePartitionLimits(limits);
}

// Partitions the tenant has limits in that do not exist (yet): allowed, so
// limits can be set before the partition, but maybe a typo.
Json PartitionWarnings(const ServiceState& s, const core::TenantConfig& t) {
  Json warnings = Json::array();
  for (const auto& [name, unused] : t.partitions) {
    if (s.driver.core()->node_sets().partition(name) != nullptr) continue;
    warnings.push_back("partition " + name + " does not exist (yet): tenant " + t.name +
                       "'s limits there apply once it is created (topo partition list shows "
                       "the partitions)");
  }
  return warnings;
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

bool TenantExists(const ServiceState& s, const std::string& name) {
  if (name == "default") return true;
  if (s.driver.core() != nullptr) return s.driver.core()->tenant(name) != nullptr;
  Result<std::vector<core::TenantConfig>> all = s.driver.store().ListTenants();
  if (!all.ok()) return false;
  return std::any_of(all.value().begin(), all.value().end(),
                     [&](const core::TenantConfig& t) { return t.name == name; });
}

Answer ListTenants(const ServiceState& s, const Caller& caller, const Route&) {
  Result<std::vector<core::TenantConfig>> all = AllTenants(s);
  if (!all.ok()) return StoreFailed(all.status());
  const UsageTree usage(s, NamesOf(all.value()));
  Result<std::vector<store::TenantAccounts>> grants = s.driver.store().ListTenantAccounts();
  if (!grants.ok()) return StoreFailed(grants.status());
  std::map<std::string, store::TenantAccounts> grant_of;
  for (store::TenantAccounts& g : grants.value()) grant_of[g.tenant] = std::move(g);
  Json out = Json::array();
  for (const core::TenantConfig& t : all.value()) {
    if (!caller.InScope(t.name)) continue;
    auto g = grant_of.find(t.name);
    out.push_back(TenantView(
        t, usage, g != grant_of.end() ? g->second : store::TenantAccounts{t.name, {}, {}}));
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
  Result<std::vector<core::TenantConfig>> all = AllTenants(s);
  if (!all.ok()) return StoreFailed(all.status());
  return JsonAnswer(200, TenantView(live != nullptr ? *live : core::TenantConfig{name.value()},
                                    UsageTree(s, NamesOf(all.value())), grant.value()));
}

Answer PutTenant(ServiceState& s, const Caller& caller, const Route& route) {
  Result<std::string> name = TenantOfPath(route);
  if (!name.ok()) return name.status();
  if (!caller.cluster_admin()) return AdminOnly("setting tenants and quotas");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e =
          UnknownField(body, {"guaranteed_gpus", "borrow_limit_gpus", "max_job_gpus",
                              "max_running_jobs", "max_queued_jobs", "shares", "placement_wait_s",
                              "partitions", "unix_accounts", "unix_group"});
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
  if (Status e = MergePartitionLimits(body, t.partitions); !e.ok()) return e;
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
  Result<std::vector<core::TenantConfig>> all = AllTenants(s);
  if (!all.ok()) return StoreFailed(all.status());
  Json warnings = GuaranteeWarnings(s, t, all.value());
  for (Json& w : PartitionWarnings(s, t)) warnings.push_back(std::move(w));
  s.driver.Step(core::TenantConfigured{t}, s.Actor(caller));
  std::vector<std::string> names = NamesOf(all.value());
  names.push_back(t.name);
  Json out = TenantView(*s.driver.core()->tenant(name.value()), UsageTree(s, names), grant);
  out["warnings"] = std::move(warnings);
  return JsonAnswer(live != nullptr ? 200 : 201, out);
}

}  // namespace topo::daemon
