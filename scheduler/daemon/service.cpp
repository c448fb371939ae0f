// Service: open and rebuild, dispatch, authentication, group commit, ticks.

#include "daemon/service.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "daemon/service_internal.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;
using core::TimeMs;

// ---------------------------------------------------------------- helpers

bool Caller::InScope(std::string_view tenant) const {
  switch (user.role) {
    case store::Role::kClusterAdmin:
      return true;
    case store::Role::kTenantAdmin:
      return tenant == user.tenant || (tenant.size() > user.tenant.size() &&
                                       tenant.substr(0, user.tenant.size()) == user.tenant &&
                                       tenant[user.tenant.size()] == '/');
    case store::Role::kUser:
      return tenant == user.tenant;
  }
  return false;
}

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  r.body += "\n";
  return r;
}

HttpResponse Error(int status, std::string_view message, std::string_view field) {
  static const std::unordered_map<int, std::string> kCodes = {
      {400, "bad_request"},        {401, "unauthenticated"},
      {403, "forbidden"},          {404, "not_found"},
      {405, "method_not_allowed"}, {409, "conflict"},
      {413, "too_large"},          {415, "unsupported_media_type"},
      {429, "rate_limited"},       {431, "headers_too_large"},
      {500, "internal"},           {503, "unavailable"}};
  Json e = {{"code", kCodes.count(status) ? kCodes.at(status) : "error"},
            {"message", std::string(message)}};
  if (!field.empty()) e["field"] = std::string(field);
  return JsonResponse(status, Json{{"error", e}});
}

namespace {

// Nesting depth of JSON text (brackets outside strings), to refuse deep
// nesting before the parser sees it.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

Body ParseBody(const HttpRequest& request, bool allow_empty) {
  Body b;
  if (request.body.empty() && allow_empty) {
    b.json = Json::object();
    return b;
  }
  const std::string& ct = request.content_type;
  if (!ct.empty() && ct.rfind("application/json", 0) != 0) {
    b.error = Error(415, "the body must be JSON: send Content-Type: application/json (got \"" +
                             ct.substr(0, 100) + "\")");
    return b;
  }
  if (request.body.empty()) {
    b.error = Error(400, "the request needs a JSON object body");
    return b;
  }
  if (JsonDepth(request.body) > 32) {
    b.error = Error(400, "the JSON body is nested deeper than 32 levels");
    return b;
  }
  b.json = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (b.json.is_discarded()) {
    // Parse again for the message that says where.
    try {
      Json again = Json::parse(request.body);
      (void)again;
    } catch (const Json::exception& e) {
      b.error = Error(400, std::string("the body is not valid JSON: ") + e.what());
      return b;
    }
    b.error = Error(400, "the body is not valid JSON");
    return b;
  }
  if (!b.json.is_object()) {
    b.error = Error(400, std::string("the body must be a JSON object, not ") + b.json.type_name());
  }
  return b;
}

std::optional<HttpResponse> UnknownField(const Json& body,
                                         std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, unused] : body.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string known;
      for (std::string_view a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
      return Error(400, "unknown field \"" + key + "\"; known fields: " + known, key);
    }
  }
  return std::nullopt;
}

std::optional<HttpResponse> IntField(const Json& body, std::string_view field, int64_t lo,
                                     int64_t hi, int64_t& out) {
  auto it = body.find(std::string(field));
  if (it == body.end()) return std::nullopt;
  if (!it->is_number_integer()) {
    return Error(400,
                 std::string(field) + " must be a whole number in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", not " + it->dump().substr(0, 40),
                 field);
  }
  const bool negative =
      it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if ((!negative && it->get<uint64_t>() > static_cast<uint64_t>(std::max<int64_t>(hi, 0))) ||
      (negative && it->get<int64_t>() < lo) || (!negative && it->get<int64_t>() < lo)) {
    return Error(400,
                 std::string(field) + " " + it->dump() + " is out of range; use " +
                     std::to_string(lo) + ".." + std::to_string(hi),
                 field);
  }
  out = it->get<int64_t>();
  return std::nullopt;
}

