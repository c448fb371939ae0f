// Job cgroups: layout detection, creation with limits, kill and removal
// (cgroup.hpp).

#include "topo/agent/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "device_filter.hpp"

namespace topo::agent {
namespace fs = std::filesystem;

namespace {

struct Mount {
  std::string point;  // where it is mounted
  std::string root;   // the hierarchy path shown at `point`
  bool v2 = false;
  bool read_only = false;
  std::set<std::string> controllers;  // v1 only
};

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out += static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream ss(s);
  while (std::getline(ss, cur, sep)) out.push_back(cur);
  return out;
}

std::vector<Mount> CgroupMounts() {
  std::vector<Mount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<std::string> f;
    std::string w;
    while (ss >> w) f.push_back(w);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || dash + 3 > f.end()) continue;
    const std::string& type = *(dash + 1);
    if (type != "cgroup" && type != "cgroup2") continue;
    Mount m;
    m.root = Unescape(f[3]);
    m.point = Unescape(f[4]);
    m.v2 = type == "cgroup2";
    for (const auto& o : Split(f[5], ',')) {
      if (o == "ro") m.read_only = true;
    }
    if (!m.v2) {
      for (const auto& o : Split(*(dash + 3), ',')) m.controllers.insert(o);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// The agent's own cgroup path in the v1 hierarchy holding `controller`
// (from /proc/self/cgroup), or "" for v2's "0::" line when controller is "".
std::string OwnCgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controller.empty() ? ctrls.empty() : [&] {
          for (const auto& c : Split(ctrls, ',')) {
            if (c == controller) return true;
          }
          return false;
        }()) {
      return path;
    }
  }
  return "/";
}

// MOUNT + (own - mount root): the directory of our own cgroup.
std::string OwnDir(const Mount& m, const std::string& own) {
  std::string rel = own;
  if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
  if (rel.empty() || rel == "/") return m.point;
  return (fs::path(m.point) / fs::path(rel).relative_path()).string();
}

bool KernelAtLeast(int major, int minor) {
  utsname u{};
  if (::uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream ss(text);
  std::string w;
  while (ss >> w) {
    if (w == word) return true;
  }
  return false;
}

// Writes text to an existing (cgroup) file; 0 or errno.
int WriteFile(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return err;
}

bool IsUnder(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  const std::string d = dir.back() == '/' ? dir : dir + "/";
  return path.rfind(d, 0) == 0;
}

std::vector<pid_t> ReadPids(const std::string& file) {
  std::vector<pid_t> out;
  std::ifstream in(file);
  long v;
  while (in >> v) out.push_back(static_cast<pid_t>(v));
  return out;
}

bool WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

std::string CgroupScope(const std::string& node, const std::string& ca_pem) {
  std::string name;
  for (char c : node.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    name += ok ? c : '_';
  }
  // FNV-1a: a name, not a secret (both inputs are the site's own).
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : node + '\n' + ca_pem) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (int shift = 60; shift >= 16; shift -= 4) hex += kHex[(h >> shift) & 15];
  return name + "." + hex;
}

// ------------------------------------------------------------------ JobCgroup

bool JobCgroup::Exists() const {
  if (!valid()) return false;
  std::error_code ec;
  return fs::is_directory(dirs[0], ec);
}

std::vector<pid_t> JobCgroup::Members() const {
  if (!valid()) return {};
  return ReadPids(dirs[0] + "/cgroup.procs");
}

bool JobCgroup::Contains(pid_t pid) const {
  auto m = Members();
  return std::find(m.begin(), m.end(), pid) != m.end();
}

void JobCgroup::SignalAll(int sig) const {
  for (pid_t p : Members()) {
    if (p > 0) ::kill(p, sig);
  }
}

