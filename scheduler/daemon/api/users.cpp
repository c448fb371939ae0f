// /v1/users and /v1/tokens: who may call, with which role, as which Unix
// account their jobs run. Changes are replicated in HA mode by the route
// table (routes.cpp, kAuthChange) before they are answered.

#include <algorithm>
#include <map>

#include "daemon/api/handlers.hpp"
#include "daemon/api/unix_accounts.hpp"
#include "topo/common/agent_protocol.hpp"

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

Json UserView(const store::User& u) {
  return Json{{"name", u.name},
              {"tenant", u.tenant},
              {"role", store::RoleName(u.role)},
              {"unix_user", u.unix_user},
              {"created_ms", u.created_ms}};
}

// The optional "unix_user" of a users request into out; errors name the field.
Status UnixUserField(const Json& body, std::string& out) {
  auto it = body.find("unix_user");
  if (it == body.end()) return Status::Ok();
  if (!it->is_string() || !proto::ValidUnixUser(it->get<std::string>())) {
    return Invalid(
        "unix_user must be the name of a Unix account on the nodes: 1-32 of A-Z a-z 0-9 _ . -, "
        "not starting with '-' or '.'",
        "unix_user");
  }
  out = it->get<std::string>();
  return Status::Ok();
}

// May caller manage (create tokens for, delete) user u?
bool Manages(const Caller& caller, const store::User& u) {
  if (caller.cluster_admin()) return true;
  if (caller.user.role == store::Role::kTenantAdmin) {
    return u.role != store::Role::kClusterAdmin && caller.InScope(u.tenant);
  }
  return u.name == caller.user.name;
}

std::optional<store::User> UserOf(const ServiceState& s, const std::string& name) {
  Result<std::optional<store::User>> u = s.driver.store().GetUser(name);
  return u.ok() ? u.value() : std::nullopt;
}

// The user the path names, if the caller (an admin) manages it; `verb`
// says what for, in the errors.
Result<store::User> ManagedUser(const ServiceState& s, const Caller& caller, const Route& route,
                                std::string_view verb) {
  const std::string& name = route.param("name");
  Result<std::optional<store::User>> u = s.driver.store().GetUser(name);
  if (!u.ok()) return StoreFailed(u.status());
  if (!u.value() || !caller.admin() || !Manages(caller, *u.value())) {
    if (u.value() && !caller.admin()) return Forbidden(std::string(verb) + " users needs an admin");
    return NotFound("no user " + name.substr(0, 64) + " that you manage");
  }
  return *u.value();
}

}  // namespace

// ---------------------------------------------------------------- users

Answer ListUsers(const ServiceState& s, const Caller& caller, const Route&) {
  Result<std::vector<store::User>> users = s.driver.store().ListUsers();
  if (!users.ok()) return StoreFailed(users.status());
  Json out = Json::array();
  for (const store::User& u : users.value()) {
    if (Manages(caller, u) || (caller.admin() && caller.InScope(u.tenant))) {
      out.push_back(UserView(u));
    }
  }
  return JsonAnswer(200, Json{{"users", std::move(out)}});
}

Answer CreateUser(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.admin()) return Forbidden("creating users needs a tenant-admin or cluster-admin");
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"name", "tenant", "role", "unix_user"}); !e.ok()) return e;
  for (const char* f : {"name", "tenant", "role"}) {
    if (!body.contains(f) || !body[f].is_string()) {
      return Invalid(std::string(f) + " is required and must be a string", f);
    }
  }
  store::User u{body["name"], body["tenant"], store::Role::kUser, s.driver.now(), {}};
  if (!ValidUserName(u.name)) {
    return Invalid("name: user names are 1-64 of a-z 0-9 _ . - (and @ after the first)", "name");
  }
  // Jobs run as this Unix account on the nodes; by default the user's name.
  u.unix_user = u.name;
  if (Status e = UnixUserField(body, u.unix_user); !e.ok()) return e;
  if (!body.contains("unix_user") && !proto::ValidUnixUser(u.unix_user)) {
    return Invalid("user " + u.name +
                       " is not a Unix account name: give unix_user, the account its jobs run as "
                       "on the nodes",
                   "unix_user");
  }
  if (!ValidTenantName(u.tenant)) return Invalid("tenant: not a tenant name", "tenant");
  std::optional<store::Role> role = store::ParseRole(body["role"].get<std::string>());
  if (!role) return Invalid("role must be user, tenant-admin or cluster-admin", "role");
  u.role = *role;
  if (!caller.cluster_admin() &&
      (u.role == store::Role::kClusterAdmin || !caller.InScope(u.tenant))) {
    return Forbidden("a tenant-admin creates users of role user or tenant-admin in tenant " +
                     caller.user.tenant + " and its sub-tenants only");
  }
  if (!TenantExists(s, u.tenant)) {
    return Invalid(
        "tenant " + u.tenant + " does not exist; create it with `topo quota set " + u.tenant + "`",
        "tenant");
  }
  Result<std::optional<store::User>> existing = s.driver.store().GetUser(u.name);
  if (!existing.ok()) return StoreFailed(existing.status());
  if (existing.value()) return Conflict("user " + u.name + " exists already");
  if (Status e = CheckAccountMapping(s.config, s.driver.store(), caller, u); !e.ok()) return e;
  if (Status st = s.driver.store().CreateUser(u); !st.ok()) return StoreFailed(st);
  s.Audit(caller, "user.create",
          {{"user", u.name},
           {"tenant", u.tenant},
           {"role", store::RoleName(u.role)},
           {"unix_user", u.unix_user}});
  s.auth.Forget();
  return JsonAnswer(201, UserView(u));
}

