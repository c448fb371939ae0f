#pragma once
// SchedulerCore's internals, split over scheduler.cpp (events, jobs),
// scheduler_pass.cpp (queue order, quotas, backfill, preemption) and
// scheduler_health.cpp (GPU and node health, failure recovery).

#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "topo/core/scheduler.hpp"

namespace topo::core {

class SchedulerCore::Impl {
 public:
  Impl(const Topology& topology, SchedulerConfig config);

  std::vector<Command> Step(const Event& event, TimeMs now);

  // ---- state, read by the views
  const Topology& topo_;
  SchedulerConfig config_;
  std::unique_ptr<Placer> placer_;  // Busy without the empty-cluster analysis
  std::unique_ptr<Placer> judge_;   // decides Busy vs Infeasible at submission
  ClusterState cluster_;
  std::map<JobId, JobRecord> jobs_;
  std::map<std::string, TenantConfig> tenants_;
  std::map<std::string, int> tenant_gpus_;     // GPUs held now (ranks + spares)
  std::map<std::string, int> tenant_running_;  // running jobs now
  std::map<std::string, double> fs_usage_;     // decayed GPU-ms per tenant
  TimeMs fs_time_ = 0;
  TimeMs now_ = 0;
  std::set<JobId> waiting_;             // queued or held
  std::map<JobId, TimeMs> queue_time_;  // ordering time (age)
  std::vector<TimeMs> last_heartbeat_;
  std::vector<std::vector<JobId>> node_jobs_;  // running jobs per node
  std::vector<JobId> spare_owner_;             // job holding the node as a spare, or 0
  std::vector<char> admin_drain_;              // drained by request, not by health
  std::map<JobId, TimeMs> checkpoint_asked_;   // last periodic checkpoint request
  std::map<JobId, JobId> preempted_for_;       // victim -> the job it makes room for
  ClusterState empty_;                         // for feasibility checks
  std::set<JobId> feasible_;                   // placed on the empty cluster once
  std::set<JobId> preemptors_;                 // waiting jobs that preempted others
  std::set<JobId> running_;                    // running or preempting (holding GPUs)
  // Bumped by every change that can make a placement succeed that failed
  // before (GPUs held or freed, node or GPU health, quotas). A job that
  // could not be placed at generation g cannot be at g either: the pass
  // skips it, which keeps passes after submissions cheap.
  uint64_t generation_ = 1;
  struct Blocked {
    uint64_t generation;
    bool masked;
    JobId reservation_job;
    std::string reason;
  };
  std::map<JobId, Blocked> blocked_at_;  // the last failed placement try
  std::map<JobId, uint64_t> preempt_failed_at_;
  // Timers of running jobs (time limits, checkpoint requests, preemption
  // deadlines): the earliest one, recomputed only when running jobs change.
  TimeMs next_timer_ = kNever;
  bool timers_dirty_ = true;
  void RecomputeTimers();
  // The earliest time limit, checkpoint request or preemption deadline of
  // one job (kNever when it has none).
  TimeMs JobTimer(const JobRecord& job) const;
  TimeMs next_heartbeat_check_ = kNever;
  // A pass runs only when something it depends on changed.
  uint64_t queue_epoch_ = 1;
  uint64_t last_pass_generation_ = 0;
  uint64_t last_pass_epoch_ = 0;
  // The blocked head of the last pass (0: the last pass blocked on nothing),
  // and the job the current step submitted: a submission that can only
  // queue behind that head skips the full pass (AdmitBehindHead).
  JobId pass_head_ = 0;
  JobId just_submitted_ = 0;
  // Jobs waiting out a restart backoff, by its end.
  std::set<std::pair<TimeMs, JobId>> backoff_;
  // Nodes per NodeState, for the reasons of jobs that wait for capacity.
  std::array<int, 5> nodes_in_state_{};
  JobId reservation_job_ = 0;
  uint64_t reservation_generation_ = 0;
  MasterPorts ports_;  // MASTER_PORT held by running jobs, per master node

