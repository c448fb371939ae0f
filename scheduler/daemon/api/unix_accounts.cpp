// The Unix account rules (unix_accounts.hpp): the uid floor, the tenants'
// grants and one tenant per account.

#include "daemon/api/unix_accounts.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

#include "daemon/api/route.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/auth_json.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;

namespace {

// A buffer for the reentrant passwd and group lookups, grown on ERANGE.
template <typename Entry, typename Lookup>
bool LookUp(Lookup lookup, Entry& entry, std::vector<char>& buffer) {
  buffer.resize(16384);
  for (int tries = 0; tries < 8; ++tries) {
    Entry* found = nullptr;
    const int rc = lookup(&entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    return rc == 0 && found != nullptr;
  }
  return false;
}

// Whether the scheduler host lists `account` in `group` (its primary group
// or a listed member).
bool HostGroupHas(const std::string& group, const std::string& account) {
  struct group gr {};
  std::vector<char> gbuf;
  if (!LookUp<struct group>(
          [&](struct group* e, char* b, size_t n, struct group** out) {
            return getgrnam_r(group.c_str(), e, b, n, out);
          },
          gr, gbuf)) {
    return false;
  }
  for (char** m = gr.gr_mem; m != nullptr && *m != nullptr; ++m) {
    if (account == *m) return true;
  }
  struct passwd pw {};
  std::vector<char> pbuf;
  if (!LookUp<struct passwd>(
          [&](struct passwd* e, char* b, size_t n, struct passwd** out) {
            return getpwnam_r(account.c_str(), e, b, n, out);
          },
          pw, pbuf)) {
    return false;
  }
  return pw.pw_gid == gr.gr_gid;
}

// The tenant and every tenant above it: "org/a/b" -> org/a/b, org/a, org.
std::vector<std::string> TenantAndAncestors(const std::string& tenant) {
  std::vector<std::string> out{tenant};
  for (size_t at = tenant.rfind('/'); at != std::string::npos && at > 0;
       at = tenant.rfind('/', at - 1)) {
    out.push_back(tenant.substr(0, at));
  }
  return out;
}

Status GrantRule(store::Store& store, const Caller& caller, const store::User& user) {
  if (caller.cluster_admin()) return Status::Ok();
  std::vector<std::string> looked;
  for (const std::string& tenant : TenantAndAncestors(user.tenant)) {
    if (!caller.InScope(tenant)) continue;
    Result<store::TenantAccounts> grant = store.GetTenantAccounts(tenant);
    if (!grant.ok()) return StoreFailed(grant.status());
    const store::TenantAccounts& g = grant.value();
    if (std::find(g.accounts.begin(), g.accounts.end(), user.unix_user) != g.accounts.end()) {
      return Status::Ok();
    }
    if (!g.unix_group.empty() && HostGroupHas(g.unix_group, user.unix_user)) return Status::Ok();
    looked.push_back(tenant);
  }
  std::string where;
  for (const std::string& t : looked) where += (where.empty() ? "" : ", ") + t;
  return Forbidden(
             "unix_user: a tenant-admin maps users only to the Unix accounts a "
             "cluster-admin granted their tenant, and " +
             user.unix_user.substr(0, 64) + " is not granted to " +
             (where.empty() ? user.tenant : where) +
             " (not in its unix_accounts, and not a member of its unix_group on the "
             "scheduler host); pick a granted account with --unix-user, or ask a "
             "cluster-admin: topo quota set " +
             user.tenant + " --unix-accounts ACCOUNT,... or --unix-group GROUP")
      .WithField("unix_user");
}

Status OneTenantRule(store::Store& store, const store::User& user) {
  Result<std::vector<store::User>> holders = store.UsersOfUnixUser(user.unix_user);
  if (!holders.ok()) return StoreFailed(holders.status());
  for (const store::User& other : holders.value()) {
    if (other.name == user.name || other.tenant == user.tenant) continue;
    return Conflict("unix_user: the Unix account " + user.unix_user +
                        " is already the account of a user of tenant " + other.tenant +
                        ", and an account maps to users of one tenant only (a job of one "
                        "tenant could read and change the other's files): map this user to "
                        "another account",
                    "unix_user");
  }
  return Status::Ok();
}

}  // namespace

std::optional<int64_t> HostUid(std::string_view account) {
  const std::string name(account);
  struct passwd pw {};
  std::vector<char> buf;
  if (!LookUp<struct passwd>(
          [&](struct passwd* e, char* b, size_t n, struct passwd** out) {
            return getpwnam_r(name.c_str(), e, b, n, out);
          },
          pw, buf)) {
    return name == "root" ? std::optional<int64_t>(0) : std::nullopt;
  }
  return static_cast<int64_t>(pw.pw_uid);
}

Status CheckJobAccount(const DaemonConfig& config, std::string_view user,
                       std::string_view account) {
  const std::optional<int64_t> uid = HostUid(account);
  if (!uid) return Status::Ok();  // the agents' floor decides (docs/api.md)
  const std::string who = std::string(user.substr(0, 64));
  const std::string acct = std::string(account);
  if (*uid == 0) {
    if (config.allow_root_jobs) return Status::Ok();
    return Forbidden("user " + who + " maps to the Unix account " + acct +
                     (acct == "root" ? "" : " (uid 0, root)") +
                     ", and jobs may not run as root on this cluster: map the user to an "
                     "unprivileged account (topo users set " +
                     who + " --unix-user ACCOUNT), or set allow_root_jobs = true")
        .WithField("unix_user");
  }
  if (*uid < config.min_job_uid) {
    return Forbidden("user " + who + " maps to the Unix account " + acct + ", uid " +
                     std::to_string(*uid) + " on the scheduler host, below min_job_uid (" +
                     std::to_string(config.min_job_uid) +
                     "): system accounts run no jobs; map the user to an ordinary account "
                     "(topo users set " +
                     who +
                     " --unix-user ACCOUNT), or lower min_job_uid in the scheduler's "
                     "configuration")
        .WithField("unix_user");
  }
  return Status::Ok();
}

Status CheckAccountMapping(const DaemonConfig& config, store::Store& store, const Caller& caller,
                           const store::User& user) {
  if (Status e = CheckJobAccount(config, user.name, user.unix_user); !e.ok()) return e;
  if (Status e = GrantRule(store, caller, user); !e.ok()) return e;
  return OneTenantRule(store, user);
}

Status ReadGrantFields(const nlohmann::json& body, store::TenantAccounts& grant) {
  const std::string kName =
      "1-32 of A-Z a-z 0-9 _ . -, not starting with '-' or '.' (a Unix account name)";
  if (auto it = body.find("unix_accounts"); it != body.end()) {
    if (!it->is_array() || it->size() > common::kMaxGrantAccounts) {
      return Invalid("unix_accounts must be a list of at most " +
                         std::to_string(common::kMaxGrantAccounts) +
                         " Unix account names ([] for none)",
                     "unix_accounts");
    }
    std::vector<std::string> accounts;
    std::set<std::string> seen;
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& a = (*it)[i];
      const std::string field = "unix_accounts[" + std::to_string(i) + "]";
      if (!a.is_string() || !proto::ValidUnixUser(a.get<std::string>())) {
        return Invalid(field + " must be " + kName, field);
      }
      if (!seen.insert(a.get<std::string>()).second) {
        return Invalid(field + ": " + a.get<std::string>() + " is listed twice", field);
      }
      accounts.push_back(a.get<std::string>());
    }
    grant.accounts = std::move(accounts);
  }
  if (auto it = body.find("unix_group"); it != body.end()) {
    if (!it->is_string() ||
        (!it->get<std::string>().empty() && !proto::ValidUnixUser(it->get<std::string>()))) {
      return Invalid("unix_group must be a Unix group name, " + kName + ", or \"\" for none",
                     "unix_group");
    }
    grant.unix_group = it->get<std::string>();
  }
  return Status::Ok();
}

}  // namespace topo::daemon
