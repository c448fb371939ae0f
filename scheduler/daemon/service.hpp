#pragma once
// The daemon's application layer: every /v1 route, authentication, roles,
// validation and the group commit, independent of the network.
//
// One owner (the server's strand) calls it; nothing here is thread safe
// except Metrics. For each group of requests the server does:
//
//   for each request: response[i] = service.Handle(request[i], now)
//   service.Commit()            one SQLite transaction, one fsync
//   then sends the responses    (never before Commit returned Ok)
//
// Handle steps SchedulerCore at once (so a submission's answer carries the
// job's state after its first scheduling pass) and stages the log entries;
// Commit writes them. If Commit fails, the core is ahead of the log: the
// server answers 503 to the whole group and stops; a restart rebuilds the
// core from the log, which holds exactly what was acknowledged.
//
// The API is docs/api.md.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/http.hpp"
#include "daemon/loop/replication.hpp"
#include "daemon/metrics.hpp"
#include "daemon/slurm/slurm_types.hpp"
#include "store/store.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {

struct ServiceState;  // service_internal.hpp

class Service {
 public:
  // Opens STATE_DIR/topo.db, rebuilds the core from the log (with the policy
  // and topology kept in meta), reconciles tenants, and on a fresh store
  // creates the user "admin" (cluster-admin, tenant default).
  // replicate (HA, docs/ha.md): every commit's batch goes through it
  // first, the Open's own included; empty for the single daemon.
  // replicate_epoch (HA): every topology import goes through it first.
  // In HA mode (config.ha_enabled()) a fresh store's admin token is the one
  // in STATE_DIR/admin-token when that file exists (every replica is given
  // the same file); user and token changes are replicated through
  // SetAuthReplication (docs/ha.md, Users and tokens).
  static core::Result<std::unique_ptr<Service>> Open(const DaemonConfig& config, Metrics* metrics,
                                                     core::TimeMs now,
                                                     ReplicateBatch replicate = {},
                                                     ReplicateEpoch replicate_epoch = {});
  ~Service();

  // A token for "admin", made on the first start only (nullopt otherwise):
  // the caller writes it to STATE_DIR/admin-token and prints it once.
  const std::optional<std::string>& first_admin_token() const;
  // HA (docs/ha.md): the leadership term this replica won; every agent's
  // `registered` carries it, so agents refuse an older leader. Call before
  // the agent listener opens.
  void SetLeadershipTerm(int64_t term);
  // HA (docs/ha.md, Users and tokens): every change to the users or tokens
  // is handed to `publish` (Store::ExportAuth's value) before it is answered;
  // PublishAuthNow hands the current ones at once (a fresh cluster's first
  // leader, whose etcd has none yet). Errors: publish's.
  void SetAuthReplication(std::function<core::Status(const std::string&)> publish);
  core::Status PublishAuthNow();
  // HA: `hook` runs on the strand after each snapshot the store writes
  // (docs/ha.md: the leader publishes it to etcd); it must not block.
  void OnSnapshotWritten(std::function<void()> hook);

  HttpResponse Handle(const HttpRequest& request, core::TimeMs now);
  // Reads that need no strand (the event log, the audit log, whoami;
  // routes.cpp marks them): ServedOffStrand says which, HandleRead serves
  // one on a read-only store connection. Both are thread-safe and may run
  // beside the strand.
  bool ServedOffStrand(const HttpRequest& request) const;
  HttpResponse HandleRead(const HttpRequest& request, core::TimeMs now);
  // Writes the staged entries in one transaction (nothing staged: Ok).
  core::Status Commit();
  size_t staged() const;

  // Steps a Tick when the core's next wakeup has come; stages its entries.
  void Tick(core::TimeMs now);
  // One bounded compaction batch (docs/store.md): deletes at most
  // compaction_batch_events events covered by the kept snapshots and older
  // than event_retention_days. Returns how many it deleted; a full batch
  // means more are due.
  int64_t Compact(core::TimeMs now);
  int CompactionBatch() const;
  // When the next Tick is due (kNever: nothing scheduled).
  core::TimeMs NextWakeup() const;
  void SampleUtilization(core::TimeMs now);

  // ---- node agents (docs/agent-protocol.md), on the strand like Handle.
  // The first message of an agent connection whose client certificate names
  // cert_node: the `registered` reply (JSON text), or an error (refuse and
  // close). Brings a node that was down up (a logged event).
  core::Result<std::string> AgentRegister(const std::string& cert_node, const std::string& message,
                                          core::TimeMs now);
  // Any later message of that agent: the reply to send (an `error` naming
  // the refused field), or nothing. Never closes the connection.
  std::optional<std::string> AgentMessage(const std::string& node, const std::string& message,
                                          core::TimeMs now);
  void AgentDisconnected(const std::string& node, core::TimeMs now);
  // Nodes whose agent was silent for missed_heartbeats_down intervals go
  // down (stages entries; the core recovers their jobs).
  void CheckLiveness(core::TimeMs now);
  // Messages for agents from the commands of the last Commit and from
  // requests that ask an agent (logs, checkpoints): (node, JSON).
  std::vector<std::pair<std::string, std::string>> TakeAgentMessages();
  // Answers to deferred requests that their agent has answered: (id, answer).
  std::vector<std::pair<int64_t, HttpResponse>> TakeDeferredAnswers();
  // The server stopped waiting for deferred request id (timeout); a late
  // reply from the agent is then ignored.
  void ForgetDeferred(int64_t id);

  // ---- Slurm mode (docs/slurm.md; service_slurm.cpp), on the strand like
  // Handle. The Slurm bridge (slurm_bridge.cpp) runs scontrol and the
  // plugin's socket on its own threads and hands the results here.
  // One request line of job_submit/topo (or a test/refresh client): the
  // answer line without its newline ("PLACE id nodes", "HOLD id why",
  // "REJECT why", "PASS why", "BUSY why" for op test). Submissions step the
  // core and stage their entries like POST /v1/jobs; the caller commits
  // before it answers. user: the submitter's name (from its uid). The line
  // is read by the API's reader of it (api::ParseSlurmSubmitLine); one that
  // does not read is answered "PASS" with why.
  std::string SlurmRequest(std::string_view line, const std::string& user, core::TimeMs now);
  std::string SlurmRequest(const api::SlurmSubmitLine& line, const std::string& user,
                           core::TimeMs now);
  // Brings the core's view in line with what scontrol showed: jobs that
  // ended in Slurm free their capacity, nodes follow Slurm's state (nodes
  // busy with jobs toposched did not place are drained with a "slurm:"
  // reason), and returns what to do in Slurm: release held jobs the core
  // has started, drain nodes the core took out for health, resume them.
  std::vector<SlurmAction> SlurmSync(const SlurmSnapshot& snapshot, core::TimeMs now);
  // Imports a topology.conf unless the store already holds the same
  // topology; an error when it differs and jobs are still active.
  core::Status SlurmImportTopology(const std::string& text, int gpus_per_node, core::TimeMs now);

  // What the startup replay did (for the log line).
  const store::ReplayReport& replay_report() const;
  // The seq of the snapshot the start restored (0: a full replay).
  int64_t restored_seq() const;
  bool has_topology() const;

 private:
  explicit Service(std::unique_ptr<ServiceState> state);
  std::unique_ptr<ServiceState> s_;
};

}  // namespace topo::daemon
