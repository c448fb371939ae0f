// /v1 tenants, users, tokens, topology, cluster; /metrics.

#include <algorithm>
#include <bit>
#include <map>

#include "daemon/service_internal.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/render.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::daemon {
namespace {

using core::JobId;
using core::NodeId;
using core::Result;
using core::Status;

Json TenantView(const ServiceState& s, const core::TenantConfig& t) {
  Json out = common::TenantConfigToJson(t);
  out.erase("placement_wait_ms");  // the API speaks seconds, like PUT
  out["placement_wait_s"] = t.placement_wait < 0 ? -1 : t.placement_wait / core::kSecond;
  int running = 0;
  if (s.driver.core != nullptr) {
    for (const auto& [id, j] : s.driver.core->jobs()) {
      if (j.request.tenant != t.name) continue;
      running += j.state == core::JobState::kRunning || j.state == core::JobState::kPreempting;
    }
  }
  out["usage_gpus"] = s.driver.core != nullptr ? s.driver.core->TenantUsage(t.name) : 0;
  out["running_jobs"] = running;
  out["queued_jobs"] = s.driver.waiting().OfTenant(t.name);
  return out;
}

Json UserView(const store::User& u) {
  return Json{{"name", u.name},
              {"tenant", u.tenant},
              {"role", store::RoleName(u.role)},
              {"unix_user", u.unix_user},
              {"created_ms", u.created_ms}};
}

// The optional "unix_user" of a users request: an error naming the field.
std::optional<HttpResponse> UnixUserField(const Json& body, std::string& out) {
  auto it = body.find("unix_user");
  if (it == body.end()) return std::nullopt;
  if (!it->is_string() || !proto::ValidUnixUser(it->get<std::string>())) {
    return Error(400,
                 "unix_user must be the name of a Unix account on the nodes: 1-32 of A-Z a-z 0-9 "
                 "_ . -, not starting with '-' or '.'",
                 "unix_user");
  }
  out = it->get<std::string>();
  return std::nullopt;
}

// May caller manage (create tokens for, delete) user u?
bool Manages(const Caller& caller, const store::User& u) {
  if (caller.cluster_admin()) return true;
  if (caller.user.role == store::Role::kTenantAdmin) {
    return u.role != store::Role::kClusterAdmin && caller.InScope(u.tenant);
  }
  return u.name == caller.user.name;
}

bool TenantExists(ServiceState& s, const std::string& name) {
  if (name == "default") return true;
  if (s.driver.core != nullptr) return s.driver.core->tenant(name) != nullptr;
  Result<std::vector<core::TenantConfig>> all = s.driver.store->ListTenants();
  if (!all.ok()) return false;
  return std::any_of(all.value().begin(), all.value().end(),
                     [&](const core::TenantConfig& t) { return t.name == name; });
}

}  // namespace

// ---------------------------------------------------------------- tenants