void JobCgroup::KillAll() const {
  if (!Exists()) return;
  const std::string& d = dirs[0];
  if (mode == CgroupMode::kV2 && WriteFile(d + "/cgroup.kill", "1") == 0) return;
  // Frozen, nobody can fork between our read of cgroup.procs and the kills.
  bool frozen = false;
  if (mode == CgroupMode::kV2 && WriteFile(d + "/cgroup.freeze", "1") == 0) {
    frozen = true;
    WaitFor([&] { return ReadText(d + "/cgroup.events").find("frozen 1") != std::string::npos; },
            500);
  } else if (mode == CgroupMode::kV1 && WriteFile(d + "/freezer.state", "FROZEN") == 0) {
    frozen = true;
    WaitFor([&] { return ReadText(d + "/freezer.state").rfind("FROZEN", 0) == 0; }, 500);
  }
  for (pid_t p : Members()) {
    if (p > 0) ::kill(p, SIGKILL);
  }
  if (frozen) {
    if (mode == CgroupMode::kV2) {
      WriteFile(d + "/cgroup.freeze", "0");
    } else {
      WriteFile(d + "/freezer.state", "THAWED");
    }
  }
}

bool JobCgroup::Remove() const {
  if (!valid()) return true;
  bool all_gone = true;
  for (size_t i = dirs.size(); i-- > 0;) {
    if (::rmdir(dirs[i].c_str()) != 0 && errno != ENOENT) all_gone = false;
  }
  return all_gone;
}

bool JobCgroup::KillAndRemove(int timeout_ms) const {
  return WaitFor(
      [&] {
        KillAll();
        if (Remove()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return false;
      },
      timeout_ms);
}

core::Result<std::vector<int>> JobCgroup::OpenProcsFiles() const {
  std::vector<int> fds;
  for (const auto& d : dirs) {
    const std::string p = d + "/cgroup.procs";
    int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      for (int f : fds) ::close(f);
      return core::Status::Error("cannot open " + p + ": " + std::strerror(err));
    }
    fds.push_back(fd);
  }
  return fds;
}

// ------------------------------------------------------------------ CgroupManager

