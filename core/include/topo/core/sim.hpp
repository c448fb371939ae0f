#pragma once
// Trace replay: a discrete-event simulator that drives SchedulerCore with a
// virtual clock, and injects seeded failures.
//
//   SimReport r = RunSimulation(topology, *SchedulerConfig::ForStack("toposched"),
//                               workload, options).value();
//
// Pure like the rest of the core: no files, no clock, randomness only from
// core::Rng seeded by SimOptions::seed. The caller measures wall time, CPU
// time and memory and fills the SimReport fields reserved for them.
//
// The event loop. Future events wait in one priority queue ordered by
// (time, class, sequence); at equal times the classes run in this order,
// fixed so a replay is deterministic:
//   1 job completions (start + remaining work)  -> JobFinished{id, 0}
//   2 checkpoint completions                    -> CheckpointCompleted
//   3 repairs (GPU replaced, host back)         -> GpuEvent kCleared, NodeStateRequested up
//   4 failure arrivals                          -> GpuEvent kXid 79, NodeStateRequested down
//   5 submissions, in (submit time, position) order -> JobSubmitted
//   6 the core's own wakeups (NextWakeup())     -> Tick
//   7 periodic ticks every tick_interval        -> Tick
// Tenants are configured (TenantConfigured) at the first submission time.
// Every event is one SchedulerCore::Step; the simulator reacts to the
// commands it returns:
//   StartJob     the job runs from its newest complete checkpoint (0 on its
//                first start); its completion is due at now + remaining work.
//   RestartJob   the work since checkpoint_step is lost (counted in GPU-ms);
//                the job runs again on the new ranks from checkpoint_step.
//   StopJob      its pending completion and checkpoints are cancelled.
//   RequestCheckpoint  a CheckpointCompleted follows checkpoint_latency later
//                (dropped if the job stops first).
//   JobStateChanged    terminal states are recorded; the rest is noted.
//   DrainNode, NodeStateChanged, GpuHealthChanged  counted only.
// Checkpoint steps are the job's progress in ms of work, so a step names the
// work a restart keeps. With CheckpointMode::kPeriodic (the default) the
// jobs also checkpoint on their own every checkpoint interval of run time,
// as training frameworks do; the core's periodic requests then find a fresh
// checkpoint and rarely fire. A core wakeup that the core no longer wants
// when it comes (NextWakeup() is later by then) is dropped.
//
// Failures (FailureModel kLlama3): interruptions arrive as a Poisson process
// over the whole cluster, one per `gpu_hours_per_interruption` GPU-hours of
// capacity; each picks a GPU uniformly and a category: GPU/HBM (a GpuEvent
// kXid code 79 on that GPU), network or host/software (the node goes down).
// After a lognormal repair time the GPU is cleared / the node comes back
// (NodeStateRequested up once nothing on it is broken). The failure sequence
// depends only on the seed and the topology, never on the policy, so stacks
// replayed on the same input see the same failures. If a running job on the
// broken GPU or node is still running after the core has seen the failure,
// the simulator reports the rank's death (RankExited, as an agent would) and
// counts it in rank_exit_fallbacks.
//
// Speed (SimOptions::speed_model): a job's trace duration is its work at
// its ideal placement (perf_model.hpp, the best placement of the empty
// cluster). While it runs, it progresses at speed = ideal step / step on its
// placement with its neighbours' traffic (<= 1): progress is work done, not
// wall time, and checkpoint steps count work. Jobs crossing the same
// oversubscribed fabric share it by the fair-share rule of sim_speed.hpp; a
// job's speed, and so its completion time, is recomputed whenever a job
// sharing a fabric with it starts or stops (only those jobs are touched).
// Time limits are the trace's times the job's worst unloaded slowdown (every
// group across the whole cluster: its user sized the limit for the slowest
// placement it could get alone, so no stack's jobs are killed by their
// placement alone); a job slowed beyond that by neighbours reaches its limit
// and fails. With the
// speed model off every job runs at speed 1, as before.
//
// Topology changes (SimOptions::topology_changes), as the daemon applies an
// import with `--drain` and its agents drain: at the change's time the nodes
// the new version removes (or resizes) are drained (NodeStatesRequested
// draining). The jobs holding one checkpoint (CheckpointCompleted at their
// progress after checkpoint_latency, as an agent's drain asks) and the node
// is evacuated (NodeEvacuated), so the core restarts them elsewhere from that
// checkpoint. Once no job holds a removed node the core's state moves onto the
// new version (SnapshotOnto, Restore into a core over it: every job, queue,
// quota and fairshare usage carried, node ids mapped by name), and so do the
// simulator's (ranks, failed GPUs, pending repairs, the speed model); the
// added nodes' agents register (NodeStateRequested up). Failure arrivals are
// drawn over the version in use, so after a change the failure sequence
// depends on when it applied. Utilization divides by the capacity integrated
// over time.
//
// Memory: per job a fixed-size record (SimJobResult plus a few words of run
// state); finished jobs are taken out of the core (TakeFinishedJobs) as the
// replay goes; no per-event history is kept.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/evaluator.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

