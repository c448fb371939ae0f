#pragma once
// AgentCore: the node agent's logic, the same for a real node (agent.cpp)
// and for each node of `topo-agent --simulate` (simulate.cpp). Scheduler
// messages (docs/agent-protocol.md, topo/common/agent_protocol.hpp) come in
// as text, agent messages go out through an AgentLink, ranks are started
// and stopped through a RankRunner, GPU faults are read from a GpuBackend;
// time comes from an AgentClock. No sockets, no threads, no timers: the
// connection layer (connection.hpp) calls it.
//
//   AgentCore core(node, options, runner, gpus, link, clock, log);
//   core.OnConnected();          // sends `register`
//   core.OnText(text);           // every scheduler message
//   core.Heartbeat();            // every heartbeat_ms() while connected
//   core.Tick();                 // often (100 ms): pending launches, drains
//   core.OnDisconnected();
//
// What it does, message by message:
//   registered  keep: every job running or waiting to start here that is not
//               in `keep` is stopped, and its ranks' exits are not reported
//               (the scheduler has moved on: ranks that died with the node
//               while no agent ran are old news it would refuse); reports
//               held while disconnected go out, but those about a job not
//               in `keep` are dropped.
//   start       mapped to a JobLaunch with nothing derived on the node: the
//               start's group rank and size, ranks with their local ranks
//               and GPUs (one GPU each), account, environment, working
//               directory and layout (rank order included). A run of the
//               same job still here is stopped first and the launch waits
//               (at most launch_wait_ms) until its ranks have exited. On the
//               node holding rank 0 the master port is checked free first.
//               Nothing slow blocks the loop: a restart's checkpoint the
//               runner copies onto this node first (LaunchOutcome::staging)
//               is waited for up to stage_wait_ms, and ranks the runner
//               starts in the background (LaunchOutcome::starting) until
//               they are up (RankRunner::Underway, asked each Tick); then
//               Launch again gives the outcome.
//               Once launched, `started` {job, restart_count} says so (the
//               scheduler requeues a run some node does not acknowledge).
//               Every failure is a `launch_failed` (permanent when no node
//               can do better: a missing command or account, a root account,
//               a layout that does not read); nothing is left pending.
//   stop        the job's ranks (and a launch waiting) are stopped.
//   checkpoint  the ranks are signalled.
//   drain       graceful: checkpoint, wait until a newer step is persisted
//               (or drain_checkpoint_ms), stop, report `drained`;
//               immediate: stop, report `drained` once every rank is gone.
//   logs        answered at once from the runner; for a rank whose launch
//               waits here, that it has not started yet and why.
//   error       logged (refused type, field, message); nothing else: the
//               connection stays (only a refused `register` is closed, by
//               the scheduler).
//   anything the protocol does not allow: logged with the field, ignored.
// Rank exits are reported with the restart count of the run they belong to;
// exits of ranks the agent stopped are not reported (not news to the
// scheduler). In node launch mode one process is every rank of the node:
// its exit 0 is reported for each of them (the job completes when every
// rank has), a failure once (one failure restarts the job; the rest would
// be about a run the scheduler has ended). Reports (rank exits, checkpoints, GPU events, starts,
// launch failures, drained) made while not registered are held, oldest dropped past
// max_queued_reports, and sent after the next `registered`.
//
// Thread safety: none; one thread (the agent's event loop) owns it.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_backend.hpp"
#include "rank_runner.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/core/status.hpp"

namespace topo::agent {

struct AgentCoreOptions {
  std::string addr = "127.0.0.1";  // what `register` says (MASTER_ADDR of this node's jobs)
  std::string agent_version = "topo-agent";
  // Run for every rank of a start that carries no command: /bin/sh -c LINE.
  std::string job_command;
  int heartbeat_ms = 0;  // 0: what `registered` says
  int stop_grace_ms = 5000;
  int drain_checkpoint_ms = 3000;  // graceful drain: wait this long for a checkpoint
  // How long a start waits for the ranks of the job's earlier run to exit
  // (after their stop), or for a busy runner, before it is reported failed.
  int launch_wait_ms = 30000;
  // How long a start waits while the runner copies the restart's checkpoint
  // from the persistent tier onto this node (LaunchOutcome::staging).
  int64_t stage_wait_ms = 3'600'000;
  size_t max_queued_reports = 10000;
};

// Where agent messages go: the connection of the node.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // Sends one message now; false (and dropped) when not connected.
  virtual bool Send(std::string text) = 0;
  // Registration accepted: beat now, then every heartbeat_ms.
  virtual void Registered(int heartbeat_ms) = 0;
  // Ends this connection (the scheduler is one the agent must not follow);
  // the connection then tries the next scheduler address.
  virtual void Drop() = 0;
};

// Milliseconds on a clock that does not jump (steady in production).
class AgentClock {
 public:
  virtual ~AgentClock() = default;
  virtual int64_t NowMs() const = 0;
};

enum class LogLevel { kInfo, kWarning };