  // ---- scheduler.cpp
  std::vector<Command>* out_ = nullptr;
  void Emit(Command c) { out_->push_back(std::move(c)); }
  void SetState(JobRecord& job, JobState state, std::string reason);
  void OnSubmit(const JobSubmitted& e);
  void OnCancel(const JobCancelled& e);
  void OnHold(const JobHoldChanged& e);
  void OnFinished(const JobFinished& e);
  void OnRankExited(const RankExited& e);
  void OnCheckpoint(const CheckpointCompleted& e);
  void OnTenant(const TenantConfigured& e);
  TimeMs TimeLimit(const JobRecord& job) const;
  // Allocation bookkeeping (cluster, tenant usage, node index).
  void Hold(JobRecord& job, std::vector<GpuSlot> ranks, std::vector<NodeId> spares);
  void Unhold(JobRecord& job);
  std::vector<GpuSlot> SpareSlots(const std::vector<NodeId>& spares) const;
  // Everything a start of the held job needs on its nodes, with a fresh
  // master port (the one of its last run was freed by Unhold).
  // REQUIRES: the job holds its ranks (Hold).
  Launch MakeLaunch(JobRecord& job);
  // Accounts the run time since the last mark as kept (productive) or lost.
  void KeepProgress(JobRecord& job, TimeMs until);
  void LoseProgress(JobRecord& job);
  TimeMs ProgressMark(const JobRecord& job) const;
  // Stops a running job and puts it back in the queue with its shape.
  // keep_age_only: back in line by its original age, without the head-of-
  // queue claim a failed job gets (a preemption victim must not retake what
  // it was preempted for).
  void Requeue(JobRecord& job, const std::string& reason, RequeuePosition where,
               bool keep_age_only = false);
  // Stops a running job and requeues it to restart after `delay` (its
  // restart_at; the pass leaves it until then). reason should say when.
  void RequeueWithBackoff(JobRecord& job, TimeMs delay, const std::string& reason);
  // Ends the backoffs due by now_, so the pass considers those jobs again.
  void EndBackoffs();
  // The delay before the restart after the k-th failure in a row (k >= 1).
  TimeMs Backoff(int k) const;
  void DecayFairshare();
  void MaybeFinishDrain(NodeId n);

  // ---- scheduler_pass.cpp
  void SchedulePass();
  std::vector<JobId> Ordered() const;
  // True when the job submitted this step sorts after the last pass's
  // blocked head and cannot start now, so a full pass would only set its
  // reason: sets it and spares the pass.
  bool AdmitBehindHead(JobId id);
  // A waiting job's reason for `what` it waits on, with the nodes that take
  // no work now and, for a job that ran before, where it restarts from.
  std::string WaitReason(const JobRecord& job, const std::string& what) const;
  // Empty when the tenant's quotas let the job start now; else the reason.
  std::string QuotaBlock(const JobRecord& job) const;
  void Start(JobRecord& job, const Placement& p);
  bool TryPreempt(JobRecord& waiting);
  void StopExpiredPreemptions();
  // Time limits and periodic checkpoint requests of running jobs.
  void RunJobTimers();
  TimeMs CheckpointInterval(const JobRecord& job) const;
  struct Reservation {
    JobId job = 0;
    TimeMs start = kNever;
    std::vector<GpuSlot> gpus;
  };
  Reservation Reserve(const JobRecord& job) const;
  Reservation cached_reservation_;
  // Place `job` on `where` unless it already failed at this generation.
  Placement PlaceUnlessBlocked(const JobRecord& job, const ClusterState& where, bool masked);

  // ---- scheduler_health.cpp
  // Applies the requests in order, then recovers every job they interrupt,
  // once each, by job id.
  void OnNodeRequests(const std::vector<NodeStateRequested>& requests);
  // One request's state change; the running jobs on a node it takes down
  // are added to lost (job -> its lost nodes), to be recovered after.
  void ApplyNodeRequest(const NodeStateRequested& e, std::map<JobId, std::vector<NodeId>>& lost);
  void OnEvacuated(const NodeEvacuated& e);
  void OnLaunchFailed(const JobLaunchFailed& e);
  void OnHeartbeat(const Heartbeat& e);
  void OnGpuEvent(const GpuEvent& e);
  void CheckHeartbeats();
  void SetNodeState(NodeId n, NodeState s, const std::string& reason);
  // A node a restart may put ranks on: up, with no failed GPU.
  bool Restartable(NodeId n) const;
  // An infrastructure failure of a running job (it lost GPUs or nodes, a
  // drain evacuated it, a node could not start it; avoid: that node, or -1):
  // restart it on healthy replacements that keep its topology, else requeue
  // it to wait for capacity. Never fails the job.
  void Recover(JobRecord& job, const std::string& reason, NodeId avoid = -1);
  // A rank exited non-zero: count it, and back off, restart or fail.
  void OnAppFailure(JobRecord& job, int rank, int exit_code);
  // "287 nodes down, 1 suspect": the nodes that take no work now ("" when
  // every node is up).
  std::string UnavailableNodes() const;
  TimeMs NextWakeup() const;
};

}  // namespace topo::core
