// Checkpoint protocol on the file system (CHECKPOINTS.md): step-N/ plus
// step-N/COMPLETE, and the crash-safe copy to the persistent tier.

#include <fcntl.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "topo/agent/supervisor.hpp"

namespace topo::agent {
namespace fs = std::filesystem;

namespace {

constexpr const char* kComplete = "COMPLETE";

std::optional<int64_t> ParseStepName(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return std::nullopt;
  int64_t v = 0;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v < 0) return std::nullopt;
  return v;
}

std::string StepName(int64_t step) { return "step-" + std::to_string(step); }

bool FsyncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// fsync every regular file and directory under root (root included).
void FsyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec))
      FsyncPath(it->path(), false);
    else if (it->is_directory(ec))
      FsyncPath(it->path(), true);
  }
  FsyncPath(root, true);
}

// This thread's file-system identity switched to an owner for a scope.
// setfsuid/setfsgid and the raw setgroups system call change the calling
// thread only (glibc's setgroups() would change every thread), so the
// agent's other threads keep root. Switching fsuid away from 0 also drops
// the file-system capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, ...) until it
// is switched back: the copy cannot reach what the owner cannot.
class ScopedFsIdentity {
 public:
  ScopedFsIdentity() = default;
  ScopedFsIdentity(const ScopedFsIdentity&) = delete;
  ScopedFsIdentity& operator=(const ScopedFsIdentity&) = delete;
  ~ScopedFsIdentity() { Restore(); }

  core::Status Enter(FileOwner owner) {
    if (owner.uid == ::geteuid() && owner.gid == ::getegid()) return core::Status::Ok();
    if (::geteuid() != 0) {
      return core::Status::Error("cannot write as uid " + std::to_string(owner.uid) +
                                 ": the agent is not root");
    }
    int n = ::getgroups(0, nullptr);
    saved_groups_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (n > 0 && ::getgroups(n, saved_groups_.data()) != n) {
      return core::Status::Error(std::string("getgroups: ") + std::strerror(errno));
    }
    saved_fsuid_ = static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1)));
    saved_fsgid_ = static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1)));
    entered_ = true;
    const gid_t g = owner.gid;
    if (::syscall(SYS_setgroups, 1, &g) != 0) {
      return core::Status::Error(std::string("setgroups: ") + std::strerror(errno));
    }
    ::setfsgid(owner.gid);
    ::setfsuid(owner.uid);
    if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != owner.uid ||
        static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != owner.gid) {
      return core::Status::Error("cannot switch to uid " + std::to_string(owner.uid) + " gid " +
                                 std::to_string(owner.gid) + " for the copy");
    }
    return core::Status::Ok();
  }

 private:
  void Restore() {
    if (!entered_) return;
    ::setfsuid(saved_fsuid_);
    ::setfsgid(saved_fsgid_);
    ::syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
    entered_ = false;
  }

  bool entered_ = false;
  uid_t saved_fsuid_ = 0;
  gid_t saved_fsgid_ = 0;
  std::vector<gid_t> saved_groups_;
};

core::Status Errno(const std::string& what) {
  return core::Status::Error(what + ": " + std::strerror(errno));
}

// Copies one regular file, never following a symlink at either end; the
// copy is 0600 and durable.
core::Status CopyFile(const fs::path& src, const fs::path& dst) {
  int in = ::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return Errno("opening " + src.string());
  int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    auto st = Errno("creating " + dst.string());
    ::close(in);
    return st;
  }
  core::Status st;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = Errno("reading " + src.string());
      break;
    }
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(out, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        st = Errno("writing " + dst.string());
        break;
      }
      off += w;
    }
    if (!st.ok()) break;
  }
  if (st.ok() && ::fchmod(out, 0600) != 0) st = Errno("chmod " + dst.string());
  if (st.ok() && ::fsync(out) != 0) st = Errno("fsync " + dst.string());
  ::close(in);
  ::close(out);
  return st;
}

// src (a directory) into the existing directory dst: directories 0700,
// files 0600, symlinks as symlinks, anything else (and an entry named skip)
// skipped.
core::Status CopyTree(const fs::path& src, const fs::path& dst, int depth,
                      const char* skip = nullptr) {
  if (depth > 64) return core::Status::Error(src.string() + ": nested too deep");
  std::error_code ec;
  for (auto it = fs::directory_iterator(src, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const fs::path from = it->path();
    if (skip && from.filename() == skip) continue;
    const fs::path to = dst / from.filename();
    struct stat st;
    if (::lstat(from.c_str(), &st) != 0) return Errno("stat " + from.string());
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(to.c_str(), 0700) != 0) return Errno("mkdir " + to.string());
      ::chmod(to.c_str(), 0700);
      if (auto s = CopyTree(from, to, depth + 1); !s.ok()) return s;
    } else if (S_ISREG(st.st_mode)) {
      if (auto s = CopyFile(from, to); !s.ok()) return s;
    } else if (S_ISLNK(st.st_mode)) {
      std::vector<char> target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1);
      ssize_t n = ::readlink(from.c_str(), target.data(), target.size() - 1);
      if (n < 0) return Errno("readlink " + from.string());
      target[static_cast<size_t>(n)] = 0;
      if (::symlink(target.data(), to.c_str()) != 0) return Errno("symlink " + to.string());
    }
  }
  if (ec) return core::Status::Error("reading " + src.string() + ": " + ec.message());
  return core::Status::Ok();
}

}  // namespace