bool ValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  int depth = 0;
  size_t i = 0;
  while (i <= name.size()) {
    size_t end = name.find('/', i);
    if (end == std::string_view::npos) end = name.size();
    std::string_view seg = name.substr(i, end - i);
    if (seg.empty() || ++depth > 8) return false;
    if (!((seg[0] >= 'a' && seg[0] <= 'z') || (seg[0] >= '0' && seg[0] <= '9'))) return false;
    for (char c : seg) {
      const bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
      if (!ok) return false;
    }
    i = end + 1;
  }
  return true;
}

bool ValidUserName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == '-' || (c == '@' && i > 0);
    if (!ok) return false;
  }
  return name[0] != '.' && name[0] != '-';
}

HttpResponse ServiceState::NoTopology() const {
  return Error(409,
               "the cluster has no topology yet: a cluster-admin imports one with `topo topology "
               "import FILE` (PUT /v1/topology)");
}

const std::vector<core::Command>& ServiceState::Step(const core::Event& event, std::string actor) {
  const auto t0 = std::chrono::steady_clock::now();
  store::LogEntry entry;
  entry.time_ms = now;
  entry.actor = std::move(actor);
  entry.event = event;
  entry.commands = core->Step(event, now);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bool placed = false;
  for (const core::Command& c : entry.commands) {
    if (std::holds_alternative<core::StartJob>(c) || std::holds_alternative<core::RestartJob>(c)) {
      placed = true;
    }
    if (const auto* n = std::get_if<core::NodeStateChanged>(&c)) {
      node_reason[topology->node(n->node).name] = n->reason;
    }
  }
  if (placed && metrics != nullptr) metrics->Placement(seconds);
  staged.push_back(std::move(entry));
  return staged.back().commands;
}

std::optional<std::string> ServiceState::JobTenant(core::JobId id) {
  if (core != nullptr) {
    if (const core::JobRecord* j = core->job(id)) return j->request.tenant;
  }
  Result<std::optional<store::JobRow>> row = store->GetJob(id);
  if (!row.ok() || !row.value()) return std::nullopt;
  return row.value()->tenant;
}

void BuildCore(ServiceState& s) {
  s.core = std::make_unique<core::SchedulerCore>(*s.topology, s.scheduler_config);
  s.empty = std::make_unique<core::ClusterState>(*s.topology);
  core::PlacerOptions options = s.scheduler_config.placer_options;
  options.explain_shortfall = true;
  s.judge = core::MakePlacer(s.scheduler_config.placer, options);
  if (s.judge == nullptr) s.judge = core::MakePlacer("toposched", options);
}

// ---------------------------------------------------------------- Service

Service::Service(std::unique_ptr<ServiceState> state) : s_(std::move(state)) {}
Service::~Service() = default;

const std::optional<std::string>& Service::first_admin_token() const {
  return s_->first_admin_token;
}
const store::ReplayReport& Service::replay_report() const { return s_->replay; }
bool Service::has_topology() const { return s_->topology != nullptr; }
size_t Service::staged() const { return s_->staged.size(); }

namespace {

// The registry's view of the daemon: the core, the store, the log.
class ServiceAgentHost : public AgentHost {
 public:
  explicit ServiceAgentHost(ServiceState& s) : s_(s) {}
  const core::SchedulerCore* core() const override { return s_.core.get(); }
  const core::Topology* topology() const override { return s_.topology.get(); }
  void StepCore(const core::Event& event, const std::string& actor) override {
    s_.Step(event, actor);
  }
  bool JobEnded(core::JobId id) override { return s_.JobTenant(id).has_value(); }
  void Audit(const std::string& actor, std::string_view action, const Json& detail) override {
    (void)s_.store->AppendAudit(s_.now, actor, action, detail.dump());
  }
  void Log(const std::string& line) override {
    // One write per line, so lines from threads do not interleave.
    const std::string out = line + "\n";
    std::fwrite(out.data(), 1, out.size(), stderr);
  }
  std::string UnixUserOf(const std::string& api_user) override {
    Result<std::optional<store::User>> u = s_.store->GetUser(api_user);
    if (!u.ok() || !u.value()) return api_user;
    return u.value()->unix_user.empty() ? api_user : u.value()->unix_user;
  }

 private:
  ServiceState& s_;
};

}  // namespace

