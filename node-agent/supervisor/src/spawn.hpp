#pragma once
// Starting one rank process: fork, then in the child (async-signal-safe
// calls only) its own process group, default signal handling, the job's
// cgroups, the job's mount namespace (job_scratch.hpp), the job's account,
// its log, its working directory, exec.
// Internal to the supervisor.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "topo/agent/account.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

struct SpawnRequest {
  std::string what;                      // "job J rank R", for messages
  std::string exe;                       // resolved path
  std::vector<std::string> argv;         // argv[0] as given
  std::vector<std::string> env;          // "K=V", the whole environment
  const UnixAccount* account = nullptr;  // REQUIRES: non-null
  std::vector<int> cgroup_fds;           // cgroup.procs files to join (written "0")
  // The job's mount namespace (an open pin, job_scratch.hpp), entered with
  // setns() after the cgroups and before the account switch; -1: the
  // agent's own.
  int mount_ns_fd = -1;
  std::string log_path;    // opened (created 0600) as the account
  std::string log_header;  // written before the pid; the child adds "PID ===\n"
  // Working directories to try in order as the account; the first that
  // chdir() accepts wins.
  // When required (the job's own working directory), only wd_candidates[0]
  // is tried and failing it makes the process write why to its log and
  // exit 126 (SpawnResult::failed_in_child), as a failed exec does.
  std::vector<std::string> wd_candidates;
  bool wd_required = false;
  // Files for standard output / error, opened (O_APPEND, created 0600) as the
  // account in the working directory; empty: the log (error: where output
  // goes). A file that cannot be opened: a line in the log, exit 126.
  std::string output_path;
  std::string error_path;
  // A directory the rank must be able to use (its checkpoint dir): checked
  // as the account before exec, so a parent it cannot traverse fails the
  // launch instead of the job. Empty: none.
  std::string required_dir;
};

struct SpawnResult {
  pid_t pid = 0;
  // The process exists but cannot run the command: execve failed (it exits
  // 127), or the job's working directory or output files failed (126). The
  // reason is in its log; it is reaped like any rank.
  bool failed_in_child = false;
};

// One read of up to `size` bytes from fd, waiting for data until
// `deadline`: the bytes read (> 0), 0 at end of file, -1 when the read
// fails, or kReadTimedOut when the deadline came first (a poll that fails
// is tried again until then). Interrupted calls are retried.
inline constexpr ssize_t kReadTimedOut = -2;
ssize_t ReadBefore(int fd, void* buf, size_t size, std::chrono::steady_clock::time_point deadline);

// Forks and waits (bounded, ~30 s) until the child has exec'd or failed.
// A failure before exec (cgroup join, account switch, log, working directory,
// required_dir) is an error naming the step and the fix; the child is reaped
// before returning. Blocks all signals in the calling thread across fork.
// The account switch (setgroups, setgid, setuid) happens when the caller is
// root; otherwise the child keeps the caller's identity.
// REQUIRES: euid 0, or account->uid == geteuid().
core::Result<SpawnResult> SpawnRank(const SpawnRequest& req);

}  // namespace topo::agent