std::vector<int64_t> CompleteSteps(const std::string& dir) {
  std::vector<int64_t> out;
  if (dir.empty()) return out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto step = ParseStepName(it->path().filename().string());
    if (!step) continue;
    std::error_code ec2;
    if (!it->is_directory(ec2)) continue;
    if (fs::is_regular_file(it->path() / kComplete, ec2)) out.push_back(*step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<RestartPoint> NewestRestartStep(const std::string& local_dir,
                                              const std::string& persistent_dir,
                                              bool node_survived) {
  std::optional<RestartPoint> best;
  auto persistent = CompleteSteps(persistent_dir);
  if (!persistent.empty()) {
    best = RestartPoint{persistent.back(), CheckpointTier::kPersistent,
                        (fs::path(persistent_dir) / StepName(persistent.back())).string()};
  }
  if (node_survived) {
    auto local = CompleteSteps(local_dir);
    if (!local.empty() && (!best || local.back() > best->step)) {
      best = RestartPoint{local.back(), CheckpointTier::kLocal,
                          (fs::path(local_dir) / StepName(local.back())).string()};
    }
  }
  return best;
}

core::Status CopyCompleteStep(const std::string& src_dir, const std::string& dst_dir, int64_t step,
                              std::optional<FileOwner> owner) {
  const fs::path src = fs::path(src_dir) / StepName(step);
  const fs::path dst = fs::path(dst_dir) / StepName(step);
  const fs::path tmp = fs::path(dst_dir) / ("." + StepName(step) + ".tmp");
  std::error_code ec;
  if (!owner) {
    struct stat st;
    if (::stat(dst_dir.c_str(), &st) == 0) owner = FileOwner{st.st_uid, st.st_gid};
  }
  ScopedFsIdentity as_owner;
  if (owner) {
    if (auto s = as_owner.Enter(*owner); !s.ok()) {
      return core::Status::Error("copying " + src.string() + ": " + s.message());
    }
  }
  if (!fs::is_regular_file(src / kComplete, ec)) {
    return core::Status::Error("checkpoint " + src.string() + " is not complete (no COMPLETE)");
  }
  if (fs::is_regular_file(dst / kComplete, ec)) return core::Status::Ok();  // already there
  if (!fs::is_directory(dst_dir, ec)) {
    const fs::path parent = fs::path(dst_dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (::mkdir(dst_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Errno("cannot create " + dst_dir);
    }
  }
  fs::remove_all(tmp, ec);
  if (::mkdir(tmp.c_str(), 0700) != 0) return Errno("cannot create " + tmp.string());
  // 1. Everything but COMPLETE into the temp directory.
  core::Status copied = CopyTree(src, tmp, 0, kComplete);
  if (!copied.ok()) {
    std::error_code rec;
    fs::remove_all(tmp, rec);
    return copied;
  }
  FsyncTree(tmp);
  // 2. Rename into place (a leftover incomplete step-N from a crash goes first).
  fs::remove_all(dst, ec);
  fs::rename(tmp, dst, ec);
  if (ec) return core::Status::Error("renaming to " + dst.string() + ": " + ec.message());
  FsyncPath(dst_dir, true);
  // 3. COMPLETE last, with the source's content, itself atomically.
  std::string content;
  {
    std::ifstream in(src / kComplete, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    content = ss.str();
  }
  const fs::path ctmp = dst / ".COMPLETE.tmp";
  int fd = ::open(ctmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot write " + ctmp.string());
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ok && ::fchmod(fd, 0600) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return core::Status::Error("cannot write " + ctmp.string());
  fs::rename(ctmp, dst / kComplete, ec);
  if (ec) return core::Status::Error("renaming " + ctmp.string() + ": " + ec.message());
  FsyncPath(dst, true);
  return core::Status::Ok();
}

core::Status PruneCompleteSteps(const std::string& dir, size_t keep,
                                std::optional<FileOwner> owner) {
  if (keep == 0 || dir.empty()) return core::Status::Ok();
  const std::vector<int64_t> complete = CompleteSteps(dir);
  if (complete.size() <= keep) return core::Status::Ok();
  const int64_t oldest_kept = complete[complete.size() - keep];
  ScopedFsIdentity as_owner;
  if (owner) {
    if (auto s = as_owner.Enter(*owner); !s.ok()) {
      return core::Status::Error("pruning " + dir + ": " + s.message());
    }
  }
  // Every step-N older than the oldest kept, complete or not (an older
  // incomplete one can never complete any more: its copy was replaced).
  std::error_code ec;
  std::vector<fs::path> old;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const auto step = ParseStepName(it->path().filename().string());
    if (step && *step < oldest_kept) old.push_back(it->path());
  }
  std::string failed;
  for (const fs::path& p : old) {
    // Not followed if it is a symlink: remove_all removes the link itself.
    std::error_code rec;
    fs::remove_all(p, rec);
    if (rec && failed.empty()) failed = p.string() + ": " + rec.message();
  }
  if (!failed.empty()) return core::Status::Error("cannot prune " + failed);
  return core::Status::Ok();
}

core::Status RemoveCheckpointDir(const std::string& dir, FileOwner owner) {
  if (dir.empty()) return core::Status::Ok();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return core::Status::Ok();
  {
    // Its content as the owner: nothing a job planted in it (a symlink, a
    // directory swapped for one) can make root remove anything else.
    ScopedFsIdentity as_owner;
    if (auto s = as_owner.Enter(owner); !s.ok()) {
      return core::Status::Error("removing " + dir + ": " + s.message());
    }
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      std::error_code rec;
      fs::remove_all(it->path(), rec);
      if (rec)
        return core::Status::Error("cannot remove " + it->path().string() + ": " + rec.message());
    }
    if (ec) return core::Status::Error("cannot read " + dir + ": " + ec.message());
  }
  // The directory itself, in a root-owned root: root's to remove (empty).
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove " + dir);
  return core::Status::Ok();
}

}  // namespace topo::agent
