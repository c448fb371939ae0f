#pragma once
// Slurm mode (docs/slurm.md): what the bridge saw in Slurm, and what it
// should do there. Plain values passed between the bridge's threads
// (slurm_bridge.hpp) and the service's strand (service.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topo/common/slurm_rank_map.hpp"

namespace topo::daemon {

struct SlurmNodeView {
  std::string name;
  std::string state;   // scontrol's State=, e.g. "IDLE", "ALLOCATED+DRAIN", "DOWN*"
  std::string reason;  // Reason= without the "[user@time]" suffix
};
struct SlurmJobView {
  int64_t id = 0;
  std::string state;  // job_state, e.g. "RUNNING", "PENDING"
  int64_t priority = 0;
  std::vector<std::string> nodes;  // nodes, expanded
  std::string admin_comment;
  std::string state_reason;  // e.g. "JobHeldUser", "JobHeldAdmin", "Resources"
  // From the AdminComment's signal= token (job_submit/topo): the job's own
  // --signal, the one signal toposched may send it; none: never signalled.
  std::optional<common::SlurmCheckpointSignal> checkpoint_signal;
};
struct SlurmSnapshot {
  std::vector<SlurmNodeView> nodes;
  std::vector<SlurmJobView> jobs;
};
struct SlurmAction {
  // kRelease: `scontrol update JobId ReqNodeList=...` + `scontrol release`;
  // kRequeue: `scontrol requeuehold` (the job pends held until the release
  // onto its new nodes); kHold: `scontrol hold` (an operator's hold, which
  // the job's user cannot release); kSignal: `scancel --signal=N [--batch]`,
  // the job's own checkpoint signal (before a preemption or a drain moves
  // it); kDrain/kResume: `scontrol update NodeName=.. State=DRAIN|RESUME`.
  enum class Kind { kRelease, kDrain, kResume, kRequeue, kHold, kSignal };
  Kind kind = Kind::kRelease;
  int64_t slurm_job = 0;           // kRelease, kRequeue, kHold, kSignal
  std::vector<std::string> nodes;  // kRelease: in rank order; kDrain/kResume: the node
  std::string reason;              // why, for the log; kDrain: Slurm's Reason=
  // kRelease, kRequeue, kHold: the job's new AdminComment ("": unchanged).
  std::string admin_comment;
  common::SlurmCheckpointSignal signal;  // kSignal
};

}  // namespace topo::daemon
