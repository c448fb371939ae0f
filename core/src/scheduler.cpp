// SchedulerCore: events, job bookkeeping and the public views. The queue
// pass lives in scheduler_pass.cpp, health and recovery in
// scheduler_health.cpp.

#include <algorithm>
#include <cmath>

#include "scheduler_impl.hpp"

namespace topo::core {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kHeld:
      return "held";
    case JobState::kRunning:
      return "running";
    case JobState::kPreempting:
      return "preempting";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kRejected:
      return "rejected";
  }
  return "unknown";
}

bool IsTerminal(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kRejected;
}

std::string_view DependencyKindName(DependencyKind k) {
  switch (k) {
    case DependencyKind::kAfterOk:
      return "afterok";
    case DependencyKind::kAfterAny:
      return "afterany";
    case DependencyKind::kAfterNotOk:
      return "afternotok";
  }
  return "unknown";
}

bool ParseDependencyKind(std::string_view name, DependencyKind& out) {
  for (DependencyKind k :
       {DependencyKind::kAfterOk, DependencyKind::kAfterAny, DependencyKind::kAfterNotOk}) {
    if (DependencyKindName(k) == name) {
      out = k;
      return true;
    }
  }
  return false;
}

bool DependencyMet(DependencyKind kind, JobState state) {
  switch (kind) {
    case DependencyKind::kAfterOk:
      return state == JobState::kCompleted;
    case DependencyKind::kAfterAny:
      return true;
    case DependencyKind::kAfterNotOk:
      return state != JobState::kCompleted;
  }
  return false;
}

std::optional<SchedulerConfig> SchedulerConfig::ForStack(std::string_view name) {
  SchedulerConfig c;
  if (name == "toposched") return c;
  if (name == "slurm-tree") {
    // Slurm's multifactor order (age + fairshare), EASY backfill, tree
    // placement; a failed job requeues at the head from its checkpoint with
    // no spares; no preemption.
    c.placer = "slurm-tree";
    c.preemption = false;
    c.replace_on_failure = false;
    c.requeue = RequeuePosition::kHead;
    c.placement_wait = 0;
    return c;
  }
  if (name == "fifo-firstfit") {
    c.placer = "first-fit";
    c.queue_order = "fifo";
    c.backfill = false;
    c.preemption = false;
    c.placement_wait = 0;
    c.replace_on_failure = false;
    c.requeue = RequeuePosition::kTail;
    return c;
  }
  return std::nullopt;
}

SchedulingPolicy SchedulingPolicy::Of(const SchedulerConfig& c) {
  SchedulingPolicy p;
  p.backfill = c.backfill;
  p.backfill_depth = c.backfill_depth;
  p.preemption = c.preemption;
  p.preempt_grace = c.preempt_grace;
  p.preempt_restart_cost = c.preempt_restart_cost;
  p.preempt_protect_after = c.preempt_protect_after;
  p.placement_wait = c.placement_wait;
  p.fairshare_max_wait = c.fairshare_max_wait;
  p.default_time_limit = c.default_time_limit;
  p.default_checkpoint_interval = c.default_checkpoint_interval;
  p.max_app_failures = c.max_app_failures;
  p.restart_backoff_initial = c.restart_backoff_initial;
  p.restart_backoff_max = c.restart_backoff_max;
  p.attribution_window = c.attribution_window;
  return p;
}

void SchedulingPolicy::ApplyTo(SchedulerConfig& c) const {
  c.backfill = backfill;
  c.backfill_depth = backfill_depth;
  c.preemption = preemption;
  c.preempt_grace = preempt_grace;
  c.preempt_restart_cost = preempt_restart_cost;
  c.preempt_protect_after = preempt_protect_after;
  c.placement_wait = placement_wait;
  c.fairshare_max_wait = fairshare_max_wait;
  c.default_time_limit = default_time_limit;
  c.default_checkpoint_interval = default_checkpoint_interval;
  c.max_app_failures = max_app_failures;
  c.restart_backoff_initial = restart_backoff_initial;
  c.restart_backoff_max = restart_backoff_max;
  c.attribution_window = attribution_window;
}