Result<std::unique_ptr<Service>> Service::Open(const DaemonConfig& config, Metrics* metrics,
                                               TimeMs now) {
  auto s = std::make_unique<ServiceState>();
  s->config = config;
  s->metrics = metrics;
  s->agent_host = std::make_unique<ServiceAgentHost>(*s);
  s->agents = std::make_unique<AgentRegistry>(
      *s->agent_host, AgentSettings{config.heartbeat_interval_ms, config.missed_heartbeats_down,
                                    /*send_jobs=*/config.slurm_socket.empty()});
  Result<store::Store> opened = store::Store::Open(config.state_dir + "/topo.db");
  if (!opened.ok()) return opened.status();
  s->store = std::make_unique<store::Store>(std::move(opened).value());
  store::Store& st = *s->store;
  s->now = std::max(now, st.LastTime());

  // The policy the log was written with wins over the config file's: a
  // replay must make the same decisions.
  Result<std::optional<std::string>> policy = st.GetMeta("policy");
  if (!policy.ok()) return policy.status();
  if (policy.value()) {
    if (Status p = ApplyPolicyJson(*policy.value(), s->config); !p.ok()) {
      return Status::Error("store " + st.path() + ": " + p.message());
    }
  } else if (Status p = st.SetMeta("policy", PolicyJson(s->config)); !p.ok()) {
    return p;
  }
  Result<core::SchedulerConfig> sc = s->config.SchedulerConfig();
  if (!sc.ok()) return sc.status();
  s->scheduler_config = sc.value();

  Result<std::optional<std::string>> topo_json = st.GetMeta("topology");
  if (!topo_json.ok()) return topo_json.status();
  if (topo_json.value()) {
    Result<core::Topology> t = common::ParseTopologyJson(*topo_json.value());
    if (!t.ok())
      return Status::Error("store " + st.path() + ": the stored topology: " + t.message());
    s->topology = std::make_unique<core::Topology>(std::move(t).value());
    BuildCore(*s);
    Result<std::optional<std::string>> from = st.GetMeta("topology_from_seq");
    if (!from.ok()) return from.status();
    const int64_t from_seq = from.value() ? std::stoll(*from.value()) : 1;
    Result<store::ReplayReport> replay = st.Replay(*s->core, from_seq);
    if (!replay.ok()) return replay.status();
    s->replay = replay.value();
    s->core->TakeFinishedJobs();
    // Tenants the log of this topology does not configure yet (an import
    // that crashed before its first batch): configure them again.
    Result<std::vector<core::TenantConfig>> tenants = st.ListTenants();
    if (!tenants.ok()) return tenants.status();
    for (const core::TenantConfig& t : tenants.value()) {
      const core::TenantConfig* have = s->core->tenant(t.name);
      const bool same =
          have != nullptr && common::TenantConfigToJson(*have) == common::TenantConfigToJson(t);
      if (!same) s->Step(core::TenantConfigured{t}, "scheduler");
    }
    Result<std::vector<store::NodeRow>> nodes = st.ListNodes();
    if (!nodes.ok()) return nodes.status();
    for (const store::NodeRow& n : nodes.value()) s->node_reason[n.name] = n.reason;
    // Nodes an agent brought up before the restart: their agents, retrying
    // with backoff meanwhile, get kAgentReconnectGraceMs to reconnect (the
    // heartbeat limit when that is longer); the nodes whose agents do not
    // come back go down and their jobs are recovered. Heartbeats are not
    // logged, so the node's last reason says who brought it up.
    std::vector<std::string> agent_nodes;
    for (const store::NodeRow& n : nodes.value()) {
      const core::NodeId id = s->topology->FindNode(n.name);
      if (id < 0 || s->core->cluster().node_state(id) == core::NodeState::kDown) continue;
      // "agent disconnected": suspect when the daemon stopped (its agent's
      // connection had closed); it too must come back or go down.
      if (n.reason == "agent registered" || n.reason == "heartbeat resumed" ||
          n.reason == "agent disconnected") {
        agent_nodes.push_back(n.name);
      }
    }
    s->agents->Restore(agent_nodes, ServiceState::kAgentReconnectGraceMs, s->now);
  }
  Result<core::JobId> max_id = st.MaxJobId();
  if (!max_id.ok()) return max_id.status();
  s->next_job_id = max_id.value() + 1;

  Result<std::vector<store::User>> users = st.ListUsers();
  if (!users.ok()) return users.status();
  if (users.value().empty()) {
    store::User admin{"admin", "default", store::Role::kClusterAdmin, s->now, "admin"};
    if (Status u = st.CreateUser(admin); !u.ok()) return u;
    Result<store::IssuedToken> token = st.CreateToken("admin", s->now);
    if (!token.ok()) return token.status();
    s->first_admin_token = token.value().token;
    (void)st.AppendAudit(s->now, "scheduler", "user.create",
                         Json{{"user", "admin"}, {"role", "cluster-admin"}}.dump());
  }
  auto service = std::unique_ptr<Service>(new Service(std::move(s)));
  if (Status c = service->Commit(); !c.ok()) return c;
  return service;
}

