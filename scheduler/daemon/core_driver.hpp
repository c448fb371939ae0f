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
#include <functional>
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
  core::TimeMs now = 0;        // the strand's clock, non-decreasing
  store::ReplayReport replay;  // what the start-up replay did (after the snapshot, if any)
  // How the start rebuilt the core: from the snapshot at restored_seq (0: a
  // full replay), in rebuild_ms.
  int64_t restored_seq = 0;
  double rebuild_ms = 0;
  // Snapshots (docs/store.md): the epoch's first seq (meta
  // topology_from_seq), the seq of the newest snapshot and when the strand
  // wrote it (or started).
  int64_t epoch_from_seq = 1;
  int64_t snapshot_seq = 0;
  core::TimeMs snapshot_time = 0;
  std::unordered_map<std::string, std::string> node_reason;  // node -> its last reason
  std::deque<UtilizationSample> utilization;

  // HA (docs/ha.md): called by Commit with the batch and its first seq, on
  // a thread of its own while the strand writes the batch into the local
  // transaction, which commits only after this returns Ok; an error fails
  // the commit (the local transaction rolls back). Unset: the single daemon.
  ReplicateBatch replicate;
  // HA: a topology import's meta, before the store's (service_admin.cpp).
  ReplicateEpoch replicate_epoch;
  // HA: the store's users and tokens (Store::ExportAuth) after each change
  // to them (service_admin.cpp). Unset: the single daemon.
  std::function<core::Status(const std::string&)> replicate_auth;
  // HA: called after MaybeSnapshot wrote a snapshot (the leader publishes a
  // copy of the store to etcd, off the strand). Unset: the single daemon.
  std::function<void()> snapshot_written;
  // Set when the replicated log took what this store then failed to write
  // (an import's meta): every later Commit fails with it, so the daemon
  // stops and catches up as a standby instead of leading on a store that
  // differs from the log.
  core::Status diverged = core::Status::Ok();

  // Steps the core and stages the entry; returns the commands.
  // REQUIRES: core != nullptr.
  const std::vector<core::Command>& Step(const core::Event& event, std::string actor);
  // Writes the staged entries in one transaction and returns them (nothing
  // staged: an empty batch). Terminal jobs then leave the core.
  core::Result<std::vector<store::LogEntry>> Commit();
  size_t staged() const { return staged_.size(); }
  // The jobs `user` submitted with this client_request_id: in the store, and
  // in the entries staged for the next commit (a retry within one group).
  core::Result<std::vector<core::JobId>> JobsByClientRequest(const std::string& user,
                                                             const std::string& id);
  // The tenant of a job, if the job exists (in the core or the store).
  std::optional<std::string> JobTenant(core::JobId id);
  // Rebuilds core, empty and judge over topology (after Open or an import).
  void BuildCore();
  // Rebuilds the core of the epoch that starts at from_seq: from its newest
  // snapshot that restores and the events after it (an older one when the
  // newest does not restore), else by a full replay, with a warning saying
  // why. Logs what it did ("loaded snapshot at seq N, replayed M events in
  // X ms"). Errors: the log cannot be read, or no snapshot restores and the
  // epoch's oldest events were compacted away (a full replay would be
  // wrong).
  core::Status Rebuild(int64_t from_seq);
  // What a start rebuilds the core from, in one place for Service::Open and
  // `topo-scheduler restore` (which says "Restored" only once this worked on
  // the backup): the policy the log was written with (meta "policy"; none:
  // config's as it is) applied to config and scheduler_config, then, with a
  // stored topology (meta "topology"), the core of its epoch (meta
  // "topology_from_seq") by Rebuild. No topology: core stays null. Writes
  // nothing. Errors name the store and the meta key or the event at fault.
  // REQUIRES: store is open; nothing stepped yet.
  core::Status LoadFromStore(DaemonConfig& config);
  // After a commit: stores a snapshot of the core when every_events events
  // or every_ms ms passed since the last one (0: not by that measure) and
  // the log grew since. Errors are the store's; the log stays the truth.
  core::Status MaybeSnapshot(int64_t every_events, core::TimeMs every_ms);
  // One bounded compaction batch (Store::CompactEvents) of events older
  // than retention_ms before now; returns how many it deleted.
  core::Result<int64_t> CompactOnce(core::TimeMs retention_ms, int batch);
  const WaitingJobs& waiting() const { return waiting_; }
  // Counts the waiting jobs afresh (after a replay or an import).
  void RecountWaiting();

 private:
  Metrics* metrics_;
  std::vector<store::LogEntry> staged_;
  WaitingJobs waiting_;
};

}  // namespace topo::daemon
