// `topo history` and `topo report usage`: accounting from GET /v1/history
// and GET /v1/reports/usage (docs/api.md, "Accounting").

#include <algorithm>
#include <iostream>

#include "client/format.hpp"
#include "client/input.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/hostlist.hpp"

namespace topo::cli {
namespace {

using json = nlohmann::json;

// Node lists longer than this are cut in the table (--json has them all).
constexpr size_t kNodesColumnChars = 32;

struct HistoryArgs {
  std::string user;
  std::string tenant;
  std::string state;
  std::string since;
  std::string until;
  int limit = 100;
  int64_t after = 0;
  bool json = false;
};

// --since / --until as Unix ms ("" when not given); false after printing
// the error.
bool ResolveWindow(const std::string& since, const std::string& until, std::string* since_ms,
                   std::string* until_ms) {
  const int64_t now = NowMs();
  for (auto [text, out, flag] :
       {std::tuple{&since, since_ms, "--since"}, std::tuple{&until, until_ms, "--until"}}) {
    if (text->empty()) continue;
    core::Result<int64_t> t = ParseWhen(*text, now, flag);
    if (!t.ok()) {
      std::cerr << "topo: " << t.message() << "\n";
      return false;
    }
    *out = std::to_string(t.value());
  }
  return true;
}

std::string Hours(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}
std::string Hours(const json& v) { return v.is_number() ? Hours(v.get<double>()) : "-"; }

// Every node the job ran on, over all its runs, in the order first used.
std::string NodesCell(const api::JobView& job) {
  std::vector<std::string> names;
  if (job.accounting) {
    for (const api::RunView& r : job.accounting->runs) {
      for (const std::string& n : r.node_names) {
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
    }
  }
  if (names.empty()) return "-";
  std::string list = common::CompressHostlist(names);
  if (list.size() > kNodesColumnChars) list = list.substr(0, kNodesColumnChars - 3) + "...";
  return list;
}

int RunHistory(const HistoryArgs& args) {
  std::string since, until;
  if (!ResolveWindow(args.since, args.until, &since, &until)) return kExitError;
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  const std::string query =
      Query({{"user", args.user},
             {"tenant", args.tenant},
             {"state", args.state},
             {"since", since},
             {"until", until},
             {"limit", std::to_string(args.limit)},
             {"after", args.after > 0 ? std::to_string(args.after) : std::string()}});
  Reply reply = session->Call("GET", "/v1/history?" + query);
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  core::Result<api::JobList> list = api::ReadJobList(reply.body, nullptr, api::Reading::kClient);
  if (!list.ok()) {
    std::cerr << "topo: the server's history does not read: " << TerminalSafe(list.message())
              << "\n";
    return kExitServerError;
  }
  Table table({"ID", "USER", "TENANT", "STATE", "GPUS", "NODES", "SUBMIT", "START", "END", "GPU-H",
               "EXIT"});
  for (size_t c : {0, 4, 9, 10}) table.AlignRight(c);
  auto time = [](const std::optional<int64_t>& ms) {
    return ms ? FormatTime(*ms) : std::string("-");
  };
  for (const api::JobView& j : list.value().jobs) {
    const api::JobAccounting a = j.accounting.value_or(api::JobAccounting{});
    table.AddRow({std::to_string(j.id), j.user, j.tenant, std::string(core::JobStateName(j.state)),
                  std::to_string(j.gpus), NodesCell(j), FormatTime(j.submit_ms), time(j.start_ms),
                  time(j.end_ms), Hours(a.gpu_hours),
                  a.exit_code ? std::to_string(*a.exit_code) : "-"});
  }
  if (table.rows() == 0) {
    std::cout << "No jobs match.\n";
  } else {
    std::cout << table.Render();
  }
  if (list.value().next_after) {
    std::cerr << "More jobs: add --after " << *list.value().next_after << " for the next page\n";
  }
  return kExitOk;
}

struct UsageArgs {
  std::string by = "tenant";
  std::string since;
  std::string until;
  bool json = false;
};

int RunUsage(const UsageArgs& args) {
  std::string since, until;
  if (!ResolveWindow(args.since, args.until, &since, &until)) return kExitError;
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  json rows = json::array();
  json first;
  std::string after;
  // Every page: there is one row per tenant or user.
  for (int page = 0; page < 10000; ++page) {
    Reply reply = session->Call("GET", "/v1/reports/usage?" + Query({{"by", args.by},
                                                                     {"since", since},
                                                                     {"until", until},
                                                                     {"limit", "1000"},
                                                                     {"after", after}}));
    if (!reply.ok()) return reply.exit_code;
    if (!reply.body.is_object() || !reply.body.contains("rows") || !reply.body["rows"].is_array()) {
      std::cerr << "topo: the server's answer has no \"rows\" list\n";
      return kExitServerError;
    }
    if (first.is_null()) first = reply.body;
    for (json& r : reply.body["rows"]) rows.push_back(std::move(r));
    const json next = reply.body.value("next_after", json());
    if (!next.is_string() || next.get<std::string>() <= after) break;
    after = next.get<std::string>();
  }
  first["rows"] = rows;
  first["next_after"] = nullptr;
  if (args.json) {
    PrintJson(first);
    return kExitOk;
  }
  std::string header = args.by;
  for (char& c : header) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  Table table({header, "GPU-H", "JOBS", "COMPLETED", "FAILED", "CANCELLED", "STARTED", "WAIT-MEAN",
               "WAIT-MAX"});
  for (size_t c = 1; c < 9; ++c) table.AlignRight(c);
  auto wait = [](const json& s) {
    return s.is_number() ? FormatSeconds(static_cast<int64_t>(s.get<double>() + 0.5))
                         : std::string("-");
  };
  for (const json& r : rows) {
    table.AddRow({Cell(r.value("name", json())), Hours(r.value("gpu_hours", json())),
                  Cell(r.value("jobs", json())), Cell(r.value("completed", json())),
                  Cell(r.value("failed", json())), Cell(r.value("cancelled", json())),
                  Cell(r.value("started", json())), wait(r.value("queue_wait_mean_s", json())),
                  wait(r.value("queue_wait_max_s", json()))});
  }
  // Without --since the window starts at the epoch: say "all time", not 1970.
  const json since_ms = first.value("since_ms", json());
  const bool all_time = !since_ms.is_number() || since_ms.get<double>() <= 0;
  std::cout << "Usage by " << args.by
            << (all_time ? ", all time to " : " from " + FormatTime(since_ms) + " to ")
            << FormatTime(first.value("until_ms", json())) << "\n";
  if (table.rows() == 0) {
    std::cout << "Nothing ran or was submitted then.\n";
  } else {
    std::cout << table.Render();
  }
  return kExitOk;
}

}  // namespace

void RegisterHistoryCommands(CLI::App& app, int* exit_code) {
  auto history = std::make_shared<HistoryArgs>();
  CLI::App* h = AddVerb(
      app, "history",
      "List past and present jobs with where they ran and what they used (like sacct).\n\n"
      "A job is listed when it existed between --since and --until: submitted before --until\n"
      "and not ended before --since. NODES are all the nodes it ran on (every run: a restart\n"
      "after a failure adds the new nodes), GPU-H its GPU-hours (each run's time x its GPUs;\n"
      "a running job counts up to now), EXIT the exit status that ended its last run (- when\n"
      "none did: cancelled, preempted, stopped by its time limit). `topo show ID` has each\n"
      "run and its incidents. You see your tenant's jobs; tenant-admins their subtree.\n"
      "One page at a time, by job id: --after ID goes on from the last one shown.\n\n"
      "Examples:\n"
      "  topo history --since 7d\n"
      "  topo history --user ada --state failed,cancelled --since 2026-11-01\n"
      "  topo history --tenant org/team --since 2026-11-01 --until 2026-12-01 --limit 1000\n"
      "  topo history --json | jq '.jobs[] | {id, gpu_hours, nodes}'");
  h->add_option("--user", history->user, "Only this user's jobs (within your scope)")
      ->type_name("NAME");
  h->add_option("--tenant", history->tenant, "Only this tenant's jobs (within your scope)")
      ->type_name("TENANT");
  std::string names;
  for (const std::string& st : JobStateNames()) names += (names.empty() ? "" : ", ") + st;
  h->add_option("--state", history->state, "Only these states, comma-separated: " + names)
      ->type_name("STATE[,STATE...]")
      ->check(OneOfList(JobStateNames(), "a job state"));
  h->add_option("--since", history->since,
                "Jobs not ended before this: 7d, 12h, 30m, 2w (ago), or 2026-11-01[T14:30]")
      ->type_name("WHEN");
  h->add_option("--until", history->until, "Jobs submitted before this (same forms)")
      ->type_name("WHEN");
  h->add_option("--limit", history->limit, "Jobs per page, 1..1000 (default 100)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000));
  h->add_option("--after", history->after, "Start after this job id (the previous page's last)")
      ->type_name("ID")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  h->add_flag("--json", history->json,
              "Print the server's answer: {\"jobs\": [{\"id\", \"nodes\", \"runs\", "
              "\"gpu_hours\", ...}], \"next_after\"}");
  AddConnectionFlags(*h, SharedConnectionFlags());
  h->callback([history, exit_code] { *exit_code = RunHistory(*history); });

  CLI::App* report =
      AddVerb(app, "report", "Accounting reports from topo-scheduler (see `topo report usage`).");
  report->require_subcommand(1);
  auto usage = std::make_shared<UsageArgs>();
  CLI::App* u = AddVerb(
      *report, "usage",
      "GPU-hours, jobs, outcomes and queue wait per tenant or user.\n\n"
      "Over the window --since .. --until (default: from the beginning to now): GPU-H counts\n"
      "the part of every run inside the window (a running job up to now); JOBS the jobs\n"
      "submitted in it; COMPLETED, FAILED, CANCELLED the jobs that ended in it; STARTED the\n"
      "jobs first started in it and WAIT-MEAN/WAIT-MAX their queue wait (first start -\n"
      "submission). Researchers see their tenant only, tenant-admins their subtree.\n\n"
      "Examples:\n"
      "  topo report usage --by tenant --since 30d\n"
      "  topo report usage --by user --since 2026-11-01 --until 2026-12-01\n"
      "  topo report usage --by user --json | jq '.rows[] | {name, gpu_hours}'");
  u->add_option("--by", usage->by, "Group by tenant or user (default tenant)")
      ->type_name("tenant|user")
      ->check(CLI::IsMember({"tenant", "user"}));
  u->add_option("--since", usage->since, "Window start: 7d, 12h, 30m, 2w (ago), or 2026-11-01")
      ->type_name("WHEN");
  u->add_option("--until", usage->until, "Window end (same forms; default now)")->type_name("WHEN");
  u->add_flag("--json", usage->json,
              "Print {\"by\", \"since_ms\", \"until_ms\", \"rows\": [{\"name\", \"gpu_hours\", "
              "\"jobs\", ...}]}");
  AddConnectionFlags(*u, SharedConnectionFlags());
  u->callback([usage, exit_code] { *exit_code = RunUsage(*usage); });
}

}  // namespace topo::cli
