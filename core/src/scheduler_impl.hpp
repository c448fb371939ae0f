#pragma once
// SchedulerCore's internals: the brain's parts (each with its own header and
// tests: QuotaLedger, QueueOrder, FailurePolicy, Allocations, StepTimeModel)
// and the state that ties them together, split over scheduler.cpp (events,
// jobs), scheduler_pass.cpp (the pass: order, quotas, backfill, preemption)
// and scheduler_health.cpp (GPU and node health, failure recovery).

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "topo/core/allocations.hpp"
#include "topo/core/failure_policy.hpp"
#include "topo/core/liveness.hpp"
#include "topo/core/node_sets.hpp"
#include "topo/core/queue_order.hpp"
#include "topo/core/quota.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/step_model.hpp"

namespace topo::core {

// "40 s", "10 min", "250 ms": durations in reasons.
std::string DurationText(TimeMs ms);

class SchedulerCore::Impl {
 public:
  Impl(const Topology& topology, SchedulerConfig config);

  std::vector<Command> Step(const Event& event, TimeMs now);

  // ---- the brain's parts, each with its own header and tests
  const Topology& topo_;
  SchedulerConfig config_;
  std::unique_ptr<Placer> placer_;  // Busy without the empty-cluster analysis
  std::unique_ptr<Placer> judge_;   // decides Busy vs Infeasible at submission
  // Places exactly where placer_ does, without choosing among candidates by
  // predicted speed (PlacerOptions::choose_by_speed off): the reservation
  // plan's probes ask only whether the job fits.
  std::unique_ptr<Placer> fitter_;
  std::unique_ptr<QueueOrder> order_;
  QuotaLedger quotas_;  // quotas, usage now, fairshare
  FailurePolicy failures_;
  Allocations alloc_;    // GPUs held by running jobs (and their spares)
  StepTimeModel steps_;  // predicted step times, beside the placers
  NodeSets sets_;        // partitions and reservations
  ClusterState& cluster() { return alloc_.cluster(); }
  const ClusterState& cluster() const { return alloc_.cluster(); }

  // ---- jobs and the queue
  std::map<JobId, JobRecord> jobs_;
  // Jobs that reached a terminal state since TakeFinishedJobs last ran (it
  // visits these, not every job: the daemon calls it after each commit).
  std::vector<JobId> finished_;
  TimeMs now_ = 0;
  std::set<JobId> waiting_;             // queued or held
  std::map<JobId, TimeMs> queue_time_;  // ordering time (age)
  // When a job became eligible again (released from a hold, its last
  // dependency met), where that is later than its ordering time: its
  // fairshare_max_wait counts from then (OverdueAt), as a held job or one
  // waiting for another earns no age.
  std::map<JobId, TimeMs> eligible_at_;
  std::set<JobId> preemptors_;            // waiting jobs that preempted others
  std::map<JobId, JobId> preempted_for_;  // victim -> the job it makes room for
  // Jobs waiting out a restart backoff, by its end.
  std::set<std::pair<TimeMs, JobId>> backoff_;
  // A running job's first non-zero rank exit of its run, waiting until
  // `until` (attribution_window) for a node of the job to turn suspect or go
  // down and take it over (TakeOverHeldExits; Recover names it); then an
  // application failure (ResolveHeldExits). Stale once the job is no longer
  // running that run (restarts moved on).
  struct HeldExit {
    int rank = 0;
    int exit_code = 0;
    TimeMs until = 0;
    int restarts = 0;
  };
  std::map<JobId, HeldExit> held_exits_;
  ClusterState empty_;        // for feasibility checks
  std::set<JobId> feasible_;  // placed on the empty cluster once

  // ---- node health
  // Each node's last heartbeat (or registration), and, when
  // heartbeats_required, its deadlines (WatchNode).
  LivenessTracker liveness_;
  // The admin's reason of each requested drain, kept until resume (the
  // node's reason once the drain completes); empty when the node was not
  // drained by request (health drains are not).
  std::vector<std::string> drain_reason_;
  bool AdminDrained(NodeId n) const { return !drain_reason_[n].empty(); }
  // Nodes per NodeState, for the reasons of jobs that wait for capacity.
  std::array<int, 5> nodes_in_state_{};