std::vector<std::string> SchedulerConfig::StackNames() {
  return {"toposched", "slurm-tree", "fifo-firstfit"};
}

namespace {

PlacerOptions FastOptions(PlacerOptions o) {
  o.explain_shortfall = false;
  return o;
}

PlacerOptions FitOptions(PlacerOptions o) {
  o.explain_shortfall = false;
  o.choose_by_speed = false;
  return o;
}

}  // namespace

SchedulerCore::Impl::Impl(const Topology& topology, SchedulerConfig config)
    : topo_(topology),
      config_(std::move(config)),
      placer_(MakePlacer(config_.placer, FastOptions(config_.placer_options))),
      judge_(MakePlacer(config_.placer, config_.placer_options)),
      fitter_(MakePlacer(config_.placer, FitOptions(config_.placer_options))),
      order_(MakeQueueOrder(config_.queue_order)),
      quotas_(config_.fairshare_half_life),
      failures_(config_.max_app_failures, config_.restart_backoff_initial,
                config_.restart_backoff_max),
      alloc_(topology),
      steps_(topology),
      sets_(topology),
      empty_(topology),
      drain_reason_(topology.node_count()),
      ports_(topology.node_count(), config_.master_ports) {
  if (placer_ == nullptr) placer_ = MakePlacer("toposched", FastOptions(config_.placer_options));
  if (judge_ == nullptr) judge_ = MakePlacer("toposched", config_.placer_options);
  if (fitter_ == nullptr) fitter_ = MakePlacer("toposched", FitOptions(config_.placer_options));
  if (order_ == nullptr) order_ = MakeQueueOrder("multifactor");
  if (config_.heartbeats_required || config_.nodes_start_down) {
    for (NodeId n = 0; n < topology.node_count(); ++n) cluster().SetNodeState(n, NodeState::kDown);
  }
  for (NodeId n = 0; n < topology.node_count(); ++n) {
    ++nodes_in_state_[static_cast<size_t>(cluster().node_state(n))];
    liveness_.Heard(n, 0);
    WatchNode(n);
  }
}

std::vector<Command> SchedulerCore::Impl::Step(const Event& event, TimeMs now) {
  std::vector<Command> out;
  out_ = &out;
  now_ = std::max(now_, now);
  quotas_.Advance(now_);
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, JobSubmitted>) OnSubmit(e);
        if constexpr (std::is_same_v<T, JobCancelled>) OnCancel(e);
        if constexpr (std::is_same_v<T, JobHoldChanged>) OnHold(e);
        if constexpr (std::is_same_v<T, JobFinished>) OnFinished(e);
        if constexpr (std::is_same_v<T, RankExited>) OnRankExited(e);
        if constexpr (std::is_same_v<T, CheckpointCompleted>) OnCheckpoint(e);
        if constexpr (std::is_same_v<T, NodeStateRequested>) OnNodeRequests({e});
        if constexpr (std::is_same_v<T, NodeStatesRequested>) OnNodeRequests(e.requests);
        if constexpr (std::is_same_v<T, Heartbeat>) OnHeartbeat(e);
        if constexpr (std::is_same_v<T, GpuEvent>) OnGpuEvent(e);
        if constexpr (std::is_same_v<T, TenantConfigured>) OnTenant(e);
        if constexpr (std::is_same_v<T, NodeEvacuated>) OnEvacuated(e);
        if constexpr (std::is_same_v<T, JobLaunchFailed>) OnLaunchFailed(e);
        if constexpr (std::is_same_v<T, PolicyChanged>) OnPolicy(e);
        if constexpr (std::is_same_v<T, StartUnacknowledged>) OnStartUnacknowledged(e);
        if constexpr (std::is_same_v<T, PartitionConfigured>) OnPartition(e);
        if constexpr (std::is_same_v<T, PartitionDeleted>) OnPartitionDeleted(e);
        if constexpr (std::is_same_v<T, ReservationConfigured>) OnReservation(e);
        if constexpr (std::is_same_v<T, ReservationDeleted>) OnReservationDeleted(e);
      },
      event);
  if (config_.heartbeats_required) CheckHeartbeats();
  ResolveHeldExits();
  EndBackoffs();
  if (wait_bound_at_ <= now_) {
    // A bounded wait ended: a faster placement's, or a deferred reclaim's.
    wait_bound_at_ = kNever;
    ++queue_epoch_;
  }
  if (overdue_wake_ <= now_) {
    // A job now ranks ahead of fairshare.
    overdue_wake_ = kNever;
    ++queue_epoch_;
  }
  RunJobTimers();
  if (sets_wake_ <= now_) RunNodeSetTimers();
  StopExpiredPreemptions();
  if (just_submitted_ != 0 && generation_ == last_pass_generation_ &&
      queue_epoch_ == last_pass_epoch_ + 1 && AdmitBehindHead(just_submitted_)) {
    last_pass_epoch_ = queue_epoch_;
    if (const JobRecord& j = jobs_.at(just_submitted_); j.state == JobState::kQueued) {
      overdue_wake_ = std::min(overdue_wake_, OverdueAt(j));
    }
  }
  just_submitted_ = 0;
  if (generation_ != last_pass_generation_ || queue_epoch_ != last_pass_epoch_) {
    SchedulePass();
    last_pass_generation_ = generation_;
    last_pass_epoch_ = queue_epoch_;
  }
  if (timers_dirty_) RecomputeTimers();
  out_ = nullptr;
  return out;
}

