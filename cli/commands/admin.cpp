// topo tenants | quota | users | token: tenants, quotas, users and API tokens
// on a running topo-scheduler (docs/cli.md; docs/api.md "Tenants and
// quotas", "Users and tokens").

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <set>

#include "client/format.hpp"
#include "client/requests.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"

namespace topo::cli {

namespace {

using nlohmann::json;

// The list under `key`, or the body itself when it is a list.
json ListOf(const json& body, const char* key) {
  if (body.is_array()) return body;
  if (body.is_object() && body.contains(key) && body[key].is_array()) return body[key];
  return json::array();
}

// ---- tenants, quota show

struct TenantsArgs {
  std::string tenant;
  bool json = false;
};

int RunTenants(const TenantsArgs& args, bool quota_view) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply =
      session->Call("GET", args.tenant.empty() ? "/v1/tenants" : TenantTarget(args.tenant));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  if (!args.tenant.empty()) {
    std::cout << FormatQuota(reply.body);
    return kExitOk;
  }
  const json tenants = ListOf(reply.body, "tenants");
  if (!quota_view) {
    std::cout << FormatTenantTable(tenants);
    return kExitOk;
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    std::cout << (i > 0 ? "\n" : "") << FormatQuota(tenants[i]);
  }
  return kExitOk;
}

// ---- quota set

struct QuotaSetArgs {
  std::string tenant;
  QuotaFlags quota;
  bool json = false;
};

int RunQuotaSet(const QuotaSetArgs& args) {
  core::Result<json> body = QuotaSetBody(args.quota);
  if (!body.ok()) return Fail(body.message());
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("PUT", TenantTarget(args.tenant), body.value());
  if (!reply.ok()) return reply.exit_code;
  // Allowed, but maybe not meant (over-committed guarantees): on stderr,
  // so --json stays one value on stdout.
  if (reply.body.is_object() && reply.body.contains("warnings") &&
      reply.body["warnings"].is_array()) {
    for (const json& w : reply.body["warnings"]) {
      if (w.is_string()) std::cerr << "topo: warning: " << w.get<std::string>() << "\n";
    }
  }
  if (args.json) {
    PrintJson(reply.body);
  } else if (reply.body.is_object() && reply.body.contains("name")) {
    std::cout << FormatQuota(reply.body);
  } else {
    std::cout << "Set the quota of tenant " << args.tenant << "\n";
  }
  return kExitOk;
}

// ---- config show | set

struct ConfigArgs {
  std::string key;
  std::string value;
  bool json = false;
};

int RunConfigShow(const ConfigArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("GET", "/v1/config");
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  const json& policy = reply.body.value("policy", json::object());
  std::set<std::string> live;
  for (const json& k : reply.body.value("live", json::array())) {
    if (k.is_string()) live.insert(k.get<std::string>());
  }
  size_t width = 0;
  for (const auto& [k, v] : policy.items()) width = std::max(width, k.size());
  for (const auto& [k, v] : policy.items()) {
    std::cout << k << std::string(width - k.size() + 2, ' ') << Cell(v)
              << (live.count(k) ? "" : "    (fixed: set in the config file of a new state dir)")
              << "\n";
  }
  return kExitOk;
}

int RunConfigSet(const ConfigArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply =
      session->Call("PUT", "/v1/config/" + PercentEncode(args.key), json{{"value", args.value}});
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else if (reply.body.value("changed", false)) {
    std::cout << args.key << ": " << Cell(reply.body.value("old", json())) << " -> "
              << Cell(reply.body.value("new", json())) << " (in effect now; logged)\n";
  } else {
    std::cout << args.key << " is already " << Cell(reply.body.value("new", json()))
              << "; nothing changed\n";
  }
  return kExitOk;
}

// ---- users

struct UsersArgs {
  std::string name;
  std::string tenant;
  std::string role = "user";  // the least privilege unless --role says more
  std::string unix_user;
  bool json = false;
};

int RunUsersList(const UsersArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("GET", "/v1/users");
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << FormatObjectTable(ListOf(reply.body, "users"),
                                   {"name", "tenant", "role", "unix_user"});
  }
  return kExitOk;
}

