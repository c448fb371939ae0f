// RankSupervisor: fork/exec of ranks in their own process groups, exits,
// stops, checkpoint signals and the persistent-tier copy worker.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "topo/agent/supervisor.hpp"

extern char** environ;

namespace topo::agent {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Field 22 of /proc/PID/stat (start time, clock ticks since boot) and the
// state letter; nullopt when the process does not exist.
struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream ss(line.substr(close + 1));
  ProcStat st;
  ss >> st.state;
  std::string field;
  // Fields 4..21, then 22 = starttime.
  for (int i = 4; i <= 21; ++i) ss >> field;
  ss >> st.start_time;
  if (!ss) return std::nullopt;
  return st;
}

// Alive, not a zombie, and the same process that was started (pid reuse).
bool SameProcessAlive(pid_t pid, uint64_t start_time) {
  auto st = ReadProcStat(pid);
  return st && st->state != 'Z' && st->state != 'X' && st->start_time == start_time;
}

std::string ResolveExecutable(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return name;
  std::istringstream ss(path_env);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  return name;  // execve fails with ENOENT; the log says so
}

std::string NowText() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// async-signal-safe helpers for the child between fork and exec.
size_t FormatInt(char* out, long v) {
  char tmp[24];
  size_t n = 0;
  bool neg = v < 0;
  unsigned long u = neg ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  size_t k = 0;
  if (neg) out[k++] = '-';
  while (n > 0) out[k++] = tmp[--n];
  return k;
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

int RankIndexInGroup(const core::RankLayout& layout, core::GroupKind k, int rank) {
  auto members = layout.GroupMembers(k, layout.GroupOf(k, rank));
  auto it = std::lower_bound(members.begin(), members.end(), rank);
  return static_cast<int>(it - members.begin());
}

std::map<std::string, std::string> EnvFor(const JobLaunch& launch, const core::RankLayout& layout,
                                          const LocalRankSpec& r, const std::string& ckpt_dir) {
  std::map<std::string, std::string> env;
  const auto& p = launch.parallelism;
  env["MASTER_ADDR"] = launch.master_addr;
  env["MASTER_PORT"] = std::to_string(launch.master_port);
  env["RANK"] = std::to_string(r.rank);
  env["WORLD_SIZE"] = std::to_string(layout.world_size());
  env["LOCAL_RANK"] = std::to_string(r.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(launch.ranks.size());
  env["GROUP_RANK"] = std::to_string(launch.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(launch.group_world_size);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(launch.restart_count);
  if (!r.gpus.empty()) {
    std::string v;
    for (size_t i = 0; i < r.gpus.size(); ++i) v += (i ? "," : "") + std::to_string(r.gpus[i]);
    env["CUDA_VISIBLE_DEVICES"] = v;
  }
  env["TOPO_JOB_ID"] = launch.job_id;
  using core::Dim;
  using core::GroupKind;
  env["TOPO_TP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kTp));
  env["TOPO_CP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kCp));
  env["TOPO_PP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kPp));
  env["TOPO_EP_RANK"] = std::to_string(layout.Coord(r.rank, Dim::kEp));
  env["TOPO_DP_RANK"] = std::to_string(RankIndexInGroup(layout, GroupKind::kDp, r.rank));
  env["TOPO_TP_SIZE"] = std::to_string(p.tp);
  env["TOPO_CP_SIZE"] = std::to_string(p.cp);
  env["TOPO_PP_SIZE"] = std::to_string(p.pp);
  env["TOPO_EP_SIZE"] = std::to_string(p.ep);
  env["TOPO_DP_SIZE"] = std::to_string(p.dp);
  for (auto k : core::kAllGroupKinds) {
    std::string name(core::GroupKindName(k));
    std::transform(name.begin(), name.end(), name.begin(), ::toupper);
    env["TOPO_" + name + "_GROUP"] = std::to_string(layout.GroupOf(k, r.rank));
  }
  env["TOPO_RESTART_COUNT"] = std::to_string(launch.restart_count);
  env["TOPO_CHECKPOINT_DIR"] = ckpt_dir;
  if (launch.restart_step) env["TOPO_RESTART_STEP"] = std::to_string(*launch.restart_step);
  return env;
}

core::Status ValidateLaunch(const JobLaunch& l) {
  if (!ValidJobId(l.job_id)) {
    return core::Status::Error(
        "job id '" + l.job_id +
        "' is not valid: use 1-128 of [A-Za-z0-9._-], not starting with '.'");
  }
  if (l.argv.empty() || l.argv[0].empty()) {
    return core::Status::Error("job " + l.job_id + ": argv is empty: give the rank's command");
  }
  if (l.ranks.empty()) return core::Status::Error("job " + l.job_id + ": no local ranks to start");
  const auto& p = l.parallelism;
  core::JobSpec spec;
  spec.gpus = p.tp * p.cp * p.pp * p.dp;
  spec.parallelism = p;
  if (auto st = core::ValidateJobSpec(spec); !st.ok()) {
    return core::Status::Error("job " + l.job_id + ": " + st.message());
  }
  std::set<int> ranks, locals;
  for (const auto& r : l.ranks) {
    if (r.rank < 0 || r.rank >= spec.gpus) {
      return core::Status::Error("job " + l.job_id + ": rank " + std::to_string(r.rank) +
                                 " is outside the world of " + std::to_string(spec.gpus));
    }
    if (!ranks.insert(r.rank).second || !locals.insert(r.local_rank).second) {
      return core::Status::Error("job " + l.job_id + ": rank " + std::to_string(r.rank) +
                                 " or local rank " + std::to_string(r.local_rank) +
                                 " appears twice");
    }
  }
  if (l.master_port <= 0 || l.master_port > 65535) {
    return core::Status::Error("job " + l.job_id + ": master_port must be in 1-65535");
  }
  return core::Status::Ok();
}

}  // namespace

std::map<std::string, std::string> RankEnvironment(const JobLaunch& launch,
                                                   const LocalRankSpec& rank,
                                                   const std::string& local_checkpoint_dir) {
  core::RankLayout layout(launch.parallelism);
  return EnvFor(launch, layout, rank, local_checkpoint_dir);
}

struct RankRec {
  int rank = 0, local_rank = 0;
  pid_t pid = 0;
  uint64_t start_time = 0;
  bool running = false;
  bool adopted = false;
  bool stop_requested = false;
};

struct JobRec {
  std::string job_id;
  std::string local_dir, persistent_dir;
  int restart_count = 0;
  std::vector<RankRec> ranks;
  int64_t reported_step = -1;
  int64_t persisted_step = -1;
  bool copy_in_flight = false;
  bool finished_reported = false;
  std::optional<Clock::time_point> kill_deadline;
  std::vector<pid_t> kill_groups;
};

struct CopyTask {
  std::string job_id, src, dst;
  int64_t step;
};
struct CopyResult {
  std::string job_id;
  int64_t step;
  core::Status status;
};

struct RankSupervisor::Impl {
  SupervisorOptions opt;
  std::map<std::string, JobRec> jobs;
  int wake_r = -1, wake_w = -1;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<CopyTask> tasks;
  std::vector<CopyResult> results;
  bool stopping = false;
  std::thread worker;

  void WorkerLoop() {
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
      try {
        st = CopyCompleteStep(t.src, t.dst, t.step);
      } catch (const std::exception& e) {
        st = core::Status::Error(std::string("copy failed: ") + e.what());
      }
      {
        std::lock_guard lk(mu);
        results.push_back(CopyResult{t.job_id, t.step, st});
      }
      char b = 1;
      [[maybe_unused]] auto n = ::write(wake_w, &b, 1);
    }
  }

  std::string StatePath(const std::string& job) const {
    return (fs::path(opt.state_dir) / "jobs" / (job + ".json")).string();
  }

  void SaveState(const JobRec& j) const {
    nlohmann::json doc;
    doc["job_id"] = j.job_id;
    doc["local_checkpoint_dir"] = j.local_dir;
    doc["persistent_checkpoint_dir"] = j.persistent_dir;
    doc["restart_count"] = j.restart_count;
    doc["reported_step"] = j.reported_step;
    doc["persisted_step"] = j.persisted_step;
    doc["finished_reported"] = j.finished_reported;
    doc["ranks"] = nlohmann::json::array();
    for (const auto& r : j.ranks) {
      doc["ranks"].push_back({{"rank", r.rank},
                              {"local_rank", r.local_rank},
                              {"pid", r.pid},
                              {"start_time", r.start_time},
                              {"running", r.running}});
    }
    std::error_code ec;
    fs::create_directories(fs::path(opt.state_dir) / "jobs", ec);
    const std::string path = StatePath(j.job_id);
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << doc.dump(1) << "\n";
      if (!out) return;
    }
    fs::rename(tmp, path, ec);
  }

  void LoadStates() {
    std::error_code ec;
    const fs::path dir = fs::path(opt.state_dir) / "jobs";
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      if (it->path().extension() != ".json") continue;
      try {
        std::ifstream in(it->path());
        auto doc = nlohmann::json::parse(in);
        JobRec j;
        j.job_id = doc.at("job_id").get<std::string>();
        if (!ValidJobId(j.job_id) || it->path().stem().string() != j.job_id) continue;
        j.local_dir = doc.value("local_checkpoint_dir", "");
        j.persistent_dir = doc.value("persistent_checkpoint_dir", "");
        j.restart_count = doc.value("restart_count", 0);
        j.reported_step = doc.value("reported_step", int64_t{-1});
        j.persisted_step = doc.value("persisted_step", int64_t{-1});
        j.finished_reported = doc.value("finished_reported", false);
        auto persisted = CompleteSteps(j.persistent_dir);
        if (!persisted.empty()) j.persisted_step = std::max(j.persisted_step, persisted.back());
        for (const auto& r : doc.at("ranks")) {
          RankRec rr;
          rr.rank = r.at("rank").get<int>();
          rr.local_rank = r.at("local_rank").get<int>();
          rr.pid = r.at("pid").get<pid_t>();
          rr.start_time = r.at("start_time").get<uint64_t>();
          // Still "running" here; the first Poll() checks /proc and reports
          // the ones that ended while no agent watched.
          rr.running = r.at("running").get<bool>();
          rr.adopted = true;
          j.ranks.push_back(rr);
        }
        jobs[j.job_id] = std::move(j);
      } catch (const std::exception&) {
        continue;  // a corrupt state file adopts nothing
      }
    }
  }

  // Sends sig to rank r's process (group) if it is still the process started.
  bool SignalRank(const RankRec& r, int sig, bool group) {
    if (!r.running) return false;
    if (r.adopted && !SameProcessAlive(r.pid, r.start_time)) {
      // A zombie child of ours still has the same start time; a recycled pid not.
      auto st = ReadProcStat(r.pid);
      if (!st || st->start_time != r.start_time) return false;
    }
    if (group && ::kill(-r.pid, sig) == 0) return true;
    return ::kill(r.pid, sig) == 0;
  }

  // Non-blocking check of one running rank; fills ex when it has ended.
  bool Reap(RankRec& r, RankExit& ex) {
    int status = 0;
    pid_t w = ::waitpid(r.pid, &status, WNOHANG);
    if (w == 0) return false;
    ex.rank = r.rank;
    ex.local_rank = r.local_rank;
    ex.pid = r.pid;
    ex.stopped = r.stop_requested;
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
};

RankSupervisor::RankSupervisor(SupervisorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
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

std::string RankSupervisor::LogPath(const std::string& job_id, int rank) const {
  return (fs::path(impl_->opt.log_dir) / job_id / ("rank-" + std::to_string(rank) + ".log"))
      .string();
}

std::string RankSupervisor::StatePath(const std::string& job_id) const {
  return impl_->StatePath(job_id);
}

core::Status RankSupervisor::Launch(const JobLaunch& launch) {
  if (auto st = ValidateLaunch(launch); !st.ok()) return st;
  auto& jobs = impl_->jobs;
  if (auto it = jobs.find(launch.job_id); it != jobs.end()) {
    for (const auto& r : it->second.ranks) {
      if (r.running) {
        return core::Status::Error("job " + launch.job_id + " still runs rank " +
                                   std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
                                   ") here: stop it and poll its exit first");
      }
    }
    if (it->second.copy_in_flight) {
      return core::Status::Error("job " + launch.job_id +
                                 ": a checkpoint copy is in flight; poll until it ends");
    }
  }
  const auto& opt = impl_->opt;
  JobRec j;
  j.job_id = launch.job_id;
  j.restart_count = launch.restart_count;
  j.local_dir = launch.local_checkpoint_dir;
  if (j.local_dir.empty() && !opt.local_checkpoint_root.empty()) {
    j.local_dir = (fs::path(opt.local_checkpoint_root) / launch.job_id).string();
  }
  j.persistent_dir = launch.persistent_checkpoint_dir;
  if (j.persistent_dir.empty() && !opt.persistent_checkpoint_root.empty()) {
    j.persistent_dir = (fs::path(opt.persistent_checkpoint_root) / launch.job_id).string();
  }
  if (auto it = jobs.find(launch.job_id); it != jobs.end() && it->second.local_dir == j.local_dir) {
    j.reported_step = it->second.reported_step;  // a restart does not re-report old steps
  }
  auto persisted = CompleteSteps(j.persistent_dir);
  if (!persisted.empty()) j.persisted_step = persisted.back();

  std::error_code ec;
  const fs::path log_dir = fs::path(opt.log_dir) / launch.job_id;
  fs::create_directories(log_dir, ec);
  if (ec)
    return core::Status::Error("cannot create log dir " + log_dir.string() + ": " + ec.message());
  if (!j.local_dir.empty()) {
    fs::create_directories(j.local_dir, ec);
    if (ec)
      return core::Status::Error("cannot create checkpoint dir " + j.local_dir + ": " +
                                 ec.message());
  }

  // Base environment: the agent's, then the job's.
  std::map<std::string, std::string> base;
  if (opt.inherit_environment) {
    for (char** e = environ; e && *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos) base[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& [k, v] : launch.env) base[k] = v;
  base["TOPO_CHECKPOINT_SIGNAL"] = std::to_string(opt.checkpoint_signal);
  const std::string exe =
      ResolveExecutable(launch.argv[0], base.count("PATH") ? base["PATH"] : "/usr/bin:/bin");
  std::string cmdline;
  for (const auto& a : launch.argv) cmdline += (cmdline.empty() ? "" : " ") + a;

  core::RankLayout layout(launch.parallelism);
  std::vector<char*> argv;
  for (const auto& a : launch.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  for (const auto& spec : launch.ranks) {
    auto env = base;
    for (auto& [k, v] : EnvFor(launch, layout, spec, j.local_dir)) env[k] = v;
    std::vector<std::string> envs;
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);

    RankRec rec;
    rec.rank = spec.rank;
    rec.local_rank = spec.local_rank;
    const std::string log_path = LogPath(launch.job_id, spec.rank);
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return core::Status::Error("cannot open log " + log_path + ": " + std::strerror(errno));
    }
    std::string prefix = "=== topo-agent " + NowText() + " start job " + launch.job_id + " rank " +
                         std::to_string(spec.rank) + " local_rank " +
                         std::to_string(spec.local_rank) + " restart " +
                         std::to_string(launch.restart_count) + ": " + cmdline + " pid ";
    std::vector<char> header(prefix.begin(), prefix.end());
    header.resize(prefix.size() + 32);
    static const char kExecFail[] = "=== topo-agent: exec failed, errno ";
    const char* wd = launch.working_dir.empty() ? nullptr : launch.working_dir.c_str();

    // Signals stay blocked across fork until the child has reset every
    // handler to the default: a Stop() right after Launch() must not run the
    // agent's own handlers in the not-yet-exec'd child.
    sigset_t all, old_mask;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
    pid_t pid = ::fork();
    if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    if (pid < 0) {
      ::close(log_fd);
      return core::Status::Error("fork failed for job " + launch.job_id + " rank " +
                                 std::to_string(spec.rank) + ": " + std::strerror(errno));
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      ::setpgid(0, 0);
      struct sigaction dfl;
      std::memset(&dfl, 0, sizeof dfl);
      dfl.sa_handler = SIG_DFL;
      for (int s = 1; s < NSIG; ++s) {
        if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
      }
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::close_range(3, ~0U, 0);
      size_t n = prefix.size();
      n += FormatInt(header.data() + n, static_cast<long>(::getpid()));
      const char tail[] = " ===\n";
      for (size_t i = 0; i + 1 < sizeof tail; ++i) header[n++] = tail[i];
      WriteAll(1, header.data(), n);
      if (wd && ::chdir(wd) != 0) {
        WriteAll(1, kExecFail, sizeof kExecFail - 1);
        char num[24];
        size_t k = FormatInt(num, errno);
        num[k++] = '\n';
        WriteAll(1, num, k);
        ::_exit(127);
      }
      ::execve(exe.c_str(), argv.data(), envp.data());
      int err = errno;
      WriteAll(1, kExecFail, sizeof kExecFail - 1);
      char num[24];
      size_t k = FormatInt(num, err);
      num[k++] = '\n';
      WriteAll(1, num, k);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // both sides set it: no race with an early kill(-pid)
    ::close(log_fd);
    rec.pid = pid;
    auto st = ReadProcStat(pid);
    rec.start_time = st ? st->start_time : 0;
    rec.running = true;
    j.ranks.push_back(rec);
  }
  std::sort(j.ranks.begin(), j.ranks.end(),
            [](const RankRec& a, const RankRec& b) { return a.rank < b.rank; });
  jobs[launch.job_id] = std::move(j);
  impl_->SaveState(jobs[launch.job_id]);
  return core::Status::Ok();
}

core::Status RankSupervisor::Stop(const std::string& job_id, int grace_ms) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  auto& j = it->second;
  for (auto& r : j.ranks) {
    if (!r.running) continue;
    r.stop_requested = true;
    if (impl_->SignalRank(r, SIGTERM, true)) j.kill_groups.push_back(r.pid);
  }
  if (!j.kill_groups.empty()) {
    j.kill_deadline = Clock::now() + std::chrono::milliseconds(std::max(0, grace_ms));
  }
  return core::Status::Ok();
}

core::Status RankSupervisor::RequestCheckpoint(const std::string& job_id) {
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) return core::Status::Error("no job " + job_id + " on this node");
  int sent = 0;
  for (auto& r : it->second.ranks) {
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
                       d.status.message()};
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
          I.tasks.push_back(CopyTask{id, j.local_dir, j.persistent_dir, steps.back()});
        }
        I.cv.notify_one();
      }
    }
    for (auto& r : j.ranks) {
      if (!r.running) continue;
      SupervisorEvent ev{EventKind::kRankExited, id, {}, -1, {}};
      ev.exit.job_id = id;
      if (I.Reap(r, ev.exit)) {
        r.running = false;
        changed = true;
        out.push_back(std::move(ev));
      }
    }
    if (j.kill_deadline && now >= *j.kill_deadline) {
      for (pid_t g : j.kill_groups) ::kill(-g, SIGKILL);
      j.kill_groups.clear();
      j.kill_deadline.reset();
    }
    bool any_running =
        std::any_of(j.ranks.begin(), j.ranks.end(), [](const RankRec& r) { return r.running; });
    if (!any_running && !j.finished_reported) {
      j.finished_reported = true;
      changed = true;
      out.push_back(SupervisorEvent{EventKind::kJobFinished, id, {}, -1, {}});
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
  std::error_code ec;
  fs::remove(impl_->StatePath(job_id), ec);
  impl_->jobs.erase(it);
  return core::Status::Ok();
}

}  // namespace topo::agent
