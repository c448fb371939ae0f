// GPU and node health, heartbeats, and failure recovery that keeps a job's
// topology.

#include <algorithm>
#include <map>
#include <set>

#include "scheduler_impl.hpp"
#include "topo/core/evaluator.hpp"

namespace topo::core {

std::optional<GpuHealth> ClassifyGpuEvent(const GpuEvent& e) {
  switch (e.kind) {
    case GpuEventKind::kCleared:
      return GpuHealth::kHealthy;
    case GpuEventKind::kOffBus:
    case GpuEventKind::kEccDoubleBit:
      return GpuHealth::kFailed;
    case GpuEventKind::kThermal:
      return GpuHealth::kDegraded;
    case GpuEventKind::kEccSingleBit:
      // A burst of corrected errors predicts an uncorrectable one.
      return e.code >= 100 ? std::optional<GpuHealth>(GpuHealth::kDegraded) : std::nullopt;
    case GpuEventKind::kXid:
      switch (e.code) {
        case 48:  // double-bit ECC error
        case 64:  // row remapping failure
        case 74:  // NVLink error
        case 79:  // fallen off the bus
        case 95:  // uncontained ECC error
          return GpuHealth::kFailed;
        case 63:  // row remapping pending
        case 92:  // high single-bit ECC rate
        case 94:  // contained ECC error
          return GpuHealth::kDegraded;
        default:  // application faults (13, 31, 43, 45, ...) say nothing of the GPU
          return std::nullopt;
      }
  }
  return std::nullopt;
}

void SchedulerCore::Impl::SetNodeState(NodeId n, NodeState s, const std::string& reason) {
  const NodeState was = cluster().node_state(n);
  if (was == s) return;
  --nodes_in_state_[static_cast<size_t>(was)];
  ++nodes_in_state_[static_cast<size_t>(s)];
  cluster().SetNodeState(n, s);
  WatchNode(n);
  ++generation_;
  Emit(NodeStateChanged{n, s, reason});
}

void SchedulerCore::Impl::WatchNode(NodeId n) {
  if (!config_.heartbeats_required) return;
  const NodeState s = cluster().node_state(n);
  if (s == NodeState::kDown) {
    liveness_.Forget(n);
    return;
  }
  const TimeMs last = liveness_.last_heard(n);
  const TimeMs down_at = last + config_.heartbeat_down_after;
  const TimeMs suspect_at = last + config_.heartbeat_suspect_after;
  liveness_.Watch(n, {s == NodeState::kUp && suspect_at < down_at ? suspect_at : kNever, down_at});
}

void SchedulerCore::Impl::SetNodeReason(NodeId n, const std::string& reason) {
  Emit(NodeStateChanged{n, cluster().node_state(n), reason});
}

std::string SchedulerCore::Impl::FailedGpus(NodeId n) const {
  std::vector<int> gpus;
  for (int g = 0; g < topo_.node(n).gpus; ++g) {
    if ((cluster().failed_mask(n) >> g) & 1) gpus.push_back(g);
  }
  std::string list;
  for (size_t i = 0; i < gpus.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == gpus.size() ? " and " : ", ") + std::to_string(gpus[i]);
  }
  return topo_.node(n).name + (gpus.size() == 1 ? " GPU " : " GPUs ") + list + " failed";
}

bool SchedulerCore::Impl::Restartable(NodeId n) const {
  return cluster().node_state(n) == NodeState::kUp && cluster().failed_gpus(n) == 0;
}

namespace {

// "node a", "nodes a, b and c", "nodes a, b, c and 5 more".
std::string NodeList(const Topology& topo, const std::vector<NodeId>& nodes) {
  if (nodes.size() == 1) return "node " + topo.node(nodes[0]).name;
  constexpr size_t kNamed = 3;
  std::string out = "nodes ";
  const size_t named = nodes.size() <= kNamed + 1 ? nodes.size() - 1 : kNamed;
  for (size_t i = 0; i < named; ++i) out += (i > 0 ? ", " : "") + topo.node(nodes[i]).name;
  if (named + 1 == nodes.size()) {
    out += " and " + topo.node(nodes.back()).name;
  } else {
    out += " and " + std::to_string(nodes.size() - named) + " more";
  }
  return out;
}

// "node a is down", "nodes a, b and c are down".
std::string NodesDown(const Topology& topo, const std::vector<NodeId>& nodes) {
  return NodeList(topo, nodes) + (nodes.size() == 1 ? " is down" : " are down");
}

}  // namespace

