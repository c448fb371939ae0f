#pragma once
// topo-agent's rank supervisor and checkpoint coordination (issue 5).
//
// RankSupervisor starts the local ranks of jobs as the job's Unix account
// (fork/exec, one process group per rank, one cgroup per job, the
// environment documented at RankEnvironment below), logs each rank to
// LOG_DIR/JOB/rank-N.log, reports exits, stops jobs (every process of the
// job's cgroup: SIGTERM, SIGKILL after a grace), asks for checkpoints (a
// signal to each rank), watches the node-local checkpoint directory for
// complete steps and copies each one to the persistent tier on a worker
// thread. The checkpoint protocol is node-agent/supervisor/CHECKPOINTS.md;
// the cgroup layout and what it enforces, cgroup.hpp; the account and the
// private directories, account.hpp.
//
// What a rank gets (the trust boundary, ARCHITECTURE.md):
//   - uid/gid/supplementary groups of JobLaunch::unix_user, resolved before
//     fork; uid 0 only when allow_root (launch or site) says so, never a uid
//     below SupervisorOptions::min_job_uid (an agent that is not root can
//     only run jobs as its own account);
//   - the environment of RankEnvironment only: nothing of the agent's;
//   - file descriptors 0 (/dev/null), 1 and 2 (its log) only;
//   - working directory: launch.working_dir (must be accessible to the
//     account, else Launch fails), else the account's home if the account
//     can enter it, else the job's node-local checkpoint dir, else "/";
//   - its job's private directories (account.hpp): LOG_DIR/JOB, the
//     node-local and persistent checkpoint dirs, all 0700 owned by the
//     account under root-owned 0711 roots; STATE_DIR stays root 0700;
//   - with job_scratch: its job's own /tmp and /dev/shm (tmpfs in a mount
//     namespace of the job's, shared by its ranks on this node, charged to
//     its memory cgroup, gone once the job has ended here: job_scratch.hpp).
//
// Contract with the agent's event loop (poll API, no callbacks):
//   - Every method returns without blocking on a rank, except that Launch()
//     waits for each new process to reach exec (milliseconds; at most 30 s)
//     so that a failure before exec fails the launch, and cleans up a failed
//     launch synchronously (at most a few seconds). That part of a launch
//     can run on another thread (PrepareLaunch, StartingLaunch::Run,
//     FinishLaunch), which the agent does. Only the persistent copy runs on
//     the supervisor's own worker thread.
//   - Poll() reaps exited ranks (waitpid(pid, WNOHANG) on each rank's own pid,
//     never waitpid(-1): the agent must not reap with waitpid(-1) either),
//     escalates stops whose grace has ended to SIGKILL of the whole cgroup,
//     ends what is left in a job's cgroup once its ranks have exited and
//     removes the cgroup, scans the checkpoint directories and collects
//     finished copies. It returns each event exactly once, in the order
//     observed. Call it on a timer (100-250 ms is plenty), and also whenever
//     SIGCHLD arrives or wake_fd() becomes readable (the worker thread writes
//     to it when a copy ends).
//   - One thread: the methods are not thread-safe with each other; call them
//     from the event loop's thread. The one exception is StartingLaunch::Run
//     (below), the slow part of a launch, which may run on any thread.
//
// Adoption: every launch, exit and checkpoint report rewrites
// STATE_DIR/jobs/JOB.json (write to a temp name, then rename). A new
// RankSupervisor over the same state dir reads those files and adopts the
// ranks still alive, recognised by pid *and* the process start time from
// /proc/PID/stat (so a recycled pid is not mistaken for a rank) *and*, for a
// job with a cgroup, membership of the job's cgroup. Empty cgroups of jobs
// no state file names are removed. Limits:
//   - An adopted rank that is not our child (the old agent process died and
//     the rank was reparented) cannot be waited for: its exit is seen by
//     polling /proc, and reported with exit_status_known == false.
//   - A rank that exited while no agent ran, or whose job's cgroup is gone,
//     is reported as exited, status unknown, by the first Poll() after
//     adoption.
//   - Linux only (/proc); start times are in clock ticks since boot, so state
//     files do not survive a reboot (ranks do not either).
//   - Stop/RequestCheckpoint on adopted ranks re-check the start time first;
//     Stop on an adopted job with a cgroup ends every process in it.