  // ---- the pass's memo
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
  // The generation at which a job's preemption try found no victim set it
  // may take, and why (its wait reason repeats it until the cluster changes
  // or, for a reclaim deferred to the promise's deadline, until retry_at).
  struct PreemptTried {
    uint64_t generation;
    std::string reason;
    TimeMs retry_at = kNever;
  };
  std::map<JobId, PreemptTried> preempt_failed_at_;
  // The head's decision to wait for a faster placement at a generation (its
  // reason; empty: start now; at: the end it waits for). wait_bound_at_: the
  // earliest end of a bounded wait, a placement wait's bound or a deferred
  // reclaim's deadline (a pass runs then). overdue_wake_: the earliest
  // OverdueAt still ahead of the queued jobs, as of the last pass.
  struct FasterTried {
    uint64_t generation;
    std::string reason;
    TimeMs at = kNever;
  };
  std::map<JobId, FasterTried> faster_tried_;
  TimeMs wait_bound_at_ = kNever;
  TimeMs overdue_wake_ = kNever;
  // A pass runs only when something it depends on changed.
  uint64_t queue_epoch_ = 1;
  uint64_t last_pass_generation_ = 0;
  uint64_t last_pass_epoch_ = 0;
  // The blocked head of the last pass (0: the last pass blocked on nothing),
  // and the job the current step submitted: a submission that can only
  // queue behind that head skips the full pass (AdmitBehindHead).
  JobId pass_head_ = 0;
  JobId just_submitted_ = 0;
  JobId reservation_job_ = 0;
  uint64_t reservation_generation_ = 0;
  // The last placement Reserve found and the state it placed on: the placer
  // is a function of the job and the state, and the state after the ends a
  // reservation waits for is often the same from pass to pass (a job that
  // ended early was among them; a backfilled one ends before them).
  struct ReserveMemo {
    JobId job = 0;
    std::optional<ClusterState> state;
    Placement placement;
  };
  mutable ReserveMemo reserve_memo_;
  Placement PlaceForReservation(const JobRecord& job, const ClusterState& future) const;
  // Whether PlaceForReservation would place it (its memo, else fitter_).
  bool FitsForReservation(const JobRecord& job, const ClusterState& future) const;
  // The last pass's estimate for its blocked head (EstimatedStart): 0 and
  // kNever when it made none.
  JobId estimate_job_ = 0;
  TimeMs estimate_start_ = kNever;

  // ---- timers of running jobs
  std::map<JobId, TimeMs> checkpoint_asked_;  // last periodic checkpoint request
  // Time limits, checkpoint requests, preemption deadlines: each holder's
  // next one (JobTimer) in a queue by time, and the earliest. A job whose
  // timer may have moved (a state change, a start or release, a
  // checkpoint) is marked with TimerChanged and its entry refreshed by
  // RecomputeTimers; a policy change or a restore refreshes every entry.
  TimeMs next_timer_ = kNever;
  bool timers_dirty_ = true;  // some entry needs refreshing
  std::set<std::pair<TimeMs, JobId>> timer_queue_;
  std::map<JobId, TimeMs> timer_at_;  // each queued job's entry
  std::vector<JobId> timers_changed_;
  bool all_timers_changed_ = true;
  void TimerChanged(JobId id) {
    timers_changed_.push_back(id);
    timers_dirty_ = true;
  }
  void AllTimersChanged() {
    all_timers_changed_ = true;
    timers_dirty_ = true;
  }
  void RecomputeTimers();
  // The earliest time limit, checkpoint request or preemption deadline of
  // one job (kNever when it has none).
  TimeMs JobTimer(const JobRecord& job) const;
  MasterPorts ports_;  // MASTER_PORT held by running jobs, per master node

  // ---- failed nodes of ended jobs, by the job's name (scheduler.cpp)
  // A resubmission (the same tenant, user and job name) inherits the nodes
  // that failed the last such job, so it avoids them as its restarts do. At
  // most kMaxRememberedNames names, the oldest forgotten first.
  std::map<std::string, std::vector<std::string>> failed_by_name_;
  std::vector<std::string> failed_name_order_;  // oldest first
  static constexpr size_t kMaxRememberedNames = 4096;
  static std::string ResubmissionKey(const JobRequest& r);
  void RememberFailedOf(const JobRecord& job);