HttpResponse HandleTenants(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  const std::string& m = route.method();
  if (p.size() == 1) {
    if (m != "GET") return Error(405, "use GET /v1/tenants, or PUT /v1/tenants/NAME");
    Result<std::vector<core::TenantConfig>> all = s.driver.store->ListTenants();
    if (!all.ok()) return StoreFailed(all.status());
    Json out = Json::array();
    for (const core::TenantConfig& t : all.value()) {
      if (!caller.InScope(t.name)) continue;
      const core::TenantConfig* live =
          s.driver.core != nullptr ? s.driver.core->tenant(t.name) : nullptr;
      out.push_back(TenantView(s, live != nullptr ? *live : t));
    }
    return JsonResponse(200, Json{{"tenants", std::move(out)}});
  }
  std::string name;
  for (size_t i = 1; i < p.size(); ++i) name += (i > 1 ? "/" : "") + p[i];
  if (!ValidTenantName(name)) {
    return Error(400, "\"" + name.substr(0, 130) +
                          "\" is not a tenant name: segments of a-z 0-9 _ . - (starting with a "
                          "letter or digit) joined by /, at most 8 deep and 128 bytes");
  }
  HttpResponse r;
  if (m == "GET") {
    if (!caller.InScope(name) || !TenantExists(s, name)) {
      return Error(404, "no tenant " + name + " that you can see");
    }
    const core::TenantConfig* live =
        s.driver.core != nullptr ? s.driver.core->tenant(name) : nullptr;
    core::TenantConfig t = live != nullptr ? *live : core::TenantConfig{name};
    r = JsonResponse(200, TenantView(s, t));
  } else if (m == "PUT") {
    if (!caller.cluster_admin()) return AdminOnly("setting tenants and quotas");
    if (s.driver.core == nullptr) return NoTopology();
    Body b = ParseBody(*route.request, false);
    if (b.error) return *b.error;
    const Json& body = b.json;
    if (auto e = UnknownField(
            body, {"guaranteed_gpus", "borrow_limit_gpus", "max_job_gpus", "max_running_jobs",
                   "max_queued_jobs", "shares", "placement_wait_s"})) {
      return *e;
    }
    const core::TenantConfig* live = s.driver.core->tenant(name);
    core::TenantConfig t = live != nullptr ? *live : core::TenantConfig{name};
    int64_t v = 0;
    const int64_t kMax = 100'000'000;
    if (body.contains("guaranteed_gpus")) {
      if (auto e = IntField(body, "guaranteed_gpus", 0, kMax, v)) return *e;
      t.guaranteed_gpus = static_cast<int>(v);
    }
    if (body.contains("borrow_limit_gpus")) {
      if (auto e = IntField(body, "borrow_limit_gpus", -1, kMax, v)) return *e;
      t.borrow_limit_gpus = static_cast<int>(v);
    }
    if (body.contains("max_job_gpus")) {
      if (auto e = IntField(body, "max_job_gpus", 0, kMax, v)) return *e;
      t.max_job_gpus = static_cast<int>(v);
    }
    if (body.contains("max_running_jobs")) {
      if (auto e = IntField(body, "max_running_jobs", 0, kMax, v)) return *e;
      t.max_running_jobs = static_cast<int>(v);
    }
    if (body.contains("max_queued_jobs")) {
      if (auto e = IntField(body, "max_queued_jobs", 0, kMax, v)) return *e;
      t.max_queued_jobs = static_cast<int>(v);
    }
    if (body.contains("placement_wait_s")) {
      // -1: the tenant's jobs never wait for a faster placement; 0: the
      // cluster's placement_wait_s.
      if (auto e = IntField(body, "placement_wait_s", -1, 7ll * 86400, v)) return *e;
      t.placement_wait = v < 0 ? -1 : v * core::kSecond;
    }
    if (auto it = body.find("shares"); it != body.end()) {
      if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > 1e6) {
        return Error(400, "shares must be a number in (0, 1000000]", "shares");
      }
      t.shares = it->get<double>();
    }
    s.driver.Step(core::TenantConfigured{t}, s.Actor(caller));
    r = JsonResponse(live != nullptr ? 200 : 201, TenantView(s, *s.driver.core->tenant(name)));
  } else {
    return Error(405, "use GET or PUT /v1/tenants/NAME");
  }
  r.route = "/v1/tenants/{name}";
  return r;
}

// ---------------------------------------------------------------- users

namespace {

// HA (docs/ha.md, Users and tokens): after a change to the users or tokens
// the leader writes all of them to etcd before it answers. When etcd does
// not take them, the change stays in this store only: the answer is 503 and
// the daemon stops (every later commit fails), to come back as a standby
// that takes etcd's users and tokens, so no replica serves a change the
// others would not know.
HttpResponse Replicated(ServiceState& s, HttpResponse r) {
  if (!s.driver.replicate_auth || r.status >= 300) return r;
  Result<std::string> value = s.driver.store->ExportAuth();
  Status st = value.ok() ? s.driver.replicate_auth(value.value()) : value.status();
  if (st.ok()) return r;
  s.driver.diverged = Status::Error("the users and tokens changed here but not in etcd (" +
                                        st.message() + "); stopping, to take etcd's as a standby",
                                    core::ErrorCode::kUnavailable);
  return Error(st.code() == core::ErrorCode::kInsufficientStorage ? 507 : 503,
               "the change was not replicated and is undone when this scheduler restarts as a "
               "standby: " +
                   st.message());
}

HttpResponse HandleUsersHere(ServiceState& s, const Caller& caller, const Route& route);
HttpResponse HandleTokensHere(ServiceState& s, const Caller& caller, const Route& route);

}  // namespace

