// Service: open and rebuild, dispatch, authentication, group commit, ticks.

#include "daemon/service.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "daemon/log.hpp"
#include "daemon/service_internal.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/strict_json.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/topology_source.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;
using core::TimeMs;

// ---------------------------------------------------------------- helpers

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  r.body += "\n";
  return r;
}

HttpResponse Error(int status, std::string_view message, std::string_view field) {
  static const std::unordered_map<int, std::string> kCodes = {{400, "bad_request"},
                                                              {401, "unauthenticated"},
                                                              {403, "forbidden"},
                                                              {404, "not_found"},
                                                              {405, "method_not_allowed"},
                                                              {409, "conflict"},
                                                              {413, "too_large"},
                                                              {415, "unsupported_media_type"},
                                                              {429, "rate_limited"},
                                                              {431, "headers_too_large"},
                                                              {500, "internal"},
                                                              {503, "unavailable"},
                                                              {507, "insufficient_storage"}};
  return ErrorWithCode(status, kCodes.count(status) ? kCodes.at(status) : "error", message, field);
}

HttpResponse ErrorWithCode(int status, std::string_view code, std::string_view message,
                           std::string_view field) {
  Json e = {{"code", std::string(code)}, {"message", std::string(message)}};
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
  std::string duplicate;
  Result<Json> parsed = common::ParseJson(request.body, &duplicate);
  if (!parsed.ok()) {
    b.error = duplicate.empty()
                  ? Error(400, "the body is not valid JSON: " + parsed.message())
                  : Error(400,
                          "the body names " + duplicate +
                              " twice; give each field once (readers disagree on which one wins)",
                          duplicate);
    return b;
  }
  b.json = std::move(parsed).value();
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

HttpResponse StoreFailed(const Status& s) { return Error(503, "the store failed: " + s.message()); }

HttpResponse AdminOnly(std::string_view what) {
  return Error(403, std::string(what) + " needs a cluster-admin token");
}

void Audit(ServiceState& s, const Caller& caller, std::string_view action, const Json& detail) {
  (void)s.driver.store->AppendAudit(s.driver.now, s.Actor(caller), action, detail.dump());
}

std::optional<int64_t> QueryInt(const Route& route, const std::string& key, int64_t lo, int64_t hi,
                                int64_t fallback, HttpResponse& error) {
  auto it = route.query.find(key);
  if (it == route.query.end()) return fallback;
  int64_t v = 0;
  const std::string& t = it->second;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || v < lo || v > hi) {
    error = Error(
        400, key + " must be a whole number in " + std::to_string(lo) + ".." + std::to_string(hi),
        key);
    return std::nullopt;
  }
  return v;
}

std::optional<HttpResponse> UnknownParameter(const Route& route,
                                             std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : route.query) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    return Error(400, "unknown parameter \"" + key.substr(0, 40) + "\"; use " + list,
                 key.substr(0, 40));
  }
  return std::nullopt;
}

HttpResponse NoTopology() {
  return Error(409,
               "the cluster has no topology yet: a cluster-admin imports one with `topo topology "
               "import FILE` (PUT /v1/topology)");
}

int HttpStatusOf(core::ErrorCode code) {
  switch (code) {
    case core::ErrorCode::kOk:
      return 200;
    case core::ErrorCode::kInvalid:
      return 400;
    case core::ErrorCode::kUnauthenticated:
      return 401;
    case core::ErrorCode::kForbidden:
      return 403;
    case core::ErrorCode::kNotFound:
      return 404;
    case core::ErrorCode::kConflict:
      return 409;
    case core::ErrorCode::kRateLimited:
      return 429;
    case core::ErrorCode::kUnavailable:
      return 503;
    case core::ErrorCode::kInsufficientStorage:
      return 507;
  }
  return 500;
}