CgroupManager CgroupManager::Detect(const CgroupOptions& options) {
  CgroupManager m;
  m.options_ = options;
  CgroupInfo& info = m.info_;
  auto none = [&](const std::string& why) {
    info = CgroupInfo{};
    m.problem_ = why;
    info.summary = "no cgroups (" + why +
                   "): jobs are tracked by process group only, so a process that leaves its "
                   "group (setsid) survives a stop, and no limit is enforced";
    return m;
  };
  if (options.root == "none") return none("disabled: cgroup_root is \"none\"");
  if (::geteuid() != 0) return none("the agent is not root, so it cannot create cgroups");

  const auto mounts = CgroupMounts();
  const Mount* v2 = nullptr;
  const Mount* track = nullptr;
  for (const auto& mt : mounts) {
    if (mt.v2 && !mt.read_only && (!v2 || mt.point == "/sys/fs/cgroup")) v2 = &mt;
  }
  auto v1_with = [&](const std::string& c) -> const Mount* {
    for (const auto& mt : mounts) {
      if (!mt.v2 && !mt.read_only && mt.controllers.count(c)) return &mt;
    }
    return nullptr;
  };
  if (!options.root.empty()) {
    // The mount holding the configured root (longest mount point).
    for (const auto& mt : mounts) {
      if (!IsUnder(options.root, mt.point) || mt.read_only) continue;
      if (!mt.v2 && !mt.controllers.count("freezer") && !mt.controllers.count("pids")) continue;
      if (!track || mt.point.size() > track->point.size()) track = &mt;
    }
    if (!track || options.root == track->point) {
      return none("cgroup_root " + options.root +
                  " is not a directory inside a writable cgroup v2, v1 freezer or v1 pids "
                  "hierarchy: fix SupervisorOptions::cgroup_root");
    }
    info.track_root = options.root;
  } else if (v2) {
    track = v2;
    info.track_root = (fs::path(v2->point) / "toposched").string();
  } else if ((track = v1_with("freezer")) || (track = v1_with("pids"))) {
    info.track_root = (fs::path(track->point) / "toposched").string();
  } else {
    return none("no cgroup v2 and no v1 freezer or pids hierarchy is mounted");
  }
  info.mode = track->v2 ? CgroupMode::kV2 : CgroupMode::kV1;
  const std::string name = fs::path(info.track_root).filename().string();
  const std::string parent = fs::path(info.track_root).parent_path().string();

  if (info.mode == CgroupMode::kV2) {
    info.kill_file = KernelAtLeast(5, 14);
    info.freezer = KernelAtLeast(5, 2);
    const std::string sub = ReadText(parent + "/cgroup.subtree_control");
    m.v2_memory_ = HasWord(sub, "memory");
    m.v2_cpu_ = HasWord(sub, "cpu");
    m.v2_pids_ = HasWord(sub, "pids");
  } else {
    info.freezer = track->controllers.count("freezer") > 0;
  }
  // v1 limit hierarchies (hybrid and v1), nested under our own cgroup there.
  auto v1_root = [&](const std::string& c) -> std::string {
    if (!options.use_v1_controllers) return "";
    const Mount* mt = v1_with(c);
    if (!mt) return "";
    if (mt == track) return info.track_root;  // co-mounted with the tracker
    return (fs::path(OwnDir(*mt, OwnCgroup(c))) / name).string();
  };
  if (!m.v2_memory_) m.v1_memory_ = v1_root("memory");
  if (!m.v2_cpu_) m.v1_cpu_ = v1_root("cpu");
  if (!m.v2_pids_) m.v1_pids_ = v1_root("pids");
  m.v1_devices_ = v1_root("devices");
  for (const std::string* r : {&m.v1_memory_, &m.v1_cpu_, &m.v1_devices_, &m.v1_pids_}) {
    if (!r->empty() && *r != info.track_root &&
        std::find(info.v1_roots.begin(), info.v1_roots.end(), *r) == info.v1_roots.end()) {
      info.v1_roots.push_back(*r);
    }
  }
  if (m.v2_memory_) {
    info.memory = "memory.max (cgroup v2)";
  } else if (!m.v1_memory_.empty()) {
    info.memory = "memory.limit_in_bytes (cgroup v1, " + m.v1_memory_ + ")";
  }
  if (m.v2_cpu_) {
    info.cpu = "cpu.max (cgroup v2)";
  } else if (!m.v1_cpu_.empty()) {
    info.cpu = "cpu.cfs_quota_us (cgroup v1, " + m.v1_cpu_ + ")";
  }
  if (m.v2_pids_) {
    info.pids = "pids.max (cgroup v2)";
  } else if (!m.v1_pids_.empty()) {
    info.pids = "pids.max (cgroup v1, " + m.v1_pids_ + ")";
  }
  if (!m.v1_devices_.empty()) {
    info.gpu_devices = "devices.deny (cgroup v1, " + m.v1_devices_ + ")";
  } else if (info.mode == CgroupMode::kV2) {
    if (core::Status bpf = DeviceFilterAvailable(); bpf.ok()) {
      m.v2_device_filter_ = true;
      info.gpu_devices = "BPF device program (cgroup v2)";
    } else {
      m.device_filter_problem_ = bpf.message();
    }
  }

  std::string s =
      info.mode == CgroupMode::kV2
          ? std::string("cgroup v2") +
                (v1_with("memory") || v1_with("devices") ? " (hybrid, v1 controllers beside)" : "")
          : std::string("cgroup v1 ") + (info.freezer ? "freezer" : "pids");
  s += " at " + info.track_root + "; stop: " +
       (info.kill_file ? "cgroup.kill"
        : info.freezer ? "freeze, SIGKILL each process, thaw"
                       : "SIGKILL rounds");
  s += "; memory limit: " + (info.memory.empty() ? "not enforced" : info.memory);
  s += "; cpu limit: " + (info.cpu.empty() ? "not enforced" : info.cpu);
  s += "; pids limit: " + (info.pids.empty() ? "not enforced" : info.pids);
  s += "; GPU devices: " +
       (info.gpu_devices.empty() ? "CUDA_VISIBLE_DEVICES only" : info.gpu_devices);
  info.summary = s;
  return m;
}

