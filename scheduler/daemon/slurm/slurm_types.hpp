#pragma once
// Slurm mode (docs/slurm.md): what the bridge saw in Slurm, and what it
// should do there. Plain values passed between the bridge's threads
// (slurm_bridge.hpp) and the service's strand (service.hpp).

#include <cstdint>
#include <string>
#include <vector>

namespace topo::daemon {

struct SlurmNodeView {
  std::string name;
  std::string state;   // scontrol's State=, e.g. "IDLE", "ALLOCATED+DRAIN", "DOWN*"
  std::string reason;  // Reason= without the "[user@time]" suffix
};
struct SlurmJobView {
  int64_t id = 0;
  std::string state;  // JobState=
  int64_t priority = 0;
  std::vector<std::string> nodes;  // NodeList= expanded
  std::string admin_comment;
};
struct SlurmSnapshot {
  std::vector<SlurmNodeView> nodes;
  std::vector<SlurmJobView> jobs;
};
struct SlurmAction {
  // kRequeue: `scontrol requeuehold` (the job pends held until the release
  // onto its new nodes); kSignal: `scancel --signal=USR1 --full` (checkpoint
  // before preemption).
  enum class Kind { kRelease, kDrain, kResume, kRequeue, kSignal };
  Kind kind = Kind::kRelease;
  int64_t slurm_job = 0;           // kRelease, kRequeue, kSignal
  std::vector<std::string> nodes;  // kRelease: in rank order; kDrain/kResume: the node
  std::string reason;              // kDrain; kRelease: the job's new AdminComment (its rank map)
};

}  // namespace topo::daemon
