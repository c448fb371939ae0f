#pragma once
// SchedulerCore: every scheduling decision, as a pure state machine.
//
//   std::vector<Command> Step(const Event& event, TimeMs now);
//
// Events come in (a job submitted, a node lost, a checkpoint completed, a
// tick, ...); commands come out (start these ranks here, ask for a
// checkpoint, stop ranks, drain a node, a job changed state and why). The
// same events at the same times always give the same commands, so the daemon
// can rebuild the core after a restart by replaying its durable event log,
// and the simulator, the daemon and the benchmarks share every decision.
//
// What it decides:
//   - queue order: priority, then hierarchical fairshare (tenant names are
//     paths "org/team/user"; usage decays with a half-life), then age;
//   - EASY backfill: the blocked head job gets a reservation (the earliest
//     time and GPUs it can start, from running jobs' time limits); a later
//     job starts only if it fits now and ends before the reservation or
//     keeps off the reserved GPUs;
//   - tenant quotas: guaranteed GPUs, borrowing beyond them up to a limit,
//     maximum job size and running jobs; a job that would break a limit
//     waits with a reason naming it; borrowed capacity is reclaimed first;
//   - topology-aware preemption: the victim set that frees a placement
//     meeting the waiting job's required constraints with the least lost
//     work; victims get a checkpoint request and a grace period, then stop
//     and requeue with their shape;
//   - health: GPU events move GPUs healthy -> degraded -> failed, a failed
//     GPU drains its node; missed heartbeats move nodes up -> suspect -> down;
//   - recovery: a running job that loses a node or GPU restarts from its
//     newest complete checkpoint on replacements that keep its topology
//     (its own spares, then free nodes in the same HBD, leaf, ...), or is
//     requeued with its shape when none fit. A restart only ever uses nodes
//     that are up with no failed GPU (never suspect, draining, drained or
//     down ones), and a batch of node changes (NodeStatesRequested) is
//     applied whole before any job of it is recovered;
//   - failures are of two kinds. Infrastructure failures (a node lost, a GPU
//     failed, a drain, a transient launch failure) never fail a job: it
//     restarts on healthy nodes or waits in the queue, with the reason, until
//     there is capacity again. Application failures (a rank exits non-zero)
//     count toward max_app_failures, reset by a new checkpoint; the job
//     waits out an exponential backoff in the queue, holding nothing, before
//     each restart, and fails with the last exit status at the limit. A rank
//     that exits while a node of its job is suspect or lost, or just before
//     (attribution_window), is part of that node's incident: infrastructure.
//
// Thread safety: none; one owner (the daemon's strand, the simulator) calls
// Step. Time never comes from a clock: `now` is an argument, non-decreasing.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/launch.hpp"
#include "topo/core/node_sets.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/quota.hpp"
#include "topo/core/time.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

struct SnapshotAccess;

// ---------------------------------------------------------------- config

enum class RequeuePosition : uint8_t { kHead, kTail };

