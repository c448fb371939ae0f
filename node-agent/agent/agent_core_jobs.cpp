// AgentCore (agent_core.hpp): starts, stops, keep lists and drains.

#include <algorithm>

#include "agent_core.hpp"

namespace topo::agent {

namespace {

// launch_failed.reason is one line of at most kMaxReasonBytes.
std::string OneLine(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  if (text.size() > proto::kMaxReasonBytes) {
    text.resize(proto::kMaxReasonBytes - 3);
    // Do not cut a UTF-8 sequence in half.
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) {
      text.pop_back();
    }
    if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
    text += "...";
  }
  if (text.empty()) text = "unknown reason";
  return text;
}

bool HoldsRankZero(const JobLaunch& l) {
  return std::any_of(l.ranks.begin(), l.ranks.end(),
                     [](const LocalRankSpec& r) { return r.rank == 0; });
}

}  // namespace

core::Result<JobLaunch> LaunchFromStart(const proto::Start& s, const std::string& job_command) {
  JobLaunch l;
  l.job_id = std::to_string(s.job);
  core::Result<core::Parallelism> layout = proto::ToParallelism(s.layout);
  if (!layout.ok()) return core::Status::Error("its layout does not read: " + layout.message());
  l.parallelism = layout.value();
  if (!s.command.empty()) {
    l.argv = s.command;
  } else if (!job_command.empty()) {
    l.argv = {"/bin/sh", "-c", job_command};
  } else {
    return core::Status::Error(
        "the job has no command and this agent has no --job-command: submit the job with a "
        "command");
  }
  l.mode = s.launch;
  l.env = s.env;
  l.working_dir = s.working_dir;
  l.output = s.output;
  l.error = s.error;
  l.limits.memory_bytes = s.memory_mb << 20;
  l.limits.cpus = s.cpu_millis / 1000.0;
  l.limits.pids_max = s.pids_max.value_or(0);  // the runner applies the node's cap
  l.unix_user = s.unix_user;
  l.master_addr = s.master_addr;
  l.master_port = s.master_port;
  l.group_rank = s.group_rank;
  l.group_world_size = s.group_world_size;
  l.restart_count = s.restart_count;
  if (s.array_job && s.array_task) {
    l.array_job = *s.array_job;
    l.array_task = *s.array_task;
  }
  // The start lists its ranks in local-rank order with one GPU each
  // (checked by the protocol's reader); CUDA_VISIBLE_DEVICES follows it.
  l.ranks.reserve(s.ranks.size());
  for (const proto::StartRank& r : s.ranks) {
    l.ranks.push_back(LocalRankSpec{r.rank, r.local_rank, {r.gpu}});
  }
  return l;
}

void AgentCore::HandleStart(const proto::Start& m) {
  const std::string job = std::to_string(m.job);
  core::Result<JobLaunch> launch = LaunchFromStart(m, options_.job_command);
  if (!launch.ok()) {
    FailLaunch(job, m.restart_count, launch.message(), /*permanent=*/true);
    return;
  }
  const int have = gpus_.Inventory().count();
  for (const proto::StartRank& r : m.ranks) {
    if (r.gpu >= have) {
      // The scheduler's view of this node is wrong; another node may do.
      FailLaunch(job, m.restart_count,
                 "rank " + std::to_string(r.rank) + " is given GPU " + std::to_string(r.gpu) +
                     " but node " + node_ + " has " + std::to_string(have) +
                     " GPU(s): fix the node or the topology",
                 /*permanent=*/false);
      return;
    }
  }
  if (drain_ != DrainPhase::kNone) {
    Log(LogLevel::kWarning, "job " + job + ": start received while draining");
  }
  if (Runs(job)) {
    Log(LogLevel::kInfo, "job " + job + " restart " + std::to_string(m.restart_count) +
                             ": stopping the earlier run's ranks first");
    (void)runner_.Stop(job, options_.stop_grace_ms);
  }
  PendingLaunch& p = pending_[job];  // a newer start replaces one still waiting
  p = PendingLaunch{};
  p.launch = std::move(launch).value();
  p.checkpoint_step = m.checkpoint_step;
  p.deadline_ms = clock_.NowMs() + options_.stop_grace_ms + options_.launch_wait_ms;
  TryPendingLaunches();
}

void AgentCore::FailLaunch(const std::string& job, int restart_count, const std::string& reason,
                           bool permanent) {
  Log(LogLevel::kWarning, "job " + job + " restart " + std::to_string(restart_count) +
                              ": cannot start" + (permanent ? " (permanent)" : "") + ": " + reason);
  const auto id = JobNumber(job);
  if (!id) return;
  Report(proto::LaunchFailed{*id, restart_count, OneLine(reason), permanent});
}

