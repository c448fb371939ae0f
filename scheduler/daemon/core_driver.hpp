#pragma once
// The scheduling core as the daemon drives it: the store (its only writer),
// the topology and the core rebuilt from the log, every step staged with its
// log entry, and the group commit.
//
//   driver.Step(event, "user:ada");          // the core decides at once
//   Result<...> done = driver.Commit();      // one transaction, one fsync
//   then the caller acknowledges and hands done's commands to the agents.
//
// If Commit fails the core is ahead of the log: the caller must not
// acknowledge or send that batch (store.hpp's durability contract).
//
// Thread safety: none; the daemon's strand owns it.

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/metrics.hpp"
#include "daemon/service.hpp"
#include "store/store.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {

// Jobs waiting (queued or held) per tenant and per user, kept from the
// core's state changes, for the caps on queued jobs.
class WaitingJobs {
 public:
  void Changed(const core::JobRecord& job, core::JobState state);
  void Clear();
  int OfTenant(const std::string& tenant) const;
  int OfUser(const std::string& user) const;

 private:
  std::unordered_map<core::JobId, bool> waiting_;
  std::unordered_map<std::string, int> tenants_;
  std::unordered_map<std::string, int> users_;
};

class CoreDriver {
 public:
  explicit CoreDriver(Metrics* metrics) : metrics_(metrics) {}

  core::SchedulerConfig scheduler_config;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<core::Topology> topology;   // null until one is imported
  std::unique_ptr<core::SchedulerCore> core;  // null without a topology
  std::unique_ptr<core::ClusterState> empty;  // the empty cluster: refuses infeasible jobs
  std::unique_ptr<core::Placer> judge;        // Busy vs Infeasible at submission
  core::JobId next_job_id = 1;
  core::TimeMs now = 0;                                      // the strand's clock, non-decreasing
  store::ReplayReport replay;                                // what the start-up replay did
  std::unordered_map<std::string, std::string> node_reason;  // node -> its last reason
  std::deque<UtilizationSample> utilization;

  // Steps the core and stages the entry; returns the commands.
  // REQUIRES: core != nullptr.
  const std::vector<core::Command>& Step(const core::Event& event, std::string actor);
  // Writes the staged entries in one transaction and returns them (nothing
  // staged: an empty batch). Terminal jobs then leave the core.
  core::Result<std::vector<store::LogEntry>> Commit();
  size_t staged() const { return staged_.size(); }
  // The tenant of a job, if the job exists (in the core or the store).
  std::optional<std::string> JobTenant(core::JobId id);
  // Rebuilds core, empty and judge over topology (after Open or an import).
  void BuildCore();
  const WaitingJobs& waiting() const { return waiting_; }
  // Counts the waiting jobs afresh (after a replay or an import).
  void RecountWaiting();

 private:
  Metrics* metrics_;
  std::vector<store::LogEntry> staged_;
  WaitingJobs waiting_;
};

}  // namespace topo::daemon
