// SimRunner (sim_runner.hpp).

#include "sim_runner.hpp"

#include <algorithm>

namespace topo::agent {

namespace {

// Simulated ranks have no process; `register` still needs a pid.
constexpr int64_t kFakePidBase = 100000;

}  // namespace

SimRunner::SimRunner(const std::string& node, int node_index, const SimRunnerSettings& settings,
                     const AgentClock& clock, SimHost& host)
    : node_(node), node_index_(node_index), settings_(settings), clock_(clock), host_(host) {}

std::vector<RankInfo> SimRunner::Running() const {
  std::vector<RankInfo> out;
  for (const auto& [job, s] : jobs_) {
    for (size_t i = 0; i < s.ranks.size(); ++i) {
      RankInfo r;
      r.job_id = job;
      r.rank = s.ranks[i];
      r.local_rank = static_cast<int>(i);
      r.pid = static_cast<pid_t>(kFakePidBase + s.ranks[i]);
      r.running = true;
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::optional<int> SimRunner::RestartCountOf(const std::string& job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.restart_count;
}

core::Status SimRunner::CheckMasterPort(int) { return core::Status::Ok(); }

LaunchOutcome SimRunner::Launch(const JobLaunch& launch, int64_t checkpoint_step) {
  const int64_t now = clock_.NowMs();
  SimJob s;
  s.restart_count = launch.restart_count;
  s.world_size =
      launch.parallelism.tp * launch.parallelism.cp * launch.parallelism.pp * launch.parallelism.dp;
  for (const LocalRankSpec& r : launch.ranks) {
    s.ranks.push_back(r.rank);
    s.rank0 |= r.rank == 0;
  }
  s.base_step = std::max<int64_t>(0, checkpoint_step);
  s.last_step = checkpoint_step;
  s.started_ms = now;
  s.last_ckpt_ms = now;
  host_.Emit({{"ev", "start"},
              {"node", node_},
              {"job", JobNumber(launch.job_id).value_or(0)},
              {"restart_count", s.restart_count},
              {"checkpoint_step", checkpoint_step},
              {"ranks", s.ranks.size()},
              {"group_rank", launch.group_rank},
              {"world_size", s.world_size}});
  if (settings_.run_ms > 0) host_.WakeAt(now + settings_.run_ms, node_index_);
  if (settings_.checkpoint_every_ms > 0 && s.rank0) {
    host_.WakeAt(now + settings_.checkpoint_every_ms, node_index_);
  }
  jobs_[launch.job_id] = std::move(s);
  LaunchOutcome out;
  out.kind = LaunchOutcome::Kind::kStarted;
  if (checkpoint_step >= 0) out.restart_step = checkpoint_step;
  return out;
}

core::Status SimRunner::Stop(const std::string& job, int) {
  if (jobs_.erase(job) == 0) return core::Status::Error("no job " + job + " on this node");
  return core::Status::Ok();
}

void SimRunner::Checkpoint(const std::string& job, SimJob& s, int64_t now) {
  const int64_t step = std::max(s.base_step + (now - s.started_ms) / std::max(1, settings_.step_ms),
                                s.last_step + 1);
  s.last_step = step;
  s.last_ckpt_ms = now;
  if (!s.rank0) return;  // only rank 0 writes the job's checkpoint
  events_.push_back(SupervisorEvent{EventKind::kCheckpointPersisted, job, {}, step, {}});
  host_.Emit({{"ev", "ckpt"},
              {"node", node_},
              {"job", JobNumber(job).value_or(0)},
              {"step", step},
              {"restart_count", s.restart_count}});
}

core::Status SimRunner::RequestCheckpoint(const std::string& job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return core::Status::Error("no job " + job + " on this node");
  Checkpoint(job, it->second, clock_.NowMs());
  return core::Status::Ok();
}

core::Status SimRunner::CheckpointNow(int64_t job) {
  auto it = jobs_.find(std::to_string(job));
  if (it == jobs_.end() || !it->second.rank0) {
    return core::Status::Error("rank 0 of job " + std::to_string(job) + " does not run on " +
                               node_);
  }
  Checkpoint(it->first, it->second, clock_.NowMs());
  return core::Status::Ok();
}

bool SimRunner::HoldsRankZero(int64_t job) const {
  auto it = jobs_.find(std::to_string(job));
  return it != jobs_.end() && it->second.rank0;
}

core::Status SimRunner::Exit(int64_t job, int rank, int code) {
  const std::string id = std::to_string(job);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::Status::Error("job " + id + " does not run on " + node_);
  if (code < 0 || code > 255) {
    return core::Status::Error("exit code " + std::to_string(code) + " is not 0-255");
  }
  std::vector<int>& ranks = it->second.ranks;
  auto r = std::find(ranks.begin(), ranks.end(), rank);
  if (r == ranks.end()) {
    return core::Status::Error("rank " + std::to_string(rank) + " of job " + id +
                               " does not run on " + node_);
  }
  SupervisorEvent e{EventKind::kRankExited, id, {}, -1, {}};
  e.exit.job_id = id;
  e.exit.rank = rank;
  e.exit.local_rank = static_cast<int>(r - ranks.begin());
  e.exit.pid = static_cast<pid_t>(kFakePidBase + rank);
  e.exit.exit_code = code;
  events_.push_back(std::move(e));
  ranks.erase(r);
  if (ranks.empty()) {
    events_.push_back(SupervisorEvent{EventKind::kJobFinished, id, {}, -1, {}});
    jobs_.erase(it);
  }
  return core::Status::Ok();
}

std::vector<SupervisorEvent> SimRunner::Poll() {
  const int64_t now = clock_.NowMs();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    SimJob& s = it->second;
    if (settings_.checkpoint_every_ms > 0 && s.rank0 &&
        now - s.last_ckpt_ms >= settings_.checkpoint_every_ms) {
      Checkpoint(it->first, s, now);
      host_.WakeAt(now + settings_.checkpoint_every_ms, node_index_);
    }
    if (settings_.run_ms > 0 && now - s.started_ms >= settings_.run_ms) {
      for (size_t i = 0; i < s.ranks.size(); ++i) {
        SupervisorEvent e{EventKind::kRankExited, it->first, {}, -1, {}};
        e.exit.job_id = it->first;
        e.exit.rank = s.ranks[i];
        e.exit.local_rank = static_cast<int>(i);
        e.exit.pid = static_cast<pid_t>(kFakePidBase + s.ranks[i]);
        events_.push_back(std::move(e));
      }
      events_.push_back(SupervisorEvent{EventKind::kJobFinished, it->first, {}, -1, {}});
      host_.Emit({{"ev", "finished"},
                  {"node", node_},
                  {"job", JobNumber(it->first).value_or(0)},
                  {"restart_count", s.restart_count}});
      it = jobs_.erase(it);
      continue;
    }
    ++it;
  }
  std::vector<SupervisorEvent> out;
  out.swap(events_);
  return out;
}

std::optional<int64_t> SimRunner::NewestCompleteStep(const std::string& job) const {
  return NewestPersistedStep(job);
}

std::optional<int64_t> SimRunner::NewestPersistedStep(const std::string& job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.last_step < 0) return std::nullopt;
  return it->second.last_step;
}

proto::LogsReply SimRunner::ReadLog(const proto::LogsRequest& request) {
  auto it = jobs_.find(std::to_string(request.job));
  const std::string log =
      "simulated node " + node_ + ": job " + std::to_string(request.job) + " rank " +
      std::to_string(request.rank) +
      (it != jobs_.end() ? " restart " + std::to_string(it->second.restart_count)
                         : std::string(" (not running here now)")) +
      "; no process runs\n";
  const auto size = static_cast<int64_t>(log.size());
  int64_t offset = request.offset < 0 ? std::max<int64_t>(0, size + request.offset)
                                      : std::min(request.offset, size);
  const int64_t n = std::min(request.max, size - offset);
  proto::LogsReply reply;
  reply.offset = offset;
  reply.next_offset = offset + n;
  reply.size = size;
  reply.data = log.substr(static_cast<size_t>(offset), static_cast<size_t>(n));
  return reply;
}

void SimRunner::Reset() {
  jobs_.clear();
  events_.clear();
}

}  // namespace topo::agent