void AgentCore::TryPendingLaunches() {
  const int64_t now = clock_.NowMs();
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::string& job = it->first;
    PendingLaunch& p = it->second;
    const int restart = p.launch.restart_count;
    auto log_wait = [&](const std::string& why) {
      if (p.waiting_for != why) {
        p.waiting_for = why;
        Log(LogLevel::kInfo,
            "job " + job + " restart " + std::to_string(restart) + ": launch waits: " + why);
      }
      return false;
    };
    auto wait = [&](const std::string& why) {
      if (now >= p.deadline_ms) {
        FailLaunch(job, restart,
                   why + " (waited " +
                       std::to_string(options_.stop_grace_ms + options_.launch_wait_ms) + " ms)",
                   false);
        return true;
      }
      return log_wait(why);
    };
    auto stage_wait = [&](const std::string& why) {
      if (p.stage_deadline_ms == 0) {
        p.stage_deadline_ms = now + options_.stage_wait_ms;
        // The scheduler gives a start start_ack_timeout_s (10 min by
        // default) before it requeues the run; a copy may take this long,
        // and the launch launch_wait_ms after it: say so, once.
        if (const auto id = JobNumber(job)) {
          const int64_t wait = std::clamp<int64_t>(options_.stage_wait_ms + options_.launch_wait_ms,
                                                   1, proto::kMaxStartWaitMs);
          Report(proto::StartWaiting{*id, restart, wait, OneLine(why).substr(0, 1000)});
        }
      }
      if (now >= p.stage_deadline_ms) {
        FailLaunch(job, restart,
                   why + " took longer than " + std::to_string(options_.stage_wait_ms) + " ms",
                   false);
        return true;
      }
      // What follows the copy gets the usual wait from its end.
      p.deadline_ms = std::max(p.deadline_ms, now + options_.launch_wait_ms);
      return log_wait(why);
    };
    if (p.starting) {
      // The runner starts the ranks in the background: that ends by itself
      // and cannot be called off, so it has no deadline here; a stop
      // meanwhile goes to the runner (the ranks count as running).
      if (std::optional<std::string> what = runner_.Underway(job)) {
        log_wait(*what);
        ++it;
        continue;
      }
    } else {
      if (Runs(job)) {
        if (wait("ranks of the job's earlier run have not exited yet")) {
          it = pending_.erase(it);
        } else {
          ++it;
        }
        continue;
      }
      if (HoldsRankZero(p.launch)) {
        // Rank 0 listens on MASTER_PORT; a port taken here would fail the
        // whole job at rendezvous. The scheduler restarts it with a fresh port.
        core::Status port = runner_.CheckMasterPort(p.launch.master_port);
        if (!port.ok()) {
          FailLaunch(job, restart,
                     "MASTER_PORT " + std::to_string(p.launch.master_port) + " is in use on node " +
                         node_ + ": " + port.message(),
                     false);
          it = pending_.erase(it);
          continue;
        }
      }
      // The restart's checkpoint is still being copied here: not launched
      // again until the copy ends.
      if (std::optional<std::string> copying = runner_.Underway(job)) {
        if (stage_wait(*copying)) {
          it = pending_.erase(it);
        } else {
          ++it;
        }
        continue;
      }
    }
    LaunchOutcome out = runner_.Launch(p.launch, p.checkpoint_step);
    if (out.kind == LaunchOutcome::Kind::kBusy) {
      if (out.starting) {
        if (!p.starting) p.launch_began_ms = now;
        p.starting = true;
        log_wait(out.reason);
        ++it;
        continue;
      }
      p.starting = false;
      if (out.staging ? stage_wait(out.reason) : wait(out.reason)) {
        it = pending_.erase(it);
      } else {
        ++it;
      }
      continue;
    }
    if (out.kind == LaunchOutcome::Kind::kFailed) {
      FailLaunch(job, restart, out.reason, out.permanent);
      it = pending_.erase(it);
      continue;
    }
    // Exits are reported with the count of the run they belong to: set
    // only now, after every exit of the earlier run has been seen (and not
    // kept for a run whose ranks have all ended already).
    if (Runs(job)) {
      restart_counts_[job] = restart;
    } else {
      restart_counts_.erase(job);
    }
    // Started in the background: how long the ranks took to come up.
    const int64_t launch_ms = p.launch_began_ms < 0 ? 0 : now - p.launch_began_ms;
    std::string ranks;
    for (const LocalRankSpec& r : p.launch.ranks) {
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r.rank);
    }
    Log(LogLevel::kInfo,
        "job " + job + " restart " + std::to_string(restart) + ": started ranks " + ranks + " as " +
            p.launch.unix_user + " (group rank " + std::to_string(p.launch.group_rank) + " of " +
            std::to_string(p.launch.group_world_size) + ", master " + p.launch.master_addr + ":" +
            std::to_string(p.launch.master_port) +
            (out.restart_step ? ", from step " + std::to_string(*out.restart_step) : "") + ")" +
            (p.launch.mode == core::LaunchMode::kNode ? " in one process (launch node)" : "") +
            (launch_ms >= 100 ? " in " + std::to_string(launch_ms) + " ms" : ""));
    if (!out.note.empty()) Log(LogLevel::kInfo, "job " + job + ": " + out.note);
    // The scheduler requeues a run whose start no node acknowledges.
    if (const auto id = JobNumber(job)) Report(proto::Started{*id, restart});
    it = pending_.erase(it);
  }
}

