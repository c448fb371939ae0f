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
//   ledger.AddJob("org/a", 8, "gb200");  // ... and one in partition gb200
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
// Per-partition limits (TenantConfig::partitions, Slurm's partition QOS):
// a tenant may also be bounded in one partition, in GPUs held there at once,
// GPUs per job and running jobs. A job counts in the partition it started
// in (the one it named, else the default one; none when no partition
// applies), and only there; the cluster-wide limits count it as well.
//
// Thread safety: none; one owner (SchedulerCore).

#include <map>
#include <string>
#include <vector>

#include "topo/core/status.hpp"
#include "topo/core/time.hpp"

namespace topo::core {

struct SnapshotAccess;

// A tenant's limits in one partition. 0 is no limit in each field (as in
// TenantConfig's max_job_gpus and max_running_jobs); an entry whose fields
// are all 0 limits nothing. A tenant is kept out of a partition by the
// partition's tenants (PartitionConfig::tenants), not by these.
struct PartitionLimits {
  int max_gpus = 0;  // GPUs its jobs there hold at once (ranks + spares)
  int max_job_gpus = 0;
  int max_running_jobs = 0;
  bool operator==(const PartitionLimits&) const = default;
};

// Bounds of TenantConfig::partitions: at most as many entries as there can
// be partitions (kMaxNodeSets), each field 0..kMaxPartitionLimit.
inline constexpr size_t kMaxTenantPartitions = 1000;
inline constexpr int kMaxPartitionLimit = 100'000'000;

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
  // Limits per partition, by partition name (ValidateNodeSetName's rule; a
  // partition need not exist yet: its limits apply once it does).
  std::map<std::string, PartitionLimits> partitions = {};
};

// TenantConfig::partitions against its bounds: at most kMaxTenantPartitions
// entries, names by the node-set name rule, fields 0..kMaxPartitionLimit.
// Errors name the field ("partitions", "partitions.gb200.max_gpus") and the
// fix; too many entries is kTooLarge.
Status ValidatePartitionLimits(const std::map<std::string, PartitionLimits>& partitions);

class QuotaLedger {
 public:
  // "default" is configured with no limits.
  explicit QuotaLedger(TimeMs fairshare_half_life);

  // Adds or replaces a tenant. REQUIRES: !tenant.name.empty().
  void Configure(const TenantConfig& tenant);
  // nullptr when the tenant was never configured (it then has no limits).
  const TenantConfig* tenant(const std::string& name) const;

  // A job of `tenant` starts holding `gpus` GPUs (its ranks and spares) /
  // gives them back, counted in `partition` too ("" none). The caller
  // removes a job under the partition it added it under.
  void AddJob(const std::string& tenant, int gpus, const std::string& partition = "");
  void RemoveJob(const std::string& tenant, int gpus, const std::string& partition = "");
  int gpus(const std::string& tenant) const;        // held now
  int running(const std::string& tenant) const;     // running jobs now
  int guaranteed(const std::string& tenant) const;  // 0 when not configured
  // What a tenant's jobs hold and how many run in one partition.
  struct PartitionUse {
    int gpus = 0;
    int running = 0;
    bool operator==(const PartitionUse&) const = default;
  };
  // By partition name, only partitions where it runs something.
  const std::map<std::string, PartitionUse>& partition_use(const std::string& tenant) const;

  // Empty when the tenant's quotas let a job asking for job_gpus GPUs, which
  // would hold held_gpus (its ranks and spares), start now in `partition`
  // ("" none); else the reason, naming the limit. Limits are checked in this
  // order: max_job_gpus, max_running_jobs, guaranteed + borrow_limit, then
  // the partition's max_job_gpus, max_running_jobs, max_gpus.
  std::string Block(const std::string& tenant, int job_gpus, int held_gpus,
                    const std::string& partition = "") const;

  // Decays usage up to `now` and adds what each tenant held since the last
  // call. A `now` before the last one does nothing.
  void Advance(TimeMs now);
  // Decayed GPU-ms of the tenant itself (0 when none).
  double usage(const std::string& tenant) const;
  // The same as Advance(now) would make it, without advancing (a read);
  // usage() for a `now` at or before the last Advance.
  double UsageAt(const std::string& tenant, TimeMs now) const;

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
  std::map<std::string, int> gpus_;     // held now (ranks + spares)
  std::map<std::string, int> running_;  // running jobs now
  // tenant -> partition -> held now; no entry for nothing held.
  std::map<std::string, std::map<std::string, PartitionUse>> partition_use_;
  std::map<std::string, double> usage_;  // decayed GPU-ms
  TimeMs usage_time_ = 0;
};

// "a/b/c" -> {"a", "a/b", "a/b/c"}
std::vector<std::string> TenantPathPrefixes(const std::string& path);

}  // namespace topo::core