Status Service::Commit() { return s_->CommitStaged(); }

Status ServiceState::CommitStaged() {
  if (staged.empty()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  Result<store::AppendResult> r = store->Append(*topology, staged);
  if (!r.ok()) return r.status();
  for (const store::LogEntry& e : staged) agents->Dispatch(e.commands);
  if (metrics != nullptr) {
    metrics->Commit(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    staged.size());
  }
  staged.clear();
  // Terminal jobs now live in the store; the core forgets them.
  core->TakeFinishedJobs();
  return Status::Ok();
}

void Service::Tick(TimeMs now) {
  ServiceState& s = *s_;
  if (s.core == nullptr) return;
  s.now = std::max(s.now, now);
  if (s.core->NextWakeup() <= s.now) s.Step(core::Tick{}, "scheduler");
}

TimeMs Service::NextWakeup() const {
  return s_->core == nullptr ? core::kNever : s_->core->NextWakeup();
}

void Service::SampleUtilization(TimeMs now) {
  ServiceState& s = *s_;
  if (s.core == nullptr) return;
  s.utilization.push_back({now, s.core->cluster().total_busy_gpus(), s.topology->total_gpus()});
  while (s.utilization.size() > 24 * 60) s.utilization.pop_front();
}

namespace {
HttpResponse Unauthenticated(std::string_view message) {
  HttpResponse r = Error(401, message);
  r.route = "unauthenticated";
  return r;
}
}  // namespace

HttpResponse Service::Handle(const HttpRequest& request, TimeMs now) {
  ServiceState& s = *s_;
  s.now = std::max(s.now, now);
  Route route;
  route.request = &request;
  std::string_view target = request.target;
  std::string_view path = target.substr(0, target.find('?'));
  if (target.size() > path.size()) {
    std::string_view q = target.substr(path.size() + 1);
    size_t i = 0;
    while (i <= q.size()) {
      size_t end = q.find('&', i);
      if (end == std::string_view::npos) end = q.size();
      std::string_view kv = q.substr(i, end - i);
      const size_t eq = kv.find('=');
      if (!kv.empty()) {
        route.query[std::string(kv.substr(0, eq))] =
            eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
      }
      i = end + 1;
    }
  }
  // Split the path; reject traversal and encoded separators outright.
  if (path.find("..") != std::string_view::npos || path.find('%') != std::string_view::npos ||
      path.find("//") != std::string_view::npos || path.find('\\') != std::string_view::npos) {
    HttpResponse r = Error(404, "no such route: " + std::string(path.substr(0, 200)));
    r.route = "invalid";
    return r;
  }
  {
    size_t i = 1;
    while (i < path.size()) {
      size_t end = path.find('/', i);
      if (end == std::string_view::npos) end = path.size();
      if (end > i) route.path.emplace_back(path.substr(i, end - i));
      i = end + 1;
    }
  }
  if (route.path.empty() || route.path[0] != "v1") {
    if (route.path.size() == 1 && route.path[0] == "metrics") {
      // handled below, after authentication
    } else {
      HttpResponse r = Error(404, "no such route: " + std::string(path.substr(0, 200)) +
                                      "; the API lives under /v1 (docs/api.md)");
      r.route = "unknown";
      return r;
    }
  }
  const bool metrics_route = route.path[0] == "metrics";
  if (!metrics_route) route.path.erase(route.path.begin());

  // Authenticate.
  std::string_view auth = request.authorization;
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.empty()) {
    return Unauthenticated(
        "this route needs a token: send Authorization: Bearer TOKEN (topo --token, "
        "TOPO_TOKEN)");
  }
  if (auth.substr(0, kBearer.size()) != kBearer || auth.size() > 256) {
    return Unauthenticated("the Authorization header must be \"Bearer TOKEN\"");
  }
  const std::string token(auth.substr(kBearer.size()));
  const std::string hash = store::Sha256Hex(token);
  auto cached = s.auth_cache.find(hash);
  if (cached == s.auth_cache.end()) {
    Result<std::optional<store::User>> user = s.store->Authenticate(token);
    if (!user.ok()) return Error(503, "the store failed: " + user.message());
    if (s.auth_cache.size() > 100000) s.auth_cache.clear();
    cached = s.auth_cache.emplace(hash, user.value()).first;
  }
  if (!cached->second) {
    return Unauthenticated(
        "unknown or revoked token; ask an admin for a new one (topo token create)");
  }
  Caller caller{*cached->second};

  // Rate limit per user: a token bucket of rate_limit_per_second, burst 2x.
  {
    const double rate = s.config.rate_limit_per_second;
    ServiceState::Bucket& b = s.rate[caller.user.name];
    if (b.last_ms < 0) {
      b.tokens = 2 * rate;
    } else {
      b.tokens = std::min(2 * rate, b.tokens + rate * double(s.now - b.last_ms) / 1000.0);
    }
    b.last_ms = s.now;
    if (b.tokens < 1) {
      HttpResponse r =
          Error(429, "too many requests for user " + caller.user.name + "; the limit is " +
                         std::to_string(int64_t(rate)) + " per second");
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    b.tokens -= 1;
  }

  if (metrics_route) {
    HttpResponse r;
    r.route = "/metrics";
    if (request.method != "GET") return Error(405, "use GET /metrics");
    r.content_type = "text/plain; version=0.0.4";
    r.body = RenderMetrics(s, caller);
    return r;
  }
  if (route.path.empty()) return Error(404, "no such route: /v1");
  const std::string& root = route.path[0];
  HttpResponse r;
  if (root == "jobs") {
    r = HandleJobs(s, caller, route);
  } else if (root == "nodes") {
    r = HandleNodes(s, caller, route);
  } else if (root == "tenants") {
    r = HandleTenants(s, caller, route);
  } else if (root == "users") {
    r = HandleUsers(s, caller, route);
  } else if (root == "tokens") {
    r = HandleTokens(s, caller, route);
  } else if (root == "topology") {
    r = HandleTopology(s, caller, route);
  } else if (root == "events" || root == "audit") {
    r = HandleEvents(s, caller, route);
  } else if (root == "cluster" || root == "utilization" || root == "whoami") {
    r = HandleCluster(s, caller, route);
  } else {
    r = Error(404, "no such route: /v1/" + root.substr(0, 100) + " (docs/api.md)");
    r.route = "unknown";
    return r;
  }
  if (r.route.empty()) r.route = "/v1/" + root;
  return r;
}

// ---------------------------------------------------------------- agents

Result<std::string> Service::AgentRegister(const std::string& cert_node, const std::string& message,
                                           TimeMs now) {
  s_->now = std::max(s_->now, now);
  return s_->agents->Register(cert_node, message, s_->now);
}

std::optional<std::string> Service::AgentMessage(const std::string& node,
                                                 const std::string& message, TimeMs now) {
  s_->now = std::max(s_->now, now);
  return s_->agents->Message(node, message, s_->now);
}

void Service::AgentDisconnected(const std::string& node, TimeMs now) {
  s_->now = std::max(s_->now, now);
  s_->agents->Disconnected(node, s_->now);
}

void Service::CheckLiveness(TimeMs now) {
  s_->now = std::max(s_->now, now);
  s_->agents->CheckLiveness(s_->now);
}

std::vector<std::pair<std::string, std::string>> Service::TakeAgentMessages() {
  return s_->agents->TakeMessages();
}

std::vector<std::pair<int64_t, HttpResponse>> Service::TakeDeferredAnswers() {
  return s_->agents->TakeDeferredAnswers();
}

void Service::ForgetDeferred(int64_t id) { s_->agents->ForgetDeferred(id); }

}  // namespace topo::daemon