void AgentCore::HandleStop(const std::string& job, const std::string& reason) {
  const bool waiting = pending_.erase(job) > 0;
  if (!Runs(job)) {
    Log(LogLevel::kInfo,
        "stop of job " + job + " (" + reason +
            "): " + (waiting ? "its launch was still waiting; dropped" : "nothing runs here"));
    return;
  }
  core::Status st = runner_.Stop(job, options_.stop_grace_ms);
  Log(LogLevel::kInfo,
      "stopping job " + job + " (" + reason + ")" + (st.ok() ? "" : ": " + st.message()));
}

void AgentCore::Reconcile(const std::vector<int64_t>& keep) {
  std::set<std::string> wanted;
  for (int64_t id : keep) wanted.insert(std::to_string(id));
  std::set<std::string> mine = RunningJobs();
  for (const auto& entry : pending_) mine.insert(entry.first);
  for (const std::string& job : mine) {
    if (wanted.count(job)) continue;
    Log(LogLevel::kInfo, "job " + job + " is not in the scheduler's keep list");
    HandleStop(job, "not kept after registration");
  }
}

// ------------------------------------------------------------------ drain

void AgentCore::HandleDrain(const proto::Drain& m) {
  const bool immediate = m.mode == proto::DrainMode::kImmediate;
  Log(LogLevel::kInfo,
      std::string("drain (") + (immediate ? "immediate" : "graceful") + "): " + m.reason);
  for (const auto& entry : pending_) {
    Log(LogLevel::kInfo, "job " + entry.first + ": launch dropped by the drain");
  }
  pending_.clear();
  drain_baseline_.clear();
  if (immediate) {
    for (const std::string& job : RunningJobs()) (void)runner_.Stop(job, 0);
    drain_ = DrainPhase::kStopping;
  } else {
    for (const std::string& job : RunningJobs()) {
      drain_baseline_[job] = DrainStep(job);
      (void)runner_.RequestCheckpoint(job);
    }
    drain_deadline_ms_ = clock_.NowMs() + options_.drain_checkpoint_ms;
    drain_ = DrainPhase::kCheckpoint;
  }
  DrainProgress();
}

// The step a graceful drain waits for: persisted when there is a persistent
// tier (the job restarts on other nodes, which read that tier), else local.
int64_t AgentCore::DrainStep(const std::string& job) const {
  return (runner_.HasPersistentTier() ? runner_.NewestPersistedStep(job)
                                      : runner_.NewestCompleteStep(job))
      .value_or(-1);
}

void AgentCore::DrainProgress() {
  if (drain_ == DrainPhase::kCheckpoint) {
    bool all = true;
    for (const auto& [job, before] : drain_baseline_) {
      if (Runs(job) && DrainStep(job) <= before) all = false;
    }
    if (!all && clock_.NowMs() < drain_deadline_ms_) return;
    if (!all) Log(LogLevel::kWarning, "drain: not every job checkpointed in time; stopping anyway");
    for (const std::string& job : RunningJobs()) (void)runner_.Stop(job, options_.stop_grace_ms);
    drain_ = DrainPhase::kStopping;
    PollRunner();
  }
  if (drain_ == DrainPhase::kStopping && runner_.Running().empty() && pending_.empty()) {
    drain_ = DrainPhase::kNone;
    Log(LogLevel::kInfo, "drained: no rank runs here");
    Report(proto::Drained{});
  }
}

}  // namespace topo::agent
