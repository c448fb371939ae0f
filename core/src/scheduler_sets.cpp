// SchedulerCore: partitions and reservations (node_sets.hpp) in the pass.
//
// Every job is placed on the nodes its fence admits (RefreshFence): its
// partition's, its own reservation's, without those of reservations it does
// not use that its run would meet. Feasibility is judged on the home fence
// alone (HomeSpec), so a reservation that holds nodes for a while makes a
// job wait, never rejects it.

#include <algorithm>
#include <string>
#include <vector>

#include "scheduler_impl.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::core {

namespace {

// The first node of a job's ranks inside a reservation; -1 when none.
NodeId NodeIn(const NodeSets& sets, const ReservationConfig& r, const JobRecord& job) {
  for (const GpuSlot& g : job.ranks) {
    if (sets.InReservation(r, g.node)) return g.node;
  }
  return -1;
}

}  // namespace

void SchedulerCore::Impl::RefreshFence(JobRecord& job) {
  if (sets_.empty() && !job.fence) return;
  job.SetFence(sets_.FenceFor(job.request, now_, TimeLimit(job)));
}

JobSpec SchedulerCore::Impl::HomeSpec(const JobRecord& job) const {
  JobSpec spec = job.SpecToPlace();
  spec.selection.fence = sets_.HomeFence(job.request);
  return spec;
}

int SchedulerCore::Impl::PriorityTier(const JobRecord& job) const {
  if (sets_.partitions().empty()) return 0;
  const PartitionConfig* p = sets_.PartitionOf(job.request);
  return p ? p->priority_tier : 0;
}

void SchedulerCore::Impl::OnPartition(const PartitionConfigured& e) {
  if (!sets_.ConfigurePartition(e.partition).ok()) return;  // the daemon checked it
  NodeSetsChanged(e.partition.name, false, false);
}

void SchedulerCore::Impl::OnPartitionDeleted(const PartitionDeleted& e) {
  if (!sets_.DeletePartition(e.name).ok()) return;
  NodeSetsChanged(e.name, true, false);
}

void SchedulerCore::Impl::OnReservation(const ReservationConfigured& e) {
  if (!sets_.ConfigureReservation(e.reservation).ok()) return;
  maintenance_asked_.erase(e.reservation.name);  // a new window asks again
  NodeSetsChanged(e.reservation.name, false, true);
}

void SchedulerCore::Impl::OnReservationDeleted(const ReservationDeleted& e) {
  if (!sets_.DeleteReservation(e.name).ok()) return;
  maintenance_asked_.erase(e.name);
  NodeSetsChanged(e.name, true, true);
}

void SchedulerCore::Impl::NodeSetsChanged(const std::string& name, bool deleted, bool reservation) {
  ++generation_;
  ++queue_epoch_;
  feasible_.clear();  // judged on the old sets
  kept_plan_.job = 0;
  AllTimersChanged();  // default and maximum times, a reservation's end
  // A reservation whose window (or checkpoint lead) has begun acts this
  // step (RunNodeSetTimers runs after the event); else at its next moment.
  sets_wake_ = reservation ? now_ : sets_.NextChange(now_, config_.preempt_grace);
  // Waiting jobs of the set that may no longer run as they asked.
  std::vector<JobId> affected;
  for (JobId id : waiting_) {
    const JobRequest& r = jobs_.at(id).request;
    if ((reservation ? r.reservation : r.partition) == name) affected.push_back(id);
  }
  for (JobId id : affected) {
    JobRecord& job = jobs_.at(id);
    if (IsTerminal(job.state)) continue;
    Status still = sets_.Admit(job.request, now_);
    if (still.ok()) continue;
    const std::string what = (reservation ? "reservation '" : "partition '") + name + "' ";
    SetState(job, JobState::kRejected,
             deleted ? what + "was deleted" : what + "changed: " + still.message());
  }
}

void SchedulerCore::Impl::RunNodeSetTimers() {
  const TimeMs lead = config_.preempt_grace;
  std::vector<JobId> holders(alloc_.holders().begin(), alloc_.holders().end());
  std::sort(holders.begin(), holders.end());
  for (const auto& [name, r] : sets_.reservations()) {
    if (!r.maintenance || now_ >= r.end || now_ < r.start - lead) continue;
    const bool started = now_ >= r.start;
    if (!started && maintenance_asked_.count(name)) continue;
    maintenance_asked_.insert(name);
    for (JobId id : holders) {
      JobRecord& job = jobs_.at(id);
      if (job.request.reservation == name) continue;  // its own work
      // A preempting job stops within its grace anyway.
      if (job.state != JobState::kRunning) continue;
      const NodeId n = NodeIn(sets_, r, job);
      if (n < 0) continue;
      if (!started) {
        // Would it overrun the start? Ask for a checkpoint to restart from.
        if (job.last_start + TimeLimit(job) > r.start) {
          Emit(RequestCheckpoint{id, "maintenance reservation '" + name + "' starts on node " +
                                         topo_.node(n).name + " in " +
                                         DurationText(r.start - now_)});
        }
        continue;
      }
      LoseProgress(job);
      job.restarts += 1;
      Requeue(job,
              "maintenance reservation '" + name + "' started on node " + topo_.node(n).name +
                  ": requeued to restart elsewhere" +
                  (job.checkpoint_step >= 0
                       ? " from checkpoint step " + std::to_string(job.checkpoint_step)
                       : std::string()),
              RequeuePosition::kHead);
    }
  }
  // Starts and ends change fences: the pass looks again.
  ++generation_;
  ++queue_epoch_;
  kept_plan_.job = 0;
  for (const std::string& name : sets_.RemoveEnded(now_)) {
    maintenance_asked_.erase(name);
    std::vector<JobId> members;
    for (JobId id : waiting_) {
      if (jobs_.at(id).request.reservation == name) members.push_back(id);
    }
    for (JobId id : members) {
      SetState(jobs_.at(id), JobState::kRejected,
               "reservation '" + name + "' ended before the job could start");
    }
  }
  sets_wake_ = sets_.NextChange(now_, lead);
}