// A change of state is a command; a new reason for the same state is only
// visible in the job's record (reasons of waiting jobs change every pass).
void SchedulerCore::Impl::SetState(JobRecord& job, JobState state, std::string reason) {
  if (job.state == state) {
    job.reason = std::move(reason);
    return;
  }
  job.state = state;
  job.reason = std::move(reason);
  ++queue_epoch_;
  TimerChanged(job.id);
  if (IsTerminal(state)) {
    finished_.push_back(job.id);
    job.end_time = now_;
    RememberFailedOf(job);
    waiting_.erase(job.id);
    if (job.restart_at >= 0) backoff_.erase({job.restart_at, job.id});
    job.restart_at = -1;
    ForgetDependencies(job);
  } else if (state == JobState::kQueued || state == JobState::kHeld) {
    waiting_.insert(job.id);
  } else {
    waiting_.erase(job.id);
  }
  Emit(JobStateChanged{job.id, state, job.reason});
  if (IsTerminal(state)) ResolveDependents(job);
}

// ---------------------------------------------------------------- dependencies

void SchedulerCore::Impl::ForgetDependencies(const JobRecord& job) {
  for (const Dependency& d : job.waiting_on) {
    auto it = dependents_.find(d.job);
    if (it == dependents_.end()) continue;
    std::erase(it->second, job.id);
    if (it->second.empty()) dependents_.erase(it);
  }
}

void SchedulerCore::Impl::ResolveDependents(const JobRecord& ended) {
  auto it = dependents_.find(ended.id);
  if (it == dependents_.end()) return;
  const std::vector<JobId> waiting = std::move(it->second);
  dependents_.erase(it);
  for (JobId id : waiting) {
    auto w = jobs_.find(id);
    if (w == jobs_.end() || IsTerminal(w->second.state)) continue;
    JobRecord& job = w->second;
    bool never = false;
    DependencyKind failed_kind = DependencyKind::kAfterOk;
    std::erase_if(job.waiting_on, [&](const Dependency& d) {
      if (d.job != ended.id) return false;
      if (!DependencyMet(d.kind, ended.state)) {
        never = true;
        failed_kind = d.kind;
      }
      return true;
    });
    if (never) {
      // Slurm would leave it pending forever (DependencyNeverSatisfied);
      // nothing can change a finished job's outcome, so say so and end it.
      SetState(job, JobState::kCancelled,
               "dependency never satisfied: job " + std::to_string(ended.id) + " " +
                   std::string(JobStateName(ended.state)) + " (" +
                   std::string(DependencyKindName(failed_kind)) + ")");
    } else {
      if (job.waiting_on.empty()) eligible_at_[job.id] = now_;
      ++queue_epoch_;  // it may start now: the next step runs a pass
    }
  }
}

