// A job's private /tmp and /dev/shm (job_scratch.hpp).

#include "topo/agent/job_scratch.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace topo::agent {
namespace fs = std::filesystem;

namespace {

std::string Errno(int err) { return std::strerror(err); }

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountPath(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

// Whether PATH is a mount point in the agent's namespace.
bool IsMountPoint(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, dev, root, point;
    if (ss >> id >> parent >> dev >> root >> point && UnescapeMountPath(point) == path) return true;
  }
  return false;
}

// Where the child that makes a namespace failed.
enum Stage : int { kReady = 0, kUnshare, kSlave, kMountTmp, kMountShm };

struct ChildReport {
  int stage = 0;
  int err = 0;
};

void WriteReport(int fd, Stage stage, int err) {
  ChildReport r{stage, err};
  [[maybe_unused]] ssize_t n = ::write(fd, &r, sizeof r);
}

std::string StageText(int stage) {
  switch (stage) {
    case kUnshare:
      return "unshare(CLONE_NEWNS)";
    case kSlave:
      return "making the new namespace's mounts slaves of the node's";
    case kMountTmp:
      return "mounting a tmpfs on /tmp";
    case kMountShm:
      return "mounting a tmpfs on /dev/shm";
    default:
      return "setting up the namespace";
  }
}

}  // namespace

const char* ScratchModeName(ScratchMode mode) {
  switch (mode) {
    case ScratchMode::kOff:
      return "off";
    case ScratchMode::kAuto:
      return "auto";
    case ScratchMode::kOn:
      return "on";
  }
  return "?";
}

