#pragma once
// Which Unix account a user's jobs may run as (docs/api.md, "Unix accounts").
//
// A user's jobs run as its `unix_user` on the nodes, so mapping a user to an
// account is the power to act as that account there. The rules, checked
// whenever a user is created or its account changed (POST and PATCH
// /v1/users), the default account (the user's name) included:
//
// 1. The uid floor. Where the scheduler host knows the account (getpwnam),
//    a uid in 1..min_job_uid-1 is refused; uid 0 (root, or another name for
//    it) only with allow_root_jobs. An account this host does not know
//    passes: the scheduler host often has no cluster accounts, and every
//    agent applies its own floor at the start (topo-agent --min-job-uid),
//    whatever the scheduler says.
// 2. The grant. A cluster-admin maps any account. A tenant-admin maps the
//    users of tenant T only to accounts a cluster-admin granted T or a
//    tenant above T within the tenant-admin's own scope: an account of its
//    `unix_accounts` list, or a member of its `unix_group` (primary group or
//    listed member on the scheduler host; an account or group this host does
//    not know is no member). Nothing is granted by default.
// 3. One tenant per account. An account already mapped to a user of another
//    tenant is refused, naming that tenant.
//
// At submission only rule 1 is checked again (an account's uid may have
// changed since its user was mapped): CheckJobAccount.
//
// Thread safety: none (the strand's); the host lookups are reentrant.

#include <optional>
#include <string>
#include <string_view>

#include "daemon/access/scope.hpp"
#include "daemon/config.hpp"
#include "store/store.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// The account's uid on this host; nullopt when this host does not know it.
std::optional<int64_t> HostUid(std::string_view account);

// Rule 1 for `account`: kForbidden naming the account, its uid, the floor
// and the setting; Ok otherwise. `user` names the API user in the message.
core::Status CheckJobAccount(const DaemonConfig& config, std::string_view user,
                             std::string_view account);

// Rules 1-3 for `user` (its tenant and unix_user, as it would be stored)
// mapped by `caller`. kForbidden (floor, grant), kConflict (another tenant's
// account) or kUnavailable (the store), each naming the field unix_user.
core::Status CheckAccountMapping(const DaemonConfig& config, store::Store& store,
                                 const Caller& caller, const store::User& user);

// A tenant's grant from a PUT /v1/tenants body's "unix_accounts" (a list of
// account names, replacing the old list) and "unix_group" (a group name, ""
// for none); absent fields keep `grant`'s. Errors name the field.
core::Status ReadGrantFields(const nlohmann::json& body, store::TenantAccounts& grant);

}  // namespace topo::daemon