class AgentLog {
 public:
  virtual ~AgentLog() = default;
  virtual void Line(const std::string& node, LogLevel level, const std::string& text) = 0;
};

// Told of every scheduler message that reads as the protocol, before the
// core acts on it (simulate.cpp prints events from it).
class AgentObserver {
 public:
  virtual ~AgentObserver() = default;
  virtual void OnSchedulerMessage(const std::string& node, const proto::SchedulerMessage& m) = 0;
};

class AgentCore {
 public:
  // Every reference must outlive the core; options may be shared by many.
  AgentCore(std::string node, const AgentCoreOptions& options, RankRunner& runner,
            gpu::GpuBackend& gpus, AgentLink& link, const AgentClock& clock, AgentLog& log,
            AgentObserver* observer = nullptr);

  // ---- from the connection
  // A new connection is open: sends `register` (the GPUs and the running ranks).
  void OnConnected();
  // One scheduler message (a WebSocket text frame).
  void OnText(std::string_view text);
  // The connection ended; reports are held until the next registration.
  void OnDisconnected();
  // Every heartbeat interval while connected: a heartbeat when registered,
  // a GPU poll and a Tick.
  void Heartbeat();

  // ---- from the event loop
  // Runner events, launches waiting, drain progress.
  void Tick();
  // Reports new GPU faults at once (call when the backend's wait fd fires).
  void PollGpus();
  // Reports what the runner saw (call on SIGCHLD and the runner's wake fd).
  void PollRunner();
  // Forgets everything but the configuration: a fresh agent on a node
  // whose ranks are gone (simulate's kill and revive).
  void Reset();

  // ---- state
  const std::string& node() const { return node_; }
  bool registered() const { return registered_; }
  int heartbeat_ms() const { return heartbeat_ms_; }
  // The message of the last `error` of this connection ("" when none).
  const std::string& last_refusal() const { return last_refusal_; }
  bool draining() const { return drain_ != DrainPhase::kNone; }
  size_t pending_launches() const { return pending_.size(); }
  size_t queued_reports() const { return queued_reports_.size(); }

 private:
  struct PendingLaunch {
    JobLaunch launch;
    int64_t checkpoint_step = -1;
    int64_t deadline_ms = 0;        // give up waiting then
    int64_t stage_deadline_ms = 0;  // while the checkpoint is copied here (0: not yet)
    std::string waiting_for;        // last reason it waited, logged once
    // The runner starts the ranks in the background (LaunchOutcome::starting):
    // wait for RankRunner::Underway to end, then Launch for the outcome.
    bool starting = false;
    int64_t launch_began_ms = -1;  // when the runner began starting the ranks
  };
  enum class DrainPhase { kNone, kCheckpoint, kStopping };

  void Log(LogLevel level, const std::string& text) const;
  void Beat();  // one heartbeat now, when registered
  void Report(const proto::AgentMessage& message);
  void HandleRegistered(const proto::Registered& m);
  // HA: the newest leadership term a `registered` carried (0: none yet).
  int64_t newest_term_ = 0;
  void HandleStart(const proto::Start& m);
  void HandleStop(const std::string& job, const std::string& reason);
  void HandleCheckpoint(const proto::CheckpointRequest& m);
  void HandleDrain(const proto::Drain& m);
  void HandleLogs(const proto::LogsRequest& m);
  void HandleError(const proto::Error& m);
  void Reconcile(const std::vector<int64_t>& keep);
  void TryPendingLaunches();
  void FailLaunch(const std::string& job, int restart_count, const std::string& reason,
                  bool permanent);
  void DrainProgress();
  int64_t DrainStep(const std::string& job) const;
  int RestartCountOf(const std::string& job);
  std::set<std::string> RunningJobs() const;
  bool Runs(const std::string& job) const;

  const std::string node_;
  const AgentCoreOptions& options_;
  RankRunner& runner_;
  gpu::GpuBackend& gpus_;
  AgentLink& link_;
  const AgentClock& clock_;
  AgentLog& log_;
  AgentObserver* observer_;

  bool registered_ = false;
  int heartbeat_ms_ = 1000;
  int64_t seq_ = 0;
  std::string last_refusal_;
  struct HeldReport {
    std::optional<int64_t> job;  // the job it is about (none: a GPU event, `drained`)
    std::string text;
  };
  std::vector<HeldReport> queued_reports_;  // oldest first
  std::map<std::string, PendingLaunch> pending_;
  // The run each job's exits belong to: set when its launch succeeds.
  std::map<std::string, int> restart_counts_;
  DrainPhase drain_ = DrainPhase::kNone;
  int64_t drain_deadline_ms_ = 0;
  std::map<std::string, int64_t> drain_baseline_;
};

// "17" -> 17; nullopt for job ids the scheduler did not give.
std::optional<int64_t> JobNumber(const std::string& job_id);

// The start's ranks as JobLaunch fields, nothing derived: see HandleStart.
// Fails (permanent) when the layout does not read or has no command.
core::Result<JobLaunch> LaunchFromStart(const proto::Start& start, const std::string& job_command);

}  // namespace topo::agent