HttpResponse HandleUsers(ServiceState& s, const Caller& caller, const Route& route) {
  HttpResponse r = HandleUsersHere(s, caller, route);
  return route.method() == "GET" ? r : Replicated(s, std::move(r));
}

HttpResponse HandleTokens(ServiceState& s, const Caller& caller, const Route& route) {
  HttpResponse r = HandleTokensHere(s, caller, route);
  return route.method() == "GET" ? r : Replicated(s, std::move(r));
}

namespace {

HttpResponse HandleUsersHere(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  const std::string& m = route.method();
  if (p.size() == 1 && m == "GET") {
    Result<std::vector<store::User>> users = s.driver.store->ListUsers();
    if (!users.ok()) return StoreFailed(users.status());
    Json out = Json::array();
    for (const store::User& u : users.value()) {
      if (Manages(caller, u) || (caller.admin() && caller.InScope(u.tenant))) {
        out.push_back(UserView(u));
      }
    }
    return JsonResponse(200, Json{{"users", std::move(out)}});
  }
  if (p.size() == 1 && m == "POST") {
    if (!caller.admin()) return Error(403, "creating users needs a tenant-admin or cluster-admin");
    Body b = ParseBody(*route.request, false);
    if (b.error) return *b.error;
    if (auto e = UnknownField(b.json, {"name", "tenant", "role", "unix_user"})) return *e;
    for (const char* f : {"name", "tenant", "role"}) {
      if (!b.json.contains(f) || !b.json[f].is_string()) {
        return Error(400, std::string(f) + " is required and must be a string", f);
      }
    }
    store::User u{b.json["name"], b.json["tenant"], store::Role::kUser, s.driver.now, {}};
    if (!ValidUserName(u.name)) {
      return Error(400, "name: user names are 1-64 of a-z 0-9 _ . - (and @ after the first)",
                   "name");
    }
    // Jobs run as this Unix account on the nodes; by default the user's name.
    u.unix_user = u.name;
    if (auto e = UnixUserField(b.json, u.unix_user)) return *e;
    if (!b.json.contains("unix_user") && !proto::ValidUnixUser(u.unix_user)) {
      return Error(400,
                   "user " + u.name +
                       " is not a Unix account name: give unix_user, the account "
                       "its jobs run as on the nodes",
                   "unix_user");
    }
    if (!ValidTenantName(u.tenant)) return Error(400, "tenant: not a tenant name", "tenant");
    std::optional<store::Role> role = store::ParseRole(b.json["role"].get<std::string>());
    if (!role) return Error(400, "role must be user, tenant-admin or cluster-admin", "role");
    u.role = *role;
    if (!caller.cluster_admin() &&
        (u.role == store::Role::kClusterAdmin || !caller.InScope(u.tenant))) {
      return Error(403, "a tenant-admin creates users of role user or tenant-admin in tenant " +
                            caller.user.tenant + " and its sub-tenants only");
    }
    if (!TenantExists(s, u.tenant)) {
      return Error(400,
                   "tenant " + u.tenant + " does not exist; create it with `topo quota set " +
                       u.tenant + "`",
                   "tenant");
    }
    Result<std::optional<store::User>> existing = s.driver.store->GetUser(u.name);
    if (!existing.ok()) return StoreFailed(existing.status());
    if (existing.value()) return Error(409, "user " + u.name + " exists already");
    if (Status st = s.driver.store->CreateUser(u); !st.ok()) return StoreFailed(st);
    Audit(s, caller, "user.create",
          {{"user", u.name},
           {"tenant", u.tenant},
           {"role", store::RoleName(u.role)},
           {"unix_user", u.unix_user}});
    s.auth.Forget();
    return JsonResponse(201, UserView(u));
  }
  if (p.size() == 2 && m == "PATCH") {
    // PATCH /v1/users/NAME {"unix_user": ...}: the account later starts run as.
    Result<std::optional<store::User>> u = s.driver.store->GetUser(p[1]);
    if (!u.ok()) return StoreFailed(u.status());
    if (!u.value() || !caller.admin() || !Manages(caller, *u.value())) {
      if (u.value() && !caller.admin()) return Error(403, "changing users needs an admin");
      return Error(404, "no user " + p[1].substr(0, 64) + " that you manage");
    }
    Body b = ParseBody(*route.request, false);
    if (b.error) return *b.error;
    if (auto e = UnknownField(b.json, {"unix_user"})) return *e;
    store::User changed = *u.value();
    if (!b.json.contains("unix_user")) return Error(400, "give unix_user", "unix_user");
    if (auto e = UnixUserField(b.json, changed.unix_user)) return *e;
    if (Status st = s.driver.store->UpdateUser(changed); !st.ok()) return StoreFailed(st);
    Audit(
        s, caller, "user.update",
        {{"user", changed.name}, {"unix_user", changed.unix_user}, {"was", u.value()->unix_user}});
    s.auth.Forget();
    HttpResponse r = JsonResponse(200, UserView(changed));
    r.route = "/v1/users/{name}";
    return r;
  }
  if (p.size() == 2 && m == "DELETE") {
    HttpResponse r;
    Result<std::optional<store::User>> u = s.driver.store->GetUser(p[1]);
    if (!u.ok()) return StoreFailed(u.status());
    if (!u.value() || !caller.admin() || !Manages(caller, *u.value())) {
      if (u.value() && !caller.admin()) return Error(403, "deleting users needs an admin");
      return Error(404, "no user " + p[1].substr(0, 64) + " that you manage");
    }
    if (u.value()->name == caller.user.name) {
      return Error(409, "you cannot delete yourself; another admin can");
    }
    if (Status st = s.driver.store->DeleteUser(p[1]); !st.ok()) return StoreFailed(st);
    Audit(s, caller, "user.delete", {{"user", p[1]}});
    s.auth.Forget();
    r = JsonResponse(200, UserView(*u.value()));
    r.route = "/v1/users/{name}";
    return r;
  }
  return Error(p.size() <= 2 ? 405 : 404,
               "use GET or POST /v1/users, or PATCH or DELETE /v1/users/NAME");
}

// ---------------------------------------------------------------- tokens

HttpResponse HandleTokensHere(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  const std::string& m = route.method();
  auto user_of = [&](const std::string& name) -> std::optional<store::User> {
    Result<std::optional<store::User>> u = s.driver.store->GetUser(name);
    return u.ok() ? u.value() : std::nullopt;
  };
  if (p.size() == 1 && m == "GET") {
    std::optional<std::string> only;
    if (auto it = route.query.find("user"); it != route.query.end()) only = it->second;
    Result<std::vector<store::TokenInfo>> tokens = s.driver.store->ListTokens();
    if (!tokens.ok()) return StoreFailed(tokens.status());
    Json out = Json::array();
    std::map<std::string, bool> manages;
    for (const store::TokenInfo& t : tokens.value()) {
      if (only && t.user != *only) continue;
      if (!manages.count(t.user)) {
        std::optional<store::User> u = user_of(t.user);
        manages[t.user] = u && Manages(caller, *u);
      }
      if (!manages[t.user]) continue;
      out.push_back(
          {{"id", t.id}, {"user", t.user}, {"created_ms", t.created_ms}, {"revoked", t.revoked}});
    }
    return JsonResponse(200, Json{{"tokens", std::move(out)}});
  }
  if (p.size() == 1 && m == "POST") {
    Body b = ParseBody(*route.request, true);
    if (b.error) return *b.error;
    if (auto e = UnknownField(b.json, {"user"})) return *e;
    std::string name = caller.user.name;
    if (auto it = b.json.find("user"); it != b.json.end()) {
      if (!it->is_string()) return Error(400, "user must be a string", "user");
      name = it->get<std::string>();
    }
    std::optional<store::User> u = user_of(name);
    if (!u || !Manages(caller, *u)) {
      if (u) return Error(403, "you may create tokens only for yourself or users you manage");
      return Error(404, "no user " + name.substr(0, 64) + " that you manage", "user");
    }
    Result<store::IssuedToken> t = s.driver.store->CreateToken(name, s.driver.now);
    if (!t.ok()) return StoreFailed(t.status());
    Audit(s, caller, "token.create", {{"user", name}, {"id", t.value().id}});
    return JsonResponse(201,
                        Json{{"token", t.value().token}, {"id", t.value().id}, {"user", name}});
  }
  if (p.size() == 2 && m == "DELETE") {
    const std::string& id = p[1];
    const bool hex = id.size() >= 8 && id.size() <= 64 &&
                     id.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) return Error(400, "a token id is 8 to 64 lowercase hex digits (topo token list)");
    Result<std::vector<store::TokenInfo>> tokens = s.driver.store->ListTokens();
    if (!tokens.ok()) return StoreFailed(tokens.status());
    std::vector<store::TokenInfo> hits;
    for (const store::TokenInfo& t : tokens.value()) {
      if (t.id.rfind(id.substr(0, std::min(id.size(), t.id.size())), 0) == 0) hits.push_back(t);
    }
    std::optional<store::User> u = hits.size() == 1 ? user_of(hits[0].user) : std::nullopt;
    if (hits.empty() || (hits.size() == 1 && (!u || !Manages(caller, *u)))) {
      return Error(404, "no token " + id + " that you manage");
    }
    if (hits.size() > 1) return Error(400, "token id " + id + " is ambiguous; give more digits");
    if (Status st = s.driver.store->RevokeToken(hits[0].id); !st.ok()) return StoreFailed(st);
    Audit(s, caller, "token.revoke", {{"user", hits[0].user}, {"id", hits[0].id}});
    s.auth.Forget();
    HttpResponse r =
        JsonResponse(200, Json{{"id", hits[0].id}, {"user", hits[0].user}, {"revoked", true}});
    r.route = "/v1/tokens/{id}";
    return r;
  }
  return Error(p.size() <= 2 ? 405 : 404, "use GET or POST /v1/tokens, or DELETE /v1/tokens/ID");
}

}  // namespace