struct SchedulerConfig {
  std::string placer = "toposched";
  PlacerOptions placer_options;
  // A name of QueueOrderNames() (queue_order.hpp): "multifactor" or "fifo".
  std::string queue_order = "multifactor";
  bool backfill = true;
  // Backfill looks at this many queued jobs behind the blocked head per pass
  // (Slurm's bf_max_job_test, 500 there too); jobs further back wait for a
  // later pass. A pass costs the order of every waiting job plus a placement
  // try per job looked at: with 10,000 jobs pending on 24,576 GPUs a step
  // took 26 ms at 500 against 24 ms at 64 and 40 ms with no bound, and
  // started 4 times as many jobs as at 64 (docs/benchmarks.md, "Backfill
  // depth"). 64 before it was a policy key.
  int backfill_depth = 500;
  bool preemption = true;
  TimeMs preempt_grace = 2 * kMinute;
  // What one preemption costs a victim besides lost work, per GPU: stopping,
  // relaunching and loading its checkpoint. A victim set is chosen only when
  // the preemptor's gain (its GPUs x its expected wait from the reservation
  // plan) exceeds the victims' cost (their GPUs x (this + work since their
  // last checkpoint, for victims that cannot have checkpointed recently)).
  TimeMs preempt_restart_cost = 10 * kMinute;
  // A job preempted this many times is never chosen again (0: no limit).
  int preempt_protect_after = 3;
  // Waiting for a faster placement (docs/architecture.md): the head of the
  // queue whose placement now is predicted at least placement_wait_slowdown
  // x its ideal step waits, at most placement_wait after it queued, for
  // running jobs to end when their ends promise a placement that finishes it
  // sooner. A job's or its tenant's own bound overrides this one; 0 here:
  // only jobs or tenants that ask wait. 30 min did best of 0, 30, 60 and
  // 240 on S/meta-24k (3,000 jobs; docs/benchmarks.md).
  TimeMs placement_wait = 30 * kMinute;
  double placement_wait_slowdown = 1.10;
  // The multifactor order's bound on fairshare: a job eligible (queued, not
  // held, its dependencies met) for this long ranks ahead of fairshare,
  // oldest first, so no job waits forever behind other tenants' shares
  // (priority still comes first). 0: fairshare alone, the default of every
  // stack (as Slurm's age weight is 0 by default): a bound trades the
  // replays' goodput and JCT for the waits it ends. On the 100,000-job
  // S/meta-24k replay 48 h took goodput from 96.7 to 93.7 % and 7 days to
  // 95.3 %; on 16 seeds of S/meta-24k+F 48 h narrowed the ETTR gap to
  // slurm-tree from -0.88 to -0.61 points, ending a reclaimed 2,048-GPU
  // job's 45 h wait behind its tenant's share (docs/benchmarks.md).
  TimeMs fairshare_max_wait = 0;
  // Recovery: replacements that keep the topology (spares, then free
  // nodes); without, the job restarts only by being requeued.
  bool replace_on_failure = true;
  RequeuePosition requeue = RequeuePosition::kHead;
  bool restart_from_checkpoint = true;  // false: a requeued job starts over
  TimeMs fairshare_half_life = 7 * 24 * kHour;
  TimeMs default_time_limit = 24 * kHour;
  TimeMs default_checkpoint_interval = 30 * kMinute;
  TimeMs heartbeat_suspect_after = 3 * kSecond;
  TimeMs heartbeat_down_after = 10 * kSecond;
  // Nodes must heartbeat to stay up (the daemon); the simulator turns it off.
  bool heartbeats_required = true;
  // Nodes start down until registered (NodeStateRequested up) even when the
  // core does not time heartbeats out (the daemon tracks liveness itself).
  bool nodes_start_down = false;
  // MASTER_PORT of every start, per master node (launch.hpp).
  PortRange master_ports;
  // Application failures (a rank exits non-zero): the job fails at the
  // max_app_failures-th one in a row without a new checkpoint between them
  // (1: at the first). Infrastructure failures never count.
  int max_app_failures = 10;
  // Restart backoff after an application failure: the k-th in a row waits
  // initial * 2^(k-1), at most max, in the queue. initial 0: restart at once
  // (on the same nodes where they are healthy). The second and later
  // transient launch failures in a row wait the same way, one step behind
  // (the first restarts at once, off the node that could not start it).
  TimeMs restart_backoff_initial = 10 * kSecond;
  TimeMs restart_backoff_max = 10 * kMinute;
  // A rank's non-zero exit while every node of its job is up waits this long
  // for its verdict: a node of the job that turns suspect or goes down
  // meanwhile takes the exit over, as part of that node's incident (an
  // infrastructure failure); otherwise it is an application failure then. A
  // rank that exits while a node of its job is already suspect or down is
  // that node's at once; one of a job on its own node alone (whose agent
  // reported it) is an application failure at once. Real ranks exit first
  // when a peer vanishes (their collective fails within a second) and the
  // loss is seen only when the lost node's connection closes or its
  // heartbeats are missed: about the daemon's liveness window (3 s:
  // missed_heartbeats_down x heartbeat_interval_ms), with a margin. 0: every
  // exit of a job whose nodes are up is an application failure at once.
  TimeMs attribution_window = 5 * kSecond;

