// SupervisorRunner (supervisor_runner.hpp).

#include "supervisor_runner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>
#include <tuple>

#include "port_check.hpp"
#include "topo/agent/account.hpp"

namespace topo::agent {

namespace fs = std::filesystem;

namespace {

bool HasStep(const std::string& dir, int64_t step) {
  if (dir.empty()) return false;
  const std::vector<int64_t> steps = CompleteSteps(dir);
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

std::string CopyingText(int64_t step) {
  return "copying checkpoint step " + std::to_string(step) +
         " from the persistent tier to this node";
}

LaunchOutcome StagingBusy(int64_t step) {
  LaunchOutcome out;
  out.kind = LaunchOutcome::Kind::kBusy;
  out.staging = true;
  out.reason = CopyingText(step);
  return out;
}

LaunchOutcome StartingBusy(std::string what) {
  LaunchOutcome out;
  out.kind = LaunchOutcome::Kind::kBusy;
  out.starting = true;
  out.reason = std::move(what);
  return out;
}

LaunchOutcome Failed(std::string reason, bool permanent) {
  LaunchOutcome out;
  out.kind = LaunchOutcome::Kind::kFailed;
  out.permanent = permanent;
  out.reason = std::move(reason);
  return out;
}

}  // namespace

SupervisorRunner::SupervisorRunner(RankSupervisor& supervisor, SupervisorRunnerOptions options)
    : sup_(supervisor), options_(std::move(options)) {}

SupervisorRunner::~SupervisorRunner() { WaitForLaunches(); }

void SupervisorRunner::WaitForLaunches() { FinishStarted(/*wait=*/true); }

void SupervisorRunner::FinishStarted(bool wait) {
  for (auto& [job, run] : starting_) {
    if (run->finished) continue;
    bool ran = false;
    {
      std::lock_guard lock(run->mu);
      ran = run->ran;
    }
    if (!ran && !wait) continue;
    if (run->thread.joinable()) run->thread.join();
    run->permanent = run->launch->permanent();
    run->status = sup_.FinishLaunch(std::move(*run->launch));
    run->launch.reset();
    run->finished = true;
    if (!run->status.ok()) continue;
    restart_counts_[job] = run->restart_count;
    // Stopped while it started: the ranks exist now, so they can be.
    if (run->stop_grace_ms) (void)sup_.Stop(job, *run->stop_grace_ms);
  }
}

std::string SupervisorRunner::StartingText(const StartingRun& run) {
  return "starting " + std::to_string(run.ranks.size()) + " rank(s) of restart " +
         std::to_string(run.restart_count);
}

std::vector<RankInfo> SupervisorRunner::Running() const {
  std::vector<RankInfo> out = sup_.List(true);
  // Ranks being started are this node's already (no pid yet).
  bool added = false;
  for (const auto& [job, run] : starting_) {
    if (run->finished) continue;
    for (const LocalRankSpec& r : run->ranks) {
      RankInfo info;
      info.job_id = job;
      info.rank = r.rank;
      info.local_rank = r.local_rank;
      info.running = true;
      out.push_back(info);
      added = true;
    }
  }
  if (added) {
    std::sort(out.begin(), out.end(), [](const RankInfo& a, const RankInfo& b) {
      return std::tie(a.job_id, a.rank) < std::tie(b.job_id, b.rank);
    });
  }
  return out;
}

std::optional<int> SupervisorRunner::RestartCountOf(const std::string& job) const {
  auto it = restart_counts_.find(job);
  if (it != restart_counts_.end()) return it->second;
  // An adopted job: its run's count is in the supervisor's state file.
  std::ifstream in(sup_.StatePath(job));
  if (!in) return std::nullopt;
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("restart_count") ||
      !doc["restart_count"].is_number_integer()) {
    return std::nullopt;
  }
  const int rc = doc["restart_count"].get<int>();
  restart_counts_[job] = rc;
  return rc;
}

core::Status SupervisorRunner::CheckMasterPort(int port) { return CheckTcpPortFree(port); }

LaunchOutcome SupervisorRunner::Launch(const JobLaunch& launch, int64_t checkpoint_step) {
  const std::string& job = launch.job_id;
  // A launch of the job started on its thread: its outcome, once done.
  FinishStarted(/*wait=*/false);
  if (auto it = starting_.find(job); it != starting_.end()) {
    StartingRun& run = *it->second;
    const bool same = run.restart_count == launch.restart_count && !run.stop_grace_ms;
    if (!run.finished) {
      if (same) return StartingBusy(StartingText(run));
      LaunchOutcome out;
      out.kind = LaunchOutcome::Kind::kBusy;
      out.reason = "an earlier launch of the job is still starting its ranks";
      return out;
    }
    LaunchOutcome out = run.outcome;
    const core::Status status = run.status;
    const bool it_permanent = run.permanent;
    starting_.erase(it);
    if (same) return status.ok() ? out : Failed(status.message(), it_permanent);
    // The run that started was stopped meanwhile: this is a new one.
  }
  JobLaunch l = launch;
  l.limits.restrict_gpu_devices = options_.restrict_gpu_devices;
  LaunchOutcome out;
  auto note = [&out](const std::string& line) {
    out.note += (out.note.empty() ? "" : "; ") + line;
  };
  if (options_.pids_max > 0 && (l.limits.pids_max <= 0 || l.limits.pids_max > options_.pids_max)) {
    if (l.limits.pids_max > 0) {
      note("pids_max " + std::to_string(l.limits.pids_max) + " lowered to this node's " +
           std::to_string(options_.pids_max) + " (--job-pids-max)");
    }
    l.limits.pids_max = options_.pids_max;
  }
  if (checkpoint_step >= 0) {
    const std::string local_dir = !launch.local_checkpoint_dir.empty() ? launch.local_checkpoint_dir
                                  : options_.local_checkpoint_root.empty()
                                      ? std::string()
                                      : (fs::path(options_.local_checkpoint_root) / job).string();
    const std::string persistent_dir =
        !launch.persistent_checkpoint_dir.empty() ? launch.persistent_checkpoint_dir
        : options_.persistent_checkpoint_root.empty()
            ? std::string()
            : (fs::path(options_.persistent_checkpoint_root) / job).string();
    const std::string step = std::to_string(checkpoint_step);
    // A copy in flight (or just done) for this job comes first.
    bool staged = false;
    bool absent = false;  // the persistent tier was looked at: not there
    if (auto it = staging_.find(job); it != staging_.end()) {
      std::shared_ptr<StagingCopy> copy = it->second;
      std::unique_lock lock(copy->mu);
      if (!copy->done) return StagingBusy(copy->step);
      const core::Status copied = copy->status;
      const int64_t copied_step = copy->step;
      const bool not_there = copy->absent;
      const bool permanent = copy->permanent;
      lock.unlock();
      staging_.erase(it);
      if (permanent) return Failed(copied.message(), true);  // the account: on every try
      if (copied_step == checkpoint_step && not_there) {
        absent = true;
      } else if (copied_step == checkpoint_step) {
        if (!copied.ok()) {
          return Failed(
              "checkpoint step " + step +
                  " could not be copied from the persistent tier to this node: " + copied.message(),
              false);
        }
        staged = true;
      }
    }
    if (HasStep(local_dir, checkpoint_step)) {
      l.restart_step = checkpoint_step;
      if (staged) note("staged checkpoint step " + step + " from the persistent tier");
    } else if (!absent && !local_dir.empty() && !persistent_dir.empty()) {
      // Looked for on the persistent tier (often a network file system,
      // slow to list) and copied, as the account into its own directory
      // (nothing the job placed in either tier can make root read or write
      // elsewhere), off the event loop, as is the account's lookup (NSS).
      // The copy may take minutes (a large model's state): on its own
      // thread, with the identity switch that thread alone makes
      // (CopyCompleteStep). The next Launch finds it done.
      auto copy = std::make_shared<StagingCopy>();
      copy->step = checkpoint_step;
      const std::string local_root =
          launch.local_checkpoint_dir.empty() ? options_.local_checkpoint_root : "";
      const std::string unix_user = launch.unix_user;
      const AccountPolicy rules = sup_.AccountRules(launch);
      try {
        std::thread([copy, persistent_dir, local_dir, local_root, unix_user, rules,
                     checkpoint_step] {
          bool permanent = false;
          bool there = false;
          core::Status st;
          core::Result<UnixAccount> acct = JobAccount(unix_user, rules, &permanent);
          if (!acct.ok()) {
            st = acct.status();
          } else {
            const FileOwner owner{acct.value().uid, acct.value().gid};
            if (!local_root.empty()) st = EnsureTraversableRoot(local_root);
            if (st.ok()) st = EnsurePrivateDir(local_dir, owner);
            there = st.ok() && HasStep(persistent_dir, checkpoint_step);
            if (there) st = CopyCompleteStep(persistent_dir, local_dir, checkpoint_step, owner);
          }
          std::lock_guard guard(copy->mu);
          copy->absent = st.ok() && !there;
          copy->permanent = permanent;
          copy->status = std::move(st);
          copy->done = true;
        }).detach();
      } catch (const std::system_error& e) {
        return Failed("staging checkpoint step " + step + ": cannot start a thread: " + e.what(),
                      false);
      }
      staging_[job] = copy;
      return StagingBusy(checkpoint_step);
    } else {
      note("checkpoint step " + step +
           " is on neither checkpoint tier of this node; starting without TOPO_RESTART_STEP");
    }
  }

  core::Result<StartingLaunch> prepared = sup_.PrepareLaunch(l);
  if (!prepared.ok()) {
    // The supervisor refuses while it copies the earlier run's newest step
    // to the persistent tier; that ends by itself.
    if (prepared.message().find("checkpoint copy is in flight") != std::string::npos) {
      out.kind = LaunchOutcome::Kind::kBusy;
      out.reason = prepared.message();
      return out;
    }
    return Failed(prepared.message(), false);
  }
  // The cgroup and the forks on a thread of their own: the event loop
  // goes on (heartbeats); Poll() hands the ranks to the supervisor.
  auto run = std::make_unique<StartingRun>();
  run->restart_count = launch.restart_count;
  run->ranks = launch.ranks;
  run->outcome = out;
  run->outcome.kind = LaunchOutcome::Kind::kStarted;
  run->outcome.restart_step = l.restart_step;
  run->launch = std::move(prepared).value();
  StartingRun* raw = run.get();
  RankSupervisor* sup = &sup_;
  try {
    run->thread = std::thread([raw, sup] {
      (void)raw->launch->Run();
      {
        std::lock_guard lock(raw->mu);
        raw->ran = true;
      }
      sup->Wake();
    });
  } catch (const std::system_error& e) {
    return Failed("starting the ranks: cannot start a thread: " + std::string(e.what()), false);
  }
  const std::string text = StartingText(*run);
  starting_[job] = std::move(run);
  return StartingBusy(text);
}

std::optional<std::string> SupervisorRunner::Underway(const std::string& job) const {
  if (auto it = staging_.find(job); it != staging_.end()) {
    std::lock_guard lock(it->second->mu);
    if (!it->second->done) return CopyingText(it->second->step);
  }
  if (auto it = starting_.find(job); it != starting_.end() && !it->second->finished) {
    return StartingText(*it->second);
  }
  return std::nullopt;
}

core::Status SupervisorRunner::Stop(const std::string& job, int grace_ms) {
  if (auto it = starting_.find(job); it != starting_.end() && !it->second->finished) {
    it->second->stop_grace_ms = grace_ms;
    return core::Status::Ok();
  }
  return sup_.Stop(job, grace_ms);
}

core::Status SupervisorRunner::RequestCheckpoint(const std::string& job) {
  return sup_.RequestCheckpoint(job);
}

std::vector<SupervisorEvent> SupervisorRunner::Poll() {
  FinishStarted(/*wait=*/false);
  // Outcomes of copies nobody came back for.
  const auto now = std::chrono::steady_clock::now();
  for (auto it = staging_.begin(); it != staging_.end();) {
    StagingCopy& copy = *it->second;
    {
      std::lock_guard lock(copy.mu);
      if (!copy.done) {
        ++it;
        continue;
      }
    }
    if (!copy.seen_done) copy.seen_done = now;
    if (now - *copy.seen_done >= std::chrono::milliseconds(options_.staging_keep_ms)) {
      it = staging_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<SupervisorEvent> events = sup_.Poll();
  // A finished run's count is still in its state file if asked again.
  for (SupervisorEvent& e : events) {
    if (e.kind != EventKind::kJobFinished) continue;
    restart_counts_.erase(e.job_id);
    // Its node-local checkpoints go (when the persistent tier holds them),
    // unless a new run of the job is already being staged or started here.
    if (staging_.count(e.job_id) || starting_.count(e.job_id)) continue;
    core::Result<bool> removed = sup_.RemoveLocalCheckpoints(e.job_id);
    const std::string what = !removed.ok()     ? removed.message()
                             : removed.value() ? "its node-local checkpoints removed (the "
                                                 "persistent tier holds its newest step)"
                                               : "";
    if (!what.empty()) e.message += (e.message.empty() ? "" : "; ") + what;
  }
  return events;
}

std::optional<int64_t> SupervisorRunner::NewestCompleteStep(const std::string& job) const {
  return sup_.NewestCompleteStep(job);
}

std::optional<int64_t> SupervisorRunner::NewestPersistedStep(const std::string& job) const {
  return sup_.NewestPersistedStep(job);
}

bool SupervisorRunner::HasPersistentTier() const {
  return !options_.persistent_checkpoint_root.empty();
}

proto::LogsReply SupervisorRunner::ReadLog(const proto::LogsRequest& request) {
  return ReadLogPiece(sup_.LogPath(std::to_string(request.job), request.rank), request.offset,
                      request.max);
}

proto::LogsReply ReadLogPiece(const std::string& path, int64_t offset, int64_t max) {
  proto::LogsReply reply;
  // The job's account owns the log's directory: the last component is the
  // job's to change, so it is never followed, and only a plain file with
  // one link (not a hard link to someone else's file) is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      reply.error = "no log file on this node (" + path + ")";
    } else if (err == ELOOP) {
      reply.error = "the log " + path + " is a symbolic link (not written by the agent); refused";
    } else {
      reply.error = "cannot open the log " + path + ": " + std::strerror(err);
    }
    return reply;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    reply.error = "the log " + path +
                  " is not a plain file with one link (not written by the "
                  "agent); refused";
    return reply;
  }
  const int64_t size = st.st_size;
  if (offset < 0) offset = std::max<int64_t>(0, size + offset);
  offset = std::min(offset, size);
  max = std::clamp<int64_t>(max, 1, proto::kMaxLogChunkBytes);
  std::string data(static_cast<size_t>(std::min(max, size - offset)), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd, data.data() + got, data.size() - got,
                              static_cast<off_t>(offset) + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  reply.offset = offset;
  reply.next_offset = offset + static_cast<int64_t>(got);
  reply.size = size;
  reply.data = std::move(data);
  return reply;
}

}  // namespace topo::agent
