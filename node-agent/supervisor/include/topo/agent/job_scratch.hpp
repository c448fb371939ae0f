#pragma once
// A job's private /tmp and /dev/shm on this node, as Slurm's
// job_container/tmpfs gives them: one mount namespace per job and node,
// shared by every rank of the job there (NCCL and PyTorch pass tensors
// between local ranks through /dev/shm), with a tmpfs of its own on /tmp and
// on /dev/shm.
//
// Layout and lifetime:
//   - PIN_DIR (SupervisorOptions::state_dir/namespaces, root 0700) is a bind
//     mount of itself with private propagation, so that what is mounted in it
//     reaches no other namespace (a mount namespace file can only be bound
//     where it does not propagate);
//   - Create(JOB) forks a child that unshares its mount namespace, makes
//     every mount in it a slave of the node's (mounts the node makes later,
//     an automounted home, still reach the job; nothing the job's namespace
//     mounts reaches the node), and mounts tmpfs on /tmp and /dev/shm (mode
//     1777, nosuid, nodev, size= the configured sizes); the agent then binds
//     the child's /proc/PID/ns/mnt onto PIN_DIR/JOB, which keeps the
//     namespace alive with no process in it (and across an agent restart:
//     the pin is a mount of the node's namespace, not the agent's);
//   - every rank enters it with setns() between fork and exec, after it
//     joined the job's cgroups and before it drops root (spawn.cpp), so
//     every page it writes there is charged to the job's memory cgroup;
//   - Remove(JOB) detaches the pin: once the job's last process is gone the
//     kernel frees the namespace and its tmpfs mounts, and their pages.
//     A pin is never copied into another job's namespace (the kernel leaves
//     mount namespace files out of a new namespace), so nothing else keeps
//     it.
// Requirements (Usable()): euid 0 with CAP_SYS_ADMIN and CAP_SYS_CHROOT
// (setns), a kernel with mount namespaces, /tmp and /dev/shm directories.
// Otherwise problem() says why, and the supervisor runs jobs with the
// node's /tmp and /dev/shm (mode auto) or refuses them (mode on).
//
// Thread safety: the manager is immutable after Open(); Create and Remove
// touch only their job's pin (one thread per job, as the supervisor does).
// Create forks: between fork and exit the child calls only
// async-signal-safe functions (the agent has threads).

#include <set>
#include <string>

#include "topo/core/status.hpp"

namespace topo::agent {

enum class ScratchMode {
  kOff,   // the node's /tmp and /dev/shm, shared by every job (as before)
  kAuto,  // private where the node can (Usable()), else the node's, said in each rank's log
  kOn,    // private, or the launch fails (transiently: another node may do)
};
// "off", "auto", "on".
const char* ScratchModeName(ScratchMode mode);
bool ParseScratchMode(const std::string& text, ScratchMode* out);

// A tmpfs size as mount(8) takes it: bytes with an optional k, m, g or t
// suffix ("64g"), or a percentage of the node's RAM, 1%..100% ("50%").
// Errors name the value and the forms.
core::Status CheckTmpfsSize(const std::string& size);

struct ScratchOptions {
  ScratchMode mode = ScratchMode::kOff;
  // tmpfs sizes: the kernel's own default for a tmpfs is half of RAM,
  // what /dev/shm is on most nodes; the pages count against the job's
  // memory limit, which bounds them anyway.
  std::string tmp_size = "50%";
  std::string shm_size = "50%";
  std::string pin_dir;  // PIN_DIR above
};

class JobScratch {
 public:
  // Mode off: nothing. Otherwise checks the requirements and makes PIN_DIR
  // a private bind mount of itself (once: a restarted agent finds it so).
  static JobScratch Open(const ScratchOptions& options);

  ScratchMode mode() const { return options_.mode; }
  // Jobs get private scratch (mode auto or on, and the node can).
  bool enabled() const { return usable_ && options_.mode != ScratchMode::kOff; }
  // Why not ("" when it can, or mode off).
  const std::string& problem() const { return problem_; }
  // One line for the agent's log: what jobs get.
  std::string Summary() const;

  // PIN_DIR/JOB.
  std::string PinPath(const std::string& job_id) const;
  // Makes the job's namespace (a leftover pin of the job is detached
  // first) and returns its pin. Blocking (a fork, two mounts: ms).
  // REQUIRES: enabled().
  core::Result<std::string> Create(const std::string& job_id) const;
  // Detaches and removes a pin (nothing when there is none); true once it
  // is gone.
  static bool Remove(const std::string& pin);
  // Detaches the pins under PIN_DIR whose job is not in known (an earlier
  // agent's jobs it forgot).
  void RemoveStale(const std::set<std::string>& known_job_ids) const;

 private:
  ScratchOptions options_;
  bool usable_ = false;
  std::string problem_;
};

}  // namespace topo::agent