JobCgroup CgroupManager::For(const std::string& job_id, const JobLimits& limits) const {
  JobCgroup cg;
  if (!usable()) return cg;
  cg.mode = info_.mode;
  const std::string leaf = JobDirName(job_id);  // job-ID.SCOPE
  cg.dirs.push_back((fs::path(info_.track_root) / leaf).string());
  auto add = [&](const std::string& root) {
    if (root.empty() || root == info_.track_root) return;
    const std::string d = (fs::path(root) / leaf).string();
    if (std::find(cg.dirs.begin(), cg.dirs.end(), d) == cg.dirs.end()) cg.dirs.push_back(d);
  };
  if (limits.memory_bytes > 0 || limits.account_memory) add(v1_memory_);
  if (limits.cpus > 0) add(v1_cpu_);
  if (limits.pids_max > 0) add(v1_pids_);
  if (limits.restrict_gpu_devices) add(v1_devices_);
  return cg;
}

core::Result<JobCgroup> CgroupManager::Create(const std::string& job_id, const JobLimits& limits,
                                              const std::vector<int>& gpus,
                                              std::vector<std::string>* notes) const {
  JobCgroup cg = For(job_id, limits);
  if (!cg.valid()) return core::Status::Error("no usable cgroup hierarchy: " + problem_);
  // An earlier run's cgroup that still holds processes: they are not ours to
  // keep (their ranks were reported exited), so they end before we reuse it.
  if (cg.Exists() && !cg.Members().empty() && !cg.KillAndRemove(3000)) {
    return core::Status::Error("cgroup " + cg.dirs[0] +
                               " of an earlier run of the job still holds processes after "
                               "SIGKILL (stuck in the kernel?): retry later or reboot the node");
  }
  std::error_code ec;
  for (const auto& d : cg.dirs) {
    fs::create_directories(d, ec);
    if (ec) {
      cg.Remove();
      return core::Status::Error("cannot create cgroup " + d + ": " + ec.message());
    }
  }
  auto fail = [&](const std::string& what, int err) -> core::Result<JobCgroup> {
    cg.Remove();
    return core::Status::Error("cannot " + what + ": " + std::strerror(err));
  };
  auto dir_of = [&](const std::string& root) {
    return root == info_.track_root || root.empty()
               ? cg.dirs[0]
               : (fs::path(root) / JobDirName(job_id)).string();
  };
  const std::string& track = cg.dirs[0];
  // memory
  if (limits.memory_bytes > 0) {
    const std::string v = std::to_string(limits.memory_bytes);
    if (v2_memory_) {
      WriteFile(info_.track_root + "/cgroup.subtree_control", "+memory");
      if (int e = WriteFile(track + "/memory.max", v))
        return fail("set " + track + "/memory.max", e);
    } else if (!v1_memory_.empty()) {
      const std::string f = dir_of(v1_memory_) + "/memory.limit_in_bytes";
      if (int e = WriteFile(f, v)) return fail("set " + f, e);
    } else if (notes) {
      notes->push_back("the memory limit of " + v + " bytes is not enforced on this node (" +
                       info_.summary + ")");
    }
  } else if (v2_memory_) {
    if (limits.account_memory) WriteFile(info_.track_root + "/cgroup.subtree_control", "+memory");
    WriteFile(track + "/memory.max", "max");  // a reused cgroup keeps no old limit
  } else if (limits.account_memory && !v1_memory_.empty()) {
    WriteFile(dir_of(v1_memory_) + "/memory.limit_in_bytes", "-1");
  }
  // cpu
  if (limits.cpus > 0) {
    const long period = 100000;
    const long quota = std::max(1000L, std::lround(limits.cpus * period));
    if (v2_cpu_) {
      WriteFile(info_.track_root + "/cgroup.subtree_control", "+cpu");
      const std::string v = std::to_string(quota) + " " + std::to_string(period);
      if (int e = WriteFile(track + "/cpu.max", v)) return fail("set " + track + "/cpu.max", e);
    } else if (!v1_cpu_.empty()) {
      const std::string d = dir_of(v1_cpu_);
      if (int e = WriteFile(d + "/cpu.cfs_period_us", std::to_string(period)))
        return fail("set " + d + "/cpu.cfs_period_us", e);
      if (int e = WriteFile(d + "/cpu.cfs_quota_us", std::to_string(quota)))
        return fail("set " + d + "/cpu.cfs_quota_us", e);
    } else if (notes) {
      notes->push_back("the CPU limit of " + std::to_string(limits.cpus) +
                       " CPUs is not enforced on this node (" + info_.summary + ")");
    }
  } else if (v2_cpu_) {
    WriteFile(track + "/cpu.max", "max");
  }
  // pids
  if (limits.pids_max > 0) {
    const std::string v = std::to_string(limits.pids_max);
    if (v2_pids_) {
      WriteFile(info_.track_root + "/cgroup.subtree_control", "+pids");
      if (int e = WriteFile(track + "/pids.max", v)) return fail("set " + track + "/pids.max", e);
    } else if (!v1_pids_.empty()) {
      const std::string f = dir_of(v1_pids_) + "/pids.max";
      if (int e = WriteFile(f, v)) return fail("set " + f, e);
    } else if (notes) {
      notes->push_back("the limit of " + v + " tasks (pids_max) is not enforced on this node (" +
                       info_.summary + ")");
    }
  } else if (v2_pids_ || v1_pids_ == info_.track_root) {
    WriteFile(track + "/pids.max", "max");
  }
  // GPU device nodes
  if (limits.restrict_gpu_devices) {
    const std::vector<DeviceNumber> others = OtherGpuDevices(gpus);
    if (!v1_devices_.empty()) {
      const std::string f = dir_of(v1_devices_) + "/devices.deny";
      for (const DeviceNumber& d : others) {
        const std::string rule =
            "c " + std::to_string(d.major) + ":" + std::to_string(d.minor) + " rwm";
        if (int e = WriteFile(f, rule)) return fail("write '" + rule + "' to " + f, e);
      }
    } else if (v2_device_filter_ && others.size() <= kMaxDeniedDevices) {
      // Attached to every cgroup, an empty list included: a reused cgroup's
      // program of the earlier run (other GPUs) is replaced.
      if (core::Status st = AttachDeviceDenyList(track, others); !st.ok() && notes) {
        notes->push_back(
            "GPU isolation is CUDA_VISIBLE_DEVICES only for this job: the job can open every "
            "/dev/nvidiaN (" +
            st.message() + ")");
      }
    } else if (notes) {
      notes->push_back(
          "GPU isolation is CUDA_VISIBLE_DEVICES only on this node: the job can open every "
          "/dev/nvidiaN (" +
          (device_filter_problem_.empty()
               ? std::string("no v1 devices controller")
               : "no v1 devices controller, and " + device_filter_problem_) +
          ")");
    }
  }
  return cg;
}