Status SchedulerCore::CheckNodeSetChange(const Event& e) const {
  const Impl& c = *impl_;
  auto users = [&](const std::string& name, bool reservation) {
    std::vector<std::string> ids;
    for (const auto& [id, job] : c.jobs_) {
      if (IsTerminal(job.state)) continue;
      const std::string& of = reservation ? job.request.reservation : job.request.partition;
      if (of == name) ids.push_back(std::to_string(id));
    }
    return ids;
  };
  auto in_use = [&](const std::string& name, bool reservation) -> Status {
    std::vector<std::string> ids = users(name, reservation);
    if (ids.empty()) return Status::Ok();
    std::string list;
    for (size_t i = 0; i < ids.size() && i < 20; ++i) list += (i ? ", " : "") + ids[i];
    if (ids.size() > 20) list += ", ... (" + std::to_string(ids.size()) + " in all)";
    return Status::Error(std::string(reservation ? "reservation '" : "partition '") + name +
                             "' is used by job(s) " + list + ": cancel them or wait for them",
                         ErrorCode::kConflict);
  };
  if (const auto* p = std::get_if<PartitionConfigured>(&e)) {
    NodeSets trial = c.sets_;
    return trial.ConfigurePartition(p->partition);
  }
  if (const auto* r = std::get_if<ReservationConfigured>(&e)) {
    if (r->reservation.end <= c.now_) {
      return Status::Error("end: the window has passed already (it ends before now)")
          .WithField("end");
    }
    NodeSets trial = c.sets_;
    return trial.ConfigureReservation(r->reservation);
  }
  if (const auto* d = std::get_if<PartitionDeleted>(&e)) {
    if (c.sets_.partition(d->name) == nullptr) {
      return Status::Error("no partition '" + d->name + "' (topo partition list)",
                           ErrorCode::kNotFound);
    }
    return in_use(d->name, false);
  }
  if (const auto* d = std::get_if<ReservationDeleted>(&e)) {
    if (c.sets_.reservation(d->name) == nullptr) {
      return Status::Error("no reservation '" + d->name + "' (topo reservation list)",
                           ErrorCode::kNotFound);
    }
    return in_use(d->name, true);
  }
  return Status::Error("not a partition or reservation change", ErrorCode::kInternal);
}

Result<std::vector<std::string>> SchedulerCore::ChooseReservationNodes(
    int gpus, TimeMs start, TimeMs end, const std::string& partition) const {
  const Impl& c = *impl_;
  const Topology& topo = c.topo_;
  if (gpus <= 0 || gpus > topo.total_gpus()) {
    return Status::Error("gpus: a reservation takes 1 to " + std::to_string(topo.total_gpus()) +
                         " GPUs (this cluster's)")
        .WithField("gpus");
  }
  if (end <= start) {
    return Status::Error("end: must be after start").WithField("end");
  }
  auto fence = std::make_shared<std::vector<uint8_t>>(topo.node_count(), 1);
  if (!partition.empty()) {
    const PartitionConfig* p = c.sets_.partition(partition);
    if (p == nullptr) {
      return Status::Error("partition: there is no partition '" + partition + "'",
                           ErrorCode::kNotFound)
          .WithField("partition");
    }
    for (NodeId n = 0; n < topo.node_count(); ++n) (*fence)[n] = c.sets_.InPartition(*p, n);
  }
  for (const auto& [name, r] : c.sets_.reservations()) {
    if (!(start < r.end && r.start < end)) continue;
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      if (c.sets_.InReservation(r, n)) (*fence)[n] = 0;
    }
  }
  // Whole nodes, compact: the placer's choice for a job of that many GPUs on
  // the empty cluster (up nodes only: down ones are fenced too).
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    if (!c.cluster().NodeAcceptsWork(n)) (*fence)[n] = 0;
  }
  JobSpec spec;
  spec.name = "reservation";
  spec.gpus = gpus;
  spec.parallelism.dp = gpus;
  for (TierConstraint& t : spec.constraints) t = TierConstraint{};
  spec.selection.fence = fence;
  Placement p = c.judge_->Place(spec, c.empty_);
  if (!p.placed()) {
    return Status::Error("gpus: " + std::to_string(gpus) +
                             " GPUs do not fit on free up nodes outside other reservations"
                             " of that window" +
                             (partition.empty() ? "" : " in partition '" + partition + "'") + ": " +
                             p.reason,
                         ErrorCode::kInfeasible)
        .WithField("gpus");
  }
  std::vector<NodeId> nodes;
  for (const GpuSlot& g : p.ranks) nodes.push_back(g.node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<std::string> names;
  for (NodeId n : nodes) names.push_back(topo.node(n).name);
  return names;
}

}  // namespace topo::core
