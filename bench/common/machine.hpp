#pragma once
// What every benchmark records about the run: the commit, the machine and
// when it started; and the pinning to one core that the goals assume.

#include <string>

namespace topo::bench {

struct MachineInfo {
  std::string git_commit = "unknown";
  bool git_dirty = false;
  std::string hostname;
  int nproc = 0;
  std::string cpu_model;
  bool pinned = false;     // sched_setaffinity to CPU 0 succeeded
  std::string started_at;  // UTC, ISO 8601
};

// Reads git's view of source_dir, the host name, CPU count and model, and the
// start time. Never fails: unknown fields stay "unknown" or empty.
MachineInfo ReadMachine(const std::string& source_dir);

// Pins the calling thread to CPU 0; false if the system refuses.
bool PinToCpu0();

}  // namespace topo::bench
