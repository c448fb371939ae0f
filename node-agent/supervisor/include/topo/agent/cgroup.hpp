#pragma once
// One cgroup per job: every process a rank starts (setsid and double forks
// included) stays in it, and stopping the job ends every process in it.
//
// Layouts, detected at run time from /proc/self/mountinfo:
//   v2      cgroup2 mounted at /sys/fs/cgroup (production hosts);
//   hybrid  cgroup2 at /sys/fs/cgroup/unified (no controllers in it) beside
//           v1 controller hierarchies (/sys/fs/cgroup/memory, ...);
//   v1      no cgroup2: the v1 freezer hierarchy tracks the job (the pids
//           hierarchy when there is no freezer).
// The *tracking* hierarchy (v2 in v2 and hybrid, freezer/pids in v1) holds
// TRACK_ROOT/LEAF. TRACK_ROOT is SupervisorOptions::cgroup_root, or by
// default MOUNT/toposched at the top of that hierarchy (a v2 parent with no
// processes, so controllers can be enabled for the jobs below it).
// v1 controller hierarchies used for limits hold
// MOUNT/<the agent's own cgroup there>/<basename of TRACK_ROOT>/LEAF:
// nested under the agent's cgroup, so a limit that encloses the agent (a
// container's) encloses its jobs too.
// LEAF is job-ID.SCOPE (job-ID without a scope): SCOPE (CgroupScope) names
// the node and the scheduler the agent serves, so that two agents on one
// host (simulated nodes, a test cluster) or agents of two schedulers, which
// give out the same job ids, never share a job's cgroup: one agent's job
// end would kill the other's ranks. Each agent removes only stale cgroups
// of its own scope; an adopted job's cgroup is the one its state file names.
//
// Joining: the agent opens JOB/cgroup.procs of every hierarchy the job uses
// before fork; the child writes "0" (itself) to each while still root,
// before setuid and exec, so nothing the rank runs is ever outside.
//
// Ending a job's processes (KillAll):
//   v2 with cgroup.kill (Linux >= 5.14): write 1 to cgroup.kill;
//   otherwise freeze (v2 cgroup.freeze / v1 freezer.state), SIGKILL every pid
//   in cgroup.procs, thaw; repeated by the caller (Poll) until the cgroup is
//   empty; without a freezer (v1 pids only) SIGKILL rounds until empty.
//
// Limits (JobLimits) -- what is enforced where:
//   memory_bytes  v2: memory.max, when "memory" is in TRACK_ROOT's
//                 cgroup.controllers (i.e. enabled in its parent's
//                 cgroup.subtree_control; the supervisor then enables it in
//                 TRACK_ROOT's subtree_control);
//                 v1/hybrid: memory.limit_in_bytes in the memory hierarchy.
//   cpus          v2: cpu.max "QUOTA 100000" under the same condition ("cpu");
//                 v1/hybrid: cpu.cfs_quota_us / cpu.cfs_period_us.
//   pids_max      v2: pids.max under the same condition ("pids");
//                 v1/hybrid: pids.max in the v1 pids hierarchy. Every task
//                 counts (threads too): a fork or clone past it fails with
//                 EAGAIN inside the job, nothing outside it is touched.
//   gpu devices   every DEV_DIR/nvidiaN whose N is not one of the job's GPUs
//                 is refused (the control nodes nvidiactl, nvidia-uvm, ...
//                 stay open):
//                 v1/hybrid: devices.deny "c MAJ:MIN rwm" for each;
//                 v2: a BPF device program attached to the job's cgroup
//                 (device_filter.cpp), where the kernel loads one for the
//                 agent (probed at Detect; it needs CAP_SYS_ADMIN or CAP_BPF);
//                 otherwise, or when the attach fails, not enforced: GPU
//                 isolation is CUDA_VISIBLE_DEVICES only, said in the notes.
//   A limit the node cannot enforce is not an error: Create() says so in its
//   notes (the supervisor writes them into every rank's log).
//   GPU index N is taken to be /dev/nvidiaN (the minor-number order; true
//   when the driver's index order is the PCI order, the default).
//
// Thread safety: CgroupManager is immutable after Detect(); JobCgroup is a
// value. Both only touch the file system; call them from one thread per job.

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::agent {

struct DeviceNumber;  // device_filter.hpp

enum class CgroupMode {
  kNone,  // no usable hierarchy: jobs are tracked by process groups only
  kV2,    // tracked in cgroup v2 (pure v2 or hybrid)
  kV1,    // tracked in a v1 freezer (or pids) hierarchy
};

// Per-job resource limits. Zero / empty: no limit.
struct JobLimits {
  int64_t memory_bytes = 0;
  double cpus = 0;       // CPU time per wall-clock time, e.g. 2.5
  int64_t pids_max = 0;  // tasks (processes and threads) at once
  // Join the memory controller even without memory_bytes, so that what the
  // job's processes write to their tmpfs is charged to the job.
  bool account_memory = false;
  // Restrict /dev/nvidiaN to the launch's GPUs (see the table above).
  bool restrict_gpu_devices = false;
};

// What this node enforces (Describe()).
struct CgroupInfo {
  CgroupMode mode = CgroupMode::kNone;
  std::string track_root;             // TRACK_ROOT ("" when kNone)
  bool kill_file = false;             // v2 cgroup.kill
  bool freezer = false;               // v2 cgroup.freeze or v1 freezer
  std::string memory;                 // how memory_bytes is enforced; "" = not
  std::string cpu;                    // how cpus is enforced; "" = not
  std::string pids;                   // how pids_max is enforced; "" = not
  std::string gpu_devices;            // how GPUs are isolated; "" = not (CUDA_VISIBLE_DEVICES only)
  std::vector<std::string> v1_roots;  // v1 limit roots (MOUNT/.../NAME), for cleanup
  std::string summary;                // one line for logs and `topo nodes`
};

struct CgroupOptions {
  // "" = detect; "none" = no cgroups (process groups only); otherwise the
  // tracking directory, inside a cgroup v2 or v1 freezer/pids hierarchy.
  std::string root;
  std::string device_dir = "/dev";  // where nvidiaN live
  // false: use no v1 controller hierarchy for limits, as on a node with
  // cgroup v2 alone (tests use it on hybrid nodes to reach the v2 paths).
  bool use_v1_controllers = true;
  // SCOPE above (CgroupScope); "" only for tests of one agent.
  std::string scope{};
};

// The cgroup scope of an agent for `node` serving the scheduler whose CA
// certificate (PEM) is ca_pem: the node's name made safe for a directory
// name ([A-Za-z0-9_-], others as '_', at most 64 bytes), '.', and 12 hex
// digits of a 64-bit FNV-1a hash of node and CA (so two names made the same
// by the first part still differ; a name, not a secret). Pure.
std::string CgroupScope(const std::string& node, const std::string& ca_pem);

// A job's cgroup: one directory per hierarchy it uses, dirs[0] tracking.
struct JobCgroup {
  CgroupMode mode = CgroupMode::kNone;
  std::vector<std::string> dirs;

  bool valid() const { return mode != CgroupMode::kNone && !dirs.empty(); }
  bool Exists() const;
  // Processes (thread-group ids) in the tracking cgroup; empty when gone.
  std::vector<pid_t> Members() const;
  bool Contains(pid_t pid) const;
  // sig to every member (a snapshot: a process forked meanwhile may miss it;
  // KillAll catches those).
  void SignalAll(int sig) const;
  // One round of the kill protocol above; returns without waiting for the
  // processes to be reaped.
  void KillAll() const;
  // rmdir in every hierarchy; true once every directory is gone. Fails
  // (false) while processes remain.
  bool Remove() const;
  // KillAll + Remove until gone or timeout_ms passed; true when gone.
  // Blocking: for launch failures and tests.
  bool KillAndRemove(int timeout_ms) const;
  // Opens cgroup.procs of every directory for the child to join (O_WRONLY |
  // O_CLOEXEC); the caller closes them.
  core::Result<std::vector<int>> OpenProcsFiles() const;
};

class CgroupManager {
 public:
  // Reads the mount table and the agent's own cgroups; creates nothing.
  static CgroupManager Detect(const CgroupOptions& options);

  const CgroupInfo& Describe() const { return info_; }
  bool usable() const { return info_.mode != CgroupMode::kNone; }
  // Why there is no cgroup (kNone) or a configured root is unusable.
  const std::string& problem() const { return problem_; }

  // The cgroup job_id would have (no file-system access); with `limits`
  // naming which v1 limit hierarchies it joins.
  JobCgroup For(const std::string& job_id, const JobLimits& limits) const;
  // Creates the job's cgroup (and TRACK_ROOT) and applies limits. A leftover
  // cgroup of the same job is emptied first (killed) and reused. notes gets
  // one line per limit asked for that this node does not enforce.
  // REQUIRES: usable(), euid 0, gpus = the job's GPU indices on this node.
  core::Result<JobCgroup> Create(const std::string& job_id, const JobLimits& limits,
                                 const std::vector<int>& gpus,
                                 std::vector<std::string>* notes) const;
  // Removes empty cgroups of this scope (job-ID.SCOPE) under the roots whose
  // id is not in known (left by jobs an earlier agent forgot). Non-empty
  // ones, and other scopes', are kept.
  void RemoveStale(const std::set<std::string>& known_job_ids) const;

 private:
  CgroupInfo info_;
  std::string problem_;
  CgroupOptions options_;
  // v1 limit hierarchies: controller -> MOUNT/<own cgroup>/<NAME>.
  std::string v1_memory_, v1_cpu_, v1_devices_, v1_pids_;
  bool v2_memory_ = false, v2_cpu_ = false, v2_pids_ = false;
  bool v2_device_filter_ = false;      // GPU devices by a BPF program
  std::string device_filter_problem_;  // why not, where v2 has no other way
  // LEAF of the layout above.
  std::string JobDirName(const std::string& job_id) const;
  // The character devices DEV_DIR/nvidiaN whose N is not in gpus.
  std::vector<DeviceNumber> OtherGpuDevices(const std::vector<int>& gpus) const;
};

}  // namespace topo::agent
