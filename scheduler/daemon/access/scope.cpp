// The one scoping rule (scope.hpp).

#include "daemon/access/scope.hpp"

#include <map>

namespace topo::daemon {

using Json = nlohmann::json;

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

store::TenantScope StoreScope(const Caller& caller) {
  switch (caller.user.role) {
    case store::Role::kClusterAdmin:
      return {store::TenantScope::Kind::kAll, ""};
    case store::Role::kTenantAdmin:
      return {store::TenantScope::Kind::kSubtree, caller.user.tenant};
    case store::Role::kUser:
      return {store::TenantScope::Kind::kTenant, caller.user.tenant};
  }
  return {store::TenantScope::Kind::kTenant, caller.user.tenant};
}

bool SeesTenantSeries(const Caller& caller, std::string_view tenant) {
  return caller.InScope(tenant);
}

namespace {

// Reduces an object naming an out-of-scope job to what anyone may know.
Json Reduced(const Json& item, int64_t id, const std::string& tenant) {
  Json out = {{"type", item.value("type", "")}, {"id", id}, {"tenant", tenant}};
  if (item.contains("state") && item["state"].is_string()) out["state"] = item["state"];
  return out;
}

}  // namespace

std::optional<ScopedEvent> ScopeEvent(const Caller& caller, const Json& body,
                                      const std::string& actor, const TenantOf& tenant_of) {
  if (!body.is_object()) return std::nullopt;
  if (caller.cluster_admin()) {
    return ScopedEvent{body.value("event", Json::object()), body.value("commands", Json::array()),
                       actor};
  }
  std::map<int64_t, std::optional<std::string>> tenants;
  auto tenant = [&](int64_t id) -> const std::optional<std::string>& {
    auto it = tenants.find(id);
    if (it == tenants.end()) it = tenants.emplace(id, tenant_of(id)).first;
    return it->second;
  };
  auto job_id = [](const Json& item) -> std::optional<int64_t> {
    if (!item.is_object()) return std::nullopt;
    auto it = item.find("id");
    if (it == item.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  bool any_job = false;
  bool sees_one = false;
  auto visible = [&](const Json& item) -> std::optional<bool> {
    std::optional<int64_t> id = job_id(item);
    if (!id) return std::nullopt;
    any_job = true;
    const std::optional<std::string>& t = tenant(*id);
    const bool in = t && caller.InScope(*t);
    sees_one = sees_one || in;
    return in;
  };
  ScopedEvent out{Json::object(), Json::array(), actor};
  const Json event = body.value("event", Json::object());
  if (std::optional<bool> in = visible(event); in && !*in) {
    const int64_t id = *job_id(event);
    out.event = Reduced(event, id, tenant(id).value_or(""));
    out.actor = "another tenant";
  } else {
    out.event = event;
  }
  Json commands = Json::array();
  for (const Json& c : body.value("commands", Json::array())) {
    // Node and GPU commands (no job id) name no tenant: kept.
    if (std::optional<bool> in = visible(c); in && !*in) {
      const int64_t id = *job_id(c);
      commands.push_back(Reduced(c, id, tenant(id).value_or("")));
    } else {
      commands.push_back(c);
    }
  }
  out.commands = std::move(commands);
  if (!any_job) return caller.admin() ? std::optional<ScopedEvent>(out) : std::nullopt;
  if (!sees_one) return std::nullopt;
  return out;
}

}  // namespace topo::daemon
