#pragma once
// The node agents as the daemon sees them (docs/agent-protocol.md): who is
// connected, the one liveness tracker, what each node may say, and the
// core's commands turned into agent messages.
//
// Node-scoped authority. A node's agent speaks only for its node (the name
// in its certificate): about that node's GPUs, and about jobs that have
// ranks or spares there (or had them, for reports that arrive late, and a
// job that ended is not news). Anything else is refused with an `error`
// naming the field, logged, audited (at most once a minute per node and
// kind, with a count), and changes nothing. A message that does not read as
// the protocol gets the same answer; the connection stays open.
//
// Liveness. A connection that closes makes an up node suspect at once (it
// is no restart target meanwhile) and down after `closed_limit` (a killed
// agent), or after `restart_grace_ms` when the agent said `leaving` last
// (a restart or an upgrade that leaves the ranks running; a heartbeat after
// it takes it back); a connection that
// stays open but silent makes it down after `missed_heartbeats_down`
// intervals (a cut network, a stopped agent), and its next message on that
// connection brings it back. A `register` brings a suspect or down node back
// (drained stays drained). In agent mode (send_jobs) a node's liveness is
// its agent's to prove, whatever its admin state: every node that was not
// down when the daemon restarted, and one that comes out of down (an admin's
// resume) after its agent had registered here, goes down unless an agent
// registers in time. The deadlines are kept in the system's one
// core::LivenessTracker (core/include/topo/core/liveness.hpp), so a check
// costs O(log n) per expired node, not a scan of every agent.
//
// Starts. Every `start` (agent mode) must be acknowledged by the agent of
// each node it went to (`started`, once its ranks are launched) within
// `start_ack_timeout_ms`; a run that is not is requeued by the core
// (core::StartUnacknowledged, an infrastructure failure), and those of its
// nodes that have no agent connected go down. A `register` that lists a
// job's ranks acknowledges that node's part, which covers the runs a daemon
// restart left without one. A late `started` (an earlier run) is ignored.
//
// Thread safety: none; the daemon's strand owns it, like the Service.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/agent_protocol.hpp"
#include "topo/core/liveness.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// What the registry needs of the rest of the daemon.
class AgentHost {
 public:
  virtual ~AgentHost() = default;
  // nullptr while the daemon has no topology.
  virtual const core::SchedulerCore* core() const = 0;
  virtual const core::Topology* topology() const = 0;
  // Steps the core; the entry is committed with the current group.
  virtual void StepCore(const core::Event& event, const std::string& actor) = 0;
  // A job the core no longer holds but the store knows (it ended).
  virtual bool JobEnded(core::JobId id) = 0;
  virtual void Audit(const std::string& actor, std::string_view action,
                     const nlohmann::json& detail) = 0;
  // The Unix account of an API user (jobs submitted before requests carried
  // one); "" when the user is unknown.
  virtual std::string UnixUserOf(const std::string& api_user) = 0;
};

// An agent's answer to a request that waited for it (AskLogs): the
// request's id and what the agent said (`data`, when `error` is Ok), or why
// there is no answer.
struct AgentAnswer {
  int64_t id = 0;
  core::Status error;
  nlohmann::json data;
};

struct AgentSettings {
  core::TimeMs heartbeat_interval_ms = 1000;
  int missed_heartbeats_down = 3;
  // Slurm mode: slurmd runs the jobs; agents only report health.
  bool send_jobs = true;
  // HA: this replica's leadership term, sent in every `registered` (0: one
  // scheduler, none sent).
  int64_t term = 0;
  // How long a node whose agent said `leaving` (a restart that leaves its
  // ranks running) may stay disconnected before it is down; below the
  // closed-connection limit, that limit applies.
  core::TimeMs restart_grace_ms = 30000;
  // How long the agents of a start's nodes have to acknowledge it
  // (`started`) before the core requeues the run (agent mode only).
  core::TimeMs start_ack_timeout_ms = 600000;
};

class AgentRegistry {
 public:
  AgentRegistry(AgentHost& host, AgentSettings settings);
  // HA: the term this replica leads in, sent to every agent that registers
  // from now on (before the agent listener opens).
  void SetTerm(int64_t term) { settings_.term = term; }

  // The first message of a connection whose certificate names cert_node: the
  // `registered` reply, or an error (refuse and close).
  core::Result<std::string> Register(const std::string& cert_node, std::string_view text,
                                     core::TimeMs now);
  // A later message of a registered node: an `error` reply when refused,
  // nothing otherwise. Never throws; never closes.
  std::optional<std::string> Message(const std::string& node, std::string_view text,
                                     core::TimeMs now);
  void Disconnected(const std::string& node, core::TimeMs now);
  // Nodes past their deadline go down (their jobs are recovered): one
  // node_state_requested event, or one node_states_requested batch when
  // several expired by the same check. Then runs whose start some node has
  // not acknowledged in time are requeued, one StartUnacknowledged each.
  void CheckLiveness(core::TimeMs now);
  // After a daemon restart: `nodes` (in agent mode every node that is not
  // down) get `grace_ms` to reconnect; running jobs' nodes are remembered for
  // later stops, and must acknowledge their runs (a `register` listing
  // their ranks does) within grace_ms + start_ack_timeout_ms.
  void Restore(const std::vector<std::string>& nodes, core::TimeMs grace_ms, core::TimeMs now);

