#pragma once
// SimRunner: the RankRunner (rank_runner.hpp) of each node of `topo-agent
// --simulate` (simulate.hpp). No process runs; a launched job's ranks
// "train" at one step per step_ms from the step they were started at:
//   - with run_ms > 0 every rank exits 0 run_ms after the launch;
//   - with checkpoint_every_ms > 0 the node holding rank 0 reports a
//     checkpoint that often; a checkpoint request makes it report one now;
//     other nodes of the job count the step silently (so a graceful drain
//     of any node finds its checkpoint at once);
//   - Exit() ends one rank with a code (the control command `exit`);
//   - Stop() ends the job's ranks at once (nothing is reported: stopped
//     ranks are not news).
// Checkpoints are simulated on the persistent tier only (the simulated
// node writes there directly): one `checkpoint` report per step, tier
// persistent. Logs are one synthetic line per rank.
//
// Timers: the runner asks its SimHost to wake the node (AgentCore::Tick) at
// the times its ranks finish or checkpoint; Poll() finds what is due.
//
// Thread safety: none (the simulator's one thread).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent_core.hpp"
#include "rank_runner.hpp"

namespace topo::agent {

struct SimRunnerSettings {
  int step_ms = 1000;           // one training step
  int checkpoint_every_ms = 0;  // > 0: rank 0's node checkpoints on its own
  int run_ms = 0;               // > 0: ranks exit 0 after this long
};

// What a SimRunner needs of the simulator.
class SimHost {
 public:
  virtual ~SimHost() = default;
  // Call Tick on node `node_index`'s AgentCore at (or soon after) at_ms on
  // the AgentClock.
  virtual void WakeAt(int64_t at_ms, int node_index) = 0;
  // One event line on stdout ("t" is added).
  virtual void Emit(nlohmann::json event) = 0;
};

class SimRunner final : public RankRunner {
 public:
  // node: the node's name (must outlive the runner).
  SimRunner(const std::string& node, int node_index, const SimRunnerSettings& settings,
            const AgentClock& clock, SimHost& host);

  std::vector<RankInfo> Running() const override;
  std::optional<int> RestartCountOf(const std::string& job) const override;
  core::Status CheckMasterPort(int port) override;
  LaunchOutcome Launch(const JobLaunch& launch, int64_t checkpoint_step) override;
  core::Status Stop(const std::string& job, int grace_ms) override;
  core::Status RequestCheckpoint(const std::string& job) override;
  std::vector<SupervisorEvent> Poll() override;
  std::optional<int64_t> NewestCompleteStep(const std::string& job) const override;
  std::optional<int64_t> NewestPersistedStep(const std::string& job) const override;
  bool HasPersistentTier() const override { return true; }
  proto::LogsReply ReadLog(const proto::LogsRequest& request) override;

  // Control commands. Errors say what does not run here.
  core::Status Exit(int64_t job, int rank, int code);
  // Rank 0's node reports a checkpoint now.
  core::Status CheckpointNow(int64_t job);
  bool HoldsRankZero(int64_t job) const;
  // Drops every job without a report (the node was lost).
  void Reset();

 private:
  struct SimJob {
    int restart_count = 0;
    int world_size = 0;
    std::vector<int> ranks;  // global ranks here, local-rank order
    bool rank0 = false;
    int64_t base_step = 0;  // the step it (re)started from
    int64_t started_ms = 0;
    int64_t last_ckpt_ms = 0;
    int64_t last_step = -1;
  };
  void Checkpoint(const std::string& job, SimJob& s, int64_t now);

  const std::string& node_;
  int node_index_;
  const SimRunnerSettings& settings_;
  const AgentClock& clock_;
  SimHost& host_;
  std::map<std::string, SimJob> jobs_;
  std::vector<SupervisorEvent> events_;
};

}  // namespace topo::agent