  // ---- dependencies and arrays (scheduler.cpp)
  // Jobs waiting on each job's end (the inverse of JobRecord::waiting_on).
  std::map<JobId, std::vector<JobId>> dependents_;
  // Running (or preempting) tasks per array, by the array's first task.
  std::map<JobId, int> array_running_;
  void ForgetDependencies(const JobRecord& job);
  void ResolveDependents(const JobRecord& ended);
  // Why the job may not start yet for its dependencies or its array's
  // throttle ("" when nothing holds it).
  std::string DependencyBlock(const JobRecord& job) const;
  std::string ArrayBlock(const JobRecord& job) const;

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
  // ---- partitions and reservations (scheduler_sets.cpp)
  void OnPartition(const PartitionConfigured& e);
  void OnPartitionDeleted(const PartitionDeleted& e);
  void OnReservation(const ReservationConfigured& e);
  void OnReservationDeleted(const ReservationDeleted& e);
  // After a change of the sets: the memos that depend on them are dropped,
  // and waiting jobs of `name` (a partition or reservation) that may no
  // longer run as asked are rejected, with the reason.
  void NodeSetsChanged(const std::string& name, bool deleted, bool reservation);
  // Reservations' moments due by now_: a maintenance one's checkpoint
  // lead (running jobs on its nodes that would overrun it are asked to
  // checkpoint), its start (they are requeued off its nodes), any one's
  // start and end (the pass looks again; waiting jobs of an ended one are
  // rejected and it is removed).
  void RunNodeSetTimers();
  TimeMs sets_wake_ = kNever;  // the next such moment (NodeSets::NextChange)
  // Maintenance reservations whose checkpoint requests went out, by name.
  std::set<std::string> maintenance_asked_;
  // Refreshes the job's fence for a run from now (its partition's and
  // reservations' nodes) before it is placed.
  void RefreshFence(JobRecord& job);
  // The spec the judge places on the empty cluster: where the job could
  // ever run (its partition's and own reservation's nodes).
  JobSpec HomeSpec(const JobRecord& job) const;
  // The job's partition's priority tier (0 without one).
  int PriorityTier(const JobRecord& job) const;
  void OnPolicy(const PolicyChanged& e);
  TimeMs TimeLimit(const JobRecord& job) const;
  // GPU allocation of a job that starts or restarts, and its release: the
  // cluster, the node index, the tenant's usage and the job's record.
  void Allocate(JobRecord& job, std::vector<GpuSlot> ranks, std::vector<NodeId> spares);
  void Release(JobRecord& job);
  // A drain of node n: the job holding it as a spare gives it back (its
  // ranks run on; a spare on a drained node could never take one).
  void ReleaseSpare(NodeId n);
  // Everything a start of the job needs on its nodes, with a fresh master
  // port (the one of its last run was freed by Release).
  // REQUIRES: the job holds its ranks (Allocate).
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
  void MaybeFinishDrain(NodeId n);

