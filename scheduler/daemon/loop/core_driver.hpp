#pragma once
// The scheduling loop as the daemon drives it: the store (its only writer),
// the topology and the core rebuilt from the log, every step staged with its
// log entry, and the group commit.
//
//   driver.Step(event, "user:ada");          // the core decides at once
//   Result<...> done = driver.Commit();      // one transaction, one fsync
//   then the caller acknowledges and hands done's commands to the agents.
//
// Step is the one way an event reaches the core: whatever changes the
// scheduler's state goes through it and is logged with it. Everything else
// a caller may use is the read-only view (core(), topology(), waiting(), ...)
// and the store's own tables (users, tokens, audit, meta), which are not
// events.
//
// If Commit fails the core is ahead of the log: the caller must not
// acknowledge or send that batch (store.hpp's durability contract).
//
// Thread safety: none; the daemon's strand owns it.

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/loop/replication.hpp"
#include "daemon/metrics.hpp"
#include "store/store.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {

// GPUs allocated of the total at one moment (GET /v1/utilization).
struct UtilizationSample {
  core::TimeMs time_ms = 0;
  int allocated = 0;
  int total = 0;
};

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

  // ---- set-up (Service::Open)
  // Takes the opened store; the clock starts at the later of now and the
  // log's last event.
  void AttachStore(std::unique_ptr<store::Store> store, core::TimeMs now);
  // The policy a new core starts with (before Rebuild or an import), and
  // the one a live change made (the core applies its own PolicyChanged).
  void SetSchedulerConfig(const core::SchedulerConfig& config) {
    scheduler_config_ = config;
    default_time_limit_.store(config.default_time_limit, std::memory_order_relaxed);
  }
  // Rebuilds the core of the epoch that starts at from_seq over `topology`:
  // from its newest snapshot that restores and the events after it (an
  // older one when the newest does not restore), else by a full replay,
  // with a warning saying why. Logs what it did ("loaded snapshot at seq N,
  // replayed M events in X ms"). Errors: the log cannot be read, or no
  // snapshot restores and the epoch's oldest events were compacted away (a
  // full replay would be wrong).
  core::Status Rebuild(std::unique_ptr<core::Topology> topology, int64_t from_seq);
  // What a start rebuilds the core from, in one place for Service::Open and
  // `topo-scheduler restore` (which says "Restored" only once this worked on
  // the backup): the policy the log was written with (meta "policy"; none:
  // config's as it is) applied to config and the scheduler config, then,
  // with a stored topology (meta "topology"), the core of its epoch (meta
  // "topology_from_seq") by Rebuild. No topology: core() stays null. Writes
  // nothing. Errors name the store and the meta key or the event at fault.
  // REQUIRES: a store is attached; nothing stepped yet.
  core::Status LoadFromStore(DaemonConfig& config);
  // A new epoch on `topology` from the next seq on: the old core's staged
  // entries must have been committed. `core` (over *topology), when given,
  // is the epoch's first state (the old core's carried onto the new
  // topology, SchedulerCore::SnapshotOnto; meta "topology_base"); else a
  // fresh core. REQUIRES: staged() == 0.
  void StartEpoch(std::unique_ptr<core::Topology> topology,
                  std::unique_ptr<core::SchedulerCore> core = nullptr);
  // HA hooks (docs/ha.md); unset: the single daemon.
  //   replicate: called by Commit with the batch and its first seq, on a
  //     thread of its own while the strand writes the batch into the local
  //     transaction, which commits only after this returns Ok.
  //   replicate_epoch: a topology import's meta, before the store's.
  //   replicate_auth: the store's users and tokens after each change to them.
  //   snapshot_written: after MaybeSnapshot wrote a snapshot.
  void SetReplication(ReplicateBatch replicate, ReplicateEpoch replicate_epoch) {
    replicate_ = std::move(replicate);
    replicate_epoch_ = std::move(replicate_epoch);
  }
  void SetAuthReplication(std::function<core::Status(const std::string&)> publish) {
    replicate_auth_ = std::move(publish);
  }
  void OnSnapshotWritten(std::function<void()> hook) { snapshot_written_ = std::move(hook); }

  // ---- the read-only view
  const core::SchedulerCore* core() const { return core_.get(); }     // null without a topology
  const core::Topology* topology() const { return topology_.get(); }  // null until imported
  const core::SchedulerConfig& scheduler_config() const { return scheduler_config_; }
  // scheduler_config().default_time_limit for reads off the strand
  // (thread-safe).
  core::TimeMs default_time_limit() const {
    return default_time_limit_.load(std::memory_order_relaxed);
  }
  core::TimeMs now() const { return now_; }
  const WaitingJobs& waiting() const { return waiting_; }
  // A node's last reason (from the core's NodeStateChanged commands); "".
  const std::string& NodeReason(const std::string& node) const;
  const std::deque<UtilizationSample>& utilization() const { return utilization_; }
  const store::ReplayReport& replay() const { return replay_; }
  // How the start rebuilt the core: from the snapshot at restored_seq (0: a
  // full replay), in rebuild_ms.
  int64_t restored_seq() const { return restored_seq_; }
  double rebuild_ms() const { return rebuild_ms_; }
  size_t staged() const { return staged_.size(); }
  // The first seq of the current topology's epoch (meta topology_from_seq).
  int64_t epoch_from_seq() const { return epoch_from_seq_; }
  // HA: whether anything is replicated (docs/ha.md).
  bool replicated() const {
    return static_cast<bool>(replicate_) || static_cast<bool>(replicate_epoch_) ||
           static_cast<bool>(replicate_auth_);
  }
  // The store: the log's reader, and the tables that are not events (users,
  // tokens, audit, meta). Events are written only by Commit.
  store::Store& store() const { return *store_; }
  // Whether `spec` could ever be placed on this cluster (the core's own
  // check on the empty cluster): Ok, or kInfeasible with the reason.
  // REQUIRES: core() != nullptr.
  core::Status CheckFeasible(const core::JobSpec& spec) const;
  // The jobs `user` submitted with this client_request_id: in the store, and
  // in the entries staged for the next commit (a retry within one group).
  core::Result<std::vector<core::JobId>> JobsByClientRequest(const std::string& user,
                                                             const std::string& id) const;
  // The tenant of a job, if the job exists (in the core or the store).
  std::optional<std::string> JobTenant(core::JobId id) const;

  // ---- changes
  // The strand's clock, non-decreasing.
  void Advance(core::TimeMs now) { now_ = std::max(now_, now); }
  // The id the next submission takes, and (at start) where ids resume.
  core::JobId NewJobId() { return next_job_id_++; }
  void SetNextJobId(core::JobId next) { next_job_id_ = next; }
  // Steps the core and stages the entry; returns the commands.
  // REQUIRES: core() != nullptr.
  const std::vector<core::Command>& Step(const core::Event& event, std::string actor);
  // Writes the staged entries in one transaction and returns them (nothing
  // staged: an empty batch). Terminal jobs then leave the core.
  core::Result<std::vector<store::LogEntry>> Commit();
  // After a commit: stores a snapshot of the core when every_events events
  // or every_ms ms passed since the last one (0: not by that measure) and
  // the log grew since. Errors are the store's; the log stays the truth.
  core::Status MaybeSnapshot(int64_t every_events, core::TimeMs every_ms);
  // One bounded compaction batch (Store::CompactEvents) of events older
  // than retention_ms before now; returns how many it deleted.
  core::Result<int64_t> CompactOnce(core::TimeMs retention_ms, int batch);
  // Counts the waiting jobs afresh (after a replay or an import).
  void RecountWaiting();
  void SetNodeReason(const std::string& node, std::string reason) {
    node_reason_[node] = std::move(reason);
  }
  void SampleUtilization(core::TimeMs now);
  // HA: the users and tokens changed; hands them to etcd (and, on a
  // failure, marks the store diverged). Ok without HA.
  core::Status ReplicateAuth();
  // HA: hands the current users and tokens to etcd, without the failure
  // marking the store diverged (a fresh cluster's first leader).
  core::Status PublishAuth();
  // HA: a topology import's meta through the replicated log first.
  core::Status ReplicateImport(int64_t from_seq,
                               std::span<const std::pair<std::string, std::string>> meta);
  // Set when the replicated log took what this store then failed to write
  // (an import's meta, the users and tokens): every later Commit fails with
  // it, so the daemon stops and catches up as a standby instead of leading
  // on a store that differs from the log.
  void MarkDiverged(core::Status why) { diverged_ = std::move(why); }

 private:
  void BuildCore();

  Metrics* metrics_;
  core::SchedulerConfig scheduler_config_;
  std::atomic<core::TimeMs> default_time_limit_{0};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<core::Topology> topology_;
  std::unique_ptr<core::SchedulerCore> core_;
  core::JobId next_job_id_ = 1;
  core::TimeMs now_ = 0;
  store::ReplayReport replay_;
  int64_t restored_seq_ = 0;
  double rebuild_ms_ = 0;
  // Snapshots (docs/store.md): the epoch's first seq (meta
  // topology_from_seq), the seq of the newest snapshot and when the strand
  // wrote it (or started).
  int64_t epoch_from_seq_ = 1;
  int64_t snapshot_seq_ = 0;
  core::TimeMs snapshot_time_ = 0;
  std::unordered_map<std::string, std::string> node_reason_;
  std::deque<UtilizationSample> utilization_;
  ReplicateBatch replicate_;
  ReplicateEpoch replicate_epoch_;
  std::function<core::Status(const std::string&)> replicate_auth_;
  std::function<void()> snapshot_written_;
  core::Status diverged_ = core::Status::Ok();
  std::vector<store::LogEntry> staged_;
  WaitingJobs waiting_;
};

}  // namespace topo::daemon
