#pragma once
// SupervisorRunner: the real node's RankRunner (rank_runner.hpp), over
// RankSupervisor (topo/agent/supervisor.hpp).
//
// What it adds to the supervisor:
//   - classification of launch failures for `launch_failed`: the job's Unix
//     account missing on this node, an account with uid 0 while the site
//     does not allow root jobs, or one below the node's uid floor
//     (--min-job-uid), are permanent (JobAccount, account.hpp:
//     retrying elsewhere cannot help, accounts come from the site's shared
//     passwd database, and docs/jobs.md says so); the account is looked up
//     off the event loop (by the starting or the staging thread: NSS may
//     wait for a directory server); every other failure (directories, cgroup, fork,
//     an exec prerequisite, a checkpoint that cannot be staged) is transient;
//     a checkpoint copy of the earlier run still in flight is "busy";
//   - staging the restart checkpoint: a step that is not on this node's
//     local tier is looked for on the persistent tier and copied from there,
//     *as the job's account* (so nothing the job planted makes root write
//     elsewhere), before the launch, on a thread of its own (the persistent
//     tier is often a network file system): Launch answers kBusy (staging)
//     until that is done, then launches (without TOPO_RESTART_STEP when the
//     step was on neither tier); a failed copy fails the launch once (the
//     next start tries again);
//   - the start of the ranks off the event loop: Launch prepares the launch
//     (checks: RankSupervisor::PrepareLaunch) and runs its slow part
//     (account, directories, cgroup, forks: StartingLaunch::Run) on a thread of
//     its own, answering kBusy (starting); Poll() hands the ranks to the
//     supervisor once that thread is done (the thread wakes the supervisor's
//     wake fd), and the next Launch of the run gives the outcome. A Stop()
//     meanwhile stops the ranks as soon as they are handed over;
//   - the node's pids limit (options.pids_max) over the start's own;
//   - the master port check (port_check.hpp);
//   - rank logs read for `topo logs` without following anything the job
//     planted: the log must be a regular file with one link, opened with
//     O_NOFOLLOW (the job owns LOG_DIR/JOB and could replace its log with a
//     link to the agent's key);
//   - the restart count of adopted jobs (from the supervisor's state file).
//
// Thread safety: none (the agent's event loop). A staging thread touches
// only its own record (mutex) and the job's checkpoint directories; it is
// detached, so an agent that exits mid-copy leaves a temporary directory
// the next copy removes. A starting thread touches only its record (mutex)
// and its StartingLaunch; it is joined (WaitForLaunches, the destructor),
// so its ranks are always handed to the supervisor, whose state file lets
// the next agent adopt them.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rank_runner.hpp"
#include "topo/agent/supervisor.hpp"

namespace topo::agent {

struct SupervisorRunnerOptions {
  // Each job's cgroup may open only its own GPUs' device nodes, where the
  // node can enforce it (cgroup.hpp says where).
  bool restrict_gpu_devices = true;
  // The supervisor's default tiers: ROOT/JOB.
  std::string local_checkpoint_root;
  std::string persistent_checkpoint_root;  // "" = no persistent tier
  // pids.max of every job's cgroup: the start's pids_max when lower, else
  // this (0: only the start's, or none). topo-agent --job-pids-max.
  int64_t pids_max = 0;
  // A finished copy's outcome waits this long for the launch that asked for
  // it (which comes back within a tick), then Poll() drops it: the job was
  // stopped or moved meanwhile. Nothing is lost: a copied step is on the
  // local tier, and a later start looks again.
  int staging_keep_ms = 60000;
};

class SupervisorRunner final : public RankRunner {
 public:
  SupervisorRunner(RankSupervisor& supervisor, SupervisorRunnerOptions options);
  // Waits for launches still starting (WaitForLaunches).
  ~SupervisorRunner() override;
  SupervisorRunner(const SupervisorRunner&) = delete;
  SupervisorRunner& operator=(const SupervisorRunner&) = delete;

  // Waits until every launch still starting is done and hands its ranks to
  // the supervisor (an agent about to exit: its ranks are then the
  // supervisor's to stop or to leave for the next agent).
  void WaitForLaunches();

  std::vector<RankInfo> Running() const override;
  std::optional<int> RestartCountOf(const std::string& job) const override;
  core::Status CheckMasterPort(int port) override;
  LaunchOutcome Launch(const JobLaunch& launch, int64_t checkpoint_step) override;
  std::optional<std::string> Underway(const std::string& job) const override;
  core::Status Stop(const std::string& job, int grace_ms) override;
  core::Status RequestCheckpoint(const std::string& job) override;
  std::vector<SupervisorEvent> Poll() override;
  std::optional<int64_t> NewestCompleteStep(const std::string& job) const override;
  std::optional<int64_t> NewestPersistedStep(const std::string& job) const override;
  bool HasPersistentTier() const override;
  proto::LogsReply ReadLog(const proto::LogsRequest& request) override;

 private:
  RankSupervisor& sup_;
  SupervisorRunnerOptions options_;
  // Restart counts of runs launched here (adopted ones are read once).
  mutable std::map<std::string, int> restart_counts_;
  // A copy of a restart's checkpoint onto this node, by job: one at a time.
  struct StagingCopy {
    int64_t step = -1;
    std::mutex mu;
    bool done = false;       // guarded by mu
    bool absent = false;     // guarded by mu: the step was not on the persistent tier
    bool permanent = false;  // guarded by mu: the account cannot run the job (JobAccount)
    std::optional<std::chrono::steady_clock::time_point> seen_done;  // by Poll()
    core::Status status;                                             // guarded by mu; set when done
  };
  std::map<std::string, std::shared_ptr<StagingCopy>> staging_;
  // A launch whose ranks are being started on a thread, by job: one at a time.
  struct StartingRun {
    int restart_count = 0;
    std::vector<LocalRankSpec> ranks;
    LaunchOutcome outcome;  // kStarted's fields, set at Launch
    std::thread thread;
    std::mutex mu;
    bool ran = false;                      // guarded by mu: the thread is done
    std::optional<StartingLaunch> launch;  // the thread's until ran
    bool finished = false;                 // handed to the supervisor (or failed)
    core::Status status;                   // FinishLaunch's answer, once finished
    bool permanent = false;                // a failure no retry helps (StartingLaunch)
    std::optional<int> stop_grace_ms;      // Stop() asked meanwhile
  };
  std::map<std::string, std::unique_ptr<StartingRun>> starting_;
  // Hands every launch whose thread is done to the supervisor (and stops
  // those asked to stop meanwhile); `wait`: joins those still running first.
  void FinishStarted(bool wait);
  static std::string StartingText(const StartingRun& run);
};

// A piece of the file at `path` as a `logs` reply (req unset): regular
// files with a single link only, never through a symbolic link in the last
// component. Exposed for tests.
proto::LogsReply ReadLogPiece(const std::string& path, int64_t offset, int64_t max);

}  // namespace topo::agent