std::string DurationText(TimeMs ms) {
  if (ms >= kMinute && ms % kMinute == 0) return std::to_string(ms / kMinute) + " min";
  if (ms >= kSecond) return std::to_string((ms + kSecond - 1) / kSecond) + " s";
  return std::to_string(ms) + " ms";
}

void SchedulerCore::Impl::OnNodeRequests(const std::vector<NodeStateRequested>& requests) {
  // Every change first: a job is recovered only once the whole batch is
  // known, so its replacements are chosen among the nodes still up after it.
  std::map<JobId, std::vector<NodeId>> lost;
  for (const NodeStateRequested& e : requests) ApplyNodeRequest(e, lost);
  for (const auto& [id, nodes] : lost) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    Recover(it->second, NodesDown(topo_, nodes));
  }
  TakeOverHeldExits();  // jobs whose node turned suspect
}

void SchedulerCore::Impl::ApplyNodeRequest(const NodeStateRequested& e,
                                           std::map<JobId, std::vector<NodeId>>& lost) {
  const NodeId n = e.node;
  if (n < 0 || n >= topo_.node_count()) return;
  const bool busy = alloc_.occupied(n);
  switch (e.state) {
    case NodeState::kUp: {
      const bool admin_drained = AdminDrained(n);
      drain_reason_[n].clear();
      liveness_.Heard(n, now_);
      if (cluster().failed_gpus(n) > 0) {
        const NodeState to = busy ? NodeState::kDraining : NodeState::kDrained;
        if (cluster().node_state(n) != to) {
          SetNodeState(n, to, "has failed GPUs; clear them before resuming");
        } else if (admin_drained) {
          // The admin's reason no longer holds it: its failed GPUs do.
          SetNodeReason(n, FailedGpus(n));
        }
      } else {
        SetNodeState(n, NodeState::kUp, e.reason.empty() ? "up" : e.reason);
      }
      WatchNode(n);  // heard from now, whether its state changed or not
      break;
    }
    case NodeState::kDraining:
    case NodeState::kDrained: {
      drain_reason_[n] = e.reason.empty() ? "drain requested" : e.reason;
      Emit(DrainNode{n, drain_reason_[n]});
      ReleaseSpare(n);
      const bool busy_now = alloc_.occupied(n);
      const NodeState to = busy_now ? NodeState::kDraining : NodeState::kDrained;
      // Already drained (a failed GPU): the admin's reason is now the one
      // that keeps it so, until resume.
      if (cluster().node_state(n) == to) {
        SetNodeReason(n, drain_reason_[n]);
      } else {
        SetNodeState(n, to, drain_reason_[n]);
      }
      break;
    }
    case NodeState::kSuspect:
      SetNodeState(n, NodeState::kSuspect, e.reason);
      break;
    case NodeState::kDown:
      SetNodeState(n, NodeState::kDown, e.reason.empty() ? "down" : e.reason);
      for (JobId id : alloc_.jobs_on(n)) {
        std::vector<NodeId>& nodes = lost[id];
        if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
      }
      break;
  }
}

void SchedulerCore::Impl::OnEvacuated(const NodeEvacuated& e) {
  const NodeId n = e.node;
  if (n < 0 || n >= topo_.node_count() || !AdminDrained(n)) return;
  std::vector<JobId> victims = alloc_.jobs_on(n);
  for (JobId id : victims) {
    JobRecord& job = jobs_.at(id);
    // Rank 0's node reports the checkpoint a drain asks for, then its own
    // evacuation, on one connection. When it is being drained too, the
    // job moves at that evacuation: a report from another node of the job
    // may come before the checkpoint does.
    const NodeId lead = job.ranks.empty() ? -1 : job.ranks.front().node;
    if (lead >= 0 && lead != n && AdminDrained(lead) &&
        cluster().node_state(lead) != NodeState::kDown) {
      continue;
    }
    Recover(job, "node " + topo_.node(n).name + " was drained" +
                     (e.reason.empty() ? std::string() : " (" + e.reason + ")"));
  }
}

