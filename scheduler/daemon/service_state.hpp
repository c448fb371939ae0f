#pragma once
// The service's parts, each with its owner, as the routes (api/), the agent
// registry's host and the Slurm service reach them: the scheduling loop and
// its log (driver), who calls (auth), the node agents (agents), the disk
// floor, the read pool. Service (service.hpp) is the façade over this.
//
// Thread safety: none; the daemon's strand owns it (reads off the strand
// use only `reads` and `auth`, which are thread safe).

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/access/auth.hpp"
#include "daemon/access/scope.hpp"
#include "daemon/agents/agent_registry.hpp"
#include "daemon/config.hpp"
#include "daemon/disk_guard.hpp"
#include "daemon/loop/core_driver.hpp"
#include "daemon/loop/read_pool.hpp"
#include "daemon/metrics.hpp"

namespace topo::daemon {

struct ServiceState {
  ServiceState(const DaemonConfig& c, Metrics* m)
      : config(c),
        metrics(m),
        driver(m),
        auth(c.rate_limit_per_second),
        disk(c.state_dir, c.min_free_disk_mb << 20) {}
  DaemonConfig config;
  Metrics* metrics = nullptr;
  CoreDriver driver;
  Authenticator auth;
  DiskGuard disk;
  // Read-only store connections for the routes served off the strand.
  std::unique_ptr<ReadPool> reads;
  // Node agents: registration, liveness, authority, messages.
  std::unique_ptr<AgentHost> agent_host;
  std::unique_ptr<AgentRegistry> agents;
  std::optional<std::string> first_admin_token;
  // After a daemon restart, how long agents have to reconnect: twice
  // topo-agent's longest reconnect backoff (5 s).
  static constexpr core::TimeMs kAgentReconnectGraceMs = 10000;

  // Predicted slowdowns of running jobs (PredictedSlowdown), by job, valid
  // for the start they were computed for; the job list and /metrics read
  // them on every call, the model runs once per start.
  struct Slowdown {
    core::TimeMs start = -1;
    int restarts = -1;
    double value = 0;  // < 0: no prediction (no whole placement, no model)
  };
  mutable std::map<core::JobId, Slowdown> slowdowns;

  // Slurm mode: graceful drains of nodes under running jobs, by node name
  // (SlurmSync): the jobs got their checkpoint signal; at the deadline the
  // node counts as evacuated and its jobs move, from their newest checkpoint.
  // While a job that declared no checkpoint signal runs there, the deadline
  // moves on and that job runs to its end (announced: logged once each).
  struct SlurmDrain {
    core::TimeMs deadline = 0;
    std::string reason;
    std::set<core::JobId> announced;
  };
  std::map<std::string, SlurmDrain> slurm_drains;

  // Commits the driver's staged entries, then hands their commands to the
  // agents (Service::Commit).
  core::Status Commit();
  std::string Actor(const Caller& c) const { return "user:" + c.user.name; }
  // A new topology epoch (PUT /v1/topology, Slurm mode's topology.conf):
  // refused (kConflict) while any job is queued, held or running; commits
  // what the old core staged, records the topology, its first seq and the
  // policy in meta (through the replicated log first, in HA), starts a
  // fresh core on it and configures the tenants again, all logged as
  // `actor`. Errors: the store's, or HA's (kUnavailable).
  core::Status ImportTopology(std::unique_ptr<core::Topology> topology, const std::string& actor);
  // A row of the audit log: the caller did `action` ("gpu.clear"); detail is
  // a JSON object. A store failure here is not the request's: ignored.
  void Audit(const Caller& caller, std::string_view action, const nlohmann::json& detail) const;
};

}  // namespace topo::daemon
