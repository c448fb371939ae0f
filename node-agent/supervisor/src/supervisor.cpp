// RankSupervisor: launches ranks as the job's account in the job's cgroup,
// reports exits, stops jobs, checkpoint signals and the persistent-tier copy
// worker. State files and adoption: state.cpp; environment: rank_env.cpp;
// fork/exec: spawn.cpp.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "spawn.hpp"
#include "supervisor_internal.hpp"
#include "topo/common/job_process.hpp"

namespace topo::agent {
namespace fs = std::filesystem;
using Clock = SupervisorClock;

namespace {

// Processes left in a job's cgroup after its ranks exited get this long to
// die of SIGKILL before kJobFinished is reported anyway (with a message).
constexpr auto kLeftoverWait = std::chrono::seconds(30);

std::string NowText() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

// ------------------------------------------------------------------ Impl

void RankSupervisor::Impl::WorkerLoop() {
  for (;;) {
    CopyTask t;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stopping || !tasks.empty(); });
      if (stopping) return;
      t = std::move(tasks.front());
      tasks.pop_front();
    }
    core::Status st;
    std::string note;
    try {
      st = CopyCompleteStep(t.src, t.dst, t.step, t.owner);
      // A newer step is complete there: older ones beyond the newest K go.
      if (st.ok() && opt.keep_checkpoints > 0) {
        core::Status pruned =
            PruneCompleteSteps(t.dst, static_cast<size_t>(opt.keep_checkpoints), t.owner);
        if (!pruned.ok()) note = pruned.message();
      }
    } catch (const std::exception& e) {
      st = core::Status::Error(std::string("copy failed: ") + e.what());
    }
    {
      std::lock_guard lk(mu);
      results.push_back(CopyResult{t.job_id, t.step, st, note});
    }
    char b = 1;
    [[maybe_unused]] auto n = ::write(wake_w, &b, 1);
  }
}

bool RankSupervisor::Impl::SignalRank(const RankRec& r, int sig, bool group) {
  if (!r.running || r.lost) return false;
  if (r.adopted && !SameProcessAlive(r.pid, r.start_time)) {
    // A zombie child of ours still has the same start time; a recycled pid not.
    auto st = ReadProcStat(r.pid);
    if (!st || st->start_time != r.start_time) return false;
  }
  if (group && ::kill(-r.pid, sig) == 0) return true;
  return ::kill(r.pid, sig) == 0;
}

bool RankSupervisor::Impl::Reap(RankRec& r, RankExit& ex) {
  ex.rank = r.rank;
  ex.local_rank = r.local_rank;
  ex.pid = r.pid;
  ex.stopped = r.stop_requested;
  if (r.lost) {
    ex.exit_status_known = false;
    return true;
  }
  int status = 0;
  pid_t w = ::waitpid(r.pid, &status, WNOHANG);
  if (w == 0) return false;
  if (w == r.pid) {
    if (WIFEXITED(status)) {
      ex.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      ex.signaled = true;
      ex.signal = WTERMSIG(status);
    } else {
      return false;  // stopped/continued: still there
    }
    return true;
  }
  // Not our child (adopted after an agent restart): watch /proc.
  if (SameProcessAlive(r.pid, r.start_time)) return false;
  ex.exit_status_known = false;
  return true;
}

void RankSupervisor::Impl::KillJob(JobRec& j) {
  if (j.cgroup_live) {
    j.cgroup.KillAll();
    return;
  }
  for (pid_t g : j.kill_groups) ::kill(-g, SIGKILL);
}

bool RankSupervisor::Impl::CleanUpAfterRanks(JobRec& j, Clock::time_point now,
                                             std::string* message) {
  if (!j.cgroup_live) return true;
  if (!j.cgroup.Exists()) {
    if (j.cgroup.Remove()) j.cgroup_live = false;  // the v1 limit directories too
    return true;
  }
  if (j.cgroup.Members().empty()) {
    j.leftovers_since.reset();
    if (j.cgroup.Remove()) j.cgroup_live = false;
    return true;  // nothing of the job runs; a failed rmdir is retried later
  }
  // Its ranks are gone, what they left behind (daemons, setsid'd helpers)
  // goes with them.
  if (!j.leftovers_since) j.leftovers_since = now;
  j.cgroup.KillAll();
  if (now - *j.leftovers_since < kLeftoverWait) return false;
  *message = "processes of the job remain in " + j.cgroup.dirs[0] +
             " after SIGKILL (stuck in the kernel?); the agent keeps trying to remove it";
  return true;
}