void SchedulerCore::Impl::OnLaunchFailed(const JobLaunchFailed& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
  JobRecord& job = it->second;
  const std::string where =
      e.node >= 0 && e.node < topo_.node_count() ? " on node " + topo_.node(e.node).name : "";
  if (e.permanent) {
    LoseProgress(job);
    Emit(StopJob{job.id, "cannot start" + where});
    Release(job);
    SetState(job, JobState::kFailed, "cannot start" + where + ": " + e.reason);
    return;
  }
  // An infrastructure failure: it never fails the job. The first restarts
  // at once, off the node; one that keeps coming back (a node that cannot
  // start anything, wherever the job lands) waits longer each time.
  const std::string what = "could not start" + where + " (" + e.reason + ")";
  job.launch_failures += 1;
  const FailurePolicy::Decision d = failures_.AfterLaunchFailure(job.launch_failures, false);
  const TimeMs delay = d.delay;
  if (d.action == FailurePolicy::Decision::Action::kRestartNow) {
    Recover(job, what, e.node);
    return;
  }
  RequeueWithBackoff(job, delay,
                     "requeued: restarting in " + DurationText(delay) + " after it " + what +
                         " (launch failure " + std::to_string(job.launch_failures) +
                         " in a row; these do not count toward the failure limit)");
}

void SchedulerCore::Impl::OnStartUnacknowledged(const StartUnacknowledged& e) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
  JobRecord& job = it->second;
  std::vector<NodeId> nodes;
  for (NodeId n : e.nodes) {
    if (n >= 0 && n < topo_.node_count()) nodes.push_back(n);
  }
  const std::string who =
      nodes.empty() ? "the agent"
                    : NodeList(topo_, nodes) + (nodes.size() == 1 ? "'s agent" : "' agents");
  const std::string what = who + " did not acknowledge its start within " + DurationText(e.waited);
  // As a transient launch failure: the first requeues at once, one that
  // keeps coming back waits longer each time.
  job.launch_failures += 1;
  const FailurePolicy::Decision d = failures_.AfterLaunchFailure(job.launch_failures, false);
  const TimeMs delay = d.action == FailurePolicy::Decision::Action::kBackoff ? d.delay : 0;
  RequeueWithBackoff(job, delay,
                     "requeued" +
                         (delay > 0 ? ": restarting in " + DurationText(delay) + " after " : ": ") +
                         what + " (launch failure " + std::to_string(job.launch_failures) +
                         " in a row; these do not count toward the failure limit)");
}

void SchedulerCore::Impl::OnAppFailure(JobRecord& job, int rank, int exit_code) {
  const std::string what =
      "rank " + std::to_string(rank) + " exited with status " + std::to_string(exit_code);
  const int limit = failures_.max_app_failures();
  job.app_failures += 1;
  const std::string count =
      "failure " + std::to_string(job.app_failures) + " of " + std::to_string(limit);
  const FailurePolicy::Decision d = failures_.AfterAppFailure(job.app_failures);
  if (d.action == FailurePolicy::Decision::Action::kFail) {
    LoseProgress(job);
    Emit(StopJob{job.id, what});
    Release(job);
    SetState(job, JobState::kFailed,
             what + " (" + count + " without a new checkpoint); not restarted again");
    return;
  }
  const TimeMs delay = d.delay;
  if (d.action == FailurePolicy::Decision::Action::kRestartNow) {
    Recover(job, what + " (" + count + ")");
    return;
  }
  RequeueWithBackoff(
      job, delay,
      "requeued: restarting in " + DurationText(delay) + " after " + what + " (" + count + ")");
}