std::string SchedulerCore::Impl::DependencyBlock(const JobRecord& job) const {
  if (job.waiting_on.empty()) return "";
  const Dependency& d = job.waiting_on.front();
  std::string what = d.kind == DependencyKind::kAfterOk      ? "to succeed"
                     : d.kind == DependencyKind::kAfterNotOk ? "to fail"
                                                             : "to end";
  std::string out = "waiting for job " + std::to_string(d.job) + " " + what;
  if (job.waiting_on.size() > 1) {
    out += " (and " + std::to_string(job.waiting_on.size() - 1) + " more dependencies)";
  }
  return out;
}

std::string SchedulerCore::Impl::ArrayBlock(const JobRecord& job) const {
  const JobRequest& r = job.request;
  if (r.array_job == 0 || r.array_throttle <= 0) return "";
  auto it = array_running_.find(r.array_job);
  const int running = it == array_running_.end() ? 0 : it->second;
  if (running < r.array_throttle) return "";
  return "array throttle: " + std::to_string(running) + " tasks of array " +
         std::to_string(r.array_job) + " running (at most " + std::to_string(r.array_throttle) +
         " at once)";
}

std::string SchedulerCore::Impl::ResubmissionKey(const JobRequest& r) {
  if (r.spec.name.empty()) return "";
  return r.tenant + '\0' + r.user + '\0' + r.spec.name;
}

void SchedulerCore::Impl::RememberFailedOf(const JobRecord& job) {
  if (job.failed_nodes.empty()) return;
  std::string key = ResubmissionKey(job.request);
  if (key.empty()) return;
  auto [it, fresh] = failed_by_name_.try_emplace(key);
  it->second = job.failed_nodes;
  if (!fresh) std::erase(failed_name_order_, key);
  failed_name_order_.push_back(std::move(key));
  if (failed_name_order_.size() > kMaxRememberedNames) {
    failed_by_name_.erase(failed_name_order_.front());
    failed_name_order_.erase(failed_name_order_.begin());
  }
}

TimeMs SchedulerCore::Impl::TimeLimit(const JobRecord& job) const {
  if (sets_.empty()) {
    return job.request.time_limit > 0 ? job.request.time_limit : config_.default_time_limit;
  }
  TimeMs limit = sets_.BaseTimeLimit(job.request, config_.default_time_limit);
  // A job of a reservation ends with it.
  if (!job.request.reservation.empty()) {
    if (const ReservationConfig* r = sets_.reservation(job.request.reservation)) {
      const bool runs = job.state == JobState::kRunning || job.state == JobState::kPreempting;
      const TimeMs from = runs ? job.last_start : std::max(now_, r->start);
      limit = std::clamp<TimeMs>(r->end - from, 1, limit);
    }
  }
  return limit;
}