#include <sys/types.h>
#include <csignal>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topo/agent/account.hpp"
#include "topo/agent/cgroup.hpp"
#include "topo/agent/job_scratch.hpp"
#include "topo/core/job.hpp"
#include "topo/core/launch.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

struct SupervisorOptions {
  std::string state_dir;  // STATE_DIR/jobs/JOB.json (created if missing; root 0700)
  std::string log_dir;    // LOG_DIR/JOB/rank-N.log (LOG_DIR: root 0711)
  // Defaults for the checkpoint tiers of a job that names none:
  // ROOT/JOB (ROOT: root 0711). An empty persistent root means "no
  // persistent tier".
  std::string local_checkpoint_root;
  std::string persistent_checkpoint_root;
  int checkpoint_signal = SIGUSR1;
  // Site policy: let every job run as uid 0. false (the default): only a
  // launch with allow_root may.
  bool allow_root_jobs = false;
  // No job runs as an account with a uid in 1..min_job_uid-1, whatever the
  // launch says (AccountPolicy, account.hpp; topo-agent --min-job-uid).
  uid_t min_job_uid = kDefaultMinJobUid;
  // Where job cgroups go (cgroup.hpp): "" = detect, "none" = no cgroups
  // (process groups only), else a directory inside a cgroup v2 or v1
  // freezer/pids hierarchy.
  std::string cgroup_root;
  // Where the GPU device nodes nvidiaN are (JobLimits::restrict_gpu_devices).
  std::string gpu_device_dir = "/dev";
  // CgroupOptions::use_v1_controllers (false: as on a cgroup-v2-only node).
  bool use_v1_cgroup_controllers = true;
  // CgroupOptions::scope: job cgroups are job-ID.SCOPE (CgroupScope: the
  // node and the scheduler), so that agents sharing a host never share one.
  std::string cgroup_scope{};
  // Private /tmp and /dev/shm per job (job_scratch.hpp): off (the library's
  // default), auto (where the node can) or on (or the launch fails);
  // tmpfs sizes. The namespaces are pinned in STATE_DIR/namespaces.
  ScratchMode job_scratch = ScratchMode::kOff;
  std::string job_tmp_size = "50%";
  std::string job_shm_size = "50%";
  // Checkpoint retention (CHECKPOINTS.md, Retention): the persistent tier
  // keeps a job's newest keep_checkpoints complete steps, older ones pruned
  // once a newer one is persisted (0: keep every step); the node-local tier
  // of a job is removed when its run here has ended and the persistent
  // tier holds its newest local step.
  int keep_checkpoints = 2;
};

// One rank to run on this node.
struct LocalRankSpec {
  int rank = 0;           // global rank, RANK
  int local_rank = 0;     // LOCAL_RANK; the launch's local ranks are 0..N-1
  std::vector<int> gpus;  // this rank's GPU: empty, or exactly one (see CUDA_VISIBLE_DEVICES)
};