// ---------------------------------------------------------------- topology

HttpResponse HandleTopology(ServiceState& s, const Caller& caller, const Route& route) {
  const std::string& m = route.method();
  if (route.path.size() != 1) return Error(404, "use /v1/topology");
  if (m == "GET") {
    if (s.driver.topology == nullptr) return NoTopology();
    std::string format = "json";
    if (auto it = route.query.find("format"); it != route.query.end()) format = it->second;
    if (format != "json" && format != "slurm") {
      return Error(400, "format must be json or slurm", "format");
    }
    return JsonResponse(
        200, Json{{"format", format},
                  {"content", format == "json" ? common::TopologyToJson(*s.driver.topology)
                                               : common::TopologyToSlurm(*s.driver.topology)}});
  }
  if (m != "PUT") return Error(405, "use GET or PUT /v1/topology");
  if (!caller.cluster_admin()) return AdminOnly("importing a topology");
  Body b = ParseBody(*route.request, false);
  if (b.error) return *b.error;
  if (auto e = UnknownField(b.json, {"format", "content", "gpus_per_node", "name"})) return *e;
  if (!b.json.contains("content") || !b.json["content"].is_string()) {
    return Error(400, "content is required: the topology file's text", "content");
  }
  const std::string content = b.json["content"];
  int64_t gpus_per_node = 0;
  if (auto e = IntField(b.json, "gpus_per_node", 1, 64, gpus_per_node)) return *e;
  common::TopologyFormat format = common::SniffTopologyFormat(content);
  if (auto it = b.json.find("format"); it != b.json.end()) {
    Result<common::TopologyFormat> f =
        it->is_string() ? common::ParseTopologyFormat(it->get<std::string>())
                        : Result<common::TopologyFormat>(Status::Error("not a string"));
    if (!f.ok()) return Error(400, "format must be json, slurm or crux", "format");
    format = f.value();
  }
  Result<core::Topology> parsed = Status::Error("unparsed");
  switch (format) {
    case common::TopologyFormat::kJson:
      parsed = common::ParseTopologyJson(content);
      break;
    case common::TopologyFormat::kSlurm: {
      common::SlurmTopologyOptions o;
      if (gpus_per_node > 0) o.gpus_per_node = static_cast<int>(gpus_per_node);
      parsed = common::ParseSlurmTopology(content, o);
      break;
    }
    case common::TopologyFormat::kCrux:
      parsed = common::ParseCruxCsv(content, gpus_per_node > 0 ? int(gpus_per_node) : 8);
      break;
  }
  if (!parsed.ok()) return Error(400, "content: " + parsed.message(), "content");
  if (s.driver.core != nullptr) {
    for (const auto& [id, j] : s.driver.core->jobs()) {
      if (!core::IsTerminal(j.state)) {
        return Error(409, "job " + std::to_string(id) + " is " +
                              std::string(core::JobStateName(j.state)) +
                              "; a topology is imported only while no job is queued, held or "
                              "running (cancel them first)");
      }
    }
  }
  // Write what the old topology's core staged, then start the new epoch.
  if (s.driver.core != nullptr) {
    if (Status c = s.Commit(); !c.ok()) return StoreFailed(c);
  }
  auto topology = std::make_unique<core::Topology>(std::move(parsed).value());
  const std::pair<std::string, std::string> meta[] = {
      {"topology", common::TopologyToJson(*topology)},
      {"topology_from_seq", std::to_string(s.driver.store->LastSeq() + 1)},
      // The policy as of this epoch's first event: a restart replays only
      // this epoch, with live changes made before it already in effect.
      {"policy", PolicyJson(s.config)}};
  if (s.driver.replicate_epoch) {
    if (Status st = s.driver.replicate_epoch(s.driver.store->LastSeq() + 1, meta); !st.ok()) {
      return Error(503, "the topology was not imported: " + st.message());
    }
  }
  if (Status st = s.driver.store->SetMetas(meta); !st.ok()) {
    if (s.driver.replicate_epoch) {
      s.driver.diverged =
          Status::Error("the replicated log holds a topology import this store could not write (" +
                            st.message() + "); stopping, to catch up as a standby",
                        core::ErrorCode::kUnavailable);
    }
    return StoreFailed(st);
  }
  s.driver.core.reset();
  s.driver.topology = std::move(topology);
  s.driver.BuildCore();
  // A new epoch: its snapshots start after the import.
  s.driver.epoch_from_seq = s.driver.store->LastSeq() + 1;
  s.driver.snapshot_seq = s.driver.store->LastSeq();
  s.driver.snapshot_time = s.driver.now;
  s.driver.node_reason.clear();
  Result<std::vector<core::TenantConfig>> tenants = s.driver.store->ListTenants();
  if (!tenants.ok()) return StoreFailed(tenants.status());
  for (const core::TenantConfig& t : tenants.value()) {
    if (t.name != "default" || common::TenantConfigToJson(t) !=
                                   common::TenantConfigToJson(*s.driver.core->tenant("default"))) {
      s.driver.Step(core::TenantConfigured{t}, s.Actor(caller));
    }
  }
  const core::Topology& topo = *s.driver.topology;
  Json summary = {
      {"name", topo.name()},
      {"nodes", topo.node_count()},
      {"gpus", topo.total_gpus()},
      {"hbds", topo.tier_size(topo.hbd_tier())},
      {"leaves", topo.tier_size(topo.leaf_tier())},
      {"pods", topo.pod_tier() < topo.tier_count() ? topo.tier_size(topo.pod_tier()) : 1}};
  Audit(s, caller, "topology.import", summary);
  return JsonResponse(200, summary);
}

