#pragma once
// Service's state and the pieces its route files share (service.cpp,
// service_jobs.cpp, service_admin.cpp).

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/agent_registry.hpp"
#include "daemon/service.hpp"

namespace topo::daemon {

using Json = nlohmann::json;

struct Caller {
  store::User user;
  bool cluster_admin() const { return user.role == store::Role::kClusterAdmin; }
  bool admin() const { return user.role != store::Role::kUser; }
  // May this caller see and act on the tenant's jobs?
  bool InScope(std::string_view tenant) const;
};

// A request with its target split: path segments after "/v1" and the query.
struct Route {
  const HttpRequest* request = nullptr;
  std::vector<std::string> path;  // "/v1/jobs/17/cancel" -> {"jobs", "17", "cancel"}
  std::unordered_map<std::string, std::string> query;
  const std::string& method() const { return request->method; }
};

// An error answer: {"error": {"code", "message", "field"}}.
HttpResponse Error(int status, std::string_view message, std::string_view field = {});
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

struct ServiceState {
  DaemonConfig config;
  core::SchedulerConfig scheduler_config;
  Metrics* metrics = nullptr;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<core::Topology> topology;
  std::unique_ptr<core::SchedulerCore> core;
  std::unique_ptr<core::ClusterState> empty;  // the empty cluster: refuses infeasible jobs
  std::unique_ptr<core::Placer> judge;
  std::vector<store::LogEntry> staged;
  core::JobId next_job_id = 1;
  core::TimeMs now = 0;
  store::ReplayReport replay;
  std::optional<std::string> first_admin_token;
  std::unordered_map<std::string, std::string> node_reason;  // name -> last reason
  std::deque<UtilizationSample> utilization;
  // SHA-256 of a token -> its user (nullopt: refused). Cleared when users or
  // tokens change.
  std::unordered_map<std::string, std::optional<store::User>> auth_cache;
  struct Bucket {
    double tokens = 0;
    core::TimeMs last_ms = -1;
  };
  std::unordered_map<std::string, Bucket> rate;

  // Node agents: registration, liveness, authority, messages.
  std::unique_ptr<AgentRegistry> agents;
  // After a daemon restart, how long agents have to reconnect: twice
  // topo-agent's longest reconnect backoff (5 s).
  static constexpr core::TimeMs kAgentReconnectGraceMs = 10000;
  // Writes the staged entries in one transaction, then hands their commands
  // to the agents (Service::Commit).
  core::Status CommitStaged();
  // What the agent registry reaches of this state (service.cpp).
  std::unique_ptr<AgentHost> agent_host;

  // Steps the core and stages the entry; returns the commands.
  const std::vector<core::Command>& Step(const core::Event& event, std::string actor);
  // A job by id, from the core or (terminal jobs) the store; nullopt if
  // unknown. Errors (store failures) are 503 responses.
  core::Result<std::optional<Json>> JobView(core::JobId id, bool detail);
  // The tenant of a job, if the job exists.
  std::optional<std::string> JobTenant(core::JobId id);
  std::string Actor(const Caller& c) const { return "user:" + c.user.name; }
  HttpResponse NoTopology() const;
};

// Route files.
HttpResponse HandleJobs(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleNodes(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTenants(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleUsers(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTokens(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTopology(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleEvents(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleCluster(ServiceState& s, const Caller& caller, const Route& route);
std::string RenderMetrics(ServiceState& s, const Caller& caller);

// Rebuilds core, empty and judge over s.topology (after Open or an import).
void BuildCore(ServiceState& s);

}  // namespace topo::daemon