std::string SchedulerCore::Impl::UnavailableNodes() const {
  std::string out;
  auto add = [&](NodeState s) {
    const int count = nodes_in_state_[static_cast<size_t>(s)];
    if (count == 0) return;
    out += out.empty() ? std::to_string(count) + (count == 1 ? " node " : " nodes ")
                       : ", " + std::to_string(count) + " ";
    out += NodeStateName(s);
  };
  for (NodeState s :
       {NodeState::kDown, NodeState::kSuspect, NodeState::kDraining, NodeState::kDrained}) {
    add(s);
  }
  return out;
}

void SchedulerCore::Impl::OnHeartbeat(const Heartbeat& e) {
  const NodeId n = e.node;
  if (n < 0 || n >= topo_.node_count()) return;
  liveness_.Heard(n, now_);
  const NodeState s = cluster().node_state(n);
  if (s != NodeState::kSuspect && s != NodeState::kDown) {
    WatchNode(n);
    return;
  }
  const bool busy = alloc_.occupied(n);
  if (AdminDrained(n) || cluster().failed_gpus(n) > 0) {
    SetNodeState(n, busy ? NodeState::kDraining : NodeState::kDrained, "heartbeat resumed");
  } else {
    SetNodeState(n, NodeState::kUp, "heartbeat resumed");
  }
}

void SchedulerCore::Impl::CheckHeartbeats() {
  std::vector<NodeStateRequested> down;  // one batch: see OnNodeRequests
  for (const LivenessTracker::Expiry& x : liveness_.Expire(now_)) {
    const std::string why =
        "no heartbeat for " + std::to_string((now_ - x.last_heard) / kSecond) + " s";
    if (x.verdict == Liveness::kDown) {
      down.push_back(NodeStateRequested{x.node, NodeState::kDown, why});
    } else if (cluster().node_state(x.node) == NodeState::kUp) {
      SetNodeState(x.node, NodeState::kSuspect, why);
    }
  }
  if (!down.empty()) {
    OnNodeRequests(down);
  } else {
    TakeOverHeldExits();
  }
}

NodeId SchedulerCore::Impl::UnavailableNodeOf(const JobRecord& job) const {
  for (const GpuSlot& s : job.ranks) {
    const NodeState st = cluster().node_state(s.node);
    if (st == NodeState::kSuspect || st == NodeState::kDown) return s.node;
  }
  return -1;
}

std::string SchedulerCore::Impl::TakeHeldExit(const JobRecord& job) {
  auto it = held_exits_.find(job.id);
  if (it == held_exits_.end()) return "";
  const HeldExit h = it->second;
  held_exits_.erase(it);
  if (h.restarts != job.restarts) return "";  // an earlier run's
  return " (rank " + std::to_string(h.rank) + " exited with status " + std::to_string(h.exit_code) +
         " meanwhile)";
}

void SchedulerCore::Impl::TakeOverHeldExits() {
  if (held_exits_.empty()) return;
  std::vector<std::pair<JobId, NodeId>> taken;
  for (auto it = held_exits_.begin(); it != held_exits_.end();) {
    auto j = jobs_.find(it->first);
    if (j == jobs_.end() || j->second.state != JobState::kRunning ||
        j->second.restarts != it->second.restarts) {
      it = held_exits_.erase(it);  // stale: that run is over
      continue;
    }
    if (const NodeId n = UnavailableNodeOf(j->second); n >= 0) taken.push_back({it->first, n});
    ++it;
  }
  for (const auto& [id, n] : taken) {
    Recover(jobs_.at(id), "node " + topo_.node(n).name + " is " +
                              std::string(NodeStateName(cluster().node_state(n))));
  }
}

void SchedulerCore::Impl::ResolveHeldExits() {
  if (held_exits_.empty()) return;
  std::vector<std::pair<JobId, HeldExit>> due;
  for (auto it = held_exits_.begin(); it != held_exits_.end();) {
    if (it->second.until > now_) {
      ++it;
      continue;
    }
    due.push_back(*it);
    it = held_exits_.erase(it);
  }
  for (const auto& [id, h] : due) {
    auto j = jobs_.find(id);
    if (j == jobs_.end() || j->second.state != JobState::kRunning ||
        j->second.restarts != h.restarts) {
      continue;
    }
    OnAppFailure(j->second, h.rank, h.exit_code);
  }
}

