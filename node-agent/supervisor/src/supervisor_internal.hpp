#pragma once
// RankSupervisor's private state, shared by supervisor.cpp (launch, stop,
// poll), state.cpp (the state files and adoption) and rank_env.cpp (launch
// validation and the environment). Not a public header.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "topo/agent/cgroup.hpp"
#include "topo/agent/job_scratch.hpp"
#include "topo/agent/supervisor.hpp"

namespace topo::agent {

using SupervisorClock = std::chrono::steady_clock;

// ---- rank_env.cpp
bool ValidJobId(const std::string& id);
// Everything Launch() checks before touching the system.
core::Status ValidateLaunch(const JobLaunch& l);
// name as execve will find it on path_env (a name with '/' unchanged).
std::string ResolveExecutable(const std::string& name, const std::string& path_env);
// The GPUs of the launch's ranks in local-rank order.
std::vector<int> JobGpus(const JobLaunch& l);

// ---- state.cpp
// Field 3 (state letter) and 22 (start time, clock ticks since boot) of
// /proc/PID/stat; nullopt when the process does not exist.
struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid);
// Alive, not a zombie, and the same process that was started (pid reuse).
bool SameProcessAlive(pid_t pid, uint64_t start_time);

struct RankRec {
  int rank = 0, local_rank = 0;
  pid_t pid = 0;
  uint64_t start_time = 0;
  bool running = false;
  bool adopted = false;
  // Adopted, but no longer a member of the job's cgroup (or the cgroup is
  // gone): reported exited, status unknown, and never signalled.
  bool lost = false;
  bool stop_requested = false;
};

struct JobRec {
  std::string job_id;
  std::string local_dir, persistent_dir;
  std::string unix_user;
  FileOwner owner;  // the account's uid/gid: owner of the persistent copies
  int restart_count = 0;
  // Node mode: one process for every rank here (the RankRecs share its pid),
  // logged to NodeLogPath(job, group_rank).
  core::LaunchMode mode = core::LaunchMode::kRank;
  int group_rank = 0;
  std::vector<RankRec> ranks;
  int64_t reported_step = -1;
  int64_t persisted_step = -1;
  bool copy_in_flight = false;
  bool finished_reported = false;
  // The job's cgroup (invalid: tracked by process groups only). cgroup_live:
  // not yet removed.
  JobCgroup cgroup;
  bool cgroup_live = false;
  // The pin of the job's mount namespace (private /tmp and /dev/shm) while
  // it lives; removed once nothing of the job runs here.
  std::string scratch_pin;
  // The node-local checkpoint dir was removed after the job's run here
  // ended (SupervisorOptions::keep_checkpoints' rule).
  bool local_removed = false;
  // Every rank has exited and the cgroup still had processes at this time.
  std::optional<SupervisorClock::time_point> leftovers_since;
  std::optional<SupervisorClock::time_point> kill_deadline;
  std::vector<pid_t> kill_groups;
};

struct CopyTask {
  std::string job_id, src, dst;
  int64_t step;
  FileOwner owner;
};
struct CopyResult {
  std::string job_id;
  int64_t step;
  core::Status status;
  std::string note;  // pruning older steps failed: why
};

struct RankSupervisor::Impl {
  SupervisorOptions opt;
  CgroupManager cgroups;
  JobScratch scratch;
  std::map<std::string, JobRec> jobs;
  int wake_r = -1, wake_w = -1;

  std::mutex mu;  // guards tasks, results, stopping
  std::condition_variable cv;
  std::deque<CopyTask> tasks;
  std::vector<CopyResult> results;
  bool stopping = false;
  std::thread worker;

  void WorkerLoop();
  std::string StatePath(const std::string& job) const;
  void SaveState(const JobRec& j) const;
  // Reads every state file; checks each rank against its job's cgroup.
  void LoadStates();
  // sig to rank r's process (group) if it is still the process started.
  bool SignalRank(const RankRec& r, int sig, bool group);
  // Non-blocking check of one running rank; fills ex when it has ended.
  bool Reap(RankRec& r, RankExit& ex);
  // Every process of the job: SIGKILL (cgroup, else the ranks' groups).
  void KillJob(JobRec& j);
  // Once every rank has exited: ends and removes what is left of the
  // cgroup. True when nothing of the job runs any more (or the wait for
  // stuck processes has run out).
  bool CleanUpAfterRanks(JobRec& j, SupervisorClock::time_point now, std::string* message);
};

}  // namespace topo::agent