// ------------------------------------------------------------------ RankSupervisor

RankSupervisor::RankSupervisor(SupervisorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  const auto& opt = impl_->opt;
  // The state dir names every job's account and pids: root's only.
  std::error_code ec;
  fs::create_directories(fs::path(opt.state_dir) / "jobs", ec);
  ::chmod(opt.state_dir.c_str(), 0700);
  ::chmod((fs::path(opt.state_dir) / "jobs").c_str(), 0700);
  impl_->scratch =
      JobScratch::Open(ScratchOptions{opt.job_scratch, opt.job_tmp_size, opt.job_shm_size,
                                      (fs::path(opt.state_dir) / "namespaces").string()});
  impl_->cgroups = CgroupManager::Detect(CgroupOptions{
      opt.cgroup_root, opt.gpu_device_dir, opt.use_v1_cgroup_controllers, opt.cgroup_scope});
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    impl_->wake_r = fds[0];
    impl_->wake_w = fds[1];
  }
  impl_->LoadStates();
  impl_->worker = std::thread([this] { impl_->WorkerLoop(); });
}

RankSupervisor::~RankSupervisor() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
  if (impl_->wake_r >= 0) ::close(impl_->wake_r);
  if (impl_->wake_w >= 0) ::close(impl_->wake_w);
}

int RankSupervisor::wake_fd() const { return impl_->wake_r; }

AccountPolicy RankSupervisor::AccountRules(const JobLaunch& launch) const {
  return AccountPolicy{launch.allow_root || impl_->opt.allow_root_jobs, impl_->opt.min_job_uid};
}

void RankSupervisor::Wake() const {
  if (impl_->wake_w < 0) return;
  char b = 1;
  [[maybe_unused]] auto n = ::write(impl_->wake_w, &b, 1);
}

std::string RankSupervisor::LogPath(const std::string& job_id, int rank) const {
  if (auto it = impl_->jobs.find(job_id);
      it != impl_->jobs.end() && it->second.mode == core::LaunchMode::kNode) {
    return NodeLogPath(job_id, it->second.group_rank);
  }
  const fs::path dir = fs::path(impl_->opt.log_dir) / job_id;
  const fs::path rank_log = dir / ("rank-" + std::to_string(rank) + ".log");
  if (impl_->jobs.count(job_id) == 0) {
    // A job this supervisor no longer runs (it ended, or the agent was
    // restarted): one launched once per node left node-G.log, the one log
    // of this node's group rank, and no rank-R.log.
    std::error_code ec;
    if (!fs::exists(rank_log, ec)) {
      std::string found;
      int count = 0;
      for (fs::directory_iterator i(dir, ec), end; !ec && i != end; i.increment(ec)) {
        const std::string name = i->path().filename().string();
        if (name.starts_with("node-") && name.ends_with(".log")) {
          found = i->path().string();
          ++count;
        }
      }
      if (count == 1) return found;
    }
  }
  return rank_log.string();
}

std::string RankSupervisor::NodeLogPath(const std::string& job_id, int group_rank) const {
  return (fs::path(impl_->opt.log_dir) / job_id / ("node-" + std::to_string(group_rank) + ".log"))
      .string();
}

std::string RankSupervisor::StatePath(const std::string& job_id) const {
  return impl_->StatePath(job_id);
}

std::string RankSupervisor::CgroupPath(const std::string& job_id) const {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end() || !it->second.cgroup.valid()) return "";
  return it->second.cgroup.dirs[0];
}

const CgroupInfo& RankSupervisor::Cgroups() const { return impl_->cgroups.Describe(); }

const JobScratch& RankSupervisor::Scratch() const { return impl_->scratch; }

std::string RankSupervisor::ScratchPin(const std::string& job_id) const {
  auto it = impl_->jobs.find(job_id);
  return it == impl_->jobs.end() ? std::string() : it->second.scratch_pin;
}

// ------------------------------------------------------------------ launch