int RunUsersCreate(const UsersArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  json body = {{"name", args.name}, {"tenant", args.tenant}, {"role", args.role}};
  if (!args.unix_user.empty()) body["unix_user"] = args.unix_user;
  Reply reply = session->Call("POST", "/v1/users", body);
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "Created user " << args.name << " (tenant " << args.tenant << ", role "
              << args.role << ", jobs run as Unix account "
              << reply.body.value("unix_user", args.name)
              << "); give them a token: topo token create --user " << args.name << "\n";
  }
  return kExitOk;
}

int RunUsersSet(const UsersArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("PATCH", "/v1/users/" + PercentEncode(args.name),
                              json{{"unix_user", args.unix_user}});
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "User " << args.name << "'s jobs now run as Unix account " << args.unix_user
              << " (from their next start)\n";
  }
  return kExitOk;
}

int RunUsersDelete(const UsersArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("DELETE", "/v1/users/" + PercentEncode(args.name));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "Deleted user " << args.name << " and revoked their tokens\n";
  }
  return kExitOk;
}

// ---- token

struct TokenArgs {
  std::string user;
  std::string id;
  std::string out;  // token create --out FILE
  bool json = false;
};

int RunTokenCreate(const TokenArgs& args) {
  // --out: opened (mode 0600, not through a symlink) before the token
  // exists, so a path that cannot be written costs no token.
  int out_fd = -1;
  if (!args.out.empty()) {
    out_fd = ::open(args.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out_fd < 0 || ::fchmod(out_fd, 0600) != 0) {
      std::cerr << "topo: --out " << args.out << ": cannot write it: " << std::strerror(errno)
                << " (give a file in a directory you own)\n";
      if (out_fd >= 0) ::close(out_fd);
      return kExitError;
    }
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{out_fd};
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  json body = json::object();
  if (!args.user.empty()) body["user"] = args.user;
  Reply reply = session->Call("POST", "/v1/tokens", body);
  if (!reply.ok()) return reply.exit_code;
  if (args.json && out_fd < 0) {
    PrintJson(reply.body);
    return kExitOk;
  }
  if (!reply.body.is_object() || !reply.body.contains("token")) {
    std::cerr << "topo: the server's answer has no \"token\"\n";
    return kExitServerError;
  }
  if (out_fd >= 0) {
    const std::string line = reply.body["token"].is_string()
                                 ? reply.body["token"].get<std::string>() + "\n"
                                 : std::string();
    if (line.empty() ||
        ::write(out_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      std::cerr << "topo: --out " << args.out << ": the token could not be written ("
                << std::strerror(errno) << "); revoke it: topo token revoke "
                << Cell(reply.body.value("id", json())) << "\n";
      return kExitError;
    }
    if (args.json) {
      json shown = reply.body;
      shown.erase("token");
      shown["out"] = args.out;
      PrintJson(shown);
    } else {
      std::cerr << "topo: token " << Cell(reply.body.value("id", json())) << " for "
                << Cell(reply.body.value("user", json())) << " written to " << args.out
                << " (mode 0600)\n";
    }
    return kExitOk;
  } else {
    // The token alone on stdout, so `topo token create > file` keeps it.
    std::cout << Cell(reply.body["token"]) << "\n";
  }
  std::cerr << "topo: token " << Cell(reply.body.value("id", json())) << " for "
            << Cell(reply.body.value("user", json()))
            << "; it is shown only this once: store it now (revoke: topo token revoke "
            << Cell(reply.body.value("id", json())) << ")\n";
  return kExitOk;
}

int RunTokenRevoke(const TokenArgs& args) {
  bool hex = args.id.size() >= 8 && args.id.size() <= 64;
  for (char c : args.id) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
  if (!hex) {
    return Fail("token id '" + args.id +
                "': give at least 8 hex digits of it (topo token list shows the ids)");
  }
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("DELETE", "/v1/tokens/" + args.id);
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << "Revoked token " << args.id << "\n";
  }
  return kExitOk;
}

int RunTokenList(const TokenArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call(
      "GET",
      "/v1/tokens" + (args.user.empty() ? std::string() : "?" + Query({{"user", args.user}})));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << FormatObjectTable(ListOf(reply.body, "tokens"),
                                   {"id", "user", "created_ms", "last_used_ms", "revoked"});
  }
  return kExitOk;
}