// ---------------------------------------------------------------- config

HttpResponse HandleConfig(ServiceState& s, const Caller& caller, const Route& route) {
  const std::string_view m = route.method();
  if (m == "GET") {
    if (route.path.size() != 1) return Error(404, "no such route");
    Json policy = Json::parse(PolicyJson(s.config), nullptr, false);
    return JsonResponse(200, Json{{"policy", std::move(policy)}, {"live", LivePolicyKeys()}});
  }
  if (m != "PUT" || route.path.size() != 2) return Error(405, "use GET /v1/config or PUT");
  if (!caller.cluster_admin()) return AdminOnly("changing the scheduling policy");
  const std::string& key = route.path[1];
  Body b = ParseBody(*route.request, false);
  if (b.error) return *b.error;
  const Json& body = b.json;
  if (auto e = UnknownField(body, {"value"})) return *e;
  auto it = body.find("value");
  if (it == body.end()) return Error(400, "give the new value: {\"value\": ...}", "value");
  // Numbers and booleans as the config file writes them; text as is.
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_boolean() || it->is_number_integer()) {
    text = it->dump();
  } else {
    return Error(400, "value must be a string, an integer or true/false", "value");
  }
  if (text.size() > 64) return Error(400, "value is longer than 64 bytes", "value");
  DaemonConfig next = s.config;
  if (Status st = SetLivePolicyKey(key, text, next); !st.ok()) {
    return Error(400, st.message(), "value");
  }
  const std::string old_value = LivePolicyValue(s.config, key);
  const std::string new_value = LivePolicyValue(next, key);
  Json out = {{"key", key}, {"old", old_value}, {"new", new_value}};
  if (old_value == new_value) {
    out["changed"] = false;
    return JsonResponse(200, out);
  }
  Result<core::SchedulerConfig> sc = next.SchedulerConfig();
  if (!sc.ok()) return Error(400, sc.message(), "value");
  if (s.driver.core != nullptr) {
    // A log event, applied by the core from here on: a replay makes the
    // same decisions at the same point.
    s.driver.Step(
        core::PolicyChanged{core::SchedulingPolicy::Of(sc.value()), key, old_value, new_value},
        s.Actor(caller));
  } else if (Status st = s.driver.store->SetMeta("policy", PolicyJson(next)); !st.ok()) {
    // No core yet (no topology): the policy the first core starts with.
    return StoreFailed(st);
  }
  s.config = std::move(next);
  s.driver.scheduler_config = sc.value();
  Audit(s, caller, "config.set", out);
  out["changed"] = true;
  return JsonResponse(200, out);
}