HttpResponse StatusResponse(const Status& status, std::string_view field) {
  HttpResponse r = Error(HttpStatusOf(status.code()), status.message(), field);
  if (status.code() == core::ErrorCode::kRateLimited) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// ---------------------------------------------------------------- Service

Service::Service(std::unique_ptr<ServiceState> state) : s_(std::move(state)) {}
Service::~Service() = default;

const std::optional<std::string>& Service::first_admin_token() const {
  return s_->first_admin_token;
}
const store::ReplayReport& Service::replay_report() const { return s_->driver.replay; }
int64_t Service::restored_seq() const { return s_->driver.restored_seq; }
bool Service::has_topology() const { return s_->driver.topology != nullptr; }
size_t Service::staged() const { return s_->driver.staged(); }

namespace {

// The registry's view of the daemon: the core, the store, the log.
class ServiceAgentHost : public AgentHost {
 public:
  explicit ServiceAgentHost(ServiceState& s) : s_(s) {}
  const core::SchedulerCore* core() const override { return s_.driver.core.get(); }
  const core::Topology* topology() const override { return s_.driver.topology.get(); }
  void StepCore(const core::Event& event, const std::string& actor) override {
    s_.driver.Step(event, actor);
  }
  bool JobEnded(core::JobId id) override { return s_.driver.JobTenant(id).has_value(); }
  void Audit(const std::string& actor, std::string_view action, const Json& detail) override {
    (void)s_.driver.store->AppendAudit(s_.driver.now, actor, action, detail.dump());
  }
  std::string UnixUserOf(const std::string& api_user) override {
    Result<std::optional<store::User>> u = s_.driver.store->GetUser(api_user);
    if (!u.ok() || !u.value()) return api_user;
    return u.value()->unix_user.empty() ? api_user : u.value()->unix_user;
  }

 private:
  ServiceState& s_;
};

}  // namespace

Result<std::unique_ptr<Service>> Service::Open(const DaemonConfig& config, Metrics* metrics,
                                               TimeMs now, ReplicateBatch replicate,
                                               ReplicateEpoch replicate_epoch) {
  auto s = std::make_unique<ServiceState>(config, metrics);
  s->driver.replicate = std::move(replicate);
  s->driver.replicate_epoch = std::move(replicate_epoch);
  s->agent_host = std::make_unique<ServiceAgentHost>(*s);
  AgentSettings agent_settings;
  agent_settings.heartbeat_interval_ms = config.heartbeat_interval_ms;
  agent_settings.missed_heartbeats_down = config.missed_heartbeats_down;
  agent_settings.send_jobs = config.slurm_socket.empty();
  agent_settings.restart_grace_ms = config.agent_restart_grace_ms;
  agent_settings.start_ack_timeout_ms = config.start_ack_timeout_s * core::kSecond;
  s->agents = std::make_unique<AgentRegistry>(*s->agent_host, agent_settings);
  Result<store::Store> opened = store::Store::Open(config.state_dir + "/topo.db");
  if (!opened.ok()) return opened.status();
  s->reads = std::make_unique<ReadPool>(config.state_dir + "/topo.db",
                                        static_cast<size_t>(config.read_threads));
  s->driver.store = std::make_unique<store::Store>(std::move(opened).value());
  store::Store& st = *s->driver.store;
  s->driver.now = std::max(now, st.LastTime());

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
  s->driver.scheduler_config = sc.value();

  Result<std::optional<std::string>> topo_json = st.GetMeta("topology");
  if (!topo_json.ok()) return topo_json.status();
  if (topo_json.value()) {
    Result<core::Topology> t = common::ParseTopologyJson(*topo_json.value());
    if (!t.ok())
      return Status::Error("store " + st.path() + ": the stored topology: " + t.message());
    s->driver.topology = std::make_unique<core::Topology>(std::move(t).value());
    Result<std::optional<std::string>> from = st.GetMeta("topology_from_seq");
    if (!from.ok()) return from.status();
    const int64_t from_seq = from.value() ? std::stoll(*from.value()) : 1;
    if (Status r = s->driver.Rebuild(from_seq); !r.ok()) return r;
    // Policy changes in the log are the policy now.
    SyncLivePolicy(core::SchedulingPolicy::Of(s->driver.core->config()), s->config);
    s->driver.scheduler_config = s->driver.core->config();
    s->driver.core->TakeFinishedJobs();
    s->driver.RecountWaiting();
    // Tenants the log of this topology does not configure yet (an import
    // that crashed before its first batch): configure them again.
    Result<std::vector<core::TenantConfig>> tenants = st.ListTenants();
    if (!tenants.ok()) return tenants.status();
    for (const core::TenantConfig& t : tenants.value()) {
      const core::TenantConfig* have = s->driver.core->tenant(t.name);
      const bool same =
          have != nullptr && common::TenantConfigToJson(*have) == common::TenantConfigToJson(t);
      if (!same) s->driver.Step(core::TenantConfigured{t}, "scheduler");
    }
    Result<std::vector<store::NodeRow>> nodes = st.ListNodes();
    if (!nodes.ok()) return nodes.status();
    for (const store::NodeRow& n : nodes.value()) s->driver.node_reason[n.name] = n.reason;
    // Every node that is not down must prove it has an agent: the agents,
    // retrying with backoff meanwhile, get kAgentReconnectGraceMs to
    // reconnect (the heartbeat limit when that is longer); the nodes whose
    // agents do not come back go down and their jobs are recovered, whoever
    // brought them up (an admin's resume too). In Slurm mode slurmd runs the
    // jobs and Slurm says which nodes are up: only the nodes an agent brought
    // up are watched (heartbeats are not logged, so the node's last reason
    // says who did).
    std::vector<std::string> agent_nodes;
    const core::Topology& topo = *s->driver.topology;
    for (core::NodeId id = 0; id < topo.node_count(); ++id) {
      if (s->driver.core->cluster().node_state(id) == core::NodeState::kDown) continue;
      const std::string& name = topo.node(id).name;
      const std::string& reason = s->driver.node_reason[name];
      // "agent disconnected": suspect when the daemon stopped (its agent's
      // connection had closed); it too must come back or go down.
      if (agent_settings.send_jobs || reason == "agent registered" ||
          reason == "heartbeat resumed" || reason == "agent disconnected") {
        agent_nodes.push_back(name);
      }
    }
    s->agents->Restore(agent_nodes, ServiceState::kAgentReconnectGraceMs, s->driver.now);
  }
  Result<core::JobId> max_id = st.MaxJobId();
  if (!max_id.ok()) return max_id.status();
  s->driver.next_job_id = max_id.value() + 1;

  Result<std::vector<store::User>> users = st.ListUsers();
  if (!users.ok()) return users.status();
  if (users.value().empty()) {
    store::User admin{"admin", "default", store::Role::kClusterAdmin, s->driver.now, "admin"};
    if (Status u = st.CreateUser(admin); !u.ok()) return u;
    // HA: every replica is given the same admin token file, so a failover
    // keeps the token (docs/ha.md, Not in the log).
    const std::string token_file = config.state_dir + "/admin-token";
    std::optional<std::string> given;
    if (config.ha_enabled() && std::filesystem::exists(token_file)) {
      Result<std::string> text = common::ReadFile(token_file);
      if (!text.ok()) return text.status();
      std::string t = text.value();
      while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
      given = t;
    }
    Result<store::IssuedToken> token = given
                                           ? st.CreateTokenFromText("admin", *given, s->driver.now)
                                           : st.CreateToken("admin", s->driver.now);
    if (!token.ok()) {
      if (given) return Status::Error(token_file + ": " + token.message());
      return token.status();
    }
    if (!given) s->first_admin_token = token.value().token;
    (void)st.AppendAudit(s->driver.now, "scheduler", "user.create",
                         Json{{"user", "admin"}, {"role", "cluster-admin"}}.dump());
  }
  auto service = std::unique_ptr<Service>(new Service(std::move(s)));
  if (Status c = service->Commit(); !c.ok()) return c;
  return service;
}

Status Service::Commit() { return s_->Commit(); }

void Service::SetLeadershipTerm(int64_t term) { s_->agents->SetTerm(term); }

void Service::SetAuthReplication(std::function<Status(const std::string&)> publish) {
  s_->driver.replicate_auth = std::move(publish);
}

Status Service::PublishAuthNow() {
  if (!s_->driver.replicate_auth) return Status::Ok();
  Result<std::string> value = s_->driver.store->ExportAuth();
  if (!value.ok()) return value.status();
  return s_->driver.replicate_auth(value.value());
}

void Service::OnSnapshotWritten(std::function<void()> hook) {
  s_->driver.snapshot_written = std::move(hook);
}

Status ServiceState::Commit() {
  Result<std::vector<store::LogEntry>> done = driver.Commit();
  if (!done.ok()) return done.status();
  if (!done.value().empty()) {
    if (Status s = driver.MaybeSnapshot(config.snapshot_every_events,
                                        config.snapshot_every_minutes * 60000);
        !s.ok()) {
      log::Warn("snapshot not written: " + s.message() + "; the log has every event");
    }
  }
  for (const store::LogEntry& e : done.value()) {
    agents->Dispatch(e.commands, driver.now);
    if (driver.topology == nullptr) continue;
    for (const core::Command& c : e.commands) {
      for (const log::Record& r : log::Describe(c, *driver.topology)) {
        log::Write(r.level, r.message, r.fields);
      }
    }
  }
  return Status::Ok();
}

int64_t Service::Compact(TimeMs now) {
  ServiceState& s = *s_;
  s.driver.now = std::max(s.driver.now, now);
  Result<int64_t> n = s.driver.CompactOnce(s.config.event_retention_days * 24 * 3600 * 1000,
                                           s.config.compaction_batch_events);
  if (!n.ok()) {
    log::Warn("compaction: " + n.message());
    return 0;
  }
  if (n.value() > 0) log::Debug("compacted " + std::to_string(n.value()) + " events");
  return n.value();
}

int Service::CompactionBatch() const { return s_->config.compaction_batch_events; }

void Service::Tick(TimeMs now) {
  ServiceState& s = *s_;
  if (s.driver.core == nullptr) return;
  s.driver.now = std::max(s.driver.now, now);
  if (s.driver.core->NextWakeup() <= s.driver.now) s.driver.Step(core::Tick{}, "scheduler");
}

TimeMs Service::NextWakeup() const {
  return s_->driver.core == nullptr ? core::kNever : s_->driver.core->NextWakeup();
}

void Service::SampleUtilization(TimeMs now) {
  ServiceState& s = *s_;
  if (s.driver.core == nullptr) return;
  s.driver.utilization.push_back(
      {now, s.driver.core->cluster().total_busy_gpus(), s.driver.topology->total_gpus()});
  while (s.driver.utilization.size() > 24 * 60) s.driver.utilization.pop_front();
}

// ---------------------------------------------------------------- agents

Result<std::string> Service::AgentRegister(const std::string& cert_node, const std::string& message,
                                           TimeMs now) {
  s_->driver.now = std::max(s_->driver.now, now);
  return s_->agents->Register(cert_node, message, s_->driver.now);
}

std::optional<std::string> Service::AgentMessage(const std::string& node,
                                                 const std::string& message, TimeMs now) {
  s_->driver.now = std::max(s_->driver.now, now);
  return s_->agents->Message(node, message, s_->driver.now);
}

void Service::AgentDisconnected(const std::string& node, TimeMs now) {
  s_->driver.now = std::max(s_->driver.now, now);
  s_->agents->Disconnected(node, s_->driver.now);
}

void Service::CheckLiveness(TimeMs now) {
  s_->driver.now = std::max(s_->driver.now, now);
  s_->agents->CheckLiveness(s_->driver.now);
}

std::vector<std::pair<std::string, std::string>> Service::TakeAgentMessages() {
  return s_->agents->TakeMessages();
}

std::vector<std::pair<int64_t, HttpResponse>> Service::TakeDeferredAnswers() {
  return s_->agents->TakeDeferredAnswers();
}

void Service::ForgetDeferred(int64_t id) { s_->agents->ForgetDeferred(id); }

}  // namespace topo::daemon