// ---------------------------------------------------------------- input

struct SimJob {
  int64_t index = 0;    // the trace row, reported back in SimJobResult
  TimeMs submit = 0;    // >= 0
  TimeMs duration = 0;  // work to do, > 0
  JobRequest request;
};

struct SimWorkload {
  std::string name;
  std::vector<TenantConfig> tenants;  // configured before the first submission
  std::vector<SimJob> jobs;           // any order
};

enum class FailureKind : uint8_t { kNone, kLlama3 };

// Llama 3 (54 days, 16,384 H100): 419 unexpected interruptions, one per
// ~50,700 GPU-hours; 58.7 % GPU/HBM, 8.4 % network, the rest host and
// software. Repair: lognormal with median repair_median and log-sd
// repair_sigma.
struct FailureModel {
  FailureKind kind = FailureKind::kNone;
  double gpu_hours_per_interruption = 50700;
  double share_gpu = 0.59;
  double share_network = 0.08;  // the rest (0.33) is host/software
  TimeMs repair_median = 2 * kHour;
  double repair_sigma = 0.75;

  // "none" or "llama3"; nullopt for another name.
  static std::optional<FailureModel> ByName(std::string_view name);
  static std::vector<std::string> Names();
};

// One failure at a fixed time (tests, what-if runs), besides the model's.
struct ScriptedFailure {
  TimeMs at = 0;
  NodeId node = 0;
  int gpu = -1;  // a GPU/HBM fault on this GPU; -1: the node goes down (host)
  TimeMs repair = 2 * kHour;
};

// A new version of the cluster's topology applied during the replay, as an
// admin's `topo topology import` applies one to the daemon (sim.hpp,
// "Topology changes").
struct SimTopologyChange {
  TimeMs at = 0;                         // when the admin imports it
  std::shared_ptr<const Topology> next;  // the new version (nodes matched by name)
};

enum class CheckpointMode : uint8_t {
  kOnRequest,  // jobs checkpoint only when the core asks (RequestCheckpoint)
  kPeriodic,   // and also on their own every checkpoint interval of run time
};

struct SimOptions {
  uint64_t seed = 1;
  FailureModel failures;
  std::vector<ScriptedFailure> scripted_failures;
  int large_gpus = 512;                // mean_queue_delay_large: jobs of at least this many GPUs
  int ettr_gpus = 1024;                // ettr_large: jobs of at least this many GPUs
  TimeMs tick_interval = 5 * kMinute;  // 0: no periodic ticks
  TimeMs checkpoint_latency = 30 * kSecond;
  CheckpointMode checkpoints = CheckpointMode::kPeriodic;
  bool keep_job_results = true;  // SimReport::job_results; false: aggregates only
  // Jobs still waiting after this long with nothing running, submitted or
  // pending (the core will never start them) are reported as unfinished and
  // the replay stops (checked at ticks and failure arrivals).
  TimeMs stall_limit = kHour;
  // The replay stops this long after the last submission, reporting the
  // jobs not ended as unfinished (a job that fails faster than it can
  // checkpoint would otherwise restart forever).
  TimeMs horizon_after_last_submit = 365 * 24 * kHour;
  // Jobs run at the speed their placement and neighbours allow (above).
  bool speed_model = false;
  // Multiplies the bandwidth of every tier above the HBD (the sensitivity
  // runs: 0.5, 1, 2); with the speed model only.
  double cross_hbd_scale = 1.0;
  // Applied in order of `at` (a change whose time comes while the one before
  // still drains begins once that one is applied).
  std::vector<SimTopologyChange> topology_changes;
};

// ---------------------------------------------------------------- output

// What one SimTopologyChange did.
struct SimTopologyChangeResult {
  TimeMs at = 0;
  TimeMs applied = -1;  // when the new version took over; -1 never (replay ended first)
  int nodes_added = 0, nodes_removed = 0;       // removed counts resized nodes too
  int capacity_before = 0, capacity_after = 0;  // GPUs
  int64_t jobs_moved = 0;                       // jobs evacuated from the nodes it removed
  int64_t moved_failed = 0;  // of them, jobs that ended failed (at any later time)
  int64_t moved_completed = 0;
  // Every tenant's fairshare usage and held GPUs the same in the core after
  // the change as just before it.
  bool fairshare_kept = false;
};