std::vector<DeviceNumber> CgroupManager::OtherGpuDevices(const std::vector<int>& gpus) const {
  std::vector<DeviceNumber> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.device_dir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() <= 6 || n.size() > 12 || n.rfind("nvidia", 0) != 0) continue;
    if (!std::all_of(n.begin() + 6, n.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const int index = std::stoi(n.substr(6));
    if (std::find(gpus.begin(), gpus.end(), index) != gpus.end()) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    out.push_back(DeviceNumber{major(st.st_rdev), minor(st.st_rdev)});
  }
  return out;
}

std::string CgroupManager::JobDirName(const std::string& job_id) const {
  return "job-" + job_id + (options_.scope.empty() ? "" : "." + options_.scope);
}

void CgroupManager::RemoveStale(const std::set<std::string>& known_job_ids) const {
  if (!usable()) return;
  const std::string suffix = options_.scope.empty() ? "" : "." + options_.scope;
  std::vector<std::string> roots{info_.track_root};
  roots.insert(roots.end(), info_.v1_roots.begin(), info_.v1_roots.end());
  for (const auto& root : roots) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.rfind("job-", 0) != 0 || !it->is_directory()) continue;
      if (n.size() <= 4 + suffix.size() || !n.ends_with(suffix)) continue;  // another scope's
      const std::string id = n.substr(4, n.size() - 4 - suffix.size());
      if (suffix.empty() && id.find('.') != std::string::npos) continue;  // a scoped one
      if (known_job_ids.count(id)) continue;
      if (ReadPids((it->path() / "cgroup.procs").string()).empty()) ::rmdir(it->path().c_str());
    }
  }
}

}  // namespace topo::agent