struct StartingLaunch::State {
  const CgroupManager* cgroups = nullptr;  // the supervisor's; const after construction
  const JobScratch* scratch = nullptr;     // likewise
  int checkpoint_signal = 0;
  JobLaunch launch;
  AccountPolicy account_rules;           // RankSupervisor::AccountRules
  UnixAccount acct;                      // resolved by Run()
  bool permanent = false;                // Run() failed for good (StartingLaunch::permanent)
  JobRec j;                              // everything but the cgroup and the ranks, until Run()
  std::string log_path;                  // node mode: the node's log
  std::map<int, std::string> rank_logs;  // rank mode: each rank's log
  // The job's private directories (root to make traversable first, or "";
  // the directory): made by Run(), as the persistent tier may be a network
  // file system that takes its time.
  std::vector<std::pair<std::string, std::string>> dirs;
  std::optional<JobCgroup> prior_cgroup;  // the earlier run's, still there: removed first
  std::string prior_pin;                  // the earlier run's namespace, still pinned
  bool ran = false;
  bool started = false;   // Run() started every rank
  bool finished = false;  // FinishLaunch took the ranks
  core::Status status = core::Status::Error("the launch was prepared but never run");

  // Kills every rank started and removes the cgroup; the error for it.
  core::Status Abort(const std::vector<int>& cgroup_fds, const std::string& why);
  ~State() {
    if (started && !finished) (void)Abort({}, "not finished");
  }
};

StartingLaunch::StartingLaunch(std::unique_ptr<State> state) : s_(std::move(state)) {}
StartingLaunch::StartingLaunch(StartingLaunch&& other) noexcept = default;
StartingLaunch& StartingLaunch::operator=(StartingLaunch&& other) noexcept = default;
StartingLaunch::~StartingLaunch() = default;

bool StartingLaunch::permanent() const { return s_ && s_->permanent; }