struct SimJobResult {
  int64_t index = 0;   // SimJob::index
  JobId id = 0;        // the id the core saw: position in the workload + 1
  int32_t tenant = 0;  // index into SimReport::tenants
  int32_t gpus = 0;
  TimeMs submit = 0;
  TimeMs first_start = -1;
  TimeMs end = -1;  // terminal state time; -1 if unfinished
  // The last state the core reported (kQueued if it never answered).
  JobState state = JobState::kQueued;
  int32_t placements = 0;          // starts and restarts
  int32_t restarts = 0;            // RestartJob, and StartJob after a stop
  int32_t interruptions = 0;       // failures that hit the job while running
  TimeMs productive_ms = 0;        // work kept at the end (duration when completed)
  double lost_failure_gpu_ms = 0;  // work lost to failures, GPU-ms
  double lost_other_gpu_ms = 0;    // lost to preemption or requeue without a failure
  double run_ms = 0;               // wall time run, all runs
  double work_ms = 0;              // work progressed, all runs (lost work included)
  double slow_gpu_ms = 0;          // GPU-ms run beyond the work done (slow placements)
  // Of the first placement; NaN when absent.
  double leaf_span_ratio = 0;
  double comm_cost_ratio = 0;
  bool required_met = true;  // every placement met every required constraint
  // Bit m set: some placement of the job used a GPU of the topology's
  // gpu_models()[m] (the first 64 models; models that only a later topology
  // version has come after the first version's).
  uint64_t gpu_models = 0;
  int32_t topology_moves = 0;  // evacuations by topology changes
};

struct SimReport {
  std::string stack;
  std::string workload;
  std::string topology;
  int capacity_gpus = 0;  // of the first topology version (utilization integrates every version's)

  int64_t jobs = 0;
  int64_t completed = 0, failed = 0, cancelled = 0, rejected = 0, unfinished = 0;
  TimeMs first_submit = 0;
  TimeMs last_end = 0;  // last terminal time of a job that ran
  double span_days = 0;
  double offered_load = 0;  // sum(gpus x duration) / (capacity x arrival span)

  // The replay metrics of ../shared/BENCHMARKS.md; nullopt when nothing to
  // measure. Fractions are 0..1.
  double allocated_gpu_hours = 0;     // ranks of running jobs, integrated
  std::optional<double> utilization;  // allocated / (capacity x span)
  // Not in BENCHMARKS.md: the same ratio over the time when some job waits
  // (submitted, not running, not ended). At an offered load below 1 every
  // work-conserving policy ends near the same time, so `utilization` hardly
  // differs between policies; this shows how well they pack under backlog.
  std::optional<double> utilization_backlogged;
  double backlog_days = 0;
  std::optional<double> mean_jct_s;                // completed jobs, end - submit
  std::optional<double> p95_jct_s;                 // nearest rank
  std::optional<double> mean_queue_delay_s;        // started jobs, first start - submit
  std::optional<double> mean_queue_delay_large_s;  // started jobs >= large_gpus
  // Jobs >= ettr_gpus that ran and ended: sum(productive time) / sum(end -
  // first start), where a job's productive time is the wall time it ran
  // minus the share of it whose work was lost (re-done after a restart).
  // This is ETTR as ByteRobust and Meta's cluster studies measure it: what
  // failures, restarts and waits to restart cost. A slow placement is not
  // counted here (its job runs, slowly); work_ratio_large, goodput and
  // mean_slowdown count that.
  std::optional<double> ettr_large;
  // The same jobs: sum(work kept, at the ideal placement's speed) / sum(end -
  // first start): ETTR x the jobs' mean speed, below 1 without any failure
  // when placements or neighbours slow jobs down.
  std::optional<double> work_ratio_large;
  std::optional<double> required_met;  // share of placements meeting every required constraint
  std::optional<double> leaf_span_ratio_mean;  // over placements
  std::optional<double> comm_cost_ratio_mean;  // over placements
  double lost_gpu_hours = 0;                   // work lost to failures
  double lost_other_gpu_hours = 0;             // lost to preemption / requeue without a failure
  // Useful GPU-hours (work kept, at slowdown 1: gpus x productive time) /
  // allocated GPU-hours.
  std::optional<double> goodput;
  // Mean over jobs that ran of (wall time run / work progressed).
  std::optional<double> mean_slowdown;
  double slow_gpu_hours = 0;  // allocated GPU-hours beyond the work done
  // JCT of completed jobs by size: < 64 GPUs, 64 .. large_gpus - 1, >= large_gpus.
  struct SizeClass {
    int64_t jobs = 0;
    std::optional<double> mean_jct_s;
    std::optional<double> p95_jct_s;
    // The same jobs' mean duration at the ideal placement's speed: their
    // mean JCT with no wait, no failure and no slow placement, which no
    // policy's mean_jct_s can go below.
    std::optional<double> bound_jct_s;
  };
  std::array<SizeClass, 3> jct_by_size;
  bool speed_model = false;
  double cross_hbd_scale = 1.0;