// ---------------------------------------------------------------- cluster

std::string RenderMetrics(ServiceState& s, const Caller& caller) {
  std::string out;
  if (s.metrics != nullptr) {
    s.metrics->Render(out,
                      [&](std::string_view tenant) { return SeesTenantSeries(caller, tenant); });
  }
  out += "# HELP topo_event_log_seq The newest event in the durable log.\n";
  out += "# TYPE topo_event_log_seq gauge\ntopo_event_log_seq " +
         std::to_string(s.driver.store->LastSeq()) + "\n";
  out +=
      "# HELP topo_agent_messages_refused_total Agent messages refused (malformed, or about "
      "another node's jobs or GPUs).\n# TYPE topo_agent_messages_refused_total counter\n"
      "topo_agent_messages_refused_total " +
      std::to_string(s.agents->refused_messages()) + "\n";
  if (s.driver.core == nullptr) return out;
  const core::Topology& topo = *s.driver.topology;
  GpuCounts g = CountGpus(s);
  out += "# HELP topo_gpus GPUs in the cluster by state.\n# TYPE topo_gpus gauge\n";
  for (auto [state, n] : {std::pair<const char*, int>{"allocated", g.allocated},
                          {"free", g.free},
                          {"failed", g.failed},
                          {"unavailable", g.unavailable}}) {
    out += std::string("topo_gpus{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  }
  const core::ClusterState& cluster = s.driver.core->cluster();
  out += "# HELP topo_domain_gpus GPUs per domain of each tier above the HBD, by state.\n";
  out += "# TYPE topo_domain_gpus gauge\n";
  for (int t = topo.leaf_tier(); t < topo.tier_count(); ++t) {
    if (topo.tier_size(t) > 4096) continue;
    const std::string tier = PromLabel(topo.tier(t).name);
    for (int i = 0; i < topo.tier_size(t); ++i) {
      const core::DomainId d = topo.tier_first(t) + i;
      const std::string labels = "tier=" + tier + ",domain=" + PromLabel(topo.domain(d).name);
      out += "topo_domain_gpus{" + labels + ",state=\"allocated\"} " +
             std::to_string(cluster.busy_gpus(d)) + "\n";
      out += "topo_domain_gpus{" + labels + ",state=\"free\"} " +
             std::to_string(cluster.free_gpus(d)) + "\n";
      out += "topo_domain_gpus{" + labels + ",state=\"failed\"} " +
             std::to_string(cluster.failed_gpus(d)) + "\n";
    }
  }
  std::map<std::string, std::map<std::string, int>> per_tenant;  // tenant -> state -> jobs
  for (const auto& [id, j] : s.driver.core->jobs()) {
    if (!SeesTenantSeries(caller, j.request.tenant)) continue;
    per_tenant[j.request.tenant][std::string(core::JobStateName(j.state))] += 1;
  }
  out +=
      "# HELP toposched_job_predicted_slowdown A running job's predicted step time on its "
      "placement over its step at the ideal placement of the empty cluster (docs/perf-model.md).\n"
      "# TYPE toposched_job_predicted_slowdown gauge\n";
  for (const auto& [id, j] : s.driver.core->jobs()) {
    if (j.state != core::JobState::kRunning || !SeesTenantSeries(caller, j.request.tenant)) {
      continue;
    }
    const std::optional<double> slow = PredictedSlowdown(s, j);
    if (!slow) continue;
    out += "toposched_job_predicted_slowdown{job=\"" + std::to_string(id) +
           "\",tenant=" + PromLabel(j.request.tenant) + "} " + common::FormatMetric(*slow, 4) +
           "\n";
  }
  PruneSlowdowns(s);
  out += "# HELP topo_queue_depth Queued jobs per tenant.\n# TYPE topo_queue_depth gauge\n";
  for (const auto& [tenant, states] : per_tenant) {
    auto it = states.find("queued");
    out += "topo_queue_depth{tenant=" + PromLabel(tenant) + "} " +
           std::to_string(it == states.end() ? 0 : it->second) + "\n";
  }
  out += "# HELP topo_jobs Jobs per tenant and state (not yet finished).\n";
  out += "# TYPE topo_jobs gauge\n";
  for (const auto& [tenant, states] : per_tenant) {
    for (const auto& [state, n] : states) {
      out += "topo_jobs{tenant=" + PromLabel(tenant) + ",state=" + PromLabel(state) + "} " +
             std::to_string(n) + "\n";
    }
  }
  std::map<std::string, int> node_states;
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    node_states[std::string(core::NodeStateName(cluster.node_state(n)))] += 1;
  }
  out += "# HELP topo_nodes Nodes by state.\n# TYPE topo_nodes gauge\n";
  for (const auto& [state, n] : node_states) {
    out += "topo_nodes{state=" + PromLabel(state) + "} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace topo::daemon
