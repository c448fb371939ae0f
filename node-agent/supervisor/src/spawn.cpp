// fork/exec of one rank (spawn.hpp). Everything the child needs is prepared
// before fork: between fork and exec it calls only async-signal-safe
// functions, because the agent has other threads (the copy worker) whose
// locks may be held at the moment of fork.

#include "spawn.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace topo::agent {

namespace {

// Where the child failed; sent to the parent over the status pipe.
enum Stage : int {
  kJoinCgroup = 1,
  kMountNamespace,
  kSetGroups,
  kSetGid,
  kSetUid,
  kStillPrivileged,
  kDevNull,
  kOpenLog,
  kLogNotOwned,
  kChdir,
  kRequiredDir,
  kExec,
  // The job's own settings failed: the process writes why to its log and
  // exits 126 (not a launch failure).
  kJobChdir,
  kOpenOutput,
  kOpenError,
};

struct ChildReport {
  int stage = 0;
  int err = 0;
  int index = 0;  // which cgroup file / working directory
};

constexpr int kSpawnTimeoutMs = 30000;

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

[[noreturn]] void ChildFail(int status_fd, Stage stage, int err, int index = 0) {
  ChildReport r{stage, err, index};
  WriteAll(status_fd, reinterpret_cast<const char*>(&r), sizeof r);
  ::_exit(stage == kExec ? 127 : 126);
}

// Text for errno values, made before fork (strerror is not
// async-signal-safe).
const std::vector<std::string>& ErrnoTexts() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t(134);
    for (size_t e = 0; e < t.size(); ++e) t[e] = std::strerror(static_cast<int>(e));
    return t;
  }();
  return texts;
}

// "PREFIX<strerror>SUFFIX\n" to fd, async-signal-safe.
void WriteReason(int fd, const std::string& prefix, int err, const std::string& suffix) {
  const auto& texts = ErrnoTexts();
  WriteAll(fd, prefix.data(), prefix.size());
  if (err > 0 && static_cast<size_t>(err) < texts.size()) {
    WriteAll(fd, texts[err].data(), texts[err].size());
  } else {
    char num[24];
    const size_t k = FormatInt(num, err);
    WriteAll(fd, "errno ", 6);
    WriteAll(fd, num, k);
  }
  WriteAll(fd, suffix.data(), suffix.size());
}

// A descriptor at 3 or above (the child rearranges 0-2), close-on-exec.
int AboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

std::string StageMessage(const SpawnRequest& req, const ChildReport& r) {
  const std::string err = std::strerror(r.err);
  const UnixAccount& a = *req.account;
  const std::string who = "'" + a.name + "' (uid " + std::to_string(a.uid) + ")";
  switch (r.stage) {
    case kJoinCgroup:
      return "cannot join the job's cgroup (file " + std::to_string(r.index) + "): " + err;
    case kMountNamespace:
      return "cannot enter the job's mount namespace (its private /tmp and /dev/shm): " + err;
    case kSetGroups:
    case kSetGid:
    case kSetUid:
      return "cannot switch to account " + who + ": " + err;
    case kStillPrivileged:
      return "after switching to account " + who +
             " the process could become root again; refusing to run it";
    case kDevNull:
      return "cannot open /dev/null: " + err;
    case kOpenLog:
      return "cannot open the log " + req.log_path + " as " + who + ": " + err +
             ": remove what is in its place, and make every directory above it traversable by "
             "others (e.g. mode 0711)";
    case kLogNotOwned:
      return "the log " + req.log_path + " is not a regular file owned by " + who + ": remove it";
    case kRequiredDir:
      return "the job's directory " + req.required_dir + " is not usable by " + who + ": " + err +
             ": every directory above it must be traversable by others (e.g. mode 0711)";
    case kChdir: {
      const size_t i = static_cast<size_t>(r.index);
      const std::string wd = i < req.wd_candidates.size() ? req.wd_candidates[i] : "?";
      return "working directory " + wd + " is not accessible to " + who + ": " + err +
             ": create it or give the account access";
    }
    default:
      return "setup failed (stage " + std::to_string(r.stage) + "): " + err;
  }
}

}  // namespace

