// The scheduling pass: queue order (priority, hierarchical fairshare, age),
// tenant quotas, EASY backfill with a reservation for the blocked head job,
// and topology-aware preemption.

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "scheduler_impl.hpp"

namespace topo::core {

namespace {

std::string Gpus(int n) { return std::to_string(n) + " GPUs"; }

}  // namespace

QueuedJob SchedulerCore::Impl::QueueEntry(const JobRecord& j) const {
  return QueuedJob{j.id,
                   preemptors_.count(j.id) > 0,
                   j.request.priority,
                   j.requeued_at_head,
                   &j.request.tenant,
                   queue_time_.at(j.id),
                   now_ >= OverdueAt(j),
                   PriorityTier(j)};
}

TimeMs SchedulerCore::Impl::OverdueAt(const JobRecord& j) const {
  if (config_.fairshare_max_wait <= 0 || !j.waiting_on.empty()) return kNever;
  TimeMs from = queue_time_.at(j.id);
  if (auto it = eligible_at_.find(j.id); it != eligible_at_.end())
    from = std::max(from, it->second);
  return from + config_.fairshare_max_wait;
}

std::vector<JobId> SchedulerCore::Impl::Ordered() const {
  std::vector<QueuedJob> queued;
  queued.reserve(waiting_.size());
  for (JobId id : waiting_) {
    const JobRecord& j = jobs_.at(id);
    if (j.state == JobState::kQueued) queued.push_back(QueueEntry(j));
  }
  order_->Sort(queued, quotas_);
  std::vector<JobId> ids;
  ids.reserve(queued.size());
  for (const QueuedJob& q : queued) ids.push_back(q.id);
  return ids;
}

std::string SchedulerCore::Impl::QuotaPartition(const JobRecord& job) const {
  const PartitionConfig* p = sets_.PartitionOf(job.request);
  return p == nullptr ? std::string() : p->name;
}

std::string SchedulerCore::Impl::QuotaBlock(const JobRecord& job) const {
  const JobSpec& spec = job.SpecToPlace();
  return quotas_.Block(job.request.tenant, spec.gpus,
                       spec.gpus + spec.spares * topo_.max_node_gpus(), QuotaPartition(job));
}

void SchedulerCore::Impl::Start(JobRecord& job, const Placement& p) {
  Allocate(job, p.ranks, p.spares);
  job.borrowed = quotas_.gpus(job.request.tenant) > quotas_.guaranteed(job.request.tenant);
  if (job.first_start < 0) job.first_start = now_;
  job.last_start = now_;
  job.requeued_at_head = false;
  preemptors_.erase(job.id);
  checkpoint_asked_[job.id] = now_;
  Emit(StartJob{job.id, job.ranks, job.spares, MakeLaunch(job)});
  SetState(job, JobState::kRunning,
           job.checkpoint_step >= 0
               ? "running from checkpoint step " + std::to_string(job.checkpoint_step)
               : "running");
}

std::vector<SchedulerCore::Impl::Holding> SchedulerCore::Impl::Holdings() const {
  std::vector<Holding> out;
  out.reserve(alloc_.holders().size());
  for (JobId id : alloc_.holders()) {
    const JobRecord& j = jobs_.at(id);
    TimeMs end = kNever;
    if (j.state == JobState::kRunning) end = j.last_start + TimeLimit(j);
    if (j.state == JobState::kPreempting) end = j.preempt_deadline;
    out.push_back(Holding{end, id, alloc_.stamp(id)});
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<TimeMs, JobId>> SchedulerCore::Impl::EndsByLimit() const {
  std::vector<std::pair<TimeMs, JobId>> ends;
  for (const Holding& h : Holdings()) {
    if (h.end != kNever) ends.push_back({h.end, h.id});
  }
  return ends;
}

int SchedulerCore::Impl::UsableHeld(const JobRecord& job) const {
  const ClusterState& c = cluster();
  int n = 0;
  for (const GpuSlot& g : job.ranks) {
    n += c.NodeAcceptsWork(g.node) && ((c.failed_mask(g.node) >> g.gpu) & 1) == 0;
  }
  for (NodeId s : job.spares) {
    if (c.NodeAcceptsWork(s)) n += std::popcount(c.all_mask(s) & ~c.failed_mask(s));
  }
  return n;
}

SchedulerCore::Impl::Kept SchedulerCore::Impl::KeepsPlan(const JobRecord& job,
                                                         const std::vector<Holding>& now) const {
  const KeptPlan& k = kept_plan_;
  if (k.job != job.id || k.health != cluster().health_changes()) return Kept::kNo;
  auto before_answer = [&](const Holding& h) {
    return std::tie(h.end, h.id) < std::tie(k.answer().end, k.answer().id);
  };
  auto takes_reserved = [&](JobId id) {
    const JobRecord& j = jobs_.at(id);
    for (const GpuSlot& g : alloc_.Held(j.ranks, j.spares)) {
      auto it = std::lower_bound(k.reserved.begin(), k.reserved.end(),
                                 std::pair<NodeId, uint64_t>{g.node, 0});
      if (it != k.reserved.end() && it->first == g.node && ((it->second >> g.gpu) & 1)) {
        return true;
      }
    }
    return false;
  };
  // Both lists are sorted: walk them together. A job held at the answer
  // then and gone now left its GPUs free before it; one held there now and
  // not then took some.
  int free_before = k.free_before;
  bool gone = false;
  size_t i = 0;
  size_t n = 0;
  while (i < k.holdings.size() || n < now.size()) {
    if (n == now.size() || (i < k.holdings.size() && k.holdings[i] < now[n])) {
      if (i >= k.answer_at) {
        gone = true;
        free_before += k.usable[i - k.answer_at];
      }
      ++i;
    } else if (i == k.holdings.size() || now[n] < k.holdings[i]) {
      if (!before_answer(now[n])) {
        if (takes_reserved(now[n].id)) return Kept::kNo;
        free_before -= UsableHeld(jobs_.at(now[n].id));
      }
      ++n;
    } else {
      ++i;
      ++n;
    }
  }
  // Too few GPUs free before the answer: the job still cannot start sooner.
  if (!gone || free_before < job.request.spec.gpus) return Kept::kYes;
  return Kept::kProbe;
}

bool SchedulerCore::Impl::StillNotBefore(const JobRecord& job, std::vector<Holding> now) const {
  const KeptPlan& k = kept_plan_;
  const auto answer = std::lower_bound(now.begin(), now.end(), k.answer());
  if (answer == now.end() || answer->id != k.answer().id) return false;  // it ended: plan again
  ClusterState before = cluster();
  for (auto it = now.begin(); it != answer; ++it) {
    const JobRecord& j = jobs_.at(it->id);
    (void)before.Release(alloc_.Held(j.ranks, j.spares));
  }
  if (FitsForReservation(job, before)) return false;
  // The same answer and GPUs, seen from now on.
  const size_t answer_at = static_cast<size_t>(answer - now.begin());
  RebasePlan(std::move(now), answer_at, before.free_gpus(topo_.root()));
  return true;
}

void SchedulerCore::Impl::KeepPlan(const JobRecord& job, std::vector<Holding> holdings,
                                   size_t answer_at, int free_before, Reservation r) const {
  KeptPlan& k = kept_plan_;
  k.job = job.id;
  k.health = cluster().health_changes();
  k.Keep(std::move(r));
  RebasePlan(std::move(holdings), answer_at, free_before);
}

void SchedulerCore::Impl::RebasePlan(std::vector<Holding> holdings, size_t answer_at,
                                     int free_before) const {
  KeptPlan& k = kept_plan_;
  k.answer_at = answer_at;
  k.usable.clear();
  for (size_t i = answer_at; i < holdings.size(); ++i) {
    k.usable.push_back(UsableHeld(jobs_.at(holdings[i].id)));
  }
  k.free_before = free_before;
  k.holdings = std::move(holdings);
}

void SchedulerCore::Impl::KeptPlan::Keep(Reservation r) {
  reserved.clear();
  for (const GpuSlot& g : r.gpus) reserved.push_back({g.node, uint64_t{1} << g.gpu});
  std::sort(reserved.begin(), reserved.end());
  // One mask per node (a node's ranks and its spare GPUs are listed apart).
  size_t out = 0;
  for (size_t i = 0; i < reserved.size(); ++i) {
    if (out > 0 && reserved[out - 1].first == reserved[i].first) {
      reserved[out - 1].second |= reserved[i].second;
    } else {
      reserved[out++] = reserved[i];
    }
  }
  reserved.resize(out);
  reservation = std::move(r);
}

SchedulerCore::Impl::Reservation SchedulerCore::Impl::Reserve(const JobRecord& job) const {
  const bool holds = !job.ranks.empty() || !job.spares.empty();
  std::vector<Holding> holdings = Holdings();
  if (!holds) {
    const Kept kept = KeepsPlan(job, holdings);
    if (kept == Kept::kYes || (kept == Kept::kProbe && StillNotBefore(job, holdings))) {
      Reservation r = kept_plan_.reservation;
      r.start = std::max(kept_plan_.answer().end, now_);
      return r;
    }
  }
  // A recovering job's plan (Recover) leaves the kept one alone.
  if (!holds) kept_plan_ = KeptPlan{};
  std::vector<std::pair<TimeMs, JobId>> ends;
  ends.reserve(holdings.size());
  for (const Holding& h : holdings) {
    if (h.end != kNever) ends.push_back({h.end, h.id});
  }
  // A job that holds GPUs (a running job being recovered) is planned as if
  // requeued: its GPUs are free now and its own end is not waited for.
  std::optional<ClusterState> own_released;
  if (holds) {
    own_released = cluster();
    (void)own_released->Release(alloc_.Held(job.ranks, job.spares));
    std::erase_if(ends, [&](const auto& e) { return e.second == job.id; });
  }
  std::vector<TimeMs> at;
  at.reserve(ends.size());
  for (const auto& e : ends) at.push_back(e.first);
  // Every end is a running job's, whose GPUs are held in `cluster()` and
  // apart from every other job's: releasing them cannot fail, and
  // allocating them again restores the state exactly.
  PlannedStart planned = PlanStart(
      job.request.spec.gpus, own_released ? *own_released : cluster(), at,
      [&](ClusterState& s, size_t i) {
        const JobRecord& j = jobs_.at(ends[i].second);
        (void)s.Release(alloc_.Held(j.ranks, j.spares));
      },
      [&](ClusterState& s, size_t i) {
        const JobRecord& j = jobs_.at(ends[i].second);
        (void)s.Allocate(alloc_.Held(j.ranks, j.spares));
      },
      [&](const ClusterState& s) { return FitsForReservation(job, s); },
      [&](const ClusterState& s) { return PlaceForReservation(job, s); });
  Reservation r;
  r.job = job.id;
  if (planned.start == kNever) return r;
  r.start = planned.start;
  r.gpus = alloc_.Held(planned.placement.ranks, planned.placement.spares);
  if (!holds) {
    // `ends` is the front of `holdings` here; the state before the answer
    // has the answer's GPUs still held.
    const JobRecord& answer = jobs_.at(holdings[planned.index].id);
    KeepPlan(job, std::move(holdings), planned.index, planned.free_at - UsableHeld(answer), r);
  }
  return r;
}

SchedulerCore::Impl::PlannedStart SchedulerCore::Impl::PlanStart(
    int gpus, const ClusterState& base, std::span<const TimeMs> at,
    const std::function<void(ClusterState&, size_t)>& release,
    const std::function<void(ClusterState&, size_t)>& reacquire,
    const std::function<bool(const ClusterState&)>& fits,
    const std::function<Placement(const ClusterState&)>& place) const {
  PlannedStart out;
  if (at.empty()) return out;
  auto release_through = [&](ClusterState& s, size_t from, size_t to) {
    for (size_t i = from; i <= to; ++i) release(s, i);
  };
  // The first end after which enough GPUs are free at all.
  ClusterState future = base;
  size_t lo = at.size();
  for (size_t i = 0; i < at.size(); ++i) {
    release_through(future, i, i);
    if (future.free_gpus(topo_.root()) >= gpus) {
      lo = i;
      break;
    }
  }
  if (lo == at.size()) return out;  // failed hardware: no foreseeable start
  // `future` now has ends[0..lo] released. Usually the job fits within a
  // few more ends: place it after them one by one; past that, check that it
  // fits once every job has ended and binary search the first end after
  // which it does (more released GPUs only help), asking `fits` only, and
  // place it there.
  constexpr size_t kLinearTries = 4;
  size_t hi = at.size() - 1;
  for (size_t tried = 0; tried < kLinearTries && lo < at.size(); ++tried) {
    Placement p = place(future);
    if (p.placed()) {
      out.start = std::max(at[lo], now_);
      out.placement = std::move(p);
      out.index = lo;
      out.free_at = future.free_gpus(topo_.root());
      return out;
    }
    if (++lo < at.size()) release_through(future, lo, lo);
  }
  if (lo >= at.size()) return out;
  // One state, `future` with ends 0..through released, is walked to each
  // probe: forward by releasing, back by reacquiring (a copy of the whole
  // cluster per probe cost more than the jobs in between). The walks add up
  // to about twice the ends searched.
  size_t through = at.size() - 1;
  release_through(future, lo + 1, through);
  if (!fits(future)) return out;
  auto walk_to = [&](size_t k) {
    while (through < k) release(future, ++through);
    for (; through > k; --through) reacquire(future, through);
  };
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    walk_to(mid);
    if (fits(future)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  walk_to(hi);
  out.placement = place(future);
  if (!out.placement.placed()) return {};  // `fits` broke its contract: no plan
  out.start = std::max(at[hi], now_);
  out.index = hi;
  out.free_at = future.free_gpus(topo_.root());
  return out;
}

bool SchedulerCore::Impl::FitsForReservation(const JobRecord& job,
                                             const ClusterState& future) const {
  const ReserveMemo& m = reserve_memo_;
  if (m.job == job.id && m.state && m.state->SameUsage(future)) return m.placement.placed();
  return fitter_->Place(job.SpecToPlace(), future).placed();
}

Placement SchedulerCore::Impl::PlaceForReservation(const JobRecord& job,
                                                   const ClusterState& future) const {
  ReserveMemo& m = reserve_memo_;
  if (m.job == job.id && m.state && m.state->SameUsage(future)) return m.placement;
  Placement p = placer_->Place(job.SpecToPlace(), future);
  // Only a placement is kept: a try that failed would push out the state
  // the next pass's reservation most likely lands on again.
  if (p.placed()) {
    m.job = job.id;
    m.state = future;
    m.placement = p;
  }
  return p;
}

bool SchedulerCore::Impl::AdmitBehindHead(JobId id) {
  if (pass_head_ == 0) return false;
  auto h = jobs_.find(pass_head_);
  auto j = jobs_.find(id);
  if (h == jobs_.end() || j == jobs_.end()) return false;
  const JobRecord& head = h->second;
  JobRecord& job = j->second;
  if (head.state != JobState::kQueued || job.state != JobState::kQueued) return false;
  if (!job.waiting_on.empty() || job.request.array_job != 0) return false;  // the pass says why
  // Does the head sort before the job (Ordered)? Where fairshare would
  // decide (two tenants), do not guess: run the pass.
  const std::optional<bool> head_first = order_->Before(QueueEntry(head), QueueEntry(job));
  if (!head_first.value_or(false)) return false;
  if (std::string q = QuotaBlock(job); !q.empty()) {
    SetState(job, JobState::kQueued, q);
    return true;
  }
  if (!feasible_.count(id)) {
    if (!judge_->Place(job.request.spec, empty_).placed()) return false;  // the pass rejects it
    feasible_.insert(id);
  }
  // Backfill needs the GPUs free now; with fewer, the pass would only say so.
  if (cluster().free_gpus(topo_.root()) >= job.request.spec.gpus) return false;
  SetState(job, JobState::kQueued,
           WaitReason(job, "waiting behind job " + std::to_string(head.id)));
  return true;
}

std::string SchedulerCore::Impl::WaitReason(const JobRecord& job, const std::string& what) const {
  std::string out = what;
  if (std::string unavailable = UnavailableNodes(); !unavailable.empty()) {
    out += "; " + unavailable;
  }
  if (job.fence) {
    const PartitionConfig* p = sets_.PartitionOf(job.request);
    if (p != nullptr) out += "; in partition '" + p->name + "'";
    std::vector<std::string> held = sets_.Meeting(job.request, now_, TimeLimit(job));
    if (!held.empty()) {
      std::string names;
      for (size_t i = 0; i < held.size() && i < 4; ++i) names += (i ? ", '" : "'") + held[i] + "'";
      if (held.size() > 4) names += ", ...";
      out += "; keeps off the nodes of reservation " + names + ", which its time limit (" +
             DurationText(TimeLimit(job)) + ") would run into";
    }
  }
  if (job.first_start >= 0) {
    out += job.checkpoint_step >= 0
               ? "; restarts from checkpoint step " + std::to_string(job.checkpoint_step)
               : "; restarts from the beginning (no checkpoint)";
  }
  return out;
}

void SchedulerCore::Impl::SchedulePass() {
  PlaceQueued();
  // The order changes, with nothing else happening, when a job becomes
  // overdue: the core wakes then (Step runs a pass).
  overdue_wake_ = kNever;
  if (config_.fairshare_max_wait <= 0) return;
  for (JobId id : waiting_) {
    const JobRecord& j = jobs_.at(id);
    if (j.state != JobState::kQueued) continue;
    const TimeMs at = OverdueAt(j);
    if (at > now_) overdue_wake_ = std::min(overdue_wake_, at);
  }
}

void SchedulerCore::Impl::PlaceQueued() {
  pass_head_ = 0;
  estimate_job_ = 0;
  estimate_start_ = kNever;
  if (waiting_.empty()) return;
  const std::vector<JobId> order = Ordered();
  bool blocked = false;
  Reservation res;
  std::unique_ptr<ClusterState> masked;  // the state with reserved GPUs taken
  int looked = 0;
  for (JobId id : order) {
    JobRecord& job = jobs_.at(id);
    if (job.state != JobState::kQueued) continue;
    if (job.restart_at >= 0) continue;  // backing off; its reason says until when
    if (blocked && ++looked > config_.backfill_depth) break;
    RefreshFence(job);
    const JobSpec& spec = job.SpecToPlace();
    if (std::string d = DependencyBlock(job); !d.empty()) {
      SetState(job, JobState::kQueued, d);
      continue;
    }
    if (std::string a = ArrayBlock(job); !a.empty()) {
      SetState(job, JobState::kQueued, a);
      continue;
    }
    if (std::string q = QuotaBlock(job); !q.empty()) {
      SetState(job, JobState::kQueued, q);
      continue;
    }
    if (std::string w = sets_.WindowBlock(job.request, now_); !w.empty()) {
      SetState(job, JobState::kQueued, w);
      continue;
    }
    if (!feasible_.count(id)) {
      Placement on_empty =
          sets_.empty() ? judge_->Place(spec, empty_) : judge_->Place(HomeSpec(job), empty_);
      if (!on_empty.placed()) {
        SetState(job, JobState::kRejected, "infeasible: " + on_empty.reason);
        continue;
      }
      feasible_.insert(id);
    }
    if (!blocked) {
      Placement p = cluster().free_gpus(topo_.root()) >= spec.gpus
                        ? PlaceUnlessBlocked(job, cluster(), false)
                        : Placement{PlaceOutcome::kBusy,
                                    "needs " + Gpus(spec.gpus) + "; " +
                                        Gpus(cluster().free_gpus(topo_.root())) + " free now",
                                    {},
                                    {}};
      std::string faster;
      if (p.placed()) {
        faster = WaitForFaster(job, p);
        if (faster.empty()) {
          Start(job, p);
          continue;
        }
      }
      if (p.outcome == PlaceOutcome::kInfeasible) {
        SetState(job, JobState::kRejected, "infeasible: " + p.reason);
        continue;
      }
      // The head of everything that cannot start now, or will not.
      blocked = true;
      pass_head_ = id;
      if (!faster.empty()) {
        SetState(job, JobState::kQueued, faster);
        if (!config_.backfill) break;
        estimate_job_ = id;
        estimate_start_ = faster_tried_.at(id).at;
        res = ReservationFor(job);
        continue;  // nothing is reserved: it could start now
      }
      std::string why = WaitReason(job, "waiting for resources: " + p.reason);
      bool waiting_on_victims = false;
      for (const auto& [victim, for_job] : preempted_for_) waiting_on_victims |= for_job == id;
      auto failed = preempt_failed_at_.find(id);
      const bool tried = failed != preempt_failed_at_.end() &&
                         failed->second.generation == generation_ && now_ < failed->second.retry_at;
      if (waiting_on_victims) {
        why = "waiting for preempted jobs to checkpoint and stop";
      } else if (config_.preemption && tried) {
        if (!failed->second.reason.empty()) why += "; " + failed->second.reason;
      } else if (config_.preemption) {
        PreemptDecision d = TryPreempt(job, ReservationFor(job).start);
        if (d.started) {
          why = d.reason;
        } else {
          if (!d.reason.empty()) why += "; " + d.reason;
          preempt_failed_at_[id] = PreemptTried{generation_, std::move(d.reason), d.retry_at};
          wait_bound_at_ = std::min(wait_bound_at_, d.retry_at);
        }
      }
      SetState(job, JobState::kQueued, why);
      if (!config_.backfill) break;
      res = ReservationFor(job);
      if (res.start != kNever) {
        estimate_job_ = id;
        estimate_start_ = res.start;
        // Take the reserved GPUs that are free now; the rest are still held
        // by the jobs whose end makes the reservation.
        std::vector<GpuSlot> free_now;
        for (const GpuSlot& g : res.gpus) {
          if (((cluster().busy_mask(g.node) >> g.gpu) & 1) == 0) free_now.push_back(g);
        }
        masked = std::make_unique<ClusterState>(cluster());
        (void)masked->Allocate(free_now);
      }
      continue;
    }
    // Backfill: start now only if the reservation keeps its time and GPUs.
    if (cluster().free_gpus(topo_.root()) < spec.gpus) {
      SetState(job, JobState::kQueued,
               WaitReason(job, "waiting behind job " + std::to_string(res.job)));
      continue;
    }
    const bool ends_in_time = now_ + TimeLimit(job) <= res.start;
    const bool use_mask = !ends_in_time && masked != nullptr;
    Placement p = PlaceUnlessBlocked(job, use_mask ? *masked : cluster(), use_mask);
    if (p.placed()) {
      Start(job, p);
      if (masked != nullptr) {
        // A job that ends in time may sit on reserved GPUs masked already holds.
        std::vector<GpuSlot> mine = alloc_.Held(job.ranks, job.spares);
        std::erase_if(mine,
                      [&](const GpuSlot& g) { return (masked->busy_mask(g.node) >> g.gpu) & 1; });
        (void)masked->Allocate(mine);
      }
      continue;
    }
    if (p.outcome == PlaceOutcome::kInfeasible) {
      SetState(job, JobState::kRejected, "infeasible: " + p.reason);
      continue;
    }
    SetState(job, JobState::kQueued,
             "waiting behind the reservation of job " + std::to_string(res.job) + ": " + p.reason);
  }
}

TimeMs SchedulerCore::Impl::PlacementWaitBound(const JobRecord& job) const {
  if (job.request.placement_wait != 0) return job.request.placement_wait;
  if (const TenantConfig* t = quotas_.tenant(job.request.tenant);
      t != nullptr && t->placement_wait != 0) {
    return t->placement_wait;
  }
  return config_.placement_wait;
}

// Waiting for a faster placement. The head can start now at slowdown s_now
// (its predicted step over its ideal one, oversubscribed links saturated).
// When s_now >= placement_wait_slowdown and the job has waited less than its
// bound, the running jobs' ends (by their time limits, as the reservation
// plan counts them) are released one at a time, up to 8 of them and the
// bound: at the first end after which the job would finish sooner, starting
// then at slowdown s_then, than starting now, it waits. Its work is taken
// as its time limit at the ideal speed (the weakest assumption: a limit
// padded well beyond the run makes waiting look better than it is):
//   wait iff end + limit x s_then < now + limit x s_now.
std::string SchedulerCore::Impl::WaitForFaster(const JobRecord& job, const Placement& now) {
  const TimeMs bound = PlacementWaitBound(job);
  if (bound <= 0) return "";
  // On one node every group is in the innermost tier, as in the ideal: no
  // faster placement exists (most jobs; spares the model on every start),
  // unless another part of a mixed cluster has faster GPUs.
  const NodeId first = now.ranks.empty() ? -1 : now.ranks.front().node;
  if (topo_.part_count() <= 1 &&
      std::all_of(now.ranks.begin(), now.ranks.end(),
                  [first](const GpuSlot& g) { return g.node == first; })) {
    return "";
  }
  const TimeMs since = queue_time_.count(job.id) ? queue_time_.at(job.id) : job.submit_time;
  const TimeMs deadline = std::max(since, job.submit_time) + bound;
  if (deadline <= now_ || job.restarts > 0) return "";
  if (auto it = faster_tried_.find(job.id);
      it != faster_tried_.end() && it->second.generation == generation_) {
    if (!it->second.reason.empty()) wait_bound_at_ = std::min(wait_bound_at_, deadline);
    return it->second.reason;
  }
  FasterTried& decided = faster_tried_[job.id];
  decided = FasterTried{generation_, ""};
  const JobSpec& spec = job.SpecToPlace();
  const double ideal = steps_.IdealSeconds(spec, LinkLoad::kSaturated);
  if (ideal <= 0) return "";
  const double s_now = steps_.StepSeconds(spec, now.ranks, LinkLoad::kSaturated) / ideal;
  if (s_now < config_.placement_wait_slowdown) return "";
  const std::vector<std::pair<TimeMs, JobId>> ends = EndsByLimit();
  const double work = static_cast<double>(TimeLimit(job));
  const double finish_now = static_cast<double>(now_) + work * s_now;
  ClusterState future = cluster();
  constexpr size_t kEnds = 8;
  for (size_t i = 0; i < ends.size() && i < kEnds && ends[i].first < deadline; ++i) {
    const JobRecord& j = jobs_.at(ends[i].second);
    (void)future.Release(alloc_.Held(j.ranks, j.spares));
    Placement then = placer_->Place(spec, future);
    if (!then.placed()) continue;
    const double s_then = steps_.StepSeconds(spec, then.ranks, LinkLoad::kSaturated) / ideal;
    const TimeMs at = std::max(ends[i].first, now_);
    if (static_cast<double>(at) + work * s_then < finish_now) {
      char ratio[64];
      std::snprintf(ratio, sizeof ratio, "%.2fx its ideal step now, %.2fx", s_now, s_then);
      decided.reason = "waiting for a faster placement: " + std::string(ratio) + " once job " +
                       std::to_string(ends[i].second) + " ends (in " + DurationText(at - now_) +
                       "); starts anyway after " + DurationText(bound) + " in the queue";
      decided.at = at;
      wait_bound_at_ = std::min(wait_bound_at_, deadline);
      return decided.reason;
    }
  }
  return "";
}

const SchedulerCore::Impl::Reservation& SchedulerCore::Impl::ReservationFor(const JobRecord& job) {
  if (reservation_job_ != job.id || reservation_generation_ != generation_) {
    cached_reservation_ = Reserve(job);
    reservation_job_ = job.id;
    reservation_generation_ = generation_;
  }
  return cached_reservation_;
}

Placement SchedulerCore::Impl::PlaceUnlessBlocked(const JobRecord& job, const ClusterState& where,
                                                  bool masked) {
  // A gang of whole nodes needs that many whole free nodes: a free check
  // that saves a placement try.
  const JobSpec& spec = job.SpecToPlace();
  if (spec.gpus_per_node == 0 && spec.gpus >= topo_.max_node_gpus() &&
      static_cast<int64_t>(where.whole_free_nodes(topo_.root())) * topo_.max_node_gpus() <
          spec.gpus) {
    return Placement{PlaceOutcome::kBusy,
                     "needs " + std::to_string(spec.gpus) + " GPUs on whole nodes; " +
                         std::to_string(where.whole_free_nodes(topo_.root())) + " whole nodes free",
                     {},
                     {}};
  }
  // The masked state is the cluster minus the reservation, a function of the
  // head job and the generation.
  const JobId res_job = masked ? reservation_job_ : 0;
  auto it = blocked_at_.find(job.id);
  if (it != blocked_at_.end() && it->second.generation == generation_ &&
      it->second.masked == masked && it->second.reservation_job == res_job) {
    return Placement{PlaceOutcome::kBusy, it->second.reason, {}, {}};
  }
  Placement p = placer_->Place(job.SpecToPlace(), where);
  if (p.outcome == PlaceOutcome::kInfeasible && job.fence && feasible_.count(job.id)) {
    // It fits where it may ever run (the judge said so): what keeps it out
    // now is a reservation's hold on nodes.
    p.outcome = PlaceOutcome::kBusy;
    p.reason = "keeping off reserved nodes: " + p.reason;
  }
  if (p.outcome == PlaceOutcome::kBusy) {
    blocked_at_[job.id] = Blocked{generation_, masked, res_job, p.reason};
  }
  return p;
}

// Preemption. Candidates are running jobs of lower priority, and borrowed
// jobs of other tenants (never a gang larger than the waiting job) when the
// waiting job is within its guarantee and waiting would break the
// guarantee's promise; except jobs that end within the grace period anyway
// and jobs preempted preempt_protect_after times already. A job counts as
// borrowed from the start that took its tenant past its guarantee, but is
// reclaimed only while its tenant holds more than its guarantee, and a
// victim set takes no more from a tenant than it holds beyond it (counted
// victim by victim): a tenant back within its guarantee, because its earlier
// jobs ended, keeps what it runs.
// The promise: a tenant that holds none of its guarantee gets it at once;
// one that holds some gets each job within its guarantee started within the
// job's own time limit of its submission (its slowdown stays <= 2). While the
// reservation plan keeps that, borrowed GPUs are not reclaimed: reclaiming
// only moves the wait to the victims (on S/meta-24k, seed 1, the victims of
// reclaim waited 102,011 GPU-h to restart against 111,561 GPU-h of waiting
// saved), at the price of their restarts. Where the plan breaks it narrowly
// (starts the job within twice its time limit of its submission), reclaim
// waits for the promise's deadline, the time limit after submission less the
// victims' grace: the plan ends every running job at its limit, most end
// sooner, and mostly the promise is kept without a restart. Where the plan
// breaks it widely, waiting would only delay the reclaim and the job.
// A start the plan cannot foresee is not promised.
// Victims that may have checkpointed recently (they checkpoint on request
// and lose little) come first, and a victim set of only such jobs is taken
// whenever one exists; then borrowed jobs before lower-priority ones, then
// the least work at risk. The set is pruned to the victims the placement needs,
// and taken only when the waiting job's gain, its GPUs x its expected wait
// from the reservation plan, exceeds the victims' cost: their GPUs x
// (preempt_restart_cost + work since the last checkpoint for victims that
// cannot have checkpointed recently); a reclaim at the promise's deadline is
// owed and taken whatever it costs.
SchedulerCore::Impl::PreemptDecision SchedulerCore::Impl::TryPreempt(JobRecord& waiting,
                                                                     TimeMs expected_start) {
  const JobSpec& spec = waiting.SpecToPlace();
  const bool in_guarantee = quotas_.gpus(waiting.request.tenant) + spec.gpus <=
                            quotas_.guaranteed(waiting.request.tenant);
  // Waiting keeps the guarantee's promise, or breaks it narrowly (above).
  const TimeMs limit = TimeLimit(waiting);
  const bool holds_some = quotas_.gpus(waiting.request.tenant) > 0;
  const TimeMs planned_wait =
      expected_start == kNever ? kNever : expected_start - waiting.submit_time;
  const bool promise_kept = holds_some && planned_wait <= limit;
  const TimeMs reclaim_at = waiting.submit_time + limit - config_.preempt_grace;
  const bool narrowly_broken =
      in_guarantee && holds_some && !promise_kept && planned_wait <= 2 * limit;
  const bool defer_reclaim = promise_kept || (narrowly_broken && now_ < reclaim_at);
  // At the deadline the promise is owed: reclaim whatever it costs.
  const bool owed = narrowly_broken && !defer_reclaim;
  int deferred_reclaims = 0;  // borrowed jobs not reclaimed, for now
  struct Candidate {
    bool borrowed;
    bool lower;        // of lower priority (else only a reclaim)
    bool stale;        // cannot have checkpointed within its interval
    double at_risk_s;  // run time since its last checkpoint (or start)
    JobId id;
  };
  std::vector<Candidate> candidates;
  int protected_jobs = 0;
  for (JobId id : alloc_.holders()) {
    const JobRecord& j = jobs_.at(id);
    if (j.state != JobState::kRunning) continue;
    // A job of a partition that is not preemptible is never a victim; one
    // of a preemptible partition is one for jobs of a higher tier too.
    const PartitionConfig* part =
        sets_.partitions().empty() ? nullptr : sets_.PartitionOf(j.request);
    if (part != nullptr && !part->preemptible) continue;
    const bool lower = j.request.priority < waiting.request.priority ||
                       (part != nullptr && PriorityTier(waiting) > part->priority_tier);
    // Reclaiming borrowed capacity never stops a gang larger than the job it
    // makes room for (restarting a big gang costs far more than the wait),
    // nor a job of a tenant within its guarantee now.
    const bool reclaim = in_guarantee && j.borrowed && j.request.tenant != waiting.request.tenant &&
                         j.request.spec.gpus <= spec.gpus &&
                         quotas_.gpus(j.request.tenant) > quotas_.guaranteed(j.request.tenant);
    if (!lower && !reclaim) continue;
    // A job that must end within the grace period frees its GPUs anyway.
    if (j.last_start + TimeLimit(j) <= now_ + config_.preempt_grace) continue;
    if (config_.preempt_protect_after > 0 && j.preemptions >= config_.preempt_protect_after) {
      ++protected_jobs;
      continue;
    }
    if (!lower && defer_reclaim) {
      ++deferred_reclaims;
      continue;
    }
    const TimeMs since = now_ - ProgressMark(j);
    const TimeMs interval = CheckpointInterval(j);
    const bool stale = interval == kNever || since > interval;
    candidates.push_back({j.borrowed, lower, stale, static_cast<double>(since), id});
  }
  std::string protected_note = protected_jobs == 0
                                   ? ""
                                   : "; " + std::to_string(protected_jobs) + " job(s) preempted " +
                                         std::to_string(config_.preempt_protect_after) +
                                         " times already are protected";
  // A narrowly broken promise: the pass tries again at its deadline.
  const TimeMs retry_at = deferred_reclaims > 0 && !promise_kept ? reclaim_at : kNever;
  if (deferred_reclaims > 0 && promise_kept) {
    protected_note +=
        "; borrowed GPUs are not reclaimed while the plan starts it within its time "
        "limit (" +
        DurationText(limit) + ") of its submission (in " +
        DurationText(std::max<TimeMs>(0, expected_start - now_)) + ")";
  } else if (deferred_reclaims > 0) {
    protected_note += "; borrowed GPUs are reclaimed in " + DurationText(reclaim_at - now_) +
                      " if jobs ending before their limits have not made room: the plan " +
                      "starts it in " + DurationText(expected_start - now_) +
                      ", past its time limit (" + DurationText(limit) +
                      ") of its submission but within twice that";
  }
  if (candidates.empty()) {
    return {false,
            protected_jobs == 0 && deferred_reclaims == 0 ? "" : "not preempting" + protected_note,
            retry_at};
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.stale != b.stale) return !a.stale;
    if (a.borrowed != b.borrowed) return a.borrowed;
    if (a.at_risk_s != b.at_risk_s) return a.at_risk_s < b.at_risk_s;
    return a.id < b.id;
  });
  auto held = [&](JobId id) {
    const JobRecord& j = jobs_.at(id);
    return alloc_.Held(j.ranks, j.spares);
  };
  // The smallest victim set among the first `usable` candidates that frees a
  // placement; empty when none does.
  auto victims = [&](size_t usable) {
    ClusterState trial = cluster();
    std::vector<size_t> chosen;
    std::map<std::string, int> taken;  // GPUs taken from each tenant so far
    bool fits = false;
    for (size_t i = 0; i < usable; ++i) {
      // A reclaim only while the victim's tenant, less the victims taken
      // from it so far, still holds more than its guarantee.
      const std::string& t = jobs_.at(candidates[i].id).request.tenant;
      if (!candidates[i].lower && quotas_.gpus(t) - taken[t] <= quotas_.guaranteed(t)) continue;
      const std::vector<GpuSlot> gpus = held(candidates[i].id);
      taken[t] += static_cast<int>(gpus.size());
      (void)trial.Release(gpus);
      chosen.push_back(i);
      if (trial.free_gpus(topo_.root()) < spec.gpus) continue;
      if (placer_->Place(spec, trial).placed()) {
        fits = true;
        break;
      }
    }
    if (!fits) return std::vector<size_t>{};
    // Keep only the victims the placement needs, dropping the costliest first.
    for (size_t k = chosen.size(); k-- > 0;) {
      ClusterState without = trial;
      if (!without.Allocate(held(candidates[chosen[k]].id)).ok()) continue;
      if (placer_->Place(spec, without).placed()) {
        trial = std::move(without);
        chosen.erase(chosen.begin() + static_cast<long>(k));
      }
    }
    return chosen;
  };
  const size_t fresh = static_cast<size_t>(std::count_if(
      candidates.begin(), candidates.end(), [](const Candidate& c) { return !c.stale; }));
  std::vector<size_t> chosen = victims(fresh);
  if (chosen.empty() && fresh < candidates.size()) chosen = victims(candidates.size());
  if (chosen.empty()) {
    return {false, "not preempting: no set of preemptible jobs frees a placement" + protected_note,
            retry_at};
  }
  double cost_gpu_s = 0;
  for (size_t i : chosen) {
    const Candidate& c = candidates[i];
    const double per_gpu = static_cast<double>(config_.preempt_restart_cost) / kSecond +
                           (c.stale ? c.at_risk_s / kSecond : 0.0);
    cost_gpu_s += per_gpu * jobs_.at(c.id).request.spec.gpus;
  }
  const bool foreseeable = expected_start != kNever;
  const double gain_gpu_s =
      foreseeable
          ? static_cast<double>(std::max<TimeMs>(0, expected_start - now_)) / kSecond * spec.gpus
          : 0;
  auto gpu_hours = [](double gpu_s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", gpu_s / 3600.0);
    return std::string(buf);
  };
  if (foreseeable && gain_gpu_s <= cost_gpu_s && !owed) {
    return {false,
            "not preempting: stopping " + std::to_string(chosen.size()) + " job(s) would cost " +
                gpu_hours(cost_gpu_s) + " GPU-h, more than the " + gpu_hours(gain_gpu_s) +
                " GPU-h of waiting it saves" + protected_note,
            retry_at};
  }
  preemptors_.insert(waiting.id);
  // The plan changed: the victims now end at their grace deadlines. Without
  // a new generation the pass would keep the reservation it computed before
  // (its start far off, its GPUs elsewhere), and backfill would hand the
  // GPUs this job preempted for to jobs "ending before" that stale start.
  ++generation_;
  std::string ids;
  for (size_t i : chosen) {
    const JobId v = candidates[i].id;
    JobRecord& victim = jobs_.at(v);
    victim.preempt_deadline = now_ + config_.preempt_grace;
    victim.preemptions += 1;
    preempted_for_[v] = waiting.id;
    ids += (ids.empty() ? "" : ", ") + std::to_string(v);
    Emit(RequestCheckpoint{v, "preempted for job " + std::to_string(waiting.id)});
    SetState(victim, JobState::kPreempting,
             "preempted for job " + std::to_string(waiting.id) + "; checkpointing");
  }
  return {true, "preempting lower-priority or borrowed jobs to start (" + ids + "; cost " +
                    gpu_hours(cost_gpu_s) + " GPU-h, waiting saved " +
                    (foreseeable ? gpu_hours(gain_gpu_s) + " GPU-h" : "unbounded") +
                    (owed ? "; due to start within its time limit (" + DurationText(limit) +
                                ") of its submission"
                          : "") +
                    ")"};
}

void SchedulerCore::Impl::StopExpiredPreemptions() {
  for (auto it = preempted_for_.begin(); it != preempted_for_.end();) {
    JobRecord& victim = jobs_.at(it->first);
    if (victim.state != JobState::kPreempting) {
      it = preempted_for_.erase(it);
      continue;
    }
    if (victim.preempt_deadline <= now_) {
      LoseProgress(victim);
      Requeue(victim, "preempted for job " + std::to_string(it->second) + " (grace expired)",
              RequeuePosition::kHead, /*keep_age_only=*/true);
      it = preempted_for_.erase(it);
      continue;
    }
    ++it;
  }
}

TimeMs SchedulerCore::Impl::CheckpointInterval(const JobRecord& job) const {
  if (job.request.checkpoint_interval < 0) return kNever;
  return job.request.checkpoint_interval > 0 ? job.request.checkpoint_interval
                                             : config_.default_checkpoint_interval;
}

void SchedulerCore::Impl::RunJobTimers() {
  if (!timers_dirty_ && now_ < next_timer_) return;
  RecomputeTimers();
  // The jobs whose timer is due, by id (the order of their commands).
  std::vector<JobId> due;
  for (auto it = timer_queue_.begin(); it != timer_queue_.end() && it->first <= now_; ++it) {
    due.push_back(it->second);
  }
  std::sort(due.begin(), due.end());
  std::vector<JobId> expired;
  for (JobId id : due) {
    JobRecord& job = jobs_.at(id);
    if (job.state != JobState::kRunning) continue;
    if (now_ >= job.last_start + TimeLimit(job)) {
      expired.push_back(id);
      continue;
    }
    const TimeMs interval = CheckpointInterval(job);
    if (interval == kNever) continue;
    TimeMs& asked = checkpoint_asked_[id];
    if (now_ >= std::max(asked, job.checkpoint_time) + interval) {
      asked = now_;
      TimerChanged(id);
      Emit(RequestCheckpoint{id, "periodic"});
    }
  }
  for (JobId id : expired) {
    JobRecord& job = jobs_.at(id);
    KeepProgress(job, now_);
    Emit(StopJob{id, "time limit reached"});
    Release(job);
    const ReservationConfig* r =
        job.request.reservation.empty() ? nullptr : sets_.reservation(job.request.reservation);
    SetState(job, JobState::kFailed,
             r != nullptr && now_ >= r->end
                 ? "reservation '" + r->name + "' ended (its jobs end with it)"
                 : "time limit of " + std::to_string(TimeLimit(job) / kSecond) + " s reached");
  }
  RecomputeTimers();
}

TimeMs SchedulerCore::Impl::JobTimer(const JobRecord& job) const {
  if (job.state == JobState::kPreempting) return job.preempt_deadline;
  if (job.state != JobState::kRunning) return kNever;
  TimeMs next = job.last_start + TimeLimit(job);
  const TimeMs interval = CheckpointInterval(job);
  if (interval != kNever) {
    auto asked = checkpoint_asked_.find(job.id);
    TimeMs from = std::max(asked == checkpoint_asked_.end() ? job.last_start : asked->second,
                           job.checkpoint_time);
    next = std::min(next, from + interval);
  }
  return next;
}

void SchedulerCore::Impl::RecomputeTimers() {
  auto enqueue = [&](JobId id) {
    const TimeMs at = JobTimer(jobs_.at(id));
    if (at == kNever) return;
    timer_queue_.insert({at, id});
    timer_at_[id] = at;
  };
  if (all_timers_changed_) {
    timer_queue_.clear();
    timer_at_.clear();
    for (JobId id : alloc_.holders()) enqueue(id);
  } else {
    for (JobId id : timers_changed_) {
      if (auto it = timer_at_.find(id); it != timer_at_.end()) {
        timer_queue_.erase({it->second, id});
        timer_at_.erase(it);
      }
      if (alloc_.holders().count(id) > 0) enqueue(id);
    }
  }
  timers_changed_.clear();
  all_timers_changed_ = false;
  next_timer_ = timer_queue_.empty() ? kNever : timer_queue_.begin()->first;
  timers_dirty_ = false;
}

}  // namespace topo::core
