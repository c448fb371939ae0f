#pragma once
// Helpers for the supervisor tests: temp dirs, real Unix accounts, private
// cgroup roots, rank scripts, polling. Everything a helper creates is removed
// by its destructor; CleanStaleTestArtifacts() removes what a crashed earlier
// run (its pid gone) left behind.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "topo/agent/cgroup.hpp"
#include "topo/agent/supervisor.hpp"

namespace topo::agent::testing {

// A private temp dir, traversable (0711) so the test accounts can reach the
// scripts and directories the test puts in it.
class TempDir {
 public:
  // base: where (a rank in a job with a private /tmp cannot see the node's).
  explicit TempDir(const std::string& base = std::filesystem::temp_directory_path().string()) {
    std::string tmpl = (std::filesystem::path(base) / "topo-sup-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
    if (!path_.empty()) ::chmod(path_.c_str(), 0711);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& sub) const { return path_ + "/" + sub; }

 private:
  std::string path_;
};

inline std::string WriteScript(const std::string& path, const std::string& body) {
  {
    std::ofstream out(path);
    out << "#!/bin/sh\n" << body << "\n";
  }
  ::chmod(path.c_str(), 0755);
  return path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::map<std::string, std::string> ParseEnvDump(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("===", 0) == 0) continue;  // the supervisor's log header
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// The uid floor the tests' supervisors run with: the system account range
// TestAccount's accounts come from (login.defs SYS_UID_MIN).
inline constexpr uid_t kTestMinJobUid = 100;

inline std::string TestPrefix() { return "topo-t-" + std::to_string(::getpid()) + "-"; }

inline int Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Is the calling process root (the tests that create accounts need it)?
inline bool IsRoot() { return ::geteuid() == 0; }

// A real Unix account (useradd --system --no-create-home), with an extra
// supplementary group of its own; removed (with the group) on destruction.
// Its uid is a system account's (SYS_UID_MIN..SYS_UID_MAX, 100..999 on
// Debian), below the supervisor's default floor: the sandbox's options
// lower the floor to kTestMinJobUid, as a site would with --min-job-uid.
class TestAccount {
 public:
  explicit TestAccount(const std::string& suffix) {
    static std::atomic<int> seq{0};
    name_ = TestPrefix() + suffix + std::to_string(seq++);
    group_ = name_ + "g";
    // useradd takes a lock on /etc/passwd that other processes may hold.
    for (int i = 0; i < 50 && !ok_; ++i) {
      if (Run("getent group " + group_) != 0) Run("groupadd --system " + group_);
      Run("useradd --system --no-create-home --shell /usr/sbin/nologin -G " + group_ + " " + name_);
      ok_ = Run("getent passwd " + name_) == 0;
      if (!ok_) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~TestAccount() {
    for (int i = 0; i < 50 && Run("getent passwd " + name_) == 0; ++i) {
      Run("userdel " + name_);
      if (Run("getent passwd " + name_) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    for (int i = 0; i < 50 && Run("getent group " + group_) == 0; ++i) {
      Run("groupdel " + group_);
      if (Run("getent group " + group_) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  TestAccount(const TestAccount&) = delete;
  TestAccount& operator=(const TestAccount&) = delete;
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  const std::string& extra_group() const { return group_; }

 private:
  std::string name_, group_;
  bool ok_ = false;
};

// Kills what is left in a cgroup tree and removes it, bottom up.
inline void RemoveCgroupTree(const std::string& root, CgroupMode mode) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return;
  for (auto it = std::filesystem::directory_iterator(root, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->is_directory()) RemoveCgroupTree(it->path().string(), mode);
  }
  JobCgroup cg;
  cg.mode = mode;
  cg.dirs = {root};
  cg.KillAndRemove(3000);
}

// A cgroup root of this test's own, in the node's tracking hierarchy
// (kV2 or kV1, as detected) or explicitly in the v1 freezer hierarchy.
// Everything under it (and the v1 limit roots) is removed at the end.
class TestCgroupRoot {
 public:
  enum class Kind { kDetected, kV1Freezer };
  explicit TestCgroupRoot(Kind kind = Kind::kDetected) {
    static std::atomic<int> seq{0};
    const std::string leaf = TestPrefix() + "cg" + std::to_string(seq++);
    if (kind == Kind::kV1Freezer) {
      if (std::filesystem::exists("/sys/fs/cgroup/freezer/cgroup.procs")) {
        root_ = "/sys/fs/cgroup/freezer/" + leaf;
      }
    } else {
      auto detected = CgroupManager::Detect(CgroupOptions{});
      if (detected.usable()) {
        root_ =
            (std::filesystem::path(detected.Describe().track_root).parent_path() / leaf).string();
      }
    }
    if (!root_.empty()) {
      info_ = CgroupManager::Detect(CgroupOptions{root_}).Describe();
      if (info_.mode == CgroupMode::kNone) root_.clear();
    }
  }
  ~TestCgroupRoot() {
    if (root_.empty()) return;
    RemoveCgroupTree(root_, info_.mode);
    for (const auto& r : info_.v1_roots) RemoveCgroupTree(r, CgroupMode::kV1);
  }
  TestCgroupRoot(const TestCgroupRoot&) = delete;
  TestCgroupRoot& operator=(const TestCgroupRoot&) = delete;
  bool usable() const { return !root_.empty(); }
  const std::string& root() const { return root_; }
  const CgroupInfo& info() const { return info_; }

 private:
  std::string root_;
  CgroupInfo info_;
};

// Removes accounts, groups and cgroup roots named topo-t-PID-* whose PID no
// longer runs (a crashed earlier test run).
inline void CleanStaleTestArtifacts() {
  if (!IsRoot()) return;
  auto dead = [](const std::string& name) {
    if (name.rfind("topo-t-", 0) != 0) return false;
    const std::string rest = name.substr(7);
    const auto dash = rest.find('-');
    if (dash == std::string::npos) return false;
    const std::string pid = rest.substr(0, dash);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
    return pid != std::to_string(::getpid()) && !std::filesystem::exists("/proc/" + pid);
  };
  auto names = [](const std::string& file) {
    std::vector<std::string> out;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) out.push_back(line.substr(0, line.find(':')));
    return out;
  };
  for (const auto& n : names("/etc/passwd")) {
    if (dead(n)) Run("userdel " + n);
  }
  for (const auto& n : names("/etc/group")) {
    if (dead(n)) Run("groupdel " + n);
  }
  std::error_code ec;
  for (const char* top :
       {"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer",
        "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/devices"}) {
    for (auto it = std::filesystem::recursive_directory_iterator(top, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() > 3) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_directory() && dead(it->path().filename().string())) {
        it.disable_recursion_pending();
        RemoveCgroupTree(it->path().string(), std::filesystem::exists(it->path() / "cgroup.kill")
                                                  ? CgroupMode::kV2
                                                  : CgroupMode::kV1);
      }
    }
  }
}

// One test's world: a temp dir with a world-writable out/ for the ranks, an
// account, and a private cgroup root.
struct Sandbox {
  explicit Sandbox(TestCgroupRoot::Kind kind = TestCgroupRoot::Kind::kDetected,
                   const std::string& base = std::filesystem::temp_directory_path().string())
      : t(base), user("a"), cgroup(kind) {
    out = t / "out";
    std::filesystem::create_directories(out);
    ::chmod(out.c_str(), 01777);
  }
  TempDir t;
  TestAccount user;
  TestCgroupRoot cgroup;
  std::string out;

  SupervisorOptions Options() const {
    SupervisorOptions o;
    o.state_dir = t / "state";
    o.log_dir = t / "logs";
    o.local_checkpoint_root = t / "local";
    o.persistent_checkpoint_root = t / "persistent";
    o.cgroup_root = cgroup.usable() ? cgroup.root() : "none";
    o.min_job_uid = kTestMinJobUid;  // TestAccount's accounts are system accounts
    return o;
  }
  JobLaunch Job(const std::string& id, const std::string& script, int nranks) const {
    JobLaunch l;
    l.job_id = id;
    l.argv = {script};
    l.unix_user = user.name();
    l.parallelism.dp = nranks;
    for (int r = 0; r < nranks; ++r) l.ranks.push_back(LocalRankSpec{r, r, {}});
    l.env["OUT_DIR"] = out;
    return l;
  }
};

// Polls until pred(events so far) holds or timeout; returns every event seen.
inline std::vector<SupervisorEvent> PollUntil(
    RankSupervisor& sup, const std::function<bool(const std::vector<SupervisorEvent>&)>& pred,
    int timeout_ms = 10000) {
  std::vector<SupervisorEvent> all;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& e : sup.Poll()) all.push_back(std::move(e));
    if (pred(all)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return all;
}

inline bool HasEvent(const std::vector<SupervisorEvent>& evs, EventKind k, const std::string& job,
                     int64_t step = -1) {
  for (const auto& e : evs) {
    if (e.kind == k && e.job_id == job && (step < 0 || e.step == step)) return true;
  }
  return false;
}

inline auto Finished(const std::string& job) {
  return [job](const std::vector<SupervisorEvent>& evs) {
    return HasEvent(evs, EventKind::kJobFinished, job);
  };
}

inline bool WaitForFile(const std::string& path, int timeout_ms = 10000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A pid a rank wrote into a file (waits for the file and a complete line).
inline pid_t ReadPidFile(const std::string& path) {
  if (!WaitForFile(path)) return 0;
  for (int i = 0; i < 200; ++i) {
    const std::string s = ReadFile(path);
    if (!s.empty() && s.back() == '\n') return static_cast<pid_t>(std::stol(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// Gone or a zombie.
inline bool ProcessGone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return true;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

inline bool WaitGone(pid_t pid, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Live processes (not zombies) whose environment holds the exact entry
// `entry` (e.g. "TOPO_JOB_ID=x"): a scan of /proc, not of ps output.
inline std::vector<pid_t> ProcessesWithEnv(const std::string& entry) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = ReadFile(it->path().string() + "/environ");
    std::string needle = entry;
    needle.push_back('\0');
    if ((env.rfind(needle, 0) == 0 || env.find('\0' + needle) != std::string::npos) &&
        !ProcessGone(std::stoi(n))) {
      out.push_back(std::stoi(n));
    }
  }
  return out;
}

// Stat of a path: mode bits and owner.
struct Owned {
  unsigned mode = 0;
  uid_t uid = 0;
};
inline Owned StatOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Owned{0, static_cast<uid_t>(-1)};
  return Owned{static_cast<unsigned>(st.st_mode & 07777), st.st_uid};
}

}  // namespace topo::agent::testing