core::Status StartingLaunch::State::Abort(const std::vector<int>& cgroup_fds,
                                          const std::string& why) {
  for (int fd : cgroup_fds) ::close(fd);
  if (j.cgroup_live) j.cgroup.KillAll();
  for (const auto& r : j.ranks) ::kill(-r.pid, SIGKILL);
  for (const auto& r : j.ranks) {
    while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  std::string cleanup;
  if (j.cgroup_live && !j.cgroup.KillAndRemove(5000)) {
    cleanup = "; cgroup " + j.cgroup.dirs[0] + " could not be removed";
  }
  j.cgroup_live = false;
  if (!j.scratch_pin.empty() && JobScratch::Remove(j.scratch_pin)) j.scratch_pin.clear();
  const size_t killed = j.ranks.size();
  j.ranks.clear();
  started = false;
  return core::Status::Error(
      "job " + launch.job_id + ": " + why +
      (killed == 0 ? std::string()
                   : "; its " + std::to_string(killed) + " rank(s) already started were killed") +
      cleanup);
}

core::Status RankSupervisor::Launch(const JobLaunch& launch) {
  core::Result<StartingLaunch> prepared = PrepareLaunch(launch);
  if (!prepared.ok()) return prepared.status();
  (void)prepared.value().Run();
  return FinishLaunch(std::move(prepared).value());
}

core::Result<StartingLaunch> RankSupervisor::PrepareLaunch(const JobLaunch& launch) {
  if (auto st = ValidateLaunch(launch); !st.ok()) return st;
  const std::string job = "job " + launch.job_id;
  auto& jobs = impl_->jobs;
  JobRec* prior = nullptr;
  if (auto it = jobs.find(launch.job_id); it != jobs.end()) {
    prior = &it->second;
    for (const auto& r : prior->ranks) {
      if (r.running) {
        return core::Status::Error(job + " still runs rank " + std::to_string(r.rank) + " (pid " +
                                   std::to_string(r.pid) +
                                   ") here: stop it and poll its exit first");
      }
    }
    if (prior->copy_in_flight) {
      return core::Status::Error(job + ": a checkpoint copy is in flight; poll until it ends");
    }
  }
  const auto& opt = impl_->opt;

  auto s = std::make_unique<StartingLaunch::State>();
  s->cgroups = &impl_->cgroups;
  s->scratch = &impl_->scratch;
  s->checkpoint_signal = opt.checkpoint_signal;
  s->launch = launch;
  s->account_rules = AccountRules(launch);
  JobRec& j = s->j;
  j.job_id = launch.job_id;
  j.restart_count = launch.restart_count;
  j.mode = launch.mode;
  j.group_rank = launch.group_rank;
  j.local_dir = launch.local_checkpoint_dir;
  if (j.local_dir.empty() && !opt.local_checkpoint_root.empty()) {
    j.local_dir = (fs::path(opt.local_checkpoint_root) / launch.job_id).string();
  }
  j.persistent_dir = launch.persistent_checkpoint_dir;
  if (j.persistent_dir.empty() && !opt.persistent_checkpoint_root.empty()) {
    j.persistent_dir = (fs::path(opt.persistent_checkpoint_root) / launch.job_id).string();
  }
  if (prior && prior->local_dir == j.local_dir) {
    j.reported_step = prior->reported_step;  // a restart does not re-report old steps
  }
  // Nor the step it restarts from: the scheduler chose it (staged here from
  // the persistent tier, or left by an earlier run), it is not news.
  if (launch.restart_step) j.reported_step = std::max(j.reported_step, *launch.restart_step);

  // The job's private directories, under roots nobody else can list.
  s->dirs.emplace_back(opt.log_dir, (fs::path(opt.log_dir) / launch.job_id).string());
  if (!j.local_dir.empty()) {
    s->dirs.emplace_back(launch.local_checkpoint_dir.empty() ? opt.local_checkpoint_root : "",
                         j.local_dir);
  }
  if (!j.persistent_dir.empty()) {
    s->dirs.emplace_back(
        launch.persistent_checkpoint_dir.empty() ? opt.persistent_checkpoint_root : "",
        j.persistent_dir);
  }
  if (prior && prior->cgroup_live) {
    // The launch removes it (Run, on its own thread) and makes the new run's
    // at the same path: from now on Poll() leaves it alone, or it would
    // remove the new cgroup, or kill the new ranks as leftovers.
    s->prior_cgroup = prior->cgroup;
    prior->cgroup_live = false;
    prior->leftovers_since.reset();
  }
  if (prior && !prior->scratch_pin.empty()) {
    // Likewise its namespace: the new run gets a fresh one.
    s->prior_pin = prior->scratch_pin;
    prior->scratch_pin.clear();
  }
  // The logs, named now: LogPath reads what this supervisor knows.
  if (launch.mode == core::LaunchMode::kNode) {
    s->log_path = NodeLogPath(launch.job_id, launch.group_rank);
  } else {
    for (const auto& spec : launch.ranks) {
      s->rank_logs[spec.rank] = LogPath(launch.job_id, spec.rank);
    }
  }
  return StartingLaunch(std::move(s));
}

core::Status StartingLaunch::Run() {
  State& s = *s_;
  if (s.ran) return core::Status::Error("job " + s.launch.job_id + ": the launch ran already");
  s.ran = true;
  const JobLaunch& launch = s.launch;
  JobRec& j = s.j;
  const std::string job = "job " + launch.job_id;

  // The earlier run's cgroup goes before anything else: its ranks have
  // exited, what is left in it are leftovers of the job.
  if (s.prior_cgroup) {
    if (!s.prior_cgroup->KillAndRemove(3000)) {
      return s.status = core::Status::Error(
                 job + ": cgroup " + s.prior_cgroup->dirs[0] +
                 " of its earlier run still holds processes after SIGKILL: retry later or "
                 "reboot the node");
    }
    s.prior_cgroup.reset();
  }
  if (!s.prior_pin.empty()) {
    if (!JobScratch::Remove(s.prior_pin)) {
      return s.status = core::Status::Error(job + ": the mount namespace of its earlier run (" +
                                            s.prior_pin + ") cannot be removed");
    }
    s.prior_pin.clear();
  }
  // Private /tmp and /dev/shm, or why not.
  const JobScratch& scratch = *s.scratch;
  if (scratch.mode() == ScratchMode::kOn && !scratch.enabled()) {
    return s.status = core::Status::Error(
               job + ": this node cannot give jobs a private /tmp and /dev/shm (" +
               scratch.problem() +
               "), and topo-agent --job-scratch on asks for them: fix the node, or run the "
               "agent with --job-scratch auto");
  }

  // The account (NSS: maybe a directory server, so here and not on the
  // caller's loop).
  core::Result<UnixAccount> resolved = JobAccount(launch.unix_user, s.account_rules, &s.permanent);
  if (!resolved.ok()) return s.status = core::Status::Error(job + ": " + resolved.message());
  s.acct = std::move(resolved).value();
  const UnixAccount& acct = s.acct;
  j.unix_user = acct.name;
  j.owner = FileOwner{acct.uid, acct.gid};

  for (const auto& [root, dir] : s.dirs) {
    if (!root.empty()) {
      if (auto st = EnsureTraversableRoot(root); !st.ok()) {
        return s.status = core::Status::Error(job + ": " + st.message());
      }
    }
    if (auto st = EnsurePrivateDir(dir, j.owner); !st.ok()) {
      return s.status = core::Status::Error(job + ": " + st.message());
    }
  }
  const std::vector<int64_t> persisted = CompleteSteps(j.persistent_dir);
  if (!persisted.empty()) j.persisted_step = persisted.back();

  // The job's cgroup, before the first rank.
  std::vector<std::string> notes;
  std::vector<int> cgroup_fds;
  const CgroupManager& cgroups = *s.cgroups;
  JobLimits limits = launch.limits;
  // What the ranks write to their tmpfs is charged to their memory cgroup:
  // they must be in one, limit or not.
  limits.account_memory = scratch.enabled();
  if (cgroups.usable()) {
    auto cg = cgroups.Create(launch.job_id, limits, JobGpus(launch), &notes);
    if (!cg.ok()) return s.status = core::Status::Error(job + ": " + cg.message());
    j.cgroup = cg.value();
    j.cgroup_live = true;
    auto fds = j.cgroup.OpenProcsFiles();
    if (!fds.ok()) {
      j.cgroup.KillAndRemove(1000);
      j.cgroup_live = false;
      return s.status = core::Status::Error(job + ": " + fds.message());
    }
    cgroup_fds = fds.value();
  } else {
    notes.push_back(cgroups.Describe().summary);
  }
  // From here on a failure takes what was started with it.
  s.started = true;
  // The namespace's pin, open for the ranks to enter (closed on return).
  struct NsFd {
    int fd = -1;
    ~NsFd() {
      if (fd >= 0) ::close(fd);
    }
  } ns;
  if (scratch.enabled()) {
    core::Result<std::string> pin = scratch.Create(launch.job_id);
    if (!pin.ok()) return s.status = s.Abort(cgroup_fds, pin.message());
    j.scratch_pin = pin.value();
    ns.fd = ::open(j.scratch_pin.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns.fd < 0) {
      return s.status =
                 s.Abort(cgroup_fds, "cannot open " + j.scratch_pin + ": " + std::strerror(errno));
    }
  } else if (scratch.mode() != ScratchMode::kOff) {
    notes.push_back(
        "/tmp and /dev/shm are the node's, shared with other jobs and kept after "
        "this one: " +
        scratch.problem());
  }

  // The environment: the account's base, the job's own, then ours.
  std::map<std::string, std::string> base = RankBaseEnvironment(acct);
  for (const auto& [k, v] : launch.env) base[k] = v;
  base["TOPO_CHECKPOINT_SIGNAL"] = std::to_string(s.checkpoint_signal);
  const std::string exe = ResolveExecutable(launch.argv[0], base["PATH"]);
  std::string cmdline;
  for (const auto& a : launch.argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  std::string note_lines;
  for (const auto& n : notes) note_lines += "=== topo-agent: " + n + " ===\n";

  SpawnRequest req;
  req.exe = exe;
  req.argv = launch.argv;
  req.account = &acct;
  req.cgroup_fds = cgroup_fds;
  req.mount_ns_fd = ns.fd;
  req.required_dir = j.local_dir;
  if (!launch.working_dir.empty()) {
    req.wd_candidates = {launch.working_dir};
    req.wd_required = true;
  } else {
    if (!acct.home.empty()) req.wd_candidates.push_back(acct.home);
    if (!j.local_dir.empty()) req.wd_candidates.push_back(j.local_dir);
    req.wd_candidates.push_back("/");
  }

  // A failed rank takes the ones already started with it: nothing of a
  // failed launch keeps running untracked.
  auto abort_launch = [&](const std::string& why) { return s.status = s.Abort(cgroup_fds, why); };

  // Where a process's output goes (%r: its rank, or the node's group rank),
  // said at the top of its log so that `topo logs` tells where to look.
  auto redirect = [&](int index, std::string* note) {
    req.output_path.clear();
    req.error_path.clear();
    if (!launch.output.empty()) {
      req.output_path = common::ExpandOutputPattern(launch.output, launch.job_id, index);
    }
    if (!launch.error.empty()) {
      req.error_path = common::ExpandOutputPattern(launch.error, launch.job_id, index);
    }
    note->clear();
    if (req.output_path.empty() && req.error_path.empty()) return;
    const std::string where =
        launch.working_dir.empty() ? "the working directory" : launch.working_dir;
    auto shown = [&](const std::string& p) {
      return p.empty() ? std::string("this log") : p[0] == '/' ? p : p + " (in " + where + ")";
    };
    *note = "=== topo-agent: standard output goes to " + shown(req.output_path) +
            ", standard error to " +
            shown(req.error_path.empty() ? req.output_path : req.error_path) + " ===\n";
  };
  std::string redirect_note;
  if (launch.mode == core::LaunchMode::kNode) {
    // One process for the node's ranks; each of them is reported with its
    // exit.
    auto env = base;
    for (auto& [k, v] : NodeEnvironment(launch, j.local_dir)) env[k] = v;
    for (const auto& [k, v] : env) req.env.push_back(k + "=" + v);
    std::string ranks;
    for (const auto& spec : launch.ranks) {
      ranks += (ranks.empty() ? "" : ",") + std::to_string(spec.rank);
    }
    redirect(launch.group_rank, &redirect_note);
    req.what = "node process (group rank " + std::to_string(launch.group_rank) + ")";
    req.log_path = s.log_path;
    req.log_header = note_lines + redirect_note + "=== topo-agent " + NowText() + " start job " +
                     launch.job_id + " node " + std::to_string(launch.group_rank) + " of " +
                     std::to_string(launch.group_world_size) + " (ranks " + ranks + ") restart " +
                     std::to_string(launch.restart_count) + " as " + acct.name + " (uid " +
                     std::to_string(acct.uid) + "): " + cmdline + " pid ";
    auto spawned = SpawnRank(req);
    if (!spawned.ok()) return abort_launch(spawned.message());
    auto st = ReadProcStat(spawned.value().pid);
    for (const auto& spec : launch.ranks) {
      RankRec rec;
      rec.rank = spec.rank;
      rec.local_rank = spec.local_rank;
      rec.pid = spawned.value().pid;
      rec.start_time = st ? st->start_time : 0;
      rec.running = true;
      j.ranks.push_back(rec);
    }
  }
  for (const auto& spec : launch.ranks) {
    if (launch.mode != core::LaunchMode::kRank) break;
    auto env = base;
    // RankEnvironment already keeps the job's own OMP_NUM_THREADS.
    for (auto& [k, v] : RankEnvironment(launch, spec, j.local_dir)) env[k] = v;
    req.env.clear();
    for (const auto& [k, v] : env) req.env.push_back(k + "=" + v);
    redirect(spec.rank, &redirect_note);
    req.what = "rank " + std::to_string(spec.rank);
    req.log_path = s.rank_logs.at(spec.rank);
    req.log_header = note_lines + redirect_note + "=== topo-agent " + NowText() + " start job " +
                     launch.job_id + " rank " + std::to_string(spec.rank) + " local_rank " +
                     std::to_string(spec.local_rank) + " restart " +
                     std::to_string(launch.restart_count) + " as " + acct.name + " (uid " +
                     std::to_string(acct.uid) + "): " + cmdline + " pid ";
    auto spawned = SpawnRank(req);
    if (!spawned.ok()) return abort_launch(spawned.message());
    RankRec rec;
    rec.rank = spec.rank;
    rec.local_rank = spec.local_rank;
    rec.pid = spawned.value().pid;
    auto st = ReadProcStat(rec.pid);
    rec.start_time = st ? st->start_time : 0;
    rec.running = true;
    j.ranks.push_back(rec);
  }
  for (int fd : cgroup_fds) ::close(fd);
  std::sort(j.ranks.begin(), j.ranks.end(),
            [](const RankRec& a, const RankRec& b) { return a.rank < b.rank; });
  return s.status = core::Status::Ok();
}

core::Status RankSupervisor::FinishLaunch(StartingLaunch launch) {
  StartingLaunch::State& s = *launch.s_;
  if (!s.status.ok()) {
    // The earlier run's cgroup, not removed: Poll() cleans it up as before.
    if (auto it = impl_->jobs.find(s.j.job_id); it != impl_->jobs.end()) {
      if (s.prior_cgroup) {
        it->second.cgroup = *s.prior_cgroup;
        it->second.cgroup_live = true;
      }
      if (!s.prior_pin.empty()) it->second.scratch_pin = s.prior_pin;  // Poll removes it
    }
    return s.status;
  }
  s.finished = true;
  auto& jobs = impl_->jobs;
  const std::string id = s.j.job_id;
  jobs[id] = std::move(s.j);
  impl_->SaveState(jobs[id]);
  return core::Status::Ok();
}

core::Status RankSupervisor::Stop(const std::string& job_id, int grace_ms) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  auto& j = it->second;
  bool any = false;
  for (auto& r : j.ranks) {
    if (!r.running) continue;
    r.stop_requested = true;
    any = true;
    // Without a cgroup, the rank's process group is all we can reach.
    if (!j.cgroup_live && impl_->SignalRank(r, SIGTERM, true)) j.kill_groups.push_back(r.pid);
  }
  if (j.cgroup_live) {
    j.cgroup.SignalAll(SIGTERM);
    any = true;
  }
  if (any) j.kill_deadline = Clock::now() + std::chrono::milliseconds(std::max(0, grace_ms));
  return core::Status::Ok();
}

core::Status RankSupervisor::RequestCheckpoint(const std::string& job_id) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  int sent = 0;
  std::set<pid_t> signalled;  // node mode: one process for every rank
  for (auto& r : it->second.ranks) {
    if (!signalled.insert(r.pid).second) continue;
    if (impl_->SignalRank(r, impl_->opt.checkpoint_signal, false)) ++sent;
  }
  if (sent == 0) return core::Status::Error("job " + job_id + " has no running rank here");
  return core::Status::Ok();
}