  // Named stacks of ../shared/BENCHMARKS.md: "toposched", "slurm-tree",
  // "fifo-firstfit". nullopt for an unknown name.
  static std::optional<SchedulerConfig> ForStack(std::string_view name);
  static std::vector<std::string> StackNames();
};

// The part of SchedulerConfig that may change while the core runs
// (PolicyChanged): what decides when and where jobs start, preempt and
// restart, not which placer or queue order the core was built with.
struct SchedulingPolicy {
  bool backfill = true;
  int backfill_depth = 1;
  bool preemption = true;
  TimeMs preempt_grace = 0;
  TimeMs preempt_restart_cost = 0;
  int preempt_protect_after = 0;
  TimeMs placement_wait = 0;
  TimeMs fairshare_max_wait = 0;
  TimeMs default_time_limit = 0;
  TimeMs default_checkpoint_interval = 0;
  int max_app_failures = 1;
  TimeMs restart_backoff_initial = 0;
  TimeMs restart_backoff_max = 0;
  TimeMs attribution_window = 0;

  static SchedulingPolicy Of(const SchedulerConfig& c);
  void ApplyTo(SchedulerConfig& c) const;
  bool operator==(const SchedulingPolicy&) const = default;
};

// ---------------------------------------------------------------- jobs

// A job that starts only once another has ended a certain way (Slurm's
// --dependency): afterok, when it completed; afternotok, when it failed, was
// cancelled or was rejected; afterany, when it ended at all.
enum class DependencyKind : uint8_t { kAfterOk, kAfterAny, kAfterNotOk };
std::string_view DependencyKindName(DependencyKind k);
// "afterok" <-> kind; false for another name.
bool ParseDependencyKind(std::string_view name, DependencyKind& out);
struct Dependency {
  DependencyKind kind = DependencyKind::kAfterOk;
  JobId job = 0;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

struct JobRequest {
  JobSpec spec;
  std::string tenant = "default";
  std::string user;
  int priority = 0;
  TimeMs time_limit = 0;           // 0: the config's default
  TimeMs checkpoint_interval = 0;  // 0: the config's default; <0: never
  // How long the job may wait for a faster placement than it could get now
  // (SchedulerConfig::placement_wait): 0 its tenant's or the config's
  // bound; < 0 never waits.
  TimeMs placement_wait = 0;
  // What each rank runs (argv; empty: the agent's default). Carried, never
  // interpreted by the core.
  std::vector<std::string> command;
  // How the processes start (launch mode, env, working dir, output files).
  // Carried, never interpreted.
  ProcessSpec process;
  // The Unix account the ranks run as (the submitter's, from the daemon's
  // user record). Carried, never interpreted.
  std::string unix_user;
  // Limits of the job's cgroup on each node (0: none). Carried, never
  // interpreted.
  int64_t memory_mb_per_node = 0;
  int cpu_millis_per_node = 0;  // 1000 = one CPU's time per second
  // Every one must be met before the job may start; one that can no longer
  // be met cancels the job. Only jobs the core still holds (not terminal
  // ones taken by TakeFinishedJobs): the daemon resolves older ones before
  // it logs the submission.
  std::vector<Dependency> dependencies;
  // A task of a job array (Slurm's --array): array_job is the id of the
  // array's first task (0: not an array), array_task its index, and at most
  // array_throttle tasks of the array run at once (0: no bound).
  JobId array_job = 0;
  int array_task = -1;
  int array_throttle = 0;
  // The submitter's idempotency key ("" none): a retried submission with the
  // same key from the same user is answered with the job it made the first
  // time. Carried, never interpreted by the core.
  std::string client_request_id;
  // The partition it runs in ("": the default partition, or every node when
  // there is none) and the reservation it runs in ("": none): node_sets.hpp.
  std::string partition;
  std::string reservation;
};

enum class JobState : uint8_t {
  kQueued,  // waiting; reason says for what
  kHeld,    // waiting until released
  kRunning,
  kPreempting,  // asked to checkpoint; stops at the grace deadline
  kCompleted,
  kFailed,
  kCancelled,
  kRejected,  // can never run as asked; reason says why
};
std::string_view JobStateName(JobState s);
bool IsTerminal(JobState s);
// Whether a job that ended in `state` meets `kind`.
// REQUIRES: IsTerminal(state)
bool DependencyMet(DependencyKind kind, JobState state);

struct JobRecord {
  JobId id = 0;
  JobRequest request;
  JobState state = JobState::kQueued;
  std::string reason;
  TimeMs submit_time = 0;
  TimeMs first_start = -1;
  TimeMs last_start = -1;
  TimeMs end_time = -1;
  std::vector<GpuSlot> ranks;  // while running
  std::vector<NodeId> spares;  // while running
  int restarts = 0;
  int preemptions = 0;
  int64_t checkpoint_step = -1;  // newest complete checkpoint
  TimeMs checkpoint_time = -1;   // when it completed
  TimeMs productive_ms = 0;      // run time kept by checkpoints or completion
  double lost_gpu_ms = 0;        // GPU-ms of work lost to failures/preemption
  TimeMs preempt_deadline = kNever;
  bool borrowed = false;  // started beyond its tenant's guarantee
  // While it holds GPUs: the partition they count in for its tenant's
  // per-partition limits (QuotaLedger), its partition when it started ("":
  // none), so giving them back is exact whatever partitions do meanwhile.
  std::string quota_partition;
  bool requeued_at_head = false;
  // Failures since the newest checkpoint (a new one resets both):
  // application failures count toward max_app_failures; transient launch
  // failures only set their backoff.
  int app_failures = 0;
  int launch_failures = 0;
  // Waiting out a restart backoff in the queue until then; -1 when not.
  TimeMs restart_at = -1;
  // The dependencies not met yet (a subset of request.dependencies).
  std::vector<Dependency> waiting_on;
  // Nodes that failed this job (down, suspect, a failed GPU, or one that
  // could not start it), the newest 64: its placements use them only when
  // nothing else fits (NodeSelection::avoid). A resubmission (the same
  // tenant, user and job name) starts with those of the last such job.
  std::vector<std::string> failed_nodes;
  // The nodes its partition and reservations let it take work on now
  // (NodeSets::FenceFor; null: every node), refreshed by the scheduler
  // before each placement.
  NodeFence fence;
  // request.spec with failed_nodes added to its avoid list and the fence,
  // when there are any; what the placers get (SpecToPlace).
  std::shared_ptr<const JobSpec> placing;