  // ---- scheduler_pass.cpp
  // A pass: PlaceQueued, then when the next waiting job becomes overdue.
  void SchedulePass();
  void PlaceQueued();
  std::vector<JobId> Ordered() const;
  QueuedJob QueueEntry(const JobRecord& job) const;
  // When a queued job ranks ahead of fairshare (fairshare_max_wait after it
  // became eligible); kNever when the bound is off or a dependency is unmet.
  TimeMs OverdueAt(const JobRecord& job) const;
  // True when the job submitted this step sorts after the last pass's
  // blocked head and cannot start now, so a full pass would only set its
  // reason: sets it and spares the pass.
  bool AdmitBehindHead(JobId id);
  // A waiting job's reason for `what` it waits on, with the nodes that take
  // no work now and, for a job that ran before, where it restarts from.
  std::string WaitReason(const JobRecord& job, const std::string& what) const;
  // Empty when the tenant's quotas (cluster-wide and in the job's
  // partition) let the job start now; else the reason.
  std::string QuotaBlock(const JobRecord& job) const;
  // The partition a start of the job would count in for its tenant's
  // per-partition limits: its partition now ("" none).
  std::string QuotaPartition(const JobRecord& job) const;
  void Start(JobRecord& job, const Placement& p);
  // Chooses victims for a blocked job and asks them to checkpoint and stop
  // (true), or says why not (false; empty when no job may be preempted).
  // expected_start: when the reservation plan starts the job without
  // preemption (kNever: not foreseeable).
  struct PreemptDecision {
    bool started = false;
    std::string reason;
    TimeMs retry_at = kNever;  // not started: try again then, whatever changes
  };
  PreemptDecision TryPreempt(JobRecord& waiting, TimeMs expected_start);
  void StopExpiredPreemptions();
  // Empty when `job` should start on `now` (placed here now); else why it
  // waits for a faster placement (SchedulerConfig::placement_wait).
  std::string WaitForFaster(const JobRecord& job, const Placement& now);
  TimeMs PlacementWaitBound(const JobRecord& job) const;
  // Time limits and periodic checkpoint requests of running jobs.
  void RunJobTimers();
  TimeMs CheckpointInterval(const JobRecord& job) const;
  struct Reservation {
    JobId job = 0;
    TimeMs start = kNever;
    std::vector<GpuSlot> gpus;
  };
  // When the plan (running jobs ending at their limits) starts `job`; a job
  // holding GPUs is planned as if requeued (its GPUs free, its end not
  // waited for).
  Reservation Reserve(const JobRecord& job) const;
  // The plan's search: the first of the times `at` (ascending) after whose
  // release(state, 0..i) a job of `gpus` GPUs fits on `base`, and its
  // placement there; start kNever when none. `fits(state)` must be true
  // exactly where `place(state)` is placed: the search probes with the
  // cheap one and places once, at the answer.
  struct PlannedStart {
    TimeMs start = kNever;
    Placement placement;
    size_t index = 0;  // of the end in `at` it starts after
    int free_at = 0;   // free GPUs of the state it is placed on
  };
  // `reacquire` undoes `release` of the same end exactly (PlanStart walks
  // one state back and forth instead of copying it for each probe).
  PlannedStart PlanStart(int gpus, const ClusterState& base, std::span<const TimeMs> at,
                         const std::function<void(ClusterState&, size_t)>& release,
                         const std::function<void(ClusterState&, size_t)>& reacquire,
                         const std::function<bool(const ClusterState&)>& fits,
                         const std::function<Placement(const ClusterState&)>& place) const;
  // Running jobs by the time they must end, earliest first: their time
  // limits (or, preempting, their grace deadlines).
  std::vector<std::pair<TimeMs, JobId>> EndsByLimit() const;
  // Every job holding GPUs as the plan sees it, by (end, id): its end as in
  // EndsByLimit (kNever for a holder the plan never releases) and the stamp
  // of its allocation (Allocations::stamp).
  struct Holding {
    TimeMs end = kNever;
    JobId id = 0;
    uint64_t stamp = 0;
    auto operator<=>(const Holding&) const = default;
  };
  std::vector<Holding> Holdings() const;
  // The last plan Reserve made in full, and what it saw. A later pass keeps
  // it (KeepsPlan) while nothing since can have moved it:
  //  - the same job, holding no GPUs, and no node or GPU health changed;
  //  - every job that took GPUs since and ends at or after `answer` (the end
  //    the start waits for) holds none of the reserved GPUs (backfill on
  //    the masked state never does), so they are still free then;
  //  - the job still cannot start before `answer`: every job that stopped
  //    holding GPUs (or holds others now) ended, by its limit, before
  //    `answer`, so the plan had released it before the start and no state
  //    it probed is freer; or, where some ended early that the plan waited
  //    for, the state just before `answer` still has fewer free GPUs than
  //    the job needs, or (one probe, kProbe) the job does not fit on it.
  // A fresh plan gives the same start (scheduler_random_test checks it) but
  // could pick other GPUs there (that state has more busy GPUs now):
  // keeping saves a plan per pass while a large head waits for days behind
  // a churn of small jobs.
  struct KeptPlan {
    JobId job = 0;
    uint64_t health = 0;  // cluster().health_changes() when planned
    std::vector<Holding> holdings;
    size_t answer_at = 0;  // the index in holdings of `answer`
    const Holding& answer() const { return holdings[answer_at]; }
    // Free GPUs once every job before `answer` ended, and the GPUs that
    // would take work of each holder from `answer` on (holdings[answer_at +
    // i]), as the plan counted them.
    int free_before = 0;
    std::vector<int> usable;
    Reservation reservation;
    std::vector<std::pair<NodeId, uint64_t>> reserved;  // its GPUs: a mask per node, by node
    // Sets reservation and reserved.
    void Keep(Reservation r);
  };
  mutable KeptPlan kept_plan_;
  enum class Kept { kNo, kYes, kProbe };
  Kept KeepsPlan(const JobRecord& job, const std::vector<Holding>& now) const;
  // kProbe: whether the job still does not fit once every job before the
  // answer ended; if so, the kept plan takes `now` as what it saw.
  bool StillNotBefore(const JobRecord& job, std::vector<Holding> now) const;
  // Records what a plan saw (holdings, its answer's index in them, the free
  // GPUs just before it) beside the reservation it keeps.
  void KeepPlan(const JobRecord& job, std::vector<Holding> holdings, size_t answer_at,
                int free_before, Reservation r) const;
  // The kept plan's record of what it saw, alone.
  void RebasePlan(std::vector<Holding> holdings, size_t answer_at, int free_before) const;
  // GPUs of the job's allocation that would take work once free: on up
  // nodes, not failed.
  int UsableHeld(const JobRecord& job) const;
  // Reserve(job), computed once per generation for the pass's blocked head.
  const Reservation& ReservationFor(const JobRecord& job);
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
  void OnStartUnacknowledged(const StartUnacknowledged& e);
  void OnHeartbeat(const Heartbeat& e);
  void OnGpuEvent(const GpuEvent& e);
  // Nodes whose heartbeat deadline passed: suspect, or down in one batch.
  void CheckHeartbeats();
  // Sets the node's heartbeat deadlines from its last heartbeat and state:
  // an up node is suspect heartbeat_suspect_after and down
  // heartbeat_down_after after it, any other node that is not down only goes
  // down; a down node has none. A function of (last heartbeat, state) alone,
  // so a restored core sets the same ones. No-op unless heartbeats_required.
  void WatchNode(NodeId n);
  void SetNodeState(NodeId n, NodeState s, const std::string& reason);
  // The node keeps its state under a new reason (NodeStateChanged with the
  // state it has): what keeps it drained changed.
  void SetNodeReason(NodeId n, const std::string& reason);
  // "n7 GPU 6 failed", "n7 GPUs 5 and 6 failed": the node's failed GPUs.
  std::string FailedGpus(NodeId n) const;
  // A node a restart may put ranks on: up, with no failed GPU.
  bool Restartable(NodeId n) const;
  // An infrastructure failure of a running job (it lost GPUs or nodes, a
  // drain evacuated it, a node could not start it; avoid: that node, or -1):
  // restart it on healthy replacements that keep its topology (spares and
  // free nodes, else a fresh placement, else nodes of small jobs it preempts
  // when that costs less than its wait: ReplaceByPreempting), else requeue it
  // to wait for capacity. Never fails the job.
  void Recover(JobRecord& job, const std::string& reason, NodeId avoid = -1);
  // Adds the nodes of `left` that failed the job (down, suspect, a failed
  // GPU, or the one that could not start it) to its spec's avoid list, the
  // newest kMaxAvoidedNodes kept: its restarts use them only when nothing
  // else fits (placer_select.cpp).
  void RememberFailedNodes(JobRecord& job, const std::set<NodeId>& left, NodeId could_not_start);
  static constexpr size_t kMaxAvoidedNodes = 64;
  // Recovery's last resort before the queue: replacements for the nodes in
  // `bad` on nodes freed by stopping small running jobs (see the definition
  // for which). found is false when no such set completes the job within its
  // required constraints.
  struct TakeOver {
    bool found = false;
    std::vector<GpuSlot> ranks;
    std::vector<NodeId> spares_left;
    std::vector<JobId> victims;
    double cost_gpu_s = 0;  // the victims' GPUs x (restart cost + work at risk)
  };
  TakeOver ReplaceByPreempting(const JobRecord& job, const std::set<NodeId>& bad,
                               const std::vector<NodeId>& spares) const;
  // A rank exited non-zero: count it, and back off, restart or fail
  // (FailurePolicy::AfterAppFailure).
  void OnAppFailure(JobRecord& job, int rank, int exit_code);
  // The first node of the job's ranks that is suspect or down; -1 when none.
  NodeId UnavailableNodeOf(const JobRecord& job) const;
  // Held exits of jobs a node of which is now suspect or down: recovered as
  // that node's incident.
  void TakeOverHeldExits();
  // Held exits whose window ended: application failures (or, when a node of
  // the job is unavailable by now, that node's); stale ones are dropped.
  void ResolveHeldExits();
  // " (rank 3 exited with status 1 meanwhile)" for the job's held exit of
  // its current run, which it forgets; "" when none.
  std::string TakeHeldExit(const JobRecord& job);
  // "287 nodes down, 1 suspect": the nodes that take no work now ("" when
  // every node is up).
  std::string UnavailableNodes() const;
  TimeMs NextWakeup() const;
};

}  // namespace topo::core