void SchedulerCore::Impl::OnSubmit(const JobSubmitted& e) {
  if (jobs_.count(e.id)) return;  // a replayed or duplicated submission
  JobRecord& job = jobs_[e.id];
  job.id = e.id;
  job.request = e.request;
  job.submit_time = now_;
  queue_time_[e.id] = now_;
  if (job.request.tenant.empty()) job.request.tenant = "default";
  Status valid = ValidateJobSpec(job.request.spec);
  if (!valid.ok()) {
    SetState(job, JobState::kRejected, valid.message());
    return;
  }
  if (Status admitted = sets_.Admit(job.request, now_); !admitted.ok()) {
    SetState(job, JobState::kRejected, admitted.message());
    return;
  }
  if (!failed_by_name_.empty()) {
    auto it = failed_by_name_.find(ResubmissionKey(job.request));
    if (it != failed_by_name_.end()) job.SetFailedNodes(it->second);
  }
  // Dependencies on jobs that ended already are met or not now; the rest
  // wait for the job's end (ResolveDependents).
  for (const Dependency& d : job.request.dependencies) {
    auto dep = jobs_.find(d.job);
    if (dep == jobs_.end() || d.job == job.id) {
      SetState(job, JobState::kRejected,
               "dependency on job " + std::to_string(d.job) +
                   ", which the scheduler does not know (or no longer holds); submit without it");
      return;
    }
    if (IsTerminal(dep->second.state)) {
      if (!DependencyMet(d.kind, dep->second.state)) {
        SetState(job, JobState::kCancelled,
                 "dependency never satisfied: job " + std::to_string(d.job) + " " +
                     std::string(JobStateName(dep->second.state)) + " (" +
                     std::string(DependencyKindName(d.kind)) + ")");
        return;
      }
      continue;
    }
    if (std::find(job.waiting_on.begin(), job.waiting_on.end(), d) != job.waiting_on.end()) {
      continue;
    }
    job.waiting_on.push_back(d);
    std::vector<JobId>& list = dependents_[d.job];
    if (std::find(list.begin(), list.end(), job.id) == list.end()) list.push_back(job.id);
  }
  job.state = JobState::kQueued;
  job.reason = "queued";
  ++queue_epoch_;
  waiting_.insert(job.id);
  just_submitted_ = job.id;
  Emit(JobStateChanged{job.id, JobState::kQueued, "submitted"});
}

void SchedulerCore::Impl::OnCancel(const JobCancelled& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end() || IsTerminal(it->second.state)) return;
  JobRecord& job = it->second;
  if (job.state == JobState::kRunning || job.state == JobState::kPreempting) {
    KeepProgress(job, now_);
    Emit(StopJob{job.id, "cancelled"});
    Release(job);
  }
  preemptors_.erase(job.id);
  SetState(job, JobState::kCancelled, e.reason.empty() ? "cancelled" : e.reason);
}

void SchedulerCore::Impl::OnHold(const JobHoldChanged& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (e.hold && job.state == JobState::kQueued) SetState(job, JobState::kHeld, "held");
  if (!e.hold && job.state == JobState::kHeld) {
    eligible_at_[job.id] = now_;
    SetState(job, JobState::kQueued,
             job.restart_at >= 0 ? "released; waits out its restart backoff first" : "released");
  }
}

void SchedulerCore::Impl::OnFinished(const JobFinished& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (job.state != JobState::kRunning && job.state != JobState::kPreempting) return;
  KeepProgress(job, now_);
  Release(job);
  if (e.exit_code == 0) {
    SetState(job, JobState::kCompleted, "completed");
  } else {
    SetState(job, JobState::kFailed, "exited with status " + std::to_string(e.exit_code));
  }
}

void SchedulerCore::Impl::OnRankExited(const RankExited& e) {
  if (e.exit_code == 0) return;  // the job finishes when every rank has
  auto it = jobs_.find(e.id);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
  JobRecord& job = it->second;
  if (held_exits_.count(job.id)) return;  // its run's first exit decides
  const HeldExit held{e.rank, e.exit_code, now_ + config_.attribution_window, job.restarts};
  if (const NodeId n = UnavailableNodeOf(job); n >= 0) {
    // A node of the job is suspect or lost: its ranks' peers fail with it.
    held_exits_[job.id] = held;  // Recover names it
    Recover(job, "node " + topo_.node(n).name + " is " +
                     std::string(NodeStateName(cluster().node_state(n))));
    return;
  }
  // Held only when a node of the job could yet be found lost: one other than
  // the exited rank's, whose agent just reported it.
  const NodeId own = e.rank >= 0 && e.rank < static_cast<int>(job.ranks.size())
                         ? job.ranks[static_cast<size_t>(e.rank)].node
                         : -1;
  const bool others = std::any_of(job.ranks.begin(), job.ranks.end(),
                                  [&](const GpuSlot& s) { return s.node != own; });
  if (config_.attribution_window <= 0 || !others) {
    OnAppFailure(job, e.rank, e.exit_code);
    return;
  }
  held_exits_[job.id] = held;  // ResolveHeldExits or a node's loss decides
}