  const JobSpec& SpecToPlace() const { return placing ? *placing : request.spec; }
  // Sets failed_nodes and rebuilds `placing` from them.
  void SetFailedNodes(std::vector<std::string> nodes);
  // Sets the fence (a no-op for the same one) and rebuilds `placing`.
  void SetFence(NodeFence f);

 private:
  void RebuildPlacing();
};

// ---------------------------------------------------------------- events

struct JobSubmitted {
  JobId id;
  JobRequest request;
};
struct JobCancelled {
  JobId id;
  std::string reason;
};
struct JobHoldChanged {
  JobId id;
  bool hold;
};
// Every rank exited; exit_code 0 is success.
struct JobFinished {
  JobId id;
  int exit_code = 0;
};
// One rank exited on its own while the job runs: an application failure
// (it counts toward max_app_failures; the restart backs off), unless a node
// of the job is suspect or lost, now or within attribution_window: then it
// is part of that node's incident.
struct RankExited {
  JobId id;
  int rank;
  int exit_code;
};
struct CheckpointCompleted {
  JobId id;
  int64_t step;
};
// Admin or agent: drain, resume (up), register (up), down.
struct NodeStateRequested {
  NodeId node;
  NodeState state;
  std::string reason;
};
// Several node changes known at the same moment (the daemon's liveness check
// finding many nodes silent at once): every change is applied, in order,
// before any job is recovered, so no restart lands on a node the same batch
// takes down; each job it interrupts is recovered once.
struct NodeStatesRequested {
  std::vector<NodeStateRequested> requests;
};
struct Heartbeat {
  NodeId node;
};
enum class GpuEventKind : uint8_t {
  kXid,
  kEccSingleBit,
  kEccDoubleBit,
  kThermal,
  kOffBus,
  kCleared
};
struct GpuEvent {
  NodeId node;
  int gpu;
  GpuEventKind kind;
  int code = 0;  // the XID number, or the ECC count
};
struct TenantConfigured {
  TenantConfig tenant;
};
struct Tick {};
// Admin: the live policy changes from now on (SchedulingPolicy); key, old
// and new say what changed, as the admin wrote it, for the record only.
struct PolicyChanged {
  SchedulingPolicy policy;
  std::string key;
  std::string old_value;
  std::string new_value;
};
// Agent: a drain stopped every rank on the node (a graceful drain after the
// checkpoint it asked for). The node's jobs restart on other nodes from their
// newest checkpoint; ignored unless the node was drained by request.
struct NodeEvacuated {
  NodeId node;
  std::string reason;
};

// Agent: the job's ranks could not be started on a node. permanent: no
// node can (its Unix account is missing, a root job is refused): the job
// fails with the reason. Otherwise the node could not (a port in use, a
// full disk): an infrastructure failure; the job restarts off that node
// (from the second such failure in a row after a backoff), never failing.
struct JobLaunchFailed {
  JobId id;
  NodeId node;
  std::string reason;
  bool permanent = false;
};

// The daemon: the agents of `nodes` did not acknowledge the job's current
// start (or restart) within `waited` (its start_ack_timeout_s): nobody may
// run those ranks, so the job must not show running. An infrastructure
// failure, as a transient launch failure is: the job is requeued (from the
// second in a row with a backoff), never failed, never counted toward
// max_app_failures. Ignored unless the job is running.
struct StartUnacknowledged {
  JobId id;
  std::vector<NodeId> nodes;
  TimeMs waited = 0;
};

// Admin: a partition or reservation is added or replaced, or deleted
// (node_sets.hpp). Deleting one rejects the waiting jobs that name it
// (running ones keep running); the daemon refuses a change that
// CheckNodeSetChange refuses before it logs one.
struct PartitionConfigured {
  PartitionConfig partition;
};
struct PartitionDeleted {
  std::string name;
};
struct ReservationConfigured {
  ReservationConfig reservation;
};
struct ReservationDeleted {
  std::string name;
};

using Event =
    std::variant<JobSubmitted, JobCancelled, JobHoldChanged, JobFinished, RankExited,
                 CheckpointCompleted, NodeStateRequested, Heartbeat, GpuEvent, TenantConfigured,
                 Tick, NodeEvacuated, JobLaunchFailed, NodeStatesRequested, PolicyChanged,
                 StartUnacknowledged, PartitionConfigured, PartitionDeleted, ReservationConfigured,
                 ReservationDeleted>;

// ---------------------------------------------------------------- commands

// Start the job's ranks: everything each node needs is in launch
// (launch.hpp), with launch.restart_count and launch.checkpoint_step (a job
// requeued after a failure starts from its checkpoint with its restarts).
struct StartJob {
  JobId id;
  std::vector<GpuSlot> ranks;
  std::vector<NodeId> spares;
  Launch launch;
};
// Stop every rank, start them again on `ranks` from launch.checkpoint_step
// (-1: from scratch) as run launch.restart_count.
struct RestartJob {
  JobId id;
  std::vector<GpuSlot> ranks;
  std::vector<NodeId> spares;
  Launch launch;
};
struct StopJob {
  JobId id;
  std::string reason;
};
struct RequestCheckpoint {
  JobId id;
  std::string reason;
};
struct DrainNode {
  NodeId node;
  std::string reason;
};
struct NodeStateChanged {
  NodeId node;
  NodeState state;
  std::string reason;
};
struct GpuHealthChanged {
  NodeId node;
  int gpu;
  GpuHealth health;
  std::string reason;
};
struct JobStateChanged {
  JobId id;
  JobState state;
  std::string reason;
};

using Command = std::variant<StartJob, RestartJob, StopJob, RequestCheckpoint, DrainNode,
                             NodeStateChanged, GpuHealthChanged, JobStateChanged>;

// ---------------------------------------------------------------- core

class SchedulerCore {
 public:
  // REQUIRES: topology outlives the core; MakePlacer(config.placer) and
  // MakeQueueOrder(config.queue_order) exist (ForStack guarantees it). Every node starts up, or
  // down until it registers (NodeStateRequested up) when heartbeats_required or nodes_start_down.
  SchedulerCore(const Topology& topology, SchedulerConfig config);
  ~SchedulerCore();
  SchedulerCore(const SchedulerCore&) = delete;
  SchedulerCore& operator=(const SchedulerCore&) = delete;

