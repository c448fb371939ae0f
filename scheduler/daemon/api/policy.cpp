// /v1/config: the scheduling policy, read and changed live.

#include "daemon/api/handlers.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;

Answer GetPolicy(const ServiceState& s, const Caller&, const Route&) {
  Json policy = Json::parse(PolicyJson(s.config), nullptr, false);
  return JsonAnswer(200, Json{{"policy", std::move(policy)}, {"live", LivePolicyKeys()}});
}

// PUT /v1/config/{key} {"value": ...}: a live policy key, as a logged
// policy_changed event the core applies from here on.
Answer SetPolicy(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("changing the scheduling policy");
  const std::string& key = route.param("key");
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"value"}); !e.ok()) return e;
  auto it = body.find("value");
  if (it == body.end()) return Invalid("give the new value: {\"value\": ...}", "value");
  // Numbers and booleans as the config file writes them; text as is.
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_boolean() || it->is_number_integer()) {
    text = it->dump();
  } else {
    return Invalid("value must be a string, an integer or true/false", "value");
  }
  if (text.size() > 64) return Invalid("value is longer than 64 bytes", "value");
  DaemonConfig next = s.config;
  if (Status st = SetLivePolicyKey(key, text, next); !st.ok())
    return Invalid(st.message(), "value");
  const std::string old_value = LivePolicyValue(s.config, key);
  const std::string new_value = LivePolicyValue(next, key);
  Json out = {{"key", key}, {"old", old_value}, {"new", new_value}};
  if (old_value == new_value) {
    out["changed"] = false;
    return JsonAnswer(200, out);
  }
  Result<core::SchedulerConfig> sc = next.SchedulerConfig();
  if (!sc.ok()) return Invalid(sc.message(), "value");
  if (s.driver.core() != nullptr) {
    // A log event, applied by the core from here on: a replay makes the
    // same decisions at the same point.
    s.driver.Step(
        core::PolicyChanged{core::SchedulingPolicy::Of(sc.value()), key, old_value, new_value},
        s.Actor(caller));
  } else if (Status st = s.driver.store().SetMeta("policy", PolicyJson(next)); !st.ok()) {
    // No core yet (no topology): the policy the first core starts with.
    return StoreFailed(st);
  }
  s.config = std::move(next);
  s.driver.SetSchedulerConfig(sc.value());
  s.Audit(caller, "config.set", out);
  out["changed"] = true;
  return JsonAnswer(200, out);
}

}  // namespace topo::daemon