void SchedulerCore::Impl::OnCheckpoint(const CheckpointCompleted& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (e.step <= job.checkpoint_step) return;
  if (job.state == JobState::kRunning || job.state == JobState::kPreempting)
    KeepProgress(job, now_);
  job.checkpoint_step = e.step;
  job.checkpoint_time = now_;
  job.app_failures = 0;  // progress: the failures before it no longer add up
  job.launch_failures = 0;
  TimerChanged(job.id);
  if (job.state == JobState::kPreempting) {
    Requeue(job, "preempted after checkpoint step " + std::to_string(e.step),
            RequeuePosition::kHead, /*keep_age_only=*/true);
  }
}

void SchedulerCore::Impl::OnPolicy(const PolicyChanged& e) {
  e.policy.ApplyTo(config_);
  failures_ = FailurePolicy(config_.max_app_failures, config_.restart_backoff_initial,
                            config_.restart_backoff_max);
  // Every decision that reads the policy is taken again: the pass, the
  // timers (time limits, checkpoint requests, grace deadlines), the
  // per-generation memos.
  ++generation_;
  ++queue_epoch_;
  AllTimersChanged();
}

void SchedulerCore::Impl::OnTenant(const TenantConfigured& e) {
  if (e.tenant.name.empty()) return;
  quotas_.Configure(e.tenant);
  ++generation_;
}

// ---------------------------------------------------------------- bookkeeping

void SchedulerCore::Impl::Allocate(JobRecord& job, std::vector<GpuSlot> ranks,
                                   std::vector<NodeId> spares) {
  if (job.request.array_job != 0) ++array_running_[job.request.array_job];
  const int held = alloc_.Allocate(job.id, ranks, spares);
  job.quota_partition = QuotaPartition(job);
  quotas_.AddJob(job.request.tenant, held, job.quota_partition);
  ++generation_;
  TimerChanged(job.id);
  job.ranks = std::move(ranks);
  job.spares = std::move(spares);
}

void SchedulerCore::Impl::Release(JobRecord& job) {
  if (job.request.array_job != 0) {
    auto it = array_running_.find(job.request.array_job);
    if (it != array_running_.end() && --it->second <= 0) array_running_.erase(it);
  }
  if (!job.ranks.empty()) ports_.Release(job.ranks[0].node, job.id);
  const int held =
      static_cast<int>(job.ranks.size()) + static_cast<int>(alloc_.SpareSlots(job.spares).size());
  for (NodeId n : alloc_.Release(job.id, job.ranks, job.spares)) MaybeFinishDrain(n);
  quotas_.RemoveJob(job.request.tenant, held, job.quota_partition);
  job.quota_partition.clear();
  ++generation_;
  TimerChanged(job.id);
  job.ranks.clear();
  job.spares.clear();
  job.borrowed = false;
}

void SchedulerCore::Impl::ReleaseSpare(NodeId n) {
  const JobId id = alloc_.spare_owner(n);
  auto it = jobs_.find(id);
  if (id == 0 || it == jobs_.end()) return;
  JobRecord& job = it->second;
  const int held =
      static_cast<int>(job.ranks.size()) + static_cast<int>(alloc_.SpareSlots(job.spares).size());
  const int freed = alloc_.ReleaseSpare(id, n);
  // The ledger counts the job once, holding what is left.
  quotas_.RemoveJob(job.request.tenant, held, job.quota_partition);
  quotas_.AddJob(job.request.tenant, held - freed, job.quota_partition);
  job.spares.erase(std::remove(job.spares.begin(), job.spares.end(), n), job.spares.end());
  ++generation_;
  TimerChanged(job.id);
  MaybeFinishDrain(n);
}

