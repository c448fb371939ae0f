#pragma once
// topo-agent's rank supervisor and checkpoint coordination (issue 5).
//
// RankSupervisor starts the local ranks of jobs (fork/exec, one process group
// per rank, the torchrun-compatible environment plus TOPO_*), logs each rank to
// LOG_DIR/JOB/rank-N.log, reports exits, stops jobs (SIGTERM to each rank's
// process group, SIGKILL after a grace), asks for checkpoints (a signal to each
// rank), watches the node-local checkpoint directory for complete steps and
// copies each one to the persistent tier on a worker thread.
// The checkpoint protocol is node-agent/supervisor/CHECKPOINTS.md.
//
// Contract with the agent's event loop (poll API, no callbacks):
//   - Every method returns without blocking on a rank. Only the persistent
//     copy runs on the supervisor's own worker thread.
//   - Poll() reaps exited ranks (waitpid(pid, WNOHANG) on each rank's own pid,
//     never waitpid(-1): the agent must not reap with waitpid(-1) either),
//     escalates stops whose grace has ended to SIGKILL, scans the checkpoint
//     directories and collects finished copies. It returns each event exactly
//     once, in the order observed. Call it on a timer (100-250 ms is plenty),
//     and also whenever SIGCHLD arrives or wake_fd() becomes readable (the
//     worker thread writes to it when a copy ends).
//   - One thread: the methods are not thread-safe with each other; call them
//     from the event loop's thread.
//
// Adoption: every launch, exit and checkpoint report rewrites
// STATE_DIR/jobs/JOB.json (write to a temp name, then rename). A new
// RankSupervisor over the same state dir reads those files and adopts the
// ranks still alive, recognised by pid *and* the process start time from
// /proc/PID/stat (so a recycled pid is not mistaken for a rank). Limits:
//   - An adopted rank that is not our child (the old agent process died and
//     the rank was reparented) cannot be waited for: its exit is seen by
//     polling /proc, and reported with exit_status_known == false.
//   - A rank that exited while no agent ran is reported as exited, status
//     unknown, by the first Poll() after adoption.
//   - Linux only (/proc); start times are in clock ticks since boot, so state
//     files do not survive a reboot (ranks do not either).
//   - Stop/RequestCheckpoint on adopted ranks re-check the start time first.

#include <sys/types.h>
#include <csignal>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topo/core/job.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

struct SupervisorOptions {
  std::string state_dir;  // STATE_DIR/jobs/JOB.json (created if missing)
  std::string log_dir;    // LOG_DIR/JOB/rank-N.log
  // Defaults for the checkpoint tiers of a job that names none:
  // ROOT/JOB. An empty persistent root means "no persistent tier".
  std::string local_checkpoint_root;
  std::string persistent_checkpoint_root;
  int checkpoint_signal = SIGUSR1;
  // Ranks inherit the agent's environment (as under torchrun); the job's env
  // and the variables the supervisor sets win over it.
  bool inherit_environment = true;
};

// One rank to run on this node.
struct LocalRankSpec {
  int rank = 0;           // global rank, RANK
  int local_rank = 0;     // LOCAL_RANK
  std::vector<int> gpus;  // CUDA_VISIBLE_DEVICES (left unset when empty)
};

struct JobLaunch {
  std::string job_id;                      // [A-Za-z0-9._-], not starting with '.'
  std::vector<std::string> argv;           // argv[0]: a path, or a name found on PATH
  std::map<std::string, std::string> env;  // the job's own variables
  std::string working_dir;                 // empty: the agent's
  core::Parallelism parallelism;           // WORLD_SIZE = tp * cp * pp * dp
  std::string master_addr = "127.0.0.1";   // MASTER_ADDR
  int master_port = 29500;                 // MASTER_PORT
  int group_rank = 0;                      // GROUP_RANK: this node's index in the job
  int group_world_size = 1;                // GROUP_WORLD_SIZE: nodes of the job
  int restart_count = 0;                   // TOPO_RESTART_COUNT
  std::vector<LocalRankSpec> ranks;        // the ranks of this node
  std::string local_checkpoint_dir;        // TOPO_CHECKPOINT_DIR; empty: default root/JOB
  std::string persistent_checkpoint_dir;   // empty: default root/JOB (or none)
  std::optional<int64_t> restart_step;     // TOPO_RESTART_STEP when set
};

struct RankInfo {
  std::string job_id;
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;            // also the rank's process group id
  uint64_t start_time = 0;  // /proc/PID/stat field 22
  bool running = false;
  bool adopted = false;  // found in a state file, not started by this instance
};

struct RankExit {
  std::string job_id;
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool exit_status_known = true;  // false: an adopted rank that was not our child
  bool signaled = false;
  int exit_code = 0;     // when !signaled
  int signal = 0;        // when signaled
  bool stopped = false;  // it ended after Stop()
};

enum class EventKind {
  kRankExited,           // exit filled
  kCheckpointComplete,   // step: newest complete step on the node-local tier
  kCheckpointPersisted,  // step: copied to the persistent tier, COMPLETE written
  kPersistFailed,        // step, message
  kJobFinished,          // every local rank of job_id has exited (after its last kRankExited)
};