struct JobLaunch {
  std::string job_id;                      // [A-Za-z0-9._-], not starting with '.'
  std::vector<std::string> argv;           // argv[0]: a path, or a name found on PATH
  std::map<std::string, std::string> env;  // the job's own variables (no reserved name)
  // kRank: one process per entry of `ranks` (RankEnvironment). kNode: ONE
  // process for all of them (NodeEnvironment), logged to NodeLogPath; each
  // of the node's ranks is reported exited with that process's status, and
  // the checkpoint signal goes to it.
  core::LaunchMode mode = core::LaunchMode::kRank;
  // Must exist and be enterable by the account: otherwise the process writes
  // "cannot enter the working directory ..." to its log and exits 126 (it
  // is not a launch failure). Empty: the account's home (see above).
  std::string working_dir;
  // Where standard output / error go: patterns (%j job id, %r rank, or the
  // node's group rank in node mode, %% a %; common::CheckOutputPattern),
  // absolute or relative to the working directory, opened for appending
  // (created 0600) by the process AS THE ACCOUNT after it entered its
  // working directory, so a job can only write where its account can. A
  // file that cannot be opened: a line in the log, exit 126. Empty output:
  // the log; empty error: where output goes. The log's header names them.
  std::string output;
  std::string error;
  // The Unix account every rank runs as (the submitter's). Required.
  std::string unix_user;
  // This job may run as uid 0 (also allowed when the site sets
  // SupervisorOptions::allow_root_jobs). Otherwise a root account is refused.
  bool allow_root = false;
  core::Parallelism parallelism;          // WORLD_SIZE = tp * cp * pp * dp
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 29500;                // MASTER_PORT
  int group_rank = 0;                     // GROUP_RANK: this node's index in the job
  int group_world_size = 1;               // GROUP_WORLD_SIZE: nodes of the job
  int restart_count = 0;                  // TOPO_RESTART_COUNT
  int max_restarts = 0;                   // TORCHELASTIC_MAX_RESTARTS
  int omp_num_threads = 1;                // OMP_NUM_THREADS (at least 1): CPUs per rank
  std::vector<LocalRankSpec> ranks;       // the ranks of this node
  std::string local_checkpoint_dir;       // TOPO_CHECKPOINT_DIR; empty: default root/JOB
  std::string persistent_checkpoint_dir;  // empty: default root/JOB (or none)
  std::optional<int64_t> restart_step;    // TOPO_RESTART_STEP when set
  std::optional<int64_t> array_job;       // TOPO_ARRAY_JOB_ID of an array's task
  int64_t array_task = 0;                 // TOPO_ARRAY_TASK_ID (with array_job)
  JobLimits limits;                       // per-job cgroup limits (cgroup.hpp)
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
  // Node mode: the process was every rank of the job here (each is reported
  // with its status, in one Poll).
  bool whole_node = false;
};

enum class EventKind {
  kRankExited,           // exit filled
  kCheckpointComplete,   // step: newest complete step on the node-local tier
  kCheckpointPersisted,  // step: copied to the persistent tier, COMPLETE written
  kPersistFailed,        // step, message
  kJobFinished,          // every local rank of job_id has exited (after its last kRankExited)
                         // and its newest step is copied to the persistent tier
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
// Ownership: the copy is made *as* owner (the calling thread's file-system
// uid/gid and groups switched to owner for the call, so a symlink the job
// planted cannot make root write elsewhere): files 0600, directories 0700,
// owned by owner. Without owner: DST_DIR's owner when DST_DIR exists, else
// the caller (DST_DIR then created 0700). Symlinks are copied as symlinks.
// REQUIRES: euid 0 when owner differs from the caller.
// Thread safety: the identity switch is per thread; other threads are not
// affected.
core::Status CopyCompleteStep(const std::string& src_dir, const std::string& dst_dir, int64_t step,
                              std::optional<FileOwner> owner = std::nullopt);

// Removes the step-N directories of DIR older than its newest `keep`
// complete steps (complete or not), as owner (its file-system identity, as
// CopyCompleteStep). keep 0, or no more complete steps than keep: nothing.
// Blocking; thread-safe as CopyCompleteStep.
core::Status PruneCompleteSteps(const std::string& dir, size_t keep,
                                std::optional<FileOwner> owner = std::nullopt);
// Removes DIR: its content as owner, then DIR itself (empty by then) as the
// caller. A missing DIR is not an error. Blocking; thread-safe as above.
core::Status RemoveCheckpointDir(const std::string& dir, FileOwner owner);

class RankSupervisor;

// A launch between RankSupervisor::PrepareLaunch and FinishLaunch: the
// job's checks are done; Run() removes the earlier run's cgroup (if left),
// resolves the job's account (JobAccount: NSS may wait for a directory
// server), makes its directories (the persistent tier may be a slow
// network file system) and its cgroup, and starts every rank. Run() touches nothing of the
// supervisor but its cgroup configuration, which does not change after
// construction, so it may run on a thread of its own while the
// supervisor's other methods run on the event loop's (the agent does that:
// a launch takes a few ms a rank on an idle node, far more on a loaded one,
// and heartbeats must go on).
// Destroyed after a successful Run() without FinishLaunch: its ranks are
// killed and its cgroup removed (nothing runs untracked).
// Thread safety: one thread at a time; the supervisor must outlive it.
class StartingLaunch {
 public:
  StartingLaunch(StartingLaunch&& other) noexcept;
  StartingLaunch& operator=(StartingLaunch&& other) noexcept;
  ~StartingLaunch();

