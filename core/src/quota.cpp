// QuotaLedger (quota.hpp): quotas, usage now, and decayed fairshare usage.

#include "topo/core/quota.hpp"

#include <cmath>

#include "topo/core/node_sets.hpp"

namespace topo::core {

namespace {

std::string Gpus(int n) { return std::to_string(n) + " GPUs"; }

int Find(const std::map<std::string, int>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

static_assert(kMaxTenantPartitions == kMaxNodeSets, "a limit per partition there can be");

Status ValidatePartitionLimits(const std::map<std::string, PartitionLimits>& partitions) {
  if (partitions.size() > kMaxTenantPartitions) {
    return Status::Error("partitions: at most " + std::to_string(kMaxTenantPartitions) +
                             " partitions per tenant (got " + std::to_string(partitions.size()) +
                             "); remove the limits of partitions that no longer exist",
                         ErrorCode::kTooLarge)
        .WithField("partitions");
  }
  for (const auto& [name, l] : partitions) {
    if (Status s = ValidateNodeSetName(name, "partitions"); !s.ok()) return s;
    for (const auto& [field, v] : {std::pair<const char*, int>{"max_gpus", l.max_gpus},
                                   {"max_job_gpus", l.max_job_gpus},
                                   {"max_running_jobs", l.max_running_jobs}}) {
      if (v < 0 || v > kMaxPartitionLimit) {
        const std::string path = "partitions." + name + "." + field;
        return Status::Error(path + ": " + std::to_string(v) +
                             " is out of range; use 0 (no limit)" + ".." +
                             std::to_string(kMaxPartitionLimit))
            .WithField(path);
      }
    }
  }
  return Status::Ok();
}

std::vector<std::string> TenantPathPrefixes(const std::string& path) {
  std::vector<std::string> out;
  for (size_t pos = path.find('/'); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    out.push_back(path.substr(0, pos));
  }
  out.push_back(path);
  return out;
}

QuotaLedger::QuotaLedger(TimeMs fairshare_half_life) : half_life_(fairshare_half_life) {
  tenants_["default"] = TenantConfig{"default"};
}

void QuotaLedger::Configure(const TenantConfig& tenant) { tenants_[tenant.name] = tenant; }

const TenantConfig* QuotaLedger::tenant(const std::string& name) const {
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : &it->second;
}

void QuotaLedger::AddJob(const std::string& tenant, int gpus, const std::string& partition) {
  gpus_[tenant] += gpus;
  running_[tenant] += 1;
  if (partition.empty()) return;
  PartitionUse& u = partition_use_[tenant][partition];
  u.gpus += gpus;
  u.running += 1;
}

void QuotaLedger::RemoveJob(const std::string& tenant, int gpus, const std::string& partition) {
  gpus_[tenant] -= gpus;
  running_[tenant] -= 1;
  if (partition.empty()) return;
  auto t = partition_use_.find(tenant);
  if (t == partition_use_.end()) return;
  auto p = t->second.find(partition);
  if (p == t->second.end()) return;
  p->second.gpus -= gpus;
  p->second.running -= 1;
  // Nothing held: no entry, so equal states are equal maps.
  if (p->second == PartitionUse{}) t->second.erase(p);
  if (t->second.empty()) partition_use_.erase(t);
}

const std::map<std::string, QuotaLedger::PartitionUse>& QuotaLedger::partition_use(
    const std::string& tenant) const {
  static const std::map<std::string, PartitionUse> kNone;
  auto it = partition_use_.find(tenant);
  return it == partition_use_.end() ? kNone : it->second;
}

int QuotaLedger::gpus(const std::string& tenant) const { return Find(gpus_, tenant); }
int QuotaLedger::running(const std::string& tenant) const { return Find(running_, tenant); }

int QuotaLedger::guaranteed(const std::string& tenant) const {
  const TenantConfig* t = this->tenant(tenant);
  return t == nullptr ? 0 : t->guaranteed_gpus;
}

std::string QuotaLedger::Block(const std::string& tenant, int job_gpus, int held_gpus,
                               const std::string& partition) const {
  const TenantConfig* tp = this->tenant(tenant);
  if (tp == nullptr) return {};
  const TenantConfig& t = *tp;
  if (t.max_job_gpus > 0 && job_gpus > t.max_job_gpus) {
    return "quota: the job asks for " + Gpus(job_gpus) + ", over tenant '" + t.name +
           "' max_job_gpus " + std::to_string(t.max_job_gpus);
  }
  auto running = running_.find(t.name);
  if (t.max_running_jobs > 0 && running != running_.end() &&
      running->second >= t.max_running_jobs) {
    return "quota: tenant '" + t.name + "' already runs " + std::to_string(running->second) +
           " jobs, its max_running_jobs";
  }
  if (t.borrow_limit_gpus >= 0) {
    const int used = gpus(t.name);
    const int limit = t.guaranteed_gpus + t.borrow_limit_gpus;
    if (used + held_gpus > limit) {
      return "quota: tenant '" + t.name + "' would hold " + std::to_string(used + held_gpus) +
             " GPUs, over its limit of " + std::to_string(limit) + " (guaranteed " +
             std::to_string(t.guaranteed_gpus) + " + borrow_limit " +
             std::to_string(t.borrow_limit_gpus) + ")";
    }
  }
  if (partition.empty()) return {};
  auto limits = t.partitions.find(partition);
  if (limits == t.partitions.end()) return {};
  const PartitionLimits& l = limits->second;
  const std::string in = " in partition '" + partition + "'";
  if (l.max_job_gpus > 0 && job_gpus > l.max_job_gpus) {
    return "quota: the job asks for " + Gpus(job_gpus) + ", over tenant '" + t.name +
           "' max_job_gpus " + std::to_string(l.max_job_gpus) + in;
  }
  PartitionUse used;
  if (auto u = partition_use(t.name).find(partition); u != partition_use(t.name).end()) {
    used = u->second;
  }
  if (l.max_running_jobs > 0 && used.running >= l.max_running_jobs) {
    return "quota: tenant '" + t.name + "' already runs " + std::to_string(used.running) + " jobs" +
           in + ", its max_running_jobs there";
  }
  if (l.max_gpus > 0 && used.gpus + held_gpus > l.max_gpus) {
    return "quota: tenant '" + t.name + "' holds " + std::to_string(used.gpus) + " of its " +
           Gpus(l.max_gpus) + in + " (max_gpus); the job would hold " + std::to_string(held_gpus) +
           " more";
  }
  return {};
}

void QuotaLedger::Advance(TimeMs now) {
  if (now <= usage_time_) return;
  const double dt = static_cast<double>(now - usage_time_);
  const double half_life = static_cast<double>(half_life_);
  const double f = std::exp2(-dt / half_life);
  const double gained = (1.0 - f) * half_life / std::log(2.0);
  for (auto& [tenant, usage] : usage_) usage *= f;
  for (const auto& [tenant, gpus] : gpus_) {
    if (gpus > 0) usage_[tenant] += gpus * gained;
  }
  usage_time_ = now;
}

double QuotaLedger::usage(const std::string& tenant) const {
  auto it = usage_.find(tenant);
  return it == usage_.end() ? 0.0 : it->second;
}

double QuotaLedger::UsageAt(const std::string& tenant, TimeMs now) const {
  const double u = usage(tenant);
  if (now <= usage_time_) return u;
  // Advance's arithmetic for one tenant, nothing changed.
  const double dt = static_cast<double>(now - usage_time_);
  const double half_life = static_cast<double>(half_life_);
  const double f = std::exp2(-dt / half_life);
  const int held = gpus(tenant);
  return u * f + (held > 0 ? held * ((1.0 - f) * half_life / std::log(2.0)) : 0.0);
}

QuotaLedger::FairshareView QuotaLedger::Fairshare() const {
  FairshareView view;
  view.ledger_ = this;
  for (const auto& [tenant, usage] : usage_) {
    for (const std::string& p : TenantPathPrefixes(tenant)) view.prefix_usage_[p] += usage;
  }
  return view;
}

const std::vector<double>& QuotaLedger::FairshareView::KeyOf(const std::string& tenant) {
  auto [it, fresh] = keys_.try_emplace(tenant);
  if (fresh) {
    for (const std::string& p : TenantPathPrefixes(tenant)) {
      const TenantConfig* t = ledger_->tenant(p);
      const double shares = t == nullptr || t->shares <= 0 ? 1.0 : t->shares;
      auto u = prefix_usage_.find(p);
      it->second.push_back((u == prefix_usage_.end() ? 0.0 : u->second) / shares);
    }
  }
  return it->second;
}

}  // namespace topo::core