  // REQUIRES: now >= the previous call's now.
  std::vector<Command> Step(const Event& event, TimeMs now);

  // Read-only views.
  const ClusterState& cluster() const;
  const JobRecord* job(JobId id) const;  // nullptr if unknown
  // Every job ever submitted, by id (terminal ones included).
  const std::map<JobId, JobRecord>& jobs() const;
  // Waiting jobs (queued, not held) in the order the next pass considers them.
  std::vector<JobId> WaitingJobs() const;
  // When the reservation plan expects a waiting job to start, as of the last
  // scheduling pass; never earlier than the latest `now`. Only the pass's
  // blocked head has one:
  //   - a head waiting for resources: the start of the reservation backfill
  //     keeps for it (the first end of running jobs, by their time limits or
  //     preemption deadlines, after which it can be placed);
  //   - a head waiting for a faster placement: the end of the running job it
  //     waits for (its bound ends later).
  // nullopt for every other job (the ones behind the head start after jobs
  // that have not started yet, so the plan says nothing of them), for held
  // jobs and jobs backing off after a failure, for running and ended jobs,
  // for a head with no foreseeable start (failed hardware), and without
  // backfill (no reservation is made).
  std::optional<TimeMs> EstimatedStart(JobId id) const;
  // Whether a job of this spec could ever run on this cluster, as the pass
  // judges it: a valid spec that the placer fits on the empty cluster. Ok,
  // or kInfeasible with a message naming the constraint and the fix (and
  // field() "spec.gpus" when the cluster has too few GPUs, else "spec").
  // The daemon refuses such a submission before it is logged; the pass
  // rejects one that reaches it with the same verdict.
  Status CheckFeasible(const JobSpec& spec) const;
  // Where a job of this spec would be placed on the cluster as it is now,
  // by the same placer as CheckFeasible (a what-if: nothing changes, and a
  // submission may still wait behind the queue).
  Placement TryPlace(const JobSpec& spec) const;
  // GPUs in use per tenant right now.
  int TenantUsage(const std::string& tenant) const;
  // The tenant's own decayed fairshare usage, GPU-ms, at `now`: as of the
  // last Step, projected to a later `now` with what it holds
  // (QuotaLedger::UsageAt; a read, nothing changes).
  double FairshareUsage(const std::string& tenant, TimeMs now) const;
  // What the tenant's jobs hold and how many run, per partition they count
  // in (JobRecord::quota_partition); only partitions where it runs some.
  const std::map<std::string, QuotaLedger::PartitionUse>& TenantPartitionUsage(
      const std::string& tenant) const;
  const TenantConfig* tenant(const std::string& name) const;
  const SchedulerConfig& config() const;
  // Partitions and reservations as configured now (reservations that ended
  // are gone).
  const NodeSets& node_sets() const;
  // Whether a node-set event would be taken: a configure that validates and
  // conflicts with nothing (ValidatePartition, one default, no overlapping
  // reservation); a delete of one that exists and that no waiting or running
  // job names (kConflict naming them). Ok or the error, nothing changed.
  Status CheckNodeSetChange(const Event& e) const;
  // The nodes a reservation of `gpus` GPUs over [start, end) would take:
  // whole up nodes of `partition` ("" every node) in the fewest, most
  // compact domains (the toposched placer on the empty cluster), keeping off
  // nodes of reservations overlapping the window. kInfeasible when too few.
  Result<std::vector<std::string>> ChooseReservationNodes(int gpus, TimeMs start, TimeMs end,
                                                          const std::string& partition) const;
  // Removes terminal jobs from jobs() and returns them, so a long replay
  // keeps memory flat.
  std::vector<JobRecord> TakeFinishedJobs();
  // The time of the next decision the core has scheduled for itself (a
  // preemption deadline, a heartbeat timeout, the end of a restart backoff);
  // kNever when none. The caller sends a Tick then.
  TimeMs NextWakeup() const;