  // The core's commands of a committed batch, as agent messages; `now`
  // starts the acknowledgement deadlines of the starts among them.
  void Dispatch(const std::vector<core::Command>& commands, core::TimeMs now);
  // An admin's drain mode for a node (graceful, immediate, wait), until the
  // core's DrainNode for it goes out; "" forgets it.
  void SetDrainMode(const std::string& node, const std::string& mode);
  // Asks the node's agent for a piece of a rank's log: the request id (the
  // answer comes through TakeDeferredAnswers), or an error when the agent is
  // not connected.
  core::Result<int64_t> AskLogs(const std::string& node, core::JobId job, int rank, int64_t offset,
                                int64_t max);
  // Asks the agents of `nodes` to checkpoint job now.
  void AskCheckpoint(const std::vector<std::string>& nodes, core::JobId job,
                     const std::string& reason);
  bool Connected(const std::string& node) const;

  std::vector<std::pair<std::string, std::string>> TakeMessages();
  std::vector<AgentAnswer> TakeDeferredAnswers();
  void ForgetDeferred(int64_t id);

  // For /metrics.
  int64_t refused_messages() const { return refused_total_; }

 private:
  struct Agent {
    int slot = 0;  // its index in liveness_ and slot_names_
    bool connected = false;
    core::TimeMs disconnected_at = -1;
    bool leaving = false;  // said `leaving` on this connection
    // Its node went down for silence while this connection stayed open: the
    // next message on it brings the node back.
    bool silenced = false;
    std::string addr;  // MASTER_ADDR of its ranks
    int64_t refused = 0;
  };
  // A run's start not yet acknowledged by every node it went to.
  struct PendingStart {
    int restart_count = 0;
    std::vector<std::string> nodes;  // still to acknowledge
    core::TimeMs sent = 0;
    core::TimeMs deadline = core::kNever;
  };
  // Rank exits of a job's current run: which ranks ended with 0.
  struct Run {
    int restart_count = 0;
    std::vector<bool> exited_ok;
    int ok_count = 0;
    std::vector<std::string> nodes;
  };
  struct LogsAsk {
    std::string node;
    core::JobId job = 0;
    int rank = 0;
  };

  std::optional<std::string> Refuse(Agent& agent, const std::string& node, std::string_view type,
                                    const std::string& field, const std::string& message,
                                    bool authority);
  // Whether the node has (or had in the current run) ranks or spares of job.
  bool JobOnNode(const core::JobRecord& job, core::NodeId node) const;
  std::optional<std::string> OnRankExited(Agent& a, const std::string& node, core::NodeId n,
                                          const proto::RankExited& m);
  std::optional<std::string> OnLaunchFailed(Agent& a, const std::string& node, core::NodeId n,
                                            const proto::LaunchFailed& m);
  std::optional<std::string> OnCheckpoint(Agent& a, const std::string& node, core::NodeId n,
                                          const proto::CheckpointReport& m);
  std::optional<std::string> OnLogs(Agent& a, const std::string& node, proto::LogsReply m);
  // The run a start report (`started`, `start_waiting`) speaks of: the job
  // when the report is about its current run and it has ranks on the node;
  // else nullptr, with *refusal set when the report oversteps (an unknown
  // job, another node's). Late news of an ended or earlier run is neither.
  const core::JobRecord* ReportedRun(Agent& a, const std::string& node, core::NodeId n,
                                     std::string_view type, core::JobId id, int restart_count,
                                     std::optional<std::string>* refusal);
  std::optional<std::string> OnStarted(Agent& a, const std::string& node, core::NodeId n,
                                       const proto::Started& m);
  std::optional<std::string> OnStartWaiting(Agent& a, const std::string& node, core::NodeId n,
                                            const proto::StartWaiting& m);

  // A `logs` message from node that did not parse: the request it answers
  // (if any was made of that node) gets the refusal now, not a timeout.
  void AnswerRefusedLogs(const std::string& node, std::string_view text, const std::string& why);
  void OnDrained(const std::string& node, core::NodeId n);
  // The node's agent record, made (with its liveness slot) on first use.
  Agent& AgentOf(const std::string& node);
  // Down at `deadline` unless heard from (kNever: not watched).
  void SetDeadline(Agent& a, core::TimeMs deadline);
  // A node without a deadline gets the heartbeat limit to hear from its
  // agent (a silent connected one) or see one register.
  void ExpectAgent(const std::string& node);
  // The node has its part of the run of `job` numbered restart_count.
  void Acknowledge(core::JobId job, int restart_count, const std::string& node);
  void ExpectAcks(core::JobId job, int restart_count, std::vector<std::string> nodes,
                  core::TimeMs deadline);
  void ForgetAcks(core::JobId job);
  void CheckStarts();
  void SendStart(core::JobId id, const std::vector<core::GpuSlot>& ranks,
                 const core::Launch& launch);
  void Send(const std::string& node, const proto::SchedulerMessage& m);

  AgentHost& host_;
  AgentSettings settings_;
  std::unordered_map<std::string, Agent> agents_;
  core::LivenessTracker liveness_;       // by Agent::slot
  std::vector<std::string> slot_names_;  // slot -> node name
  std::unordered_map<core::JobId, PendingStart> pending_starts_;
  std::set<std::pair<core::TimeMs, core::JobId>> start_deadlines_;
  std::unordered_map<core::JobId, Run> runs_;
  std::unordered_map<std::string, std::string> drain_modes_;
  std::unordered_map<int64_t, LogsAsk> logs_asks_;
  int64_t next_ask_ = 1;
  std::vector<AgentAnswer> answers_;
  std::vector<std::pair<std::string, std::string>> outbox_;
  struct AuditMark {
    int64_t minute = -1;   // of the last audit row
    int64_t refusals = 0;  // since it
  };
  std::map<std::pair<std::string, std::string>, AuditMark> audited_;
  int64_t refused_total_ = 0;
  core::TimeMs now_ = 0;
};

}  // namespace topo::daemon
