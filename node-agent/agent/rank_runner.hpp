#pragma once
// The seam between the agent's logic (AgentCore, agent_core.hpp) and the
// node's rank processes. Two implementations:
//   - SupervisorRunner (supervisor_runner.hpp): real ranks through
//     RankSupervisor, as the job's Unix account in the job's cgroup;
//   - SimRunner (sim_runner.hpp): simulated ranks for `topo-agent
//     --simulate`, timers instead of processes.
// Both speak the supervisor's value types (JobLaunch, RankInfo,
// SupervisorEvent), so AgentCore cannot tell them apart.
//
// Contract (both implementations):
//   - Non-blocking. What takes long is not done inside Launch: a copy of the
//     restart's checkpoint onto this node, and the start of the ranks (the
//     account's lookup, which may wait for a directory server; the job's
//     cgroup; a fork and a wait for exec per rank: a few ms a rank on an
//     idle node, far more on a loaded one) may run in the background,
//     Launch answering kBusy (staging, starting) meanwhile, so the agent's
//     event loop and heartbeats go on. Underway(job) says what runs; once it
//     answers nullopt the next Launch of the same run gives the outcome.
//     While a launch is starting, Running() lists its ranks (pid 0) and
//     Stop() of the job stops them as soon as they exist.
//   - Poll() returns each event exactly once, in the order observed; a rank
//     ended by Stop() comes with RankExit::stopped set.
//   - Launch() either starts every rank of the launch or leaves nothing of
//     it running.
//   - One thread: the agent's event loop (a runner's own background work
//     touches nothing the loop uses).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topo/agent/supervisor.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

// What became of one Launch().
struct LaunchOutcome {
  enum class Kind {
    kStarted,  // every rank runs
    kBusy,     // not now, nothing started: try again shortly (e.g. a checkpoint
               // copy of the earlier run is still being made)
    kFailed,   // nothing started; reason says why
  };
  Kind kind = Kind::kStarted;
  // kFailed: retrying on another node cannot help (the account is missing,
  // a root account is refused, the job asks for something no node allows).
  bool permanent = false;
  std::string reason;                   // kBusy, kFailed: for the log and launch_failed
  std::optional<int64_t> restart_step;  // kStarted: TOPO_RESTART_STEP given to the ranks
  std::string note;                     // kStarted: a line for the agent's log, or ""
  // kBusy: the restart's checkpoint is being copied onto this node (it can
  // take minutes): the launch waits up to AgentCoreOptions::stage_wait_ms.
  bool staging = false;
  // kBusy: the ranks are being started off the event loop; it ends by
  // itself (the account's lookup within the NSS service's own timeout, each
  // rank reaching exec or failing within the supervisor's bound) and
  // cannot be called off: the caller waits for Underway() to end, then
  // calls Launch() again for the outcome, without other checks between.
  bool starting = false;
};

class RankRunner {
 public:
  virtual ~RankRunner() = default;

  // The running ranks (for `register` after a reconnect), in (job, rank) order.
  virtual std::vector<RankInfo> Running() const = 0;
  // The restart count of the run of `job` this runner holds (an adopted
  // job's from its saved state); nullopt when it holds none.
  virtual std::optional<int> RestartCountOf(const std::string& job) const = 0;
  // Ok when MASTER_PORT `port` can be bound here now; otherwise an error
  // that names the port.
  virtual core::Status CheckMasterPort(int port) = 0;
  // Starts every rank of launch. checkpoint_step >= 0: the step the
  // scheduler restarts the job from; the runner makes it available on the
  // node-local tier when it can (staging it from the persistent tier) and
  // then sets TOPO_RESTART_STEP (LaunchOutcome::restart_step).
  // REQUIRES: no rank of launch.job_id runs (the caller stops and waits).
  virtual LaunchOutcome Launch(const JobLaunch& launch, int64_t checkpoint_step) = 0;
  // While a launch of `job` works in the background (a Launch answered
  // kBusy, staging or starting): what it does, for the log. The agent asks
  // this instead of calling Launch again until it ends.
  virtual std::optional<std::string> Underway(const std::string& /*job*/) const {
    return std::nullopt;
  }
  // SIGTERM now, SIGKILL of everything of the job after grace_ms.
  virtual core::Status Stop(const std::string& job, int grace_ms) = 0;
  virtual core::Status RequestCheckpoint(const std::string& job) = 0;
  virtual std::vector<SupervisorEvent> Poll() = 0;
  // The newest step complete on the node-local tier / copied to the
  // persistent tier, of the job's current run.
  virtual std::optional<int64_t> NewestCompleteStep(const std::string& job) const = 0;
  virtual std::optional<int64_t> NewestPersistedStep(const std::string& job) const = 0;
  virtual bool HasPersistentTier() const = 0;
  // A piece of a rank's log (`req` left for the caller to set): bytes
  // [offset, offset + max) (a negative offset counts from the end), or an
  // error.
  virtual proto::LogsReply ReadLog(const proto::LogsRequest& request) = 0;
};

}  // namespace topo::agent