  // ---- snapshots (core/src/snapshot.cpp; docs/store.md, Snapshots)
  // The core's whole state as bytes: every job it holds and its record, the
  // queue, the allocations, quotas and fairshare usage, node and GPU health,
  // drains, the live policy, preemption and restart counters, the pass's
  // memos and timers, the master ports. Canonical: two cores in the same
  // state give the same bytes, so comparing snapshots compares states.
  // Versioned (kSnapshotVersion) and checksummed. Pure: no I/O.
  std::string Snapshot() const;
  // The same state in an older format version (1..kSnapshotVersion), as an
  // older release wrote it: what a newer field holds is left out. For the
  // tests that every older version still restores.
  std::string Snapshot(uint32_t version) const;
  // This core's state as a snapshot of a core over `next`, a new version of
  // this topology (nodes matched by name, DiffTopologies): a topology change
  // applied while jobs run. Every job, queue, quota, fairshare usage and
  // node state is carried; a node only in `next` comes up down (until its
  // agent registers), healthy and free; the pass's memos and the kept
  // reservation plan are dropped (computed again). Refused (kConflict), naming
  // the jobs and the nodes, when a node that is removed or whose GPU count
  // changes is held by a job (its ranks or spares): drain it first. Restore()
  // it into a fresh core over `next`.
  Result<std::string> SnapshotOnto(const Topology& next) const;
  // Puts the state of a Snapshot() into this core, which then makes the same
  // decisions for the same further events as the core that wrote it.
  // Refused, leaving the core unchanged, with an error that says why, when:
  // the bytes are not a snapshot, are truncated or fail their checksum; the
  // format version is newer than kSnapshotVersion (or older than 1); the snapshot was written over
  // another topology or under another SchedulerConfig (the live policy
  // aside: the snapshot's own replaces this core's); or a field is out of
  // range (a node, GPU or job that cannot exist, an unknown state).
  // REQUIRES: the core is fresh (no Step yet).
  Status Restore(std::string_view snapshot);
  // 2: a job's request has client_request_id. 3: a reclaim deferred to the
  // promise's deadline keeps that deadline. Versions 1 and 2 are still read
  // (a store whose early events were compacted away has only its snapshots).
  // 4: the allocations' stamps and the reservation plan a pass keeps.
  // 5: the policy's fairshare_max_wait (0 when restoring an older one) and
  // when jobs became eligible again. 6: a job spec's pids_max. 7: the
  // policy's attribution_window (0 when restoring an older one) and the rank
  // exits waiting for their verdict; backfill_depth is part of the live
  // policy (a version 6 or older snapshot keeps the depth it was written
  // with, 64).
  // 8: a job's node selection, EP auto and failed nodes. 9: partitions,
  // reservations, a request's partition and reservation, and the failed
  // nodes remembered by job name. 10: a tenant's per-partition limits and
  // the partition each running job counts in for them (an older one: no
  // such limits, and each running job counts in its partition as the
  // snapshot's sets give it).
  static constexpr uint32_t kSnapshotVersion = 10;

 private:
  friend struct SnapshotAccess;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// XID and other GPU events -> health, as the health policy classifies them.
// nullopt: the event does not change health.
std::optional<GpuHealth> ClassifyGpuEvent(const GpuEvent& e);

}  // namespace topo::core
