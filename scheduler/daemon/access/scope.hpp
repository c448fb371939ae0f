#pragma once
// Who may see what: the one scoping rule of every read (docs/api.md, "Roles").
//
//   user          the jobs, events, commands and metric series of its tenant;
//   tenant-admin  those of its tenant and every tenant below it ("org" covers
//                 "org/team");
//   cluster-admin everything.
//
// A read of something out of scope answers as if it did not exist (404), so
// a researcher cannot even learn that another tenant's job 9 exists. An event
// that touches jobs of several tenants (a preemption: one tenant's job
// submitted, another's stopped) is shown to each caller who sees one of its
// jobs, with every other job reduced to its id, tenant and state; an event
// that names no job (a node drained, a GPU failed) is shown to admins only.
// Route handlers never decide visibility themselves: they ask here.
//
// Thread safety: pure functions over their arguments.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "store/store.hpp"

namespace topo::daemon {

struct Caller {
  store::User user;
  bool cluster_admin() const { return user.role == store::Role::kClusterAdmin; }
  bool admin() const { return user.role != store::Role::kUser; }
  // May this caller see and act on the tenant's jobs?
  bool InScope(std::string_view tenant) const;
};

// The tenant of a job id (nullopt: no such job), for ScopeEvent.
using TenantOf = std::function<std::optional<std::string>(int64_t job)>;

// A logged event as a caller may see it.
struct ScopedEvent {
  nlohmann::json event;     // the event, or its reduction
  nlohmann::json commands;  // each command, or its reduction
  std::string actor;        // "another tenant" when the event is another tenant's job's
};

// The logged event body {"event": ..., "commands": [...]} and its actor as
// `caller` may see them, or nullopt when it must not see the event at all.
// Out-of-scope jobs keep only {"type", "id", "tenant", "state"?}; an
// out-of-scope job's submission keeps no request, and its actor (a user of
// another tenant) is not named. tenant_of is asked once per job id.
std::optional<ScopedEvent> ScopeEvent(const Caller& caller, const nlohmann::json& body,
                                      const std::string& actor, const TenantOf& tenant_of);

// The same rule in the store's terms, for reads the store filters in SQL
// (history, usage reports): exactly the tenants InScope accepts.
store::TenantScope StoreScope(const Caller& caller);

// Whether a per-tenant metric series (a label tenant="...") is shown.
bool SeesTenantSeries(const Caller& caller, std::string_view tenant);

}  // namespace topo::daemon
