#pragma once
// Helpers for the supervisor tests: temp dirs, rank scripts, polling.

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "topo/agent/supervisor.hpp"

namespace topo::agent::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "topo-sup-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
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
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

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

inline bool WaitForFile(const std::string& path, int timeout_ms = 10000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
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

inline SupervisorOptions Options(const TempDir& t) {
  SupervisorOptions o;
  o.state_dir = t / "state";
  o.log_dir = t / "logs";
  o.local_checkpoint_root = t / "local";
  o.persistent_checkpoint_root = t / "persistent";
  return o;
}

inline JobLaunch SimpleJob(const std::string& id, const std::string& script, int nranks) {
  JobLaunch l;
  l.job_id = id;
  l.argv = {script};
  l.parallelism.dp = nranks;
  for (int r = 0; r < nranks; ++r) l.ranks.push_back(LocalRankSpec{r, r, {}});
  return l;
}

}  // namespace topo::agent::testing