// PATCH /v1/users/NAME {"unix_user": ...}: the account later starts run as.
Answer UpdateUser(ServiceState& s, const Caller& caller, const Route& route) {
  Result<store::User> u = ManagedUser(s, caller, route, "changing");
  if (!u.ok()) return u.status();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"unix_user"}); !e.ok()) return e;
  store::User changed = u.value();
  if (!body.contains("unix_user")) return Invalid("give unix_user", "unix_user");
  if (Status e = UnixUserField(body, changed.unix_user); !e.ok()) return e;
  if (Status e = CheckAccountMapping(s.config, s.driver.store(), caller, changed); !e.ok()) {
    return e;
  }
  if (Status st = s.driver.store().UpdateUser(changed); !st.ok()) return StoreFailed(st);
  s.Audit(caller, "user.update",
          {{"user", changed.name}, {"unix_user", changed.unix_user}, {"was", u.value().unix_user}});
  s.auth.Forget();
  return JsonAnswer(200, UserView(changed));
}

Answer DeleteUser(ServiceState& s, const Caller& caller, const Route& route) {
  Result<store::User> u = ManagedUser(s, caller, route, "deleting");
  if (!u.ok()) return u.status();
  if (u.value().name == caller.user.name) {
    return Conflict("you cannot delete yourself; another admin can");
  }
  if (Status st = s.driver.store().DeleteUser(u.value().name); !st.ok()) return StoreFailed(st);
  s.Audit(caller, "user.delete", {{"user", u.value().name}});
  s.auth.Forget();
  return JsonAnswer(200, UserView(u.value()));
}

// ---------------------------------------------------------------- tokens

Answer ListTokens(const ServiceState& s, const Caller& caller, const Route& route) {
  std::optional<std::string> only;
  if (auto it = route.query.find("user"); it != route.query.end()) only = it->second;
  Result<std::vector<store::TokenInfo>> tokens = s.driver.store().ListTokens();
  if (!tokens.ok()) return StoreFailed(tokens.status());
  Json out = Json::array();
  std::map<std::string, bool> manages;
  for (const store::TokenInfo& t : tokens.value()) {
    if (only && t.user != *only) continue;
    if (!manages.count(t.user)) {
      std::optional<store::User> u = UserOf(s, t.user);
      manages[t.user] = u && Manages(caller, *u);
    }
    if (!manages[t.user]) continue;
    out.push_back(
        {{"id", t.id}, {"user", t.user}, {"created_ms", t.created_ms}, {"revoked", t.revoked}});
  }
  return JsonAnswer(200, Json{{"tokens", std::move(out)}});
}

Answer CreateToken(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Json> parsed = ParseBody(*route.request, true);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"user"}); !e.ok()) return e;
  std::string name = caller.user.name;
  if (auto it = body.find("user"); it != body.end()) {
    if (!it->is_string()) return Invalid("user must be a string", "user");
    name = it->get<std::string>();
  }
  std::optional<store::User> u = UserOf(s, name);
  if (!u || !Manages(caller, *u)) {
    if (u) return Forbidden("you may create tokens only for yourself or users you manage");
    return NotFound("no user " + name.substr(0, 64) + " that you manage", "user");
  }
  Result<store::IssuedToken> t = s.driver.store().CreateToken(name, s.driver.now());
  if (!t.ok()) return StoreFailed(t.status());
  s.Audit(caller, "token.create", {{"user", name}, {"id", t.value().id}});
  return JsonAnswer(201, Json{{"token", t.value().token}, {"id", t.value().id}, {"user", name}});
}

Answer RevokeToken(ServiceState& s, const Caller& caller, const Route& route) {
  const std::string& id = route.param("id");
  const bool hex = id.size() >= 8 && id.size() <= 64 &&
                   id.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex) return Invalid("a token id is 8 to 64 lowercase hex digits (topo token list)");
  Result<std::vector<store::TokenInfo>> tokens = s.driver.store().ListTokens();
  if (!tokens.ok()) return StoreFailed(tokens.status());
  std::vector<store::TokenInfo> hits;
  for (const store::TokenInfo& t : tokens.value()) {
    if (t.id.rfind(id.substr(0, std::min(id.size(), t.id.size())), 0) == 0) hits.push_back(t);
  }
  std::optional<store::User> u = hits.size() == 1 ? UserOf(s, hits[0].user) : std::nullopt;
  if (hits.empty() || (hits.size() == 1 && (!u || !Manages(caller, *u)))) {
    return NotFound("no token " + id + " that you manage");
  }
  if (hits.size() > 1) return Invalid("token id " + id + " is ambiguous; give more digits");
  if (Status st = s.driver.store().RevokeToken(hits[0].id); !st.ok()) return StoreFailed(st);
  s.Audit(caller, "token.revoke", {{"user", hits[0].user}, {"id", hits[0].id}});
  s.auth.Forget();
  return JsonAnswer(200, Json{{"id", hits[0].id}, {"user", hits[0].user}, {"revoked", true}});
}

}  // namespace topo::daemon