std::vector<SupervisorEvent> RankSupervisor::Poll() {
  std::vector<SupervisorEvent> out;
  auto& I = *impl_;
  // Drain the wake pipe, then collect finished copies.
  char buf[64];
  while (I.wake_r >= 0 && ::read(I.wake_r, buf, sizeof buf) > 0) {
  }
  std::vector<CopyResult> done;
  {
    std::lock_guard lk(I.mu);
    done.swap(I.results);
  }
  for (auto& d : done) {
    auto it = I.jobs.find(d.job_id);
    if (it != I.jobs.end()) {
      it->second.copy_in_flight = false;
      if (d.status.ok()) it->second.persisted_step = std::max(it->second.persisted_step, d.step);
      I.SaveState(it->second);
    }
    SupervisorEvent ev{d.status.ok() ? EventKind::kCheckpointPersisted : EventKind::kPersistFailed,
                       d.job_id,
                       {},
                       d.step,
                       d.status.ok() ? d.note : d.status.message()};
    out.push_back(std::move(ev));
  }
  const auto now = Clock::now();
  for (auto& [id, j] : I.jobs) {
    bool changed = false;
    // Checkpoints first: a step written just before the ranks exit is
    // reported before their exits.
    if (!j.local_dir.empty()) {
      auto steps = CompleteSteps(j.local_dir);
      if (!steps.empty() && steps.back() > j.reported_step) {
        j.reported_step = steps.back();
        out.push_back(SupervisorEvent{EventKind::kCheckpointComplete, id, {}, j.reported_step, {}});
        changed = true;
      }
      if (!steps.empty() && !j.persistent_dir.empty() && !j.copy_in_flight &&
          steps.back() > j.persisted_step) {
        j.copy_in_flight = true;
        {
          std::lock_guard lk(I.mu);
          I.tasks.push_back(CopyTask{id, j.local_dir, j.persistent_dir, steps.back(), j.owner});
        }
        I.cv.notify_one();
      }
    }
    for (auto& r : j.ranks) {
      if (!r.running) continue;
      SupervisorEvent ev{EventKind::kRankExited, id, {}, -1, {}};
      ev.exit.job_id = id;
      ev.exit.whole_node = j.mode == core::LaunchMode::kNode;
      if (I.Reap(r, ev.exit)) {
        r.running = false;
        changed = true;
        out.push_back(ev);
        // Node mode: the node's process was every rank here; each is
        // reported with its status (reaped once).
        for (auto& other : j.ranks) {
          if (!other.running || other.pid != r.pid) continue;
          other.running = false;
          ev.exit.rank = other.rank;
          ev.exit.local_rank = other.local_rank;
          ev.exit.stopped = other.stop_requested;
          out.push_back(ev);
        }
      }
    }
    if (j.kill_deadline && now >= *j.kill_deadline) {
      I.KillJob(j);
      j.kill_groups.clear();
      j.kill_deadline.reset();
    }
    const bool any_running =
        std::any_of(j.ranks.begin(), j.ranks.end(), [](const RankRec& r) { return r.running; });
    if (!any_running && (!j.finished_reported || j.cgroup_live || !j.scratch_pin.empty())) {
      const bool was_live = j.cgroup_live;
      std::string message;
      const bool clean = I.CleanUpAfterRanks(j, now, &message);
      if (was_live != j.cgroup_live) changed = true;
      // Nothing of the job runs here: its namespace goes, and with it the
      // pages of its /tmp and /dev/shm.
      if (clean && !j.scratch_pin.empty() && JobScratch::Remove(j.scratch_pin)) {
        j.scratch_pin.clear();
        changed = true;
      }
      // The run ends here once its last checkpoint is on the persistent
      // tier too (a step completed just before the ranks exited).
      if (clean && !j.finished_reported && !j.copy_in_flight) {
        j.finished_reported = true;
        changed = true;
        out.push_back(SupervisorEvent{EventKind::kJobFinished, id, {}, -1, message});
      }
    }
    if (changed) I.SaveState(j);
  }
  return out;
}