bool ParseScratchMode(const std::string& text, ScratchMode* out) {
  for (ScratchMode m : {ScratchMode::kOff, ScratchMode::kAuto, ScratchMode::kOn}) {
    if (text == ScratchModeName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

core::Status CheckTmpfsSize(const std::string& size) {
  auto bad = [&] {
    return core::Status::Error("tmpfs size '" + size.substr(0, 64) +
                               "' is neither bytes with an optional k, m, g or t suffix (\"64g\") "
                               "nor a percentage of the node's RAM, 1%..100% (\"50%\")");
  };
  if (size.empty() || size.size() > 20) return bad();
  size_t digits = 0;
  while (digits < size.size() && std::isdigit(static_cast<unsigned char>(size[digits]))) ++digits;
  if (digits == 0 || size[0] == '0') return bad();
  const std::string rest = size.substr(digits);
  if (rest == "%") {
    if (digits > 3 || std::stoi(size.substr(0, digits)) > 100) return bad();
    return core::Status::Ok();
  }
  if (digits > 15) return bad();
  if (rest.empty() ||
      (rest.size() == 1 && std::string("kKmMgGtT").find(rest[0]) != std::string::npos)) {
    return core::Status::Ok();
  }
  return bad();
}

JobScratch JobScratch::Open(const ScratchOptions& options) {
  JobScratch s;
  s.options_ = options;
  if (options.mode == ScratchMode::kOff) return s;
  auto fail = [&](const std::string& why) {
    s.problem_ = why;
    return s;
  };
  if (::geteuid() != 0) {
    return fail("the agent is not root: it mounts a tmpfs per job in a mount namespace of its own");
  }
  for (const char* dir : {"/tmp", "/dev/shm"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return fail(std::string(dir) + " is not a directory");
  }
  for (const std::string* size : {&options.tmp_size, &options.shm_size}) {
    if (core::Status st = CheckTmpfsSize(*size); !st.ok()) return fail(st.message());
  }
  if (options.pin_dir.empty()) return fail("no directory for the namespaces' pins");
  std::error_code ec;
  fs::create_directories(options.pin_dir, ec);
  if (ec) return fail("cannot create " + options.pin_dir + ": " + ec.message());
  ::chmod(options.pin_dir.c_str(), 0700);
  const std::string dir = fs::canonical(options.pin_dir, ec).string();
  if (ec) return fail("cannot resolve " + options.pin_dir + ": " + ec.message());
  s.options_.pin_dir = dir;
  // A private mount of its own: a mount namespace file can only be bound
  // where the bind propagates nowhere.
  if (!IsMountPoint(dir) && ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return fail("cannot bind-mount " + dir + " onto itself: " + Errno(errno));
  }
  if (::mount(nullptr, dir.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    return fail("cannot make " + dir + " a private mount: " + Errno(errno));
  }
  // Can this agent make a mount namespace? (CAP_SYS_ADMIN; a container
  // may not give it.)
  const pid_t probe = ::fork();
  if (probe == 0) ::_exit(::unshare(CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  if (probe < 0 || ::waitpid(probe, &status, 0) != probe || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return fail(
        "this agent cannot make a mount namespace (unshare(CLONE_NEWNS) needs "
        "CAP_SYS_ADMIN)");
  }
  s.usable_ = true;
  return s;
}

std::string JobScratch::Summary() const {
  const std::string shared =
      "/tmp and /dev/shm are the node's, shared by every job and kept after it";
  if (options_.mode == ScratchMode::kOff) return shared + " (--job-scratch off)";
  if (!usable_) {
    return options_.mode == ScratchMode::kOn
               ? "jobs cannot start here: --job-scratch on, but " + problem_
               : shared + " (--job-scratch auto: " + problem_ + ")";
  }
  return "each job gets a private /tmp (tmpfs, size " + options_.tmp_size + ") and /dev/shm (" +
         options_.shm_size +
         ") in a mount namespace of its own, charged to its memory cgroup and removed when it "
         "ends (--job-scratch " +
         ScratchModeName(options_.mode) + ")";
}

std::string JobScratch::PinPath(const std::string& job_id) const {
  return options_.pin_dir + "/" + job_id;
}

core::Result<std::string> JobScratch::Create(const std::string& job_id) const {
  const std::string pin = PinPath(job_id);
  const std::string what = "cannot make the private /tmp and /dev/shm of job " + job_id + ": ";
  if (!enabled()) return core::Status::Error(what + problem_);
  if (!Remove(pin)) return core::Status::Error(what + "an earlier pin " + pin + " stays");
  const int pin_fd =
      ::open(pin.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (pin_fd < 0) return core::Status::Error(what + "cannot create " + pin + ": " + Errno(errno));
  ::close(pin_fd);
  // Everything the child uses, made before fork.
  const std::string tmp_opts = "size=" + options_.tmp_size + ",mode=1777";
  const std::string shm_opts = "size=" + options_.shm_size + ",mode=1777";
  int report[2], go[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::unlink(pin.c_str());
    return core::Status::Error(what + "pipe: " + Errno(errno));
  }
  if (::pipe2(go, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(report[0]);
    ::close(report[1]);
    ::unlink(pin.c_str());
    return core::Status::Error(what + "pipe: " + Errno(err));
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::close(go[1]);
    if (::unshare(CLONE_NEWNS) != 0) {
      WriteReport(report[1], kUnshare, errno);
      ::_exit(1);
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
      WriteReport(report[1], kSlave, errno);
      ::_exit(1);
    }
    if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts.c_str()) != 0) {
      WriteReport(report[1], kMountTmp, errno);
      ::_exit(1);
    }
    if (::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm_opts.c_str()) != 0) {
      WriteReport(report[1], kMountShm, errno);
      ::_exit(1);
    }
    WriteReport(report[1], kReady, 0);
    char b;
    // Until the agent has pinned the namespace (it closes `go`).
    while (::read(go[0], &b, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  const int fork_errno = errno;
  ::close(report[1]);
  ::close(go[0]);
  if (pid < 0) {
    ::close(report[0]);
    ::close(go[1]);
    ::unlink(pin.c_str());
    return core::Status::Error(what + "fork: " + Errno(fork_errno));
  }
  ChildReport r{-1, 0};
  ssize_t got = 0;
  while ((got = ::read(report[0], &r, sizeof r)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  std::string error;
  if (got != static_cast<ssize_t>(sizeof r)) {
    error = "the helper process ended before it made the namespace";
  } else if (r.stage != kReady) {
    error = StageText(r.stage) + ": " + Errno(r.err);
  } else {
    const std::string ns = "/proc/" + std::to_string(pid) + "/ns/mnt";
    if (::mount(ns.c_str(), pin.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      error = "cannot pin the namespace at " + pin + ": " + Errno(errno);
    }
  }
  ::close(go[1]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (!error.empty()) {
    Remove(pin);
    return core::Status::Error(what + error);
  }
  return pin;
}

bool JobScratch::Remove(const std::string& pin) {
  if (pin.empty()) return true;
  // EINVAL: not a mount (never pinned, or detached already).
  ::umount2(pin.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  if (::unlink(pin.c_str()) != 0 && errno != ENOENT) return false;
  return true;
}

void JobScratch::RemoveStale(const std::set<std::string>& known_job_ids) const {
  if (!enabled()) return;  // a pin dir this agent made (a private mount of its own)
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.pin_dir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (known_job_ids.count(name) == 0) Remove(it->path().string());
  }
}

}  // namespace topo::agent