// ---- audit

struct AuditArgs {
  int64_t last = 0;  // 0: 100 unless --after or --limit
  int64_t after = -1;
  int64_t limit = 0;
  bool json = false;
};

// The newest rows shown without --last, --after or --limit.
constexpr int64_t kAuditDefaultLast = 100;

int RunAudit(const AuditArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  const bool oldest = args.after >= 0 || args.limit > 0;
  const int64_t count = oldest ? (args.limit > 0 ? args.limit : 1000)
                               : (args.last > 0 ? args.last : kAuditDefaultLast);
  Reply reply = session->Call(
      "GET", "/v1/audit?" + Query({{"after", std::to_string(std::max<int64_t>(args.after, 0))},
                                   {oldest ? "limit" : "last", std::to_string(count)}}));
  if (!reply.ok()) return reply.exit_code;
  const json rows = ListOf(reply.body, "audit");
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << FormatAuditTable(rows);
  }
  if (oldest && static_cast<int64_t>(rows.size()) == count && !args.json &&
      rows.back().is_object()) {
    std::cerr << "topo: showed " << count << " rows; more may follow: topo audit --after "
              << Cell(rows.back().value("seq", json())) << "\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterAdminCommands(CLI::App& app, int* exit_code) {
  ConnectionFlags* conn = SharedConnectionFlags();

  auto tenants = std::make_shared<TenantsArgs>();
  CLI::App* t =
      AddVerb(app, "tenants",
              "List the tenants in your scope with their quotas and what they use now.\n\n"
              "Examples:\n"
              "  topo tenants\n"
              "  topo tenants --json | jq '.tenants[] | {name, usage_gpus}'");
  t->add_flag("--json", tenants->json, std::string(kJsonHelp));
  AddConnectionFlags(*t, conn);
  t->callback([tenants, exit_code] { *exit_code = RunTenants(*tenants, false); });

  // quota show | set
  CLI::App* quota = AddVerb(app, "quota", "Show or set tenant quotas");
  quota->require_subcommand(1);
  auto show = std::make_shared<TenantsArgs>();
  CLI::App* qs =
      AddVerb(*quota, "show",
              "Show a tenant's quota and usage (every tenant in your scope without TENANT).\n\n"
              "Examples:\n"
              "  topo quota show org/team\n"
              "  topo quota show");
  qs->add_option("TENANT", show->tenant, "Tenant name, e.g. org/team");
  qs->add_flag("--json", show->json, std::string(kJsonHelp));
  AddConnectionFlags(*qs, conn);
  qs->callback([show, exit_code] { *exit_code = RunTenants(*show, true); });

  auto set = std::make_shared<QuotaSetArgs>();
  CLI::App* qset =
      AddVerb(*quota, "set",
              "Create a tenant or change its quota (cluster-admin).\n\n"
              "Only the fields given change.\n\n"
              "Examples:\n"
              "  topo quota set org/team --guaranteed 512 --borrow-limit 256 --shares 2\n"
              "  topo quota set org/team --borrow-limit none --max-job-gpus 4096\n"
              "  topo quota set org/new-team        # create it with the defaults\n"
              "  topo quota set org/team --unix-accounts ada,bob --unix-group org-team\n"
              "  topo quota set org/team --partition-limit gb200:max_gpus=64,max_running_jobs=4\n"
              "  topo quota set org/team --partition-limit gb200:max_job_gpus=32 \\\n"
              "      --partition-limit debug:max_gpus=8\n"
              "  topo quota set org/team --partition-limit gb200:none   # no limits there\n\n"
              "--unix-accounts and --unix-group grant the tenant Unix accounts: its\n"
              "tenant-admins may map users (topo users create/set --unix-user) only to a\n"
              "listed account or a member of the group; nothing is granted by default.\n\n"
              "--partition-limit bounds the tenant in one partition besides the limits above:\n"
              "max_gpus its jobs there hold at once, max_job_gpus per job, max_running_jobs\n"
              "(each N, or none: no limit). A job past one waits, its reason naming the\n"
              "partition and the limit. Only the fields given change.");
  qset->add_option("TENANT", set->tenant, "Tenant name: segments [a-z0-9][a-z0-9_.-]* joined by /")
      ->required();
  qset->add_option("--guaranteed", set->quota.guaranteed, "GPUs guaranteed to the tenant")
      ->type_name("N");
  qset->add_option("--borrow-limit", set->quota.borrow_limit,
                   "GPUs it may borrow beyond the guarantee, or none (no limit)")
      ->type_name("N|none");
  qset->add_option("--max-job-gpus", set->quota.max_job_gpus, "Largest job in GPUs, or none")
      ->type_name("N|none");
  qset->add_option("--max-running-jobs", set->quota.max_running_jobs,
                   "Running jobs at most, or none")
      ->type_name("N|none");
  qset->add_option("--max-queued-jobs", set->quota.max_queued_jobs,
                   "Jobs waiting (queued or held) at most; submissions past it are refused; or "
                   "none")
      ->type_name("N|none");
  qset->add_option("--shares", set->quota.shares, "Fairshare weight (> 0)")->type_name("X");
  qset->add_option("--placement-wait", set->quota.placement_wait,
                   "How long the tenant's jobs may wait for a faster placement (30m, 2h), never, "
                   "or default (the cluster's placement_wait_s)")
      ->type_name("DURATION|never|default");
  qset->add_option("--unix-accounts", set->quota.unix_accounts,
                   "Unix accounts its tenant-admins may map users to, comma-separated "
                   "(replaces the list), or none")
      ->type_name("A,B,...|none");
  qset->add_option("--unix-group", set->quota.unix_group,
                   "A Unix group whose members (on the scheduler host) its tenant-admins may "
                   "map users to, or none")
      ->type_name("GROUP|none");
  qset->add_option("--partition-limit", set->quota.partition_limits,
                   "Limits in one partition (repeatable): max_gpus held there at once, "
                   "max_job_gpus per job, max_running_jobs; each N or none; PART:none for none")
      ->type_name("PART:max_gpus=N,...|PART:none")
      ->allow_extra_args(false);
  qset->add_flag("--json", set->json, std::string(kJsonHelp));
  AddConnectionFlags(*qset, conn);
  qset->callback([set, exit_code] { *exit_code = RunQuotaSet(*set); });

  // config show | set
  CLI::App* config = AddVerb(
      app, "config", "Show or change the scheduling policy of topo-scheduler (docs/daemon.md)");
  config->require_subcommand(1);
  auto cshow = std::make_shared<ConfigArgs>();
  CLI::App* cs = AddVerb(*config, "show",
                         "Show the scheduling policy in effect: each key and its value.\n\n"
                         "Keys marked fixed change only with a new state directory.\n\n"
                         "Examples:\n"
                         "  topo config show\n"
                         "  topo config show --json | jq .policy.preempt_grace_s");
  cs->add_flag("--json", cshow->json, std::string(kJsonHelp));
  AddConnectionFlags(*cs, conn);
  cs->callback([cshow, exit_code] { *exit_code = RunConfigShow(*cshow); });
  auto cset = std::make_shared<ConfigArgs>();
  CLI::App* cst =
      AddVerb(*config, "set",
              "Change one policy key now (cluster-admin).\n\n"
              "The change is an event in the log (who, when, old and new value): the scheduler\n"
              "decides by it from this point, and a restart replays it at the same point. Values\n"
              "as in the config file.\n\n"
              "Examples:\n"
              "  topo config set preempt_grace_s 300\n"
              "  topo config set backfill false\n"
              "  topo config set default_checkpoint_interval_s -1    # never ask");
  cst->add_option("KEY", cset->key, "A policy key (topo config show lists them)")->required();
  cst->add_option("VALUE", cset->value, "Its new value")->required();
  cst->add_flag("--json", cset->json, std::string(kJsonHelp));
  AddConnectionFlags(*cst, conn);
  cst->callback([cset, exit_code] { *exit_code = RunConfigSet(*cset); });

  // users [create | set | delete]
  auto users = std::make_shared<UsersArgs>();
  CLI::App* u =
      AddVerb(app, "users",
              "List users (those in your scope), or create, change and delete them.\n"
              "Each user's jobs run as a Unix account on the nodes (unix_user; by\n"
              "default the user's name), never as root unless the cluster allows it.\n\n"
              "Examples:\n"
              "  topo users\n"
              "  topo users create ada --tenant org/team --role user\n"
              "  topo users create ada@example.com --tenant org --role user --unix-user ada\n"
              "  topo users set ada --unix-user ada2\n"
              "  topo users delete ada");
  u->add_flag("--json", users->json, std::string(kJsonHelp));
  AddConnectionFlags(*u, conn);
  auto create = std::make_shared<UsersArgs>();
  CLI::App* uc =
      AddVerb(*u, "create",
              "Create a user (tenant-admin: users of their tenants; cluster-admin: any).\n\n"
              "Examples:\n"
              "  topo users create ada --tenant org/team --role user\n"
              "  topo users create bob@example.com --tenant org --role tenant-admin "
              "--unix-user bob");
  uc->add_option("NAME", create->name, "User name: [a-z0-9_.-], '@' after the first character")
      ->required();
  uc->add_option("--tenant", create->tenant, "The user's tenant")->required();
  uc->add_option("--role", create->role, "user (the default), tenant-admin or cluster-admin")
      ->check(CLI::IsMember({"user", "tenant-admin", "cluster-admin"}));
  uc->add_option("--unix-user", create->unix_user,
                 "The Unix account the user's jobs run as on the nodes (default: the user's "
                 "name, which must then be an account name)");
  uc->add_flag("--json", create->json, std::string(kJsonHelp));
  AddConnectionFlags(*uc, conn);
  uc->callback([create, exit_code] { *exit_code = RunUsersCreate(*create); });
  auto uset = std::make_shared<UsersArgs>();
  CLI::App* us = AddVerb(*u, "set",
                         "Change a user's Unix account, the one their jobs run as.\n\n"
                         "The account their jobs run as on the nodes, from each job's next\n"
                         "start.\n\n"
                         "Examples:\n"
                         "  topo users set ada --unix-user ada2");
  us->add_option("NAME", uset->name, "User name")->required();
  us->add_option("--unix-user", uset->unix_user, "The Unix account on the nodes")->required();
  us->add_flag("--json", uset->json, std::string(kJsonHelp));
  AddConnectionFlags(*us, conn);
  us->callback([uset, exit_code] { *exit_code = RunUsersSet(*uset); });
  auto del = std::make_shared<UsersArgs>();
  CLI::App* ud = AddVerb(*u, "delete",
                         "Delete a user; their tokens are revoked.\n\n"
                         "Examples:\n"
                         "  topo users delete ada");
  ud->add_option("NAME", del->name, "User name")->required();
  ud->add_flag("--json", del->json, std::string(kJsonHelp));
  AddConnectionFlags(*ud, conn);
  ud->callback([del, exit_code] { *exit_code = RunUsersDelete(*del); });
  u->callback([u, users, exit_code] {
    if (u->get_subcommands().empty()) *exit_code = RunUsersList(*users);
  });

  // audit
  auto audit = std::make_shared<AuditArgs>();
  CLI::App* a =
      AddVerb(app, "audit",
              "Show the audit log (cluster-admin): who changed what outside the event log.\n\n"
              "Users, tokens, topology imports, checkpoint requests, GPU clears and refused\n"
              "agent messages, as TIME ACTOR ACTION TARGET DETAIL; without flags, the newest\n"
              "100.\n\n"
              "Examples:\n"
              "  topo audit\n"
              "  topo audit --last 20\n"
              "  topo audit --after 1200 --limit 500         # from the oldest, paging\n"
              "  topo audit --json | jq '.audit[] | select(.action == \"token.create\")'");
  CLI::Option* last = a->add_option("--last", audit->last, "The newest N rows (default 100)")
                          ->type_name("N")
                          ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  a->add_option("--after", audit->after, "Rows after this sequence number, oldest first")
      ->type_name("SEQ")
      ->check(CLI::NonNegativeNumber)
      ->excludes(last);
  a->add_option("--limit", audit->limit, "At most N rows after --after (default 1000)")
      ->type_name("N")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->excludes(last);
  a->add_flag("--json", audit->json, "Print the server's {\"audit\": [ROW...]}");
  AddConnectionFlags(*a, conn);
  a->callback([audit, exit_code] { *exit_code = RunAudit(*audit); });

  // token create | revoke | list
  CLI::App* tok = AddVerb(app, "token", "Create, list and revoke API tokens");
  tok->require_subcommand(1);
  auto tc = std::make_shared<TokenArgs>();
  CLI::App* c =
      AddVerb(*tok, "create",
              "Create an API token and print it, once (details go to stderr).\n\n"
              "Examples:\n"
              "  topo token create --out ~/.config/topo/token # your own, in a file of mode 0600\n"
              "  topo token create --user ada                 # admins: for a user in scope");
  c->add_option("--user", tc->user, "Whose token (default: yours)");
  c->add_option("--out", tc->out,
                "Write the token to FILE, created with mode 0600 (an existing file is "
                "truncated and made 0600; a symlink is refused), not to standard output")
      ->type_name("FILE");
  c->add_flag("--json", tc->json, "Print {\"token\", \"id\", \"user\"}");
  AddConnectionFlags(*c, conn);
  c->callback([tc, exit_code] { *exit_code = RunTokenCreate(*tc); });
  auto tr = std::make_shared<TokenArgs>();
  CLI::App* r = AddVerb(*tok, "revoke",
                        "Revoke a token by its id (at least 8 hex digits).\n\n"
                        "Examples:\n"
                        "  topo token revoke 0a1b2c3d");
  r->add_option("ID", tr->id, "Token id, as topo token list shows")->required();
  r->add_flag("--json", tr->json, std::string(kJsonHelp));
  AddConnectionFlags(*r, conn);
  r->callback([tr, exit_code] { *exit_code = RunTokenRevoke(*tr); });
  auto tl = std::make_shared<TokenArgs>();
  CLI::App* l = AddVerb(*tok, "list",
                        "List tokens (ids, never the tokens themselves).\n\n"
                        "Examples:\n"
                        "  topo token list\n"
                        "  topo token list --user ada");
  l->add_option("--user", tl->user, "Only this user's tokens");
  l->add_flag("--json", tl->json, std::string(kJsonHelp));
  AddConnectionFlags(*l, conn);
  l->callback([tl, exit_code] { *exit_code = RunTokenList(*tl); });
}

}  // namespace topo::cli
