#include "machine.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>

namespace topo::bench {

namespace {

// Output of a shell command, trailing newline removed; nullopt on failure.
std::optional<std::string> CommandOutput(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  if (pclose(pipe) != 0) return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

MachineInfo ReadMachine(const std::string& source_dir) {
  MachineInfo m;
  const std::string git = "git -C '" + source_dir + "' ";
  if (auto commit = CommandOutput(git + "rev-parse --short HEAD 2>/dev/null")) {
    if (!commit->empty()) m.git_commit = *commit;
  }
  if (auto status = CommandOutput(git + "status --porcelain --untracked-files=no 2>/dev/null")) {
    m.git_dirty = !status->empty();
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  m.nproc = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        m.cpu_model = line.substr(line.find_first_not_of(' ', colon + 1));
      }
      break;
    }
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.started_at = stamp;
  return m;
}

bool PinToCpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace topo::bench