ssize_t ReadBefore(int fd, void* buf, size_t size, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return kReadTimedOut;
    pollfd p{fd, POLLIN, 0};
    // Interrupted, failed or timed out: the deadline, checked above, decides.
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fd, buf, size);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

core::Result<SpawnResult> SpawnRank(const SpawnRequest& req) {
  const UnixAccount& acct = *req.account;
  // Everything the child touches, laid out now.
  std::vector<char*> argv;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char> header(req.log_header.begin(), req.log_header.end());
  const size_t header_len = header.size();
  header.resize(header_len + 32);
  std::vector<const char*> wds;
  for (const auto& w : req.wd_candidates) wds.push_back(w.c_str());
  const std::vector<gid_t>& groups = acct.groups;
  const bool switch_identity = ::geteuid() == 0;
  const char* required_dir = req.required_dir.empty() ? nullptr : req.required_dir.c_str();
  static const char kExecFail[] = "=== topo-agent: exec failed, errno ";
  (void)ErrnoTexts();  // built here, never in the child
  const std::string who = acct.name + " (uid " + std::to_string(acct.uid) + ")";
  const std::string chdir_prefix =
      "=== topo-agent: cannot enter the working directory " +
      (req.wd_candidates.empty() ? std::string() : req.wd_candidates[0]) + " as " + who + ": ";
  const std::string chdir_suffix =
      ": create it, give the account access, or submit with another --chdir; exit status 126 "
      "===\n";
  const std::string output_prefix =
      "=== topo-agent: cannot open the output file " + req.output_path + " as " + who + ": ";
  const std::string error_prefix =
      "=== topo-agent: cannot open the error file " + req.error_path + " as " + who + ": ";
  const std::string file_suffix =
      ": the account must be able to create or append to it (a relative name is in the working "
      "directory); exit status 126 ===\n";
  const char* output_path = req.output_path.empty() ? nullptr : req.output_path.c_str();
  const char* error_path = req.error_path.empty() ? nullptr : req.error_path.c_str();

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    return core::Status::Error(req.what + ": cannot create a pipe: " + std::strerror(errno));
  }
  const int status_r = AboveStdio(pipefd[0]);
  const int status_w = AboveStdio(pipefd[1]);
  if (status_r < 0 || status_w < 0) {
    if (status_r >= 0) ::close(status_r);
    if (status_w >= 0) ::close(status_w);
    return core::Status::Error(req.what + ": cannot set up the status pipe");
  }

  // Signals stay blocked across fork until the child has reset every handler
  // to the default: a Stop() right after Launch() must not run the agent's
  // own handlers in the not-yet-exec'd child.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = ::fork();
  if (pid == 0) {
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
    // The cgroups first, while still root: everything the rank ever forks
    // starts inside them.
    for (size_t i = 0; i < req.cgroup_fds.size(); ++i) {
      if (::write(req.cgroup_fds[i], "0", 1) != 1) {
        ChildFail(status_w, kJoinCgroup, errno, static_cast<int>(i));
      }
    }
    // Then the job's own /tmp and /dev/shm: every page the rank writes there
    // is charged to the cgroup it is in by now.
    if (req.mount_ns_fd >= 0 && ::setns(req.mount_ns_fd, CLONE_NEWNS) != 0) {
      ChildFail(status_w, kMountNamespace, errno);
    }
    if (switch_identity) {
      if (::setgroups(groups.size(), groups.data()) != 0) ChildFail(status_w, kSetGroups, errno);
      if (::setgid(acct.gid) != 0) ChildFail(status_w, kSetGid, errno);
      if (::setuid(acct.uid) != 0) ChildFail(status_w, kSetUid, errno);
    }
    if (switch_identity && (::getuid() != acct.uid || ::geteuid() != acct.uid ||
                            ::getgid() != acct.gid || ::getegid() != acct.gid)) {
      ChildFail(status_w, kSetUid, EPERM);
    }
    if (acct.uid != 0 && (::setuid(0) == 0 || ::seteuid(0) == 0)) {
      ChildFail(status_w, kStillPrivileged, EPERM);
    }
    // From here on as the account: the log and the working directory are
    // opened with its rights, never root's.
    int devnull = AboveStdio(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (devnull < 0) ChildFail(status_w, kDevNull, errno);
    int log_fd = ::open(
        req.log_path.c_str(),
        O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (log_fd < 0) ChildFail(status_w, kOpenLog, errno);
    log_fd = AboveStdio(log_fd);
    struct stat st;
    if (log_fd < 0 || ::fstat(log_fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != acct.uid) {
      ChildFail(status_w, kLogNotOwned, EPERM);
    }
    ::fcntl(log_fd, F_SETFL, ::fcntl(log_fd, F_GETFL) & ~O_NONBLOCK);
    if ((st.st_mode & 07777) != 0600) ::fchmod(log_fd, 0600);
    size_t n = header_len;
    n += FormatInt(header.data() + n, static_cast<long>(::getpid()));
    const char tail[] = " ===\n";
    for (size_t i = 0; i + 1 < sizeof tail; ++i) header[n++] = tail[i];
    WriteAll(log_fd, header.data(), n);
    bool in_wd = false;
    for (size_t i = 0; i < wds.size() && !in_wd; ++i) {
      if (::chdir(wds[i]) == 0) {
        in_wd = true;
      } else if (req.wd_required) {
        const int err = errno;
        WriteReason(log_fd, chdir_prefix, err, chdir_suffix);
        ChildFail(status_w, kJobChdir, err, static_cast<int>(i));
      }
    }
    if (!in_wd) ChildFail(status_w, kChdir, ENOENT, 0);
    // access() checks the real ids: the account's by now.
    if (required_dir && ::access(required_dir, R_OK | W_OK | X_OK) != 0) {
      ChildFail(status_w, kRequiredDir, errno);
    }
    // The job's own files, as the account, relative to its working directory.
    constexpr int kOutFlags = O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY | O_CLOEXEC;
    int out_fd = log_fd;
    if (output_path) {
      out_fd = AboveStdio(::open(output_path, kOutFlags, 0600));
      if (out_fd < 0) {
        const int err = errno;
        WriteReason(log_fd, output_prefix, err, file_suffix);
        ChildFail(status_w, kOpenOutput, err);
      }
    }
    int err_fd = out_fd;
    if (error_path) {
      err_fd = AboveStdio(::open(error_path, kOutFlags, 0600));
      if (err_fd < 0) {
        const int err = errno;
        WriteReason(log_fd, error_prefix, err, file_suffix);
        ChildFail(status_w, kOpenError, err);
      }
    }
    ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    // Nothing of the agent's survives exec but 0-2 (the status pipe and the
    // log, when output goes elsewhere, close on exec, which tells the parent
    // the exec happened).
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(req.exe.c_str(), argv.data(), envp.data());
    int err = errno;
    for (int fd : {log_fd, 2}) {
      if (fd == 2 && err_fd == log_fd) break;
      WriteAll(fd, kExecFail, sizeof kExecFail - 1);
      char num[24];
      size_t k = FormatInt(num, err);
      num[k++] = '\n';
      WriteAll(fd, num, k);
    }
    ChildFail(status_w, kExec, err);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(status_w);
  if (pid < 0) {
    ::close(status_r);
    return core::Status::Error(req.what + ": fork failed: " + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // both sides set it: no race with an early kill(-pid)

  // Wait for exec (EOF: the pipe closed on exec) or a report.
  ChildReport report;
  size_t got = 0;
  bool timed_out = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kSpawnTimeoutMs);
  while (got < sizeof report) {
    const ssize_t r =
        ReadBefore(status_r, reinterpret_cast<char*>(&report) + got, sizeof report - got, deadline);
    if (r == kReadTimedOut) {
      timed_out = true;
      break;
    }
    if (r <= 0) break;  // EOF (or an error)
    got += static_cast<size_t>(r);
  }
  ::close(status_r);
  if (timed_out) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return core::Status::Error(req.what + ": the new process did not reach exec within " +
                               std::to_string(kSpawnTimeoutMs / 1000) + " s; killed it");
  }
  if (got == 0) return SpawnResult{pid, false};
  if (got == sizeof report && (report.stage == kExec || report.stage == kJobChdir ||
                               report.stage == kOpenOutput || report.stage == kOpenError)) {
    return SpawnResult{pid, true};
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != sizeof report) {
    return core::Status::Error(req.what + ": the new process failed before exec (short report)");
  }
  return core::Status::Error(req.what + ": " + StageMessage(req, report));
}

}  // namespace topo::agent
