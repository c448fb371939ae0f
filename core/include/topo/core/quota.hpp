#pragma once
// QuotaLedger: every tenant's quota, what each tenant holds now, and its
// decayed usage for fairshare. One part of SchedulerCore's brain; the
// scheduler tells it when jobs start and stop, and asks it whether a job may
// start and in which fair order tenants come.
//
//   QuotaLedger ledger(7 * 24 * kHour);
//   ledger.Configure({.name = "org/a", .guaranteed_gpus = 64});
//   if (std::string why = ledger.Block("org/a", 16, 16); !why.empty()) ...wait
//   ledger.AddJob("org/a", 16);          // the job started, holding 16 GPUs
//   ledger.Advance(now);                 // usage decays, held GPUs add to it
//   QuotaLedger::FairshareView fs = ledger.Fairshare();
//   fs.KeyOf("org/a") < fs.KeyOf("org/b")   // org/a is further below its share
//
// Fairshare: usage is GPU-ms held, decaying with a half-life H; over dt, old
// usage shrinks by f = 2^(-dt/H) and a steady load of g GPUs adds
// g (1 - f) H / ln 2 (the integral of the decay), so the result does not
// depend on how time is split into steps. Tenant names are paths
// "org/team/user"; a tenant's key is usage / shares at each level of its path,
// the usage of a level being the sum over every tenant under it; keys compare
// level by level, lower first.
//
// Thread safety: none; one owner (SchedulerCore).

#include <map>
#include <string>
#include <vector>

#include "topo/core/time.hpp"

namespace topo::core {

struct SnapshotAccess;

struct TenantConfig {
  std::string name;            // a path: "org/team/user" ("default" is one level)
  int guaranteed_gpus = 0;     // capacity the tenant can always reclaim
  int borrow_limit_gpus = -1;  // GPUs it may use beyond the guarantee; -1 no limit
  int max_job_gpus = 0;        // 0: no limit
  int max_running_jobs = 0;    // 0: no limit
  double shares = 1.0;         // fairshare weight among its siblings
  // Jobs waiting (queued or held) at once; the daemon refuses submissions
  // past it. 0: no limit. Not used by the core's decisions.
  int max_queued_jobs = 0;
  // The bound on waiting for a faster placement of the tenant's jobs
  // (SchedulerConfig::placement_wait): 0 the config's; < 0 never.
  TimeMs placement_wait = 0;
};

class QuotaLedger {
 public:
  // "default" is configured with no limits.
  explicit QuotaLedger(TimeMs fairshare_half_life);

  // Adds or replaces a tenant. REQUIRES: !tenant.name.empty().
  void Configure(const TenantConfig& tenant);
  // nullptr when the tenant was never configured (it then has no limits).
  const TenantConfig* tenant(const std::string& name) const;

  // A job of `tenant` starts holding `gpus` GPUs (its ranks and spares) /
  // gives them back.
  void AddJob(const std::string& tenant, int gpus);
  void RemoveJob(const std::string& tenant, int gpus);
  int gpus(const std::string& tenant) const;        // held now
  int running(const std::string& tenant) const;     // running jobs now
  int guaranteed(const std::string& tenant) const;  // 0 when not configured

  // Empty when the tenant's quotas let a job asking for job_gpus GPUs, which
  // would hold held_gpus (its ranks and spares), start now; else the reason,
  // naming the limit. Limits are checked in this order: max_job_gpus,
  // max_running_jobs, guaranteed + borrow_limit.
  std::string Block(const std::string& tenant, int job_gpus, int held_gpus) const;

  // Decays usage up to `now` and adds what each tenant held since the last
  // call. A `now` before the last one does nothing.
  void Advance(TimeMs now);
  // Decayed GPU-ms of the tenant itself (0 when none).
  double usage(const std::string& tenant) const;

  // The fairshare keys at one moment (a pass builds one and asks for every
  // waiting job's tenant; keys are computed once per tenant).
  class FairshareView {
   public:
    // usage / shares at each level of the tenant's path, outermost first.
    const std::vector<double>& KeyOf(const std::string& tenant);

   private:
    friend class QuotaLedger;
    const QuotaLedger* ledger_ = nullptr;
    std::map<std::string, double> prefix_usage_;
    std::map<std::string, std::vector<double>> keys_;
  };
  FairshareView Fairshare() const;

 private:
  // The core's snapshot (core/src/snapshot.cpp) writes and restores the
  // private state.
  friend struct SnapshotAccess;
  TimeMs half_life_;
  std::map<std::string, TenantConfig> tenants_;
  std::map<std::string, int> gpus_;      // held now (ranks + spares)
  std::map<std::string, int> running_;   // running jobs now
  std::map<std::string, double> usage_;  // decayed GPU-ms
  TimeMs usage_time_ = 0;
};

// "a/b/c" -> {"a", "a/b", "a/b/c"}
std::vector<std::string> TenantPathPrefixes(const std::string& path);

}  // namespace topo::core