void SchedulerCore::Impl::OnGpuEvent(const GpuEvent& e) {
  const NodeId n = e.node;
  if (n < 0 || n >= topo_.node_count() || e.gpu < 0 || e.gpu >= topo_.node(n).gpus) return;
  std::optional<GpuHealth> health = ClassifyGpuEvent(e);
  if (!health || cluster().gpu_health(n, e.gpu) == *health) return;
  const std::string what = e.kind == GpuEventKind::kXid       ? "XID " + std::to_string(e.code)
                           : e.kind == GpuEventKind::kCleared ? "cleared"
                                                              : "GPU event";
  cluster().SetGpuHealth(n, e.gpu, *health);
  ++generation_;
  Emit(GpuHealthChanged{n, e.gpu, *health, what});
  const std::string gpu_name = topo_.node(n).name + " GPU " + std::to_string(e.gpu);
  if (*health == GpuHealth::kFailed) {
    const bool busy = alloc_.occupied(n);
    Emit(DrainNode{n, gpu_name + " failed (" + what + ")"});
    if (cluster().node_state(n) == NodeState::kUp) {
      SetNodeState(n, busy ? NodeState::kDraining : NodeState::kDrained,
                   gpu_name + " failed (" + what + ")");
    }
    std::vector<JobId> hit;
    for (JobId id : alloc_.jobs_on(n)) {
      for (const GpuSlot& s : jobs_.at(id).ranks) {
        if (s.node == n && s.gpu == e.gpu) {
          hit.push_back(id);
          break;
        }
      }
    }
    for (JobId id : hit) Recover(jobs_.at(id), gpu_name + " failed (" + what + ")");
  } else if (*health == GpuHealth::kHealthy && (cluster().node_state(n) == NodeState::kDrained ||
                                                cluster().node_state(n) == NodeState::kDraining)) {
    // Back up unless something else keeps it drained; then that is its
    // reason now, not this GPU.
    if (AdminDrained(n)) {
      SetNodeReason(n, drain_reason_[n]);
    } else if (cluster().failed_gpus(n) > 0) {
      SetNodeReason(n, FailedGpus(n));
    } else {
      SetNodeState(n, NodeState::kUp, gpu_name + " repaired");
    }
  }
}

void SchedulerCore::Impl::RememberFailedNodes(JobRecord& job, const std::set<NodeId>& left,
                                              NodeId could_not_start) {
  std::vector<std::string> avoid = job.failed_nodes;
  const size_t before = avoid.size();
  bool dropped = false;
  for (NodeId n : left) {
    // Down, suspect or with a failed GPU: the node failed the job. A node
    // drained or draining is the admin's, not a fault.
    const NodeState st = cluster().node_state(n);
    const bool failed = n == could_not_start || st == NodeState::kDown ||
                        st == NodeState::kSuspect || cluster().failed_mask(n) != 0;
    if (!failed) continue;
    const std::string& name = topo_.node(n).name;
    if (std::find(avoid.begin(), avoid.end(), name) != avoid.end()) continue;
    avoid.push_back(name);
    if (avoid.size() > kMaxAvoidedNodes) {
      avoid.erase(avoid.begin());
      dropped = true;
    }
  }
  if (avoid.size() != before || dropped) job.SetFailedNodes(std::move(avoid));
}