struct SupervisorEvent {
  EventKind kind;
  std::string job_id;
  RankExit exit;
  int64_t step = -1;
  std::string message;
};

enum class CheckpointTier { kLocal, kPersistent };

struct RestartPoint {
  int64_t step = -1;
  CheckpointTier tier = CheckpointTier::kPersistent;
  std::string dir;  // the step-N directory
};

// Checkpoint protocol helpers (pure file-system functions, usable without a
// supervisor).
// Complete steps in DIR: step-N directories holding a COMPLETE file, ascending.
std::vector<int64_t> CompleteSteps(const std::string& dir);
// The newest step complete on the persistent tier, or on the node-local tier
// when node_survived (this node kept its local disk since the step was
// written); the newer of the two wins, persistent on a tie.
std::optional<RestartPoint> NewestRestartStep(const std::string& local_dir,
                                              const std::string& persistent_dir,
                                              bool node_survived);
// Copies SRC_DIR/step-N to DST_DIR/step-N the crash-safe way: into
// DST_DIR/.step-N.tmp, rename to step-N, COMPLETE written (and fsynced) last.
// SRC must be complete. Blocking; the supervisor runs it on its worker thread,
// the agent may run it to stage a persistent step onto a new node's local tier
// before a restart.
core::Status CopyCompleteStep(const std::string& src_dir, const std::string& dst_dir, int64_t step);

class RankSupervisor {
 public:
  // Reads STATE_DIR/jobs/*.json and adopts ranks still alive.
  explicit RankSupervisor(SupervisorOptions options);
  // Leaves ranks running (a restarted agent adopts them) and stops the
  // worker thread after the copy in progress.
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // Starts every rank of launch. Fails without starting anything on a bad
  // spec or when a rank of the job still runs here; a failed fork/exec of one
  // rank shows as that rank exiting with code 127 (message in its log).
  core::Status Launch(const JobLaunch& launch);
  // SIGTERM to each running rank's process group now; Poll() sends SIGKILL to
  // the groups still alive once grace_ms has passed. Unknown job: an error.
  core::Status Stop(const std::string& job_id, int grace_ms);
  // The configured signal to every running rank's process (the rank's pid,
  // not its group: helpers it forked keep their default disposition).
  core::Status RequestCheckpoint(const std::string& job_id);
  // Non-blocking; see the contract above.
  std::vector<SupervisorEvent> Poll();
  // A file descriptor that becomes readable when Poll() has news from the
  // worker thread (Poll() drains it).
  int wake_fd() const;

  // What runs here (running ranks; for the reconnect report) and every rank
  // known, in (job, rank) order.
  std::vector<RankInfo> List(bool running_only = true) const;
  std::optional<RestartPoint> NewestRestartStep(const std::string& job_id,
                                                bool node_survived = true) const;
  std::optional<int64_t> NewestCompleteStep(const std::string& job_id) const;
  std::optional<int64_t> NewestPersistedStep(const std::string& job_id) const;
  // Drops a job whose ranks have all exited: its state file is removed.
  core::Status Forget(const std::string& job_id);
  // Paths, for tests and `topo logs`.
  std::string LogPath(const std::string& job_id, int rank) const;
  std::string StatePath(const std::string& job_id) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The rank's environment as the supervisor sets it (without the inherited
// and the job's own variables, which it overrides): exposed for tests.
//   MASTER_ADDR, MASTER_PORT  launch.master_addr / master_port
//   RANK, WORLD_SIZE          global rank; tp * cp * pp * dp
//   LOCAL_RANK                spec.local_rank
//   LOCAL_WORLD_SIZE          launch.ranks.size() (ranks on this node)
//   GROUP_RANK                launch.group_rank (this node's index in the job)
//   GROUP_WORLD_SIZE          launch.group_world_size
//   TORCHELASTIC_RESTART_COUNT = TOPO_RESTART_COUNT = launch.restart_count
//   CUDA_VISIBLE_DEVICES      spec.gpus joined by ',' (unset when empty)
//   TOPO_JOB_ID               launch.job_id
//   TOPO_{TP,CP,PP,EP}_RANK   core::RankLayout::Coord(rank, Dim::k..): the
//                             rank's coordinate along that dimension (EP: its
//                             expert-parallel rank, 0..ep-1)
//   TOPO_DP_RANK              position of the rank in its DP group (ascending
//                             global ranks; ep is DP's inner factor)
//   TOPO_{TP,CP,PP,EP,DP}_SIZE the degrees
//   TOPO_{TP,CP,EP,PP,DP}_GROUP RankLayout::GroupOf(kind, rank): the dense
//                             index of the rank's group of that kind (EP: the
//                             EP block of tp x cp x ep ranks); a kind of
//                             degree 1 gives every rank its own group
//   TOPO_CHECKPOINT_DIR       the node-local checkpoint dir (CHECKPOINTS.md)
//   TOPO_RESTART_STEP         launch.restart_step, when set
// Launch() adds TOPO_CHECKPOINT_SIGNAL (the signal number) to every rank.
std::map<std::string, std::string> RankEnvironment(const JobLaunch& launch,
                                                   const LocalRankSpec& rank,
                                                   const std::string& local_checkpoint_dir);

}  // namespace topo::agent