  // Counters.
  int64_t events = 0;  // Step calls
  int64_t placements = 0;
  int64_t restarts = 0;
  int64_t stops = 0;
  int64_t checkpoints = 0;
  int64_t failures_injected = 0;
  int64_t failures_absorbed = 0;  // hit a GPU or node that was already broken
  int64_t failures_hit_jobs = 0;  // job interruptions caused by failures
  // Preemption (docs/sim.md, Metrics): jobs told to stop for another job
  // (JobStateChanged kPreempting), those of them that ran on borrowed
  // capacity (reclaimable by a tenant within its guarantee; the others can
  // only be stopped for higher priority), their GPUs, their restarts, and
  // the GPU-ms they spent between that stop and the restart: the victims'
  // wait to restart, what a preemption costs them beyond lost work.
  int64_t preemptions = 0;
  int64_t preempted_borrowed = 0;
  int64_t preempted_gpus = 0;
  int64_t preemption_restarts = 0;
  double preempted_wait_gpu_ms = 0;
  int64_t rank_exit_fallbacks = 0;
  // Placements whose ranks sit in more than one part of a mixed cluster
  // (several GPU models or HBD kinds); toposched never makes one.
  int64_t cross_part_placements = 0;
  int64_t large_jobs = 0;          // jobs >= large_gpus
  int64_t ettr_jobs = 0;           // jobs >= ettr_gpus that ran and ended
  double core_busy_gpu_hours = 0;  // the core's own busy GPUs (spares too), integrated
  // Things the core did that the simulator did not expect, with counts: the
  // places to look for scheduler bugs.
  std::map<std::string, int64_t> anomalies;
  std::vector<SimTopologyChangeResult> topology_changes;

  std::vector<std::string> tenants;
  std::vector<SimJobResult> job_results;  // by workload position (if kept)

  // Filled by the caller, which owns a clock (nullopt until then).
  std::optional<double> cpu_s;
  std::optional<double> wall_s;
  std::optional<double> peak_rss_mb;
  std::optional<double> CpuSecondsPerSimDay() const {
    if (!cpu_s || span_days <= 0) return std::nullopt;
    return *cpu_s / span_days;
  }
};

// Replays `workload` through a SchedulerCore built from `config` (with
// heartbeats_required forced off). SimReport::stack is config.placer; the
// by-name overload sets the stack name. Errors: a job with a negative submit
// time or a non-positive duration (named by its index), a bad failure model,
// an unknown stack; the replay itself does not fail.
Result<SimReport> RunSimulation(const Topology& topology, SchedulerConfig config,
                                const SimWorkload& workload, const SimOptions& options);
// A named stack of SchedulerConfig::ForStack.
Result<SimReport> RunSimulation(const Topology& topology, std::string_view stack,
                                const SimWorkload& workload, const SimOptions& options);

// ---------------------------------------------------------------- metrics

// The placement metrics the replay needs (leaf_span_ratio, comm_cost_ratio,
// required_met) with the definitions of core::Evaluate, but with the
// empty-cluster bounds cached per job shape: Evaluate rebuilds them every
// call (~0.3 ms on nvl72-64k), which would dominate a 100,000-job replay.
class PlacementScorer {
 public:
  // REQUIRES: topology outlives the scorer.
  explicit PlacementScorer(const Topology& topology);

  struct Score {
    std::optional<double> leaf_span_ratio;
    std::optional<double> comm_cost_ratio;
    bool required_met = true;
  };
  // REQUIRES: ValidateJobSpec(job).ok(); ranks.size() == job.gpus.
  Score Evaluate(const JobSpec& job, std::span<const GpuSlot> ranks);

 private:
  struct Shape {
    int min_leaves = 0;
    std::array<int, kGroupKindCount> required{};    // tier, or -1
    std::array<int, kGroupKindCount> bound_tier{};  // innermost tier that could hold a group
    bool unknown_required_tier = false;
  };
  const Shape& ShapeOf(const JobSpec& job, int part);

  const Topology* topology_;
  std::map<std::string, Shape> shapes_;
  std::vector<uint32_t> stamp_;  // per domain, for counting distinct leaves
  uint32_t stamp_now_ = 0;
  std::vector<NodeId> group_first_;
  std::vector<int> group_tier_;
};

}  // namespace topo::core