void SchedulerCore::Impl::Recover(JobRecord& job, const std::string& cause, NodeId avoid) {
  // A rank's exit held for its verdict is part of this incident.
  const std::string reason = cause + TakeHeldExit(job);
  LoseProgress(job);
  if (job.state == JobState::kPreempting) {
    Requeue(job, reason + "; requeued (was being preempted)", RequeuePosition::kHead);
    return;
  }
  if (job.state != JobState::kRunning) return;
  RefreshFence(job);  // a reservation may hold nodes since it started
  // Nodes the restart must leave: down, suspect (it may be gone), draining
  // or drained, with a failed GPU, or the one that could not start it. Only
  // nodes that are up and whole take its ranks.
  std::set<NodeId> bad;
  for (const GpuSlot& s : job.ranks) {
    if (!Restartable(s.node) || s.node == avoid) bad.insert(s.node);
  }
  RememberFailedNodes(job, bad, avoid);
  if (config_.replace_on_failure) {
    std::vector<NodeId> spares;  // a spare that is not up is dropped
    for (NodeId n : job.spares) {
      if (Restartable(n) && n != avoid) spares.push_back(n);
    }
    // Replacements only where the job may run: its selection, its part of
    // a mixed cluster, not a node that failed it before.
    const int part = job.ranks.empty() ? -1 : topo_.part_of(job.ranks.front().node);
    const std::vector<uint8_t> open = AdmittedNodes(job.SpecToPlace(), topo_, part, false);
    const ClusterState admitted = cluster().Fenced(part < 0 ? topo_ : topo_.PartView(part), open);
    Replacement found =
        FindReplacements(topo_, admitted, job.ranks, bad, spares, alloc_.spare_owners());
    std::vector<GpuSlot> ranks = std::move(found.ranks);
    std::vector<NodeId> remaining_spares = std::move(found.spares_left);
    const bool complete = found.complete;
    bool keeps = complete && Evaluate(job.request.spec, topo_, ranks).required_met;
    if (!keeps) {
      // No nearby node keeps the constraints: place the whole job afresh.
      // The placers take only up nodes' healthy GPUs; the avoided node is
      // taken out by marking its free GPUs busy in the trial.
      ClusterState trial = cluster();
      (void)trial.Release(alloc_.Held(job.ranks, job.spares));
      if (avoid >= 0 && avoid < topo_.node_count()) {
        std::vector<GpuSlot> block;
        for (int g = 0; g < topo_.node(avoid).gpus; ++g) {
          if (((trial.busy_mask(avoid) >> g) & 1) == 0) block.push_back({avoid, g});
        }
        (void)trial.Allocate(block);
      }
      Placement p = placer_->Place(job.SpecToPlace(), trial);
      if (p.placed()) {
        ranks = p.ranks;
        remaining_spares = p.spares;
        keeps = true;
      }
    }
    std::string taken;  // the victims whose nodes it takes, for its reason
    if (!keeps && config_.preemption) {
      // Last resort before the queue: nodes of small running jobs. Worth it
      // when the GPUs it would otherwise wait with in the queue (its GPUs x
      // the plan's wait) exceed what stopping them costs.
      TakeOver t = ReplaceByPreempting(job, bad, spares);
      if (t.found) {
        const TimeMs start = Reserve(job).start;
        const bool worth =
            start == kNever ||
            static_cast<double>(start - now_) / kSecond * job.request.spec.gpus > t.cost_gpu_s;
        if (worth) {
          for (JobId v : t.victims) {
            JobRecord& victim = jobs_.at(v);
            const std::string why = "preempted for job " + std::to_string(job.id) +
                                    ", whose failed node its node replaces";
            victim.preemptions += 1;
            SetState(victim, JobState::kPreempting, why);
            LoseProgress(victim);
            Requeue(victim, why, RequeuePosition::kHead, /*keep_age_only=*/true);
            taken += (taken.empty() ? "" : ", ") + std::to_string(v);
          }
          ranks = std::move(t.ranks);
          remaining_spares = std::move(t.spares_left);
          keeps = true;
        }
      }
    }
    if (keeps) {
      Release(job);
      Allocate(job, ranks, remaining_spares);
      job.restarts += 1;
      job.last_start = now_;
      checkpoint_asked_[job.id] = now_;
      Emit(RestartJob{job.id, job.ranks, job.spares, MakeLaunch(job)});
      job.reason =
          "restarted after " + reason +
          (job.checkpoint_step >= 0 ? " from checkpoint step " + std::to_string(job.checkpoint_step)
                                    : " from the beginning (no checkpoint)") +
          (taken.empty() ? "" : "; on nodes of preempted job(s) " + taken);
      return;
    }
  }
  // No healthy capacity keeps it now: it waits in the queue with its shape
  // (the pass's reason says for what) and restarts from its checkpoint.
  job.restarts += 1;
  Requeue(job, reason + "; requeued until healthy nodes can take it", config_.requeue);
}

