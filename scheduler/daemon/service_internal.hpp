#pragma once
// Service's state and the pieces its route files share (service.cpp,
// service_jobs.cpp, service_nodes.cpp, service_admin.cpp).

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/agent_registry.hpp"
#include "daemon/auth.hpp"
#include "daemon/core_driver.hpp"
#include "daemon/disk_guard.hpp"
#include "daemon/reads.hpp"
#include "daemon/scope.hpp"
#include "daemon/service.hpp"

namespace topo::daemon {

using Json = nlohmann::json;

// A request with its target split: path segments after "/v1" and the query.
struct Route {
  const HttpRequest* request = nullptr;
  std::vector<std::string> path;  // "/v1/jobs/17/cancel" -> {"jobs", "17", "cancel"}
  std::unordered_map<std::string, std::string> query;
  const std::string& method() const { return request->method; }
};

// An error answer: {"error": {"code", "message", "field"}}.
HttpResponse Error(int status, std::string_view message, std::string_view field = {});
// The same with a code of its own where the status's code says too little
// (400 "infeasible": the job can never fit, not a malformed request).
HttpResponse ErrorWithCode(int status, std::string_view code, std::string_view message,
                           std::string_view field = {});
HttpResponse JsonResponse(int status, const Json& body);

// The parsed JSON body: an error response when the body is not one JSON
// object (bad JSON, nested deeper than 32, another type), or the content
// type is not JSON. An empty body is {} when allow_empty.
struct Body {
  Json json;
  std::optional<HttpResponse> error;
};
Body ParseBody(const HttpRequest& request, bool allow_empty);
// An error naming the first field of `body` not in `allowed`.
std::optional<HttpResponse> UnknownField(const Json& body,
                                         std::initializer_list<std::string_view> allowed);
// Integer field in [lo, hi]; absent: fallback. Errors name the field.
std::optional<HttpResponse> IntField(const Json& body, std::string_view field, int64_t lo,
                                     int64_t hi, int64_t& out);

bool ValidTenantName(std::string_view name);
bool ValidUserName(std::string_view name);

// The daemon's parts, each with its owner: the core and its log (driver),
// who calls (auth), the node agents (agents). Routes reach them through here.
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
  // (SlurmSync): the jobs got the checkpoint signal; at the deadline the
  // node counts as evacuated and its jobs move, from their newest checkpoint.
  struct SlurmDrain {
    core::TimeMs deadline = 0;
    std::string reason;
  };
  std::map<std::string, SlurmDrain> slurm_drains;

  // Commits the driver's staged entries, then hands their commands to the
  // agents (Service::Commit).
  core::Status Commit();
  std::string Actor(const Caller& c) const { return "user:" + c.user.name; }
};

// 503 naming a store failure.
HttpResponse StoreFailed(const core::Status& s);
// 403: "WHAT needs a cluster-admin token".
HttpResponse AdminOnly(std::string_view what);
// A row of the audit log: the caller did `action` ("gpu.clear"); detail is a
// JSON object. A store failure here is not the request's: ignored.
void Audit(ServiceState& s, const Caller& caller, std::string_view action, const Json& detail);
// An integer query parameter in [lo, hi] (absent: fallback); nullopt with
// `error` set (400 naming the key) otherwise.
std::optional<int64_t> QueryInt(const Route& route, const std::string& key, int64_t lo, int64_t hi,
                                int64_t fallback, HttpResponse& error);
// The first query parameter not in `allowed`, as a 400 naming it and the
// accepted ones; nullopt when every key is allowed.
std::optional<HttpResponse> UnknownParameter(const Route& route,
                                             std::initializer_list<std::string_view> allowed);
// 409 for a route that needs the topology before one was imported.
HttpResponse NoTopology();
// An error Status as an answer: its code mapped to the HTTP status (the one
// place that does), {"error": {"code", "message", "field"}}.
HttpResponse StatusResponse(const core::Status& status, std::string_view field = {});
int HttpStatusOf(core::ErrorCode code);

// Route files.
HttpResponse HandleJobs(ServiceState& s, const Caller& caller, const Route& route);
// The job's predicted step on its placement (docs/perf-model.md), as the job
// view's "predicted" (and `topo place`'s): {"step_s", "ideal_step_s",
// "slowdown", "model", "breakdown", "ideal_breakdown"}; null without a whole
// placement or when its model cannot be resolved.
Json PredictedJson(const core::Topology& topo, const core::JobRecord& job);
// The "slowdown" of PredictedJson for a running or preempting job, cached
// per start in s.slowdowns; nullopt when there is none.
std::optional<double> PredictedSlowdown(const ServiceState& s, const core::JobRecord& job);
// Drops the cached slowdowns of jobs that no longer run.
void PruneSlowdowns(const ServiceState& s);
HttpResponse HandleNodes(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTenants(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleUsers(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTokens(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTopology(ServiceState& s, const Caller& caller, const Route& route);
// GET /v1/cluster[?by=domain], GET /v1/utilization (service_cluster.cpp).
HttpResponse HandleCluster(ServiceState& s, const Caller& caller, const Route& route);
// GPUs of the whole cluster by state, as GET /v1/cluster and /metrics show
// them: allocated (held by a job, failed or not), failed (not held), free (on
// up nodes), unavailable (on nodes not up); they sum to total.
struct GpuCounts {
  int total = 0, allocated = 0, failed = 0, unavailable = 0, free = 0;
};
GpuCounts CountGpus(const ServiceState& s);
// GET /v1/config, PUT /v1/config/{key}: the scheduling policy, live.
HttpResponse HandleConfig(ServiceState& s, const Caller& caller, const Route& route);
std::string RenderMetrics(ServiceState& s, const Caller& caller);

}  // namespace topo::daemon