Launch SchedulerCore::Impl::MakeLaunch(JobRecord& job) {
  Launch l;
  l.restart_count = job.restarts;
  l.checkpoint_step = job.checkpoint_step;
  l.world_size = static_cast<int>(job.ranks.size());
  l.nodes = GroupByNode(job.ranks);
  l.master_node = job.ranks.empty() ? -1 : job.ranks[0].node;
  // -1 only when every port of the range is held on that node: more jobs
  // than the range has ports, which no node's GPU count allows.
  const int port = ports_.Take(l.master_node, job.id);
  l.master_port = port >= 0 ? port : config_.master_ports.first;
  l.command = job.request.command;
  l.process = job.request.process;
  l.parallelism = job.request.spec.parallelism;
  l.unix_user = job.request.unix_user;
  l.memory_mb = job.request.memory_mb_per_node;
  l.cpu_millis = job.request.cpu_millis_per_node;
  l.pids_max = job.request.spec.pids_max;
  l.array_job = job.request.array_job;
  l.array_task = job.request.array_task;
  return l;
}

// Work is kept up to the newest checkpoint of the current run.
TimeMs SchedulerCore::Impl::ProgressMark(const JobRecord& job) const {
  return std::max(job.last_start, job.checkpoint_time);
}

void SchedulerCore::Impl::KeepProgress(JobRecord& job, TimeMs until) {
  TimeMs mark = ProgressMark(job);
  if (until > mark) job.productive_ms += until - mark;
}

void SchedulerCore::Impl::LoseProgress(JobRecord& job) {
  TimeMs mark = ProgressMark(job);
  if (now_ > mark) job.lost_gpu_ms += static_cast<double>(now_ - mark) * job.request.spec.gpus;
}

void SchedulerCore::Impl::Requeue(JobRecord& job, const std::string& reason, RequeuePosition where,
                                  bool keep_age_only) {
  Emit(StopJob{job.id, reason});
  Release(job);
  job.preempt_deadline = kNever;
  job.requeued_at_head = where == RequeuePosition::kHead && !keep_age_only;
  queue_time_[job.id] = where == RequeuePosition::kHead ? job.submit_time : now_;
  eligible_at_.erase(job.id);
  if (!config_.restart_from_checkpoint) {
    job.checkpoint_step = -1;
  }
  SetState(job, JobState::kQueued, reason);
}

void SchedulerCore::Impl::RequeueWithBackoff(JobRecord& job, TimeMs delay,
                                             const std::string& reason) {
  LoseProgress(job);
  job.restarts += 1;
  Requeue(job, reason, config_.requeue);
  job.restart_at = now_ + delay;
  backoff_.insert({job.restart_at, job.id});
}

void SchedulerCore::Impl::EndBackoffs() {
  while (!backoff_.empty() && backoff_.begin()->first <= now_) {
    const JobId id = backoff_.begin()->second;
    backoff_.erase(backoff_.begin());
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.restart_at = -1;
    ++queue_epoch_;  // the pass considers it again
  }
}

void SchedulerCore::Impl::MaybeFinishDrain(NodeId n) {
  if (cluster().node_state(n) == NodeState::kDraining && !alloc_.occupied(n)) {
    // A requested drain keeps the admin's reason; a health drain says why it
    // is now empty.
    SetNodeState(n, NodeState::kDrained,
                 AdminDrained(n) ? drain_reason_[n] : "drained: no job left on it");
  }
}

// ---------------------------------------------------------------- facade

void JobRecord::SetFailedNodes(std::vector<std::string> nodes) {
  failed_nodes = std::move(nodes);
  RebuildPlacing();
}

void JobRecord::SetFence(NodeFence f) {
  if (f == fence) return;
  fence = std::move(f);
  RebuildPlacing();
}

void JobRecord::RebuildPlacing() {
  if (failed_nodes.empty() && !fence) {
    placing.reset();
    return;
  }
  auto spec = std::make_shared<JobSpec>(request.spec);
  std::vector<std::string>& avoid = spec->selection.avoid;
  for (const std::string& n : failed_nodes) {
    if (std::find(avoid.begin(), avoid.end(), n) == avoid.end()) avoid.push_back(n);
  }
  spec->selection.fence = fence;
  placing = std::move(spec);
}