// Candidates are running jobs of no higher priority than the recovering job
// and no larger than the GPUs it must move (so a victim's own restart needs
// no bigger shape than the one lost), not protected (preempt_protect_after),
// not ending within the grace period anyway. A node qualifies when it is up
// and whole, no job's spare, and every job on it is a candidate; it costs its
// jobs' GPUs x (preempt_restart_cost + work since their last checkpoint:
// they stop at once, without a grace period, since the recovering job's
// other ranks wait idle meanwhile). FindReplacements then picks the nearest
// nodes, cheapest first at the same distance, with free nodes at cost 0.
SchedulerCore::Impl::TakeOver SchedulerCore::Impl::ReplaceByPreempting(
    const JobRecord& job, const std::set<NodeId>& bad, const std::vector<NodeId>& spares) const {
  TakeOver out;
  std::set<NodeId> own;
  int moved = 0;
  for (const GpuSlot& s : job.ranks) {
    own.insert(s.node);
    if (bad.count(s.node)) ++moved;
  }
  std::map<JobId, double> cost;  // a candidate's cost; < 0: not a candidate
  auto cost_of = [&](JobId id) {
    auto [it, first] = cost.try_emplace(id, -1.0);
    if (!first) return it->second;
    const JobRecord& j = jobs_.at(id);
    if (id == job.id || j.state != JobState::kRunning ||
        j.request.priority > job.request.priority || j.request.spec.gpus > moved ||
        (config_.preempt_protect_after > 0 && j.preemptions >= config_.preempt_protect_after) ||
        j.last_start + TimeLimit(j) <= now_ + config_.preempt_grace) {
      return it->second;
    }
    const double at_risk_s = static_cast<double>(now_ - ProgressMark(j)) / kSecond;
    it->second = j.request.spec.gpus *
                 (static_cast<double>(config_.preempt_restart_cost) / kSecond + at_risk_s);
    return it->second;
  };
  ClusterState trial = cluster();
  std::vector<double> node_cost(static_cast<size_t>(topo_.node_count()), 0.0);
  std::set<JobId> released;
  for (NodeId n = 0; n < topo_.node_count(); ++n) {
    const std::vector<JobId>& on = alloc_.jobs_on(n);
    if (on.empty() || own.count(n) || alloc_.spare_owners()[static_cast<size_t>(n)] != 0 ||
        !Restartable(n)) {
      continue;
    }
    double c = 0;
    bool all = true;
    for (JobId id : on) {
      const double v = cost_of(id);
      if (v < 0) {
        all = false;
        break;
      }
      c += v;
    }
    if (!all) continue;
    node_cost[static_cast<size_t>(n)] = c;
    for (JobId id : on) {
      if (!released.insert(id).second) continue;
      const JobRecord& j = jobs_.at(id);
      (void)trial.Release(alloc_.Held(j.ranks, j.spares));
    }
  }
  if (released.empty()) return out;
  Replacement r =
      FindReplacements(topo_, trial, job.ranks, bad, spares, alloc_.spare_owners(), node_cost);
  if (!r.complete || !Evaluate(job.request.spec, topo_, r.ranks).required_met) return out;
  std::set<JobId> victims;
  for (const GpuSlot& s : r.ranks) {
    if (own.count(s.node)) continue;
    for (JobId id : alloc_.jobs_on(s.node)) {
      if (id != job.id) victims.insert(id);
    }
  }
  if (victims.empty()) return out;  // free nodes did it after all: not this path
  out.found = true;
  out.ranks = std::move(r.ranks);
  out.spares_left = std::move(r.spares_left);
  out.victims.assign(victims.begin(), victims.end());
  for (JobId v : out.victims) out.cost_gpu_s += cost.at(v);
  return out;
}

TimeMs SchedulerCore::Impl::NextWakeup() const {
  TimeMs next = std::min({next_timer_, wait_bound_at_, overdue_wake_});
  if (!backoff_.empty()) next = std::min(next, backoff_.begin()->first);
  for (const auto& [id, h] : held_exits_) next = std::min(next, h.until);
  if (config_.heartbeats_required) next = std::min(next, liveness_.NextDeadline());
  return std::min(next, sets_wake_);
}

}  // namespace topo::core
