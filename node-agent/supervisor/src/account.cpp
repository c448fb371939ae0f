// Account lookup and the per-job private directories (account.hpp).

#include "topo/agent/account.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace topo::agent {
namespace fs = std::filesystem;

namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string ModeText(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Hands one root-written tree to owner. Only directories that root owns and
// nobody else may write are entered: their content cannot have been placed
// by a user, so no symlink or hard link in them was planted to make root
// chown something else. Entries already owned by owner are left alone.
core::Status HandOver(const std::string& dir, FileOwner owner, int depth) {
  if (depth > 64) return core::Status::Error(dir + ": directories nested too deep to hand over");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return core::Status::Error("cannot read " + dir + ": " + Errno(errno));
  core::Status result;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;  // removed meanwhile
    if (st.st_uid == owner.uid) continue;
    if (st.st_uid != 0) {
      result = core::Status::Error(path + " belongs to uid " + std::to_string(st.st_uid) +
                                   ", neither root nor the job's account: remove it");
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        result = core::Status::Error(path + " is writable by others (mode " + ModeText(st.st_mode) +
                                     "): remove it");
        break;
      }
      if (auto sub = HandOver(path, owner, depth + 1); !sub.ok()) {
        result = sub;
        break;
      }
      ::chmod(path.c_str(), 0700);
    } else if (S_ISREG(st.st_mode)) {
      ::chmod(path.c_str(), 0600);
    }
    if (::lchown(path.c_str(), owner.uid, owner.gid) != 0) {
      result = core::Status::Error("cannot hand " + path + " to uid " + std::to_string(owner.uid) +
                                   ": " + Errno(errno));
      break;
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace

std::string NodeName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "(unknown node)";
  return buf;
}

core::Result<UnixAccount> ResolveUnixAccount(const std::string& name, bool* missing) {
  bool none = false;
  if (missing == nullptr) missing = &none;
  *missing = true;
  if (name.empty()) {
    return core::Status::Error(
        "the job names no Unix account (unix_user is empty): the scheduler must send the "
        "submitter's account");
  }
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = 0;
  while ((err = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE) {
    if (buf.size() > (1u << 22)) break;
    buf.resize(buf.size() * 2);
  }
  if (err != 0 && err != ENOENT && err != ESRCH && err != EBADF && err != EPERM) {
    *missing = false;
    return core::Status::Error("cannot look up Unix account '" + name + "' on node " + NodeName() +
                               ": " + Errno(err));
  }
  if (!found) {
    return core::Status::Error("no Unix account '" + name + "' on this node (" + NodeName() +
                               "): create it or set the user's unix_user");
  }
  *missing = false;
  UnixAccount a;
  a.name = pw.pw_name;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.home = pw.pw_dir ? pw.pw_dir : "";
  a.shell = pw.pw_shell ? pw.pw_shell : "";
  int n = 32;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  for (int tries = 0; tries < 8; ++tries) {
    int want = n;
    if (::getgrouplist(a.name.c_str(), a.gid, groups.data(), &want) >= 0) {
      groups.resize(static_cast<size_t>(want));
      a.groups = std::move(groups);
      return a;
    }
    n = want > n ? want : n * 2;
    groups.resize(static_cast<size_t>(n));
  }
  return core::Status::Error("cannot list the groups of Unix account '" + name + "' on node " +
                             NodeName());
}

core::Result<UnixAccount> JobAccount(const std::string& unix_user, const AccountPolicy& policy,
                                     bool* permanent) {
  bool missing = false;
  core::Result<UnixAccount> acct = ResolveUnixAccount(unix_user, &missing);
  *permanent = missing;
  if (!acct.ok()) {
    if (!missing) return acct.status();
    return core::Status::Error(
        acct.message() + " (accounts must exist on every node, from the site's passwd database)");
  }
  const UnixAccount& a = acct.value();
  if (a.uid == 0 && !policy.allow_root) {
    *permanent = true;
    return core::Status::Error(
        "jobs may not run as root; unix_user '" + unix_user + "' has uid 0 on node " + NodeName() +
        ": map the user to an ordinary account (PATCH /v1/users/NAME {\"unix_user\": ...}), or "
        "allow root jobs on the node (topo-agent --allow-root-jobs)");
  }
  if (a.uid != 0 && a.uid < policy.min_uid) {
    *permanent = true;
    return core::Status::Error(
        "Unix account '" + a.name + "' has uid " + std::to_string(a.uid) + " on node " +
        NodeName() + ", below this node's floor of " + std::to_string(policy.min_uid) +
        " for job accounts (topo-agent --min-job-uid, TOPO_AGENT_MIN_JOB_UID in "
        "topo-agent.conf): map the user to an ordinary account (PATCH /v1/users/NAME "
        "{\"unix_user\": ...}), or lower the floor on the nodes");
  }
  if (::geteuid() != 0 && a.uid != ::geteuid()) {
    return core::Status::Error("the agent runs as uid " + std::to_string(::geteuid()) +
                               ", not root, so it can only run jobs as its own account, not as '" +
                               a.name + "': run topo-agent as root");
  }
  return acct;
}

core::Status EnsureTraversableRoot(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return core::Status::Error("cannot create " + path + ": " + ec.message());
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return core::Status::Error(path +
                               " is not a directory (or is a symlink): point the root elsewhere");
  }
  if (::geteuid() == 0 && (st.st_uid != 0 || st.st_gid != 0) && ::chown(path.c_str(), 0, 0) != 0) {
    return core::Status::Error("cannot give " + path + " to root: " + Errno(errno));
  }
  if ((st.st_mode & 07777) != 0711 && ::chmod(path.c_str(), 0711) != 0) {
    return core::Status::Error("cannot set mode 0711 on " + path + ": " + Errno(errno));
  }
  return core::Status::Ok();
}

core::Status EnsurePrivateDir(const std::string& path, FileOwner owner) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return core::Status::Error("cannot stat " + path + ": " + Errno(errno));
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::exists(parent)) {
      if (auto s = EnsureTraversableRoot(parent.string()); !s.ok()) return s;
    }
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return core::Status::Error("cannot create " + path + ": " + Errno(errno));
    }
    if (::lstat(path.c_str(), &st) != 0) {
      return core::Status::Error("cannot stat " + path + ": " + Errno(errno));
    }
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    return core::Status::Error(path + " is not a directory (or is a symlink): remove it");
  }
  if (st.st_uid != owner.uid) {
    if (st.st_uid != 0) {
      return core::Status::Error(path + " belongs to uid " + std::to_string(st.st_uid) +
                                 ", not to the job's account (uid " + std::to_string(owner.uid) +
                                 "): remove it or run the job as its owner");
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      return core::Status::Error(path + " is writable by others (mode " + ModeText(st.st_mode) +
                                 "): remove it");
    }
    if (auto s = HandOver(path, owner, 0); !s.ok()) return s;
    if (::lchown(path.c_str(), owner.uid, owner.gid) != 0) {
      return core::Status::Error("cannot give " + path + " to uid " + std::to_string(owner.uid) +
                                 ": " + Errno(errno));
    }
  }
  if ((st.st_mode & 07777) != 0700 && ::chmod(path.c_str(), 0700) != 0) {
    return core::Status::Error("cannot set mode 0700 on " + path + ": " + Errno(errno));
  }
  return core::Status::Ok();
}

}  // namespace topo::agent