SchedulerCore::SchedulerCore(const Topology& topology, SchedulerConfig config)
    : impl_(std::make_unique<Impl>(topology, std::move(config))) {}
SchedulerCore::~SchedulerCore() = default;

std::vector<Command> SchedulerCore::Step(const Event& event, TimeMs now) {
  return impl_->Step(event, now);
}
const ClusterState& SchedulerCore::cluster() const { return impl_->cluster(); }
const JobRecord* SchedulerCore::job(JobId id) const {
  auto it = impl_->jobs_.find(id);
  return it == impl_->jobs_.end() ? nullptr : &it->second;
}
const std::map<JobId, JobRecord>& SchedulerCore::jobs() const { return impl_->jobs_; }
std::vector<JobId> SchedulerCore::WaitingJobs() const { return impl_->Ordered(); }
std::optional<TimeMs> SchedulerCore::EstimatedStart(JobId id) const {
  if (id == 0 || id != impl_->estimate_job_ || impl_->estimate_start_ == kNever) {
    return std::nullopt;
  }
  const JobRecord* j = job(id);
  if (j == nullptr || j->state != JobState::kQueued || j->restart_at >= 0) return std::nullopt;
  return std::max(impl_->estimate_start_, impl_->now_);
}
Status SchedulerCore::CheckFeasible(const JobSpec& spec) const {
  if (Status valid = ValidateJobSpec(spec); !valid.ok()) {
    return Status::Error("spec: " + valid.message()).WithField("spec");
  }
  const int total = impl_->topo_.total_gpus();
  if (spec.gpus > total) {
    return Status::Error("spec.gpus: " + std::to_string(spec.gpus) +
                             " GPUs is more than the cluster has (" + std::to_string(total) + ")",
                         ErrorCode::kInfeasible)
        .WithField("spec.gpus");
  }
  Placement fit = impl_->judge_->Place(spec, impl_->empty_);
  if (fit.outcome == PlaceOutcome::kInfeasible) {
    return Status::Error("spec: the job can never be placed on this cluster: " + fit.reason,
                         ErrorCode::kInfeasible)
        .WithField("spec");
  }
  return Status::Ok();
}

Placement SchedulerCore::TryPlace(const JobSpec& spec) const {
  return impl_->judge_->Place(spec, impl_->cluster());
}

int SchedulerCore::TenantUsage(const std::string& tenant) const {
  return impl_->quotas_.gpus(tenant);
}
double SchedulerCore::FairshareUsage(const std::string& tenant, TimeMs now) const {
  return impl_->quotas_.UsageAt(tenant, now);
}
const std::map<std::string, QuotaLedger::PartitionUse>& SchedulerCore::TenantPartitionUsage(
    const std::string& tenant) const {
  return impl_->quotas_.partition_use(tenant);
}

const TenantConfig* SchedulerCore::tenant(const std::string& name) const {
  return impl_->quotas_.tenant(name);
}
const SchedulerConfig& SchedulerCore::config() const { return impl_->config_; }
const NodeSets& SchedulerCore::node_sets() const { return impl_->sets_; }
TimeMs SchedulerCore::NextWakeup() const { return impl_->NextWakeup(); }

std::vector<JobRecord> SchedulerCore::TakeFinishedJobs() {
  // In id order, as a walk over every job would give them.
  std::vector<JobId>& ids = impl_->finished_;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<JobRecord> out;
  for (JobId id : ids) {
    auto it = impl_->jobs_.find(id);
    if (it == impl_->jobs_.end() || !IsTerminal(it->second.state)) continue;
    impl_->queue_time_.erase(id);
    impl_->eligible_at_.erase(id);
    impl_->feasible_.erase(id);
    impl_->preemptors_.erase(id);
    impl_->blocked_at_.erase(id);
    impl_->preempt_failed_at_.erase(id);
    impl_->faster_tried_.erase(id);
    impl_->checkpoint_asked_.erase(id);
    impl_->held_exits_.erase(id);
    out.push_back(std::move(it->second));
    impl_->jobs_.erase(it);
  }
  ids.clear();
  return out;
}

}  // namespace topo::core