std::vector<RankInfo> RankSupervisor::List(bool running_only) const {
  std::vector<RankInfo> out;
  for (const auto& [id, j] : impl_->jobs) {
    for (const auto& r : j.ranks) {
      if (running_only && !r.running) continue;
      out.push_back(RankInfo{id, r.rank, r.local_rank, r.pid, r.start_time, r.running, r.adopted});
    }
  }
  return out;
}

std::optional<RestartPoint> RankSupervisor::NewestRestartStep(const std::string& job_id,
                                                              bool node_survived) const {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return std::nullopt;
  return agent::NewestRestartStep(it->second.local_dir, it->second.persistent_dir, node_survived);
}

std::optional<int64_t> RankSupervisor::NewestCompleteStep(const std::string& job_id) const {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end() || it->second.reported_step < 0) return std::nullopt;
  return it->second.reported_step;
}

std::optional<int64_t> RankSupervisor::NewestPersistedStep(const std::string& job_id) const {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end() || it->second.persisted_step < 0) return std::nullopt;
  return it->second.persisted_step;
}

core::Result<bool> RankSupervisor::RemoveLocalCheckpoints(const std::string& job_id) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  JobRec& j = it->second;
  const auto& opt = impl_->opt;
  const bool running =
      std::any_of(j.ranks.begin(), j.ranks.end(), [](const RankRec& r) { return r.running; });
  if (running || j.copy_in_flight || j.local_removed || j.local_dir.empty() ||
      j.persistent_dir.empty() || opt.local_checkpoint_root.empty() ||
      j.local_dir != (fs::path(opt.local_checkpoint_root) / job_id).string()) {
    return false;  // running, no persistent tier, or a directory the launch named
  }
  const std::vector<int64_t> local = CompleteSteps(j.local_dir);
  if (!local.empty() && local.back() > j.persisted_step) return false;  // the only copy
  if (core::Status st = RemoveCheckpointDir(j.local_dir, j.owner); !st.ok()) {
    return core::Status::Error("job " + job_id +
                               ": its node-local checkpoints stay: " + st.message());
  }
  j.local_removed = true;
  impl_->SaveState(j);
  return !local.empty();
}

core::Status RankSupervisor::Forget(const std::string& job_id) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  for (const auto& r : it->second.ranks) {
    if (r.running) {
      return core::Status::Error("job " + job_id + " still runs rank " + std::to_string(r.rank));
    }
  }
  if (it->second.copy_in_flight) {
    return core::Status::Error("job " + job_id + ": a checkpoint copy is in flight");
  }
  if (it->second.cgroup_live) it->second.cgroup.KillAndRemove(1000);
  JobScratch::Remove(it->second.scratch_pin);
  std::error_code ec;
  fs::remove(impl_->StatePath(job_id), ec);
  impl_->jobs.erase(it);
  return core::Status::Ok();
}

}  // namespace topo::agent