  // The job's directories and cgroup, then every rank, each up to exec.
  // On a failure before
  // exec the ranks already started are killed and the cgroup removed before
  // it returns, and FinishLaunch returns the same error. At most once.
  core::Status Run();
  // After a Run() that failed: whether no retry can help (the account is
  // missing, or is root or below the uid floor and refused: JobAccount).
  bool permanent() const;

  struct State;

 private:
  friend class RankSupervisor;
  explicit StartingLaunch(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

class RankSupervisor {
 public:
  // Reads STATE_DIR/jobs/*.json and adopts ranks still alive.
  explicit RankSupervisor(SupervisorOptions options);
  // Leaves ranks running (a restarted agent adopts them) and stops the
  // worker thread after the copy in progress.
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // Starts every rank of launch as launch.unix_user in the job's cgroup.
  // Fails, leaving nothing running, on a bad spec, when a rank of the job
  // still runs here, when the account is missing ("no Unix account 'ada' on
  // this node (N): create it or set the user's unix_user"), is root without
  // allow_root ("jobs may not run as root; ...") or has a uid below
  // min_job_uid ("... below this node's floor ..."), when a private directory
  // or the cgroup cannot be made, or when any rank fails before exec (fork,
  // cgroup join, account switch, log, working directory): the ranks already
  // started are killed and the cgroup removed first. An execve failure (no
  // such program) is not a launch failure: that rank exits 127 with the
  // reason in its log.
  core::Status Launch(const JobLaunch& launch);
  // Launch() in three steps, so that its slow part can leave the caller's
  // thread:
  //   auto prepared = sup.PrepareLaunch(launch);   // this thread: checks,
  //                                                // log names
  //   status = prepared.value().Run();             // any thread: account,
  //                                                // directories, cgroup, ranks
  //   status = sup.FinishLaunch(std::move(prepared).value());  // this thread:
  //                                                // the job is known here
  // Launch() is exactly the three in a row, with the same errors. Until
  // FinishLaunch, nothing of the new run is known to the other methods
  // (List, Stop, Poll see the job's earlier run, if any; a failed Run()
  // leaves its cgroup to Poll() as before, if Run() had not removed it).
  // REQUIRES: no other launch of the job between PrepareLaunch and
  // FinishLaunch.
  core::Result<StartingLaunch> PrepareLaunch(const JobLaunch& launch);
  // Run()'s error if it failed (or was never called); otherwise records the
  // job's ranks (reaped and reported by Poll() from now on) and saves its
  // state file.
  core::Status FinishLaunch(StartingLaunch launch);
  // SIGTERM to every process of the job's cgroup (without a cgroup: each
  // running rank's process group) now; Poll() SIGKILLs the whole cgroup
  // (groups) once grace_ms has passed. Unknown job: an error.
  core::Status Stop(const std::string& job_id, int grace_ms);
  // The configured signal to every running rank's process (the rank's pid,
  // not its group: helpers it forked keep their default disposition).
  core::Status RequestCheckpoint(const std::string& job_id);
  // Non-blocking; see the contract above.
  std::vector<SupervisorEvent> Poll();
  // A file descriptor that becomes readable when Poll() has news from the
  // worker thread (Poll() drains it).
  int wake_fd() const;
  // The account rules for `launch` (JobAccount's policy): uid 0 with its own
  // allow_root or the site's allow_root_jobs; no uid below min_job_uid.
  // Thread-safe.
  AccountPolicy AccountRules(const JobLaunch& launch) const;
  // Makes wake_fd() readable, so that the loop polls soon. Thread-safe:
  // for work done on other threads (a StartingLaunch that ran).
  void Wake() const;

  // What runs here (running ranks; for the reconnect report) and every rank
  // known, in (job, rank) order.
  std::vector<RankInfo> List(bool running_only = true) const;
  std::optional<RestartPoint> NewestRestartStep(const std::string& job_id,
                                                bool node_survived = true) const;
  std::optional<int64_t> NewestCompleteStep(const std::string& job_id) const;
  std::optional<int64_t> NewestPersistedStep(const std::string& job_id) const;
  // Retention of the node-local tier (CHECKPOINTS.md, Retention): once the
  // job's run here has ended, its node-local checkpoint dir (the default
  // one, ROOT/JOB) is removed when the persistent tier holds its newest
  // local step, so nothing is lost; without a persistent tier, or with a
  // newer step that could not be copied, it stays (the only copy). True
  // when it held checkpoints and was removed (an empty one goes silently),
  // false otherwise; an error when removing failed. Blocking (the removal).
  // REQUIRES: no launch of the job is being prepared or staged (the caller,
  // SupervisorRunner, asks only then).
  core::Result<bool> RemoveLocalCheckpoints(const std::string& job_id);
  // Drops a job whose ranks have all exited: its state file is removed (and
  // its cgroup, if something kept it alive until now).
  core::Status Forget(const std::string& job_id);
  // Paths, for tests and `topo logs`. A rank of a node-mode job known here
  // has its node's log (NodeLogPath).
  std::string LogPath(const std::string& job_id, int rank) const;
  std::string NodeLogPath(const std::string& job_id, int group_rank) const;
  std::string StatePath(const std::string& job_id) const;
  // The job's cgroup directory in the tracking hierarchy ("" without one).
  std::string CgroupPath(const std::string& job_id) const;
  // What this node enforces (cgroup.hpp); summary is also written into
  // every rank's log when something is not enforced.
  const CgroupInfo& Cgroups() const;
  // Private /tmp and /dev/shm (job_scratch.hpp): whether jobs get them.
  const JobScratch& Scratch() const;
  // The pin of the job's mount namespace ("" without one).
  std::string ScratchPin(const std::string& job_id) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The environment of a rank is, in this order (a later source wins):
//   1. the base, from the account's passwd entry (RankBaseEnvironment):
//        PATH=/usr/local/bin:/usr/bin:/bin
//        HOME, USER, LOGNAME, SHELL (pw_dir, pw_name, pw_name, pw_shell or
//        /bin/sh when empty)
//   2. launch.env, the job's own variables (LANG and the like come only from
//      here);
//   3. the supervisor's variables (RankEnvironment), except OMP_NUM_THREADS,
//      which the job's own value overrides (as under torchrun);
//   4. TOPO_CHECKPOINT_SIGNAL (SupervisorOptions::checkpoint_signal's number),
//      added by Launch().
// Nothing of the agent's own environment reaches a rank.
std::map<std::string, std::string> RankBaseEnvironment(const UnixAccount& account);

// The supervisor's variables for one rank (source 3 above), exactly:
//   MASTER_ADDR, MASTER_PORT  launch.master_addr / master_port
//   RANK, WORLD_SIZE          global rank; tp * cp * pp * dp
//   ROLE_RANK, ROLE_WORLD_SIZE = RANK, WORLD_SIZE (one role)
//   ROLE_NAME                 "default"
//   LOCAL_RANK                spec.local_rank (0..LOCAL_WORLD_SIZE-1)
//   LOCAL_WORLD_SIZE          launch.ranks.size() (ranks on this node)
//   GROUP_RANK                launch.group_rank (this node's index in the job)
//   GROUP_WORLD_SIZE          launch.group_world_size
//   TORCHELASTIC_RESTART_COUNT = TOPO_RESTART_COUNT = launch.restart_count
//   TORCHELASTIC_MAX_RESTARTS launch.max_restarts
//   TORCHELASTIC_RUN_ID       "topo-" + launch.job_id
//   OMP_NUM_THREADS           max(1, launch.omp_num_threads), unless launch.env
//                             sets it
//   CUDA_VISIBLE_DEVICES      every GPU of the job on this node, in local-rank
//                             order (the gpus of launch.ranks sorted by
//                             local_rank, joined by ','), the same for every
//                             rank, so that LOCAL_RANK indexes it
//                             (torch.cuda.set_device(LOCAL_RANK) picks the
//                             rank's own GPU); unset when no rank has a GPU
//   TOPO_JOB_ID               launch.job_id
//   TOPO_{TP,CP,PP,EP}_RANK   core::RankLayout::Coord(rank, Dim::k..): the
//                             rank's coordinate along that dimension (EP: its
//                             expert-parallel rank, 0..ep-1)
//   TOPO_DP_RANK              position of the rank in its DP group (ascending
//                             global ranks; ep is DP's inner factor)
//   TOPO_{TP,CP,PP,EP,DP}_SIZE the degrees
//   TOPO_{TP,CP,EP,PP,DP}_GROUP RankLayout::GroupOf(kind, rank): the dense
//                             index of the rank's group of that kind. TP, CP,
//                             PP: the ranks differing only along it (degree
//                             1: one group per rank); EP: the block of
//                             tp x cp x ep ranks, so with ep 1 the TP x CP
//                             group (never one per rank); DP: ep x dp
//   TOPO_CHECKPOINT_DIR       the node-local checkpoint dir (CHECKPOINTS.md)
//   TOPO_RESTART_STEP         launch.restart_step, when set
//   TOPO_ARRAY_JOB_ID, TOPO_ARRAY_TASK_ID  launch.array_job and array_task, for
//                             a task of a job array (both modes)
// REQUIRES: launch passes Launch()'s validation (ranks and GPUs as above).
std::map<std::string, std::string> RankEnvironment(const JobLaunch& launch,
                                                   const LocalRankSpec& rank,
                                                   const std::string& local_checkpoint_dir);

// The variables of a node-mode process (source 3 above), exactly: what
// `torchrun --nnodes $GROUP_WORLD_SIZE --nproc-per-node $LOCAL_WORLD_SIZE
// --node-rank $GROUP_RANK --master-addr $MASTER_ADDR --master-port
// $MASTER_PORT` needs, and the job-wide TOPO_* variables:
//   MASTER_ADDR, MASTER_PORT, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
//   GROUP_WORLD_SIZE, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES (as in
//   RankEnvironment), TOPO_JOB_ID, TOPO_RESTART_COUNT, TOPO_{TP,CP,PP,EP,DP}_SIZE,
//   TOPO_CHECKPOINT_DIR, TOPO_RESTART_STEP (when set), and
//   TOPO_NODE_RANKS   the global ranks of the node's GPUs in local order,
//                     comma-separated (CUDA_VISIBLE_DEVICES' order)
// No RANK, LOCAL_RANK, ROLE_*, TORCHELASTIC_* or per-rank TOPO_*: the
// node's launcher gives its workers those.
// REQUIRES: as RankEnvironment.
std::map<std::string, std::string> NodeEnvironment(const JobLaunch& launch,
                                                   const std::string& local_checkpoint_dir);

}  // namespace topo::agent
