// topo submit | queue | show | cancel | hold | release | checkpoint: jobs
// on a running topo-scheduler (docs/cli.md, docs/api.md "Jobs").

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "client/format.hpp"
#include "client/input.hpp"
#include "client/requests.hpp"
#include "client/submit.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::cli {

namespace {

using nlohmann::json;

// Jobs asked for per page by `topo queue` (the API's default).
constexpr int kQueuePageSize = 1000;

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string StateAndReason(const json& job) {
  std::string s = job.is_object() && job.contains("state") ? Cell(job["state"]) : "?";
  if (job.is_object() && job.contains("reason") && job["reason"].is_string() &&
      !job["reason"].get<std::string>().empty() && job["reason"] != job.value("state", "")) {
    s += ": " + Cell(job["reason"]);
  }
  return s;
}

// ---- submit

// 128 random bits as 32 hex digits, from the kernel's random source.
std::string RandomRequestId() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out += buf;
  }
  return out;
}

struct SubmitArgs {
  std::string script;
  std::string wrap;                                       // --wrap CMD
  std::optional<std::vector<std::string>> command;        // after "--"
  std::map<std::string, std::string> values;              // by flag name
  std::map<std::string, std::vector<std::string>> lists;  // repeatable flags, by name
  std::map<std::string, CLI::Option*> options;
  bool json = false;
  bool dry_run = false;
};

// What the limits on read files say in `topo submit`'s terms.
constexpr InputLimit kScriptLimit = {
    kMaxScriptBytes, "a batch script",
    "since the script is sent as one argument of its interpreter (`sh -c SCRIPT`) and Linux "
    "execs no longer argument (MAX_ARG_STRLEN)",
    "keep the bulk (data, long code) in files the nodes can read and run them from a short "
    "script"};
constexpr InputLimit kSpecLimit = {
    kMaxSpecFileBytes, "a job spec (--spec)", "the API's request body limit",
    "a job spec is a few KiB of JSON; check that --spec names the right file"};

std::shared_ptr<SubmitArgs>& SubmitArgsOfThisRun() {
  static std::shared_ptr<SubmitArgs> args = std::make_shared<SubmitArgs>();
  return args;
}

int RunSubmit(SubmitArgs& args) {
  const int ways =
      (args.command ? 1 : 0) + (args.wrap.empty() ? 0 : 1) + (args.script.empty() ? 0 : 1);
  if (ways > 1) {
    return Fail(
        "give the job's command one way: a batch script (topo submit train.sh), "
        "--wrap 'CMD', or -- CMD ARGS...");
  }
  if (args.command && args.command->empty()) {
    return Fail(
        "nothing follows --: put the command and its arguments after it, as in "
        "`topo submit --gpus 8 -- python train.py`");
  }
  SubmitFlags script_flags;
  std::string script_text;
  const std::string script_shown = args.script == "-" ? "<stdin>" : args.script;
  if (!args.script.empty()) {
    core::Result<std::string> text = ReadInputFile(args.script, kScriptLimit);
    if (!text.ok()) return Fail(text.message());
    script_text = text.value();
    core::Result<ScriptDirectives> d = ParseScriptDirectives(text.value(), script_shown);
    if (!d.ok()) return Fail(d.message());
    for (const std::string& w : d.value().warnings) std::cerr << "topo: warning: " << w << "\n";
    script_flags = d.value().flags;
  }
  SubmitFlags cmd_flags;
  for (const auto& [name, opt] : args.options) {
    if (opt->count() == 0) continue;
    if (IsRepeatableSubmitFlag(name)) {
      for (const std::string& c : args.lists[name]) {
        if (core::Status s = AddSubmitFlag(&cmd_flags, name, c, ""); !s.ok()) {
          return Fail(s.message());
        }
      }
    } else if (core::Status s = AddSubmitFlag(&cmd_flags, name, args.values[name], ""); !s.ok()) {
      return Fail(s.message());
    }
  }
  const SubmitFlags flags = MergeSubmitFlags(script_flags, cmd_flags);

  std::optional<json> spec_file;
  std::string spec_shown;
  if (auto it = flags.find("spec"); it != flags.end()) {
    const std::string& path = it->second.value;
    if (path == "-" && args.script == "-") {
      return Fail("the script and --spec cannot both come from standard input");
    }
    spec_shown = path == "-" ? "<stdin>" : path;
    core::Result<std::string> text = ReadInputFile(path, kSpecLimit);
    if (!text.ok()) {
      const std::string& origin = it->second.origin;  // the #TOPO line that named it
      return Fail(origin.empty() ? text.message() : origin + ": --spec " + text.message());
    }
    json parsed = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return Fail((path == "-" ? std::string("<stdin>") : path) +
                  ": not valid JSON (a job spec v1, docs/formats.md)");
    }
    spec_file = std::move(parsed);
  }
  std::string default_name;
  if (!args.script.empty()) default_name = args.script == "-" ? "stdin" : Basename(args.script);
  std::map<std::string, std::string> environment;  // for --export
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos && eq > 0) {
      environment.emplace(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  // What every rank runs: the command line's, else the one in --spec,
  // else the batch script; each checked against what exec takes, naming
  // where the argument came from.
  std::vector<std::string> command;
  const bool spec_has_command = spec_file && spec_file->is_object() &&
                                spec_file->contains("spec") && spec_file->contains("command");
  if (args.command || !args.wrap.empty()) {
    command = args.command ? *args.command : std::vector<std::string>{"/bin/sh", "-c", args.wrap};
    const ArgumentOrigin origin = [&](size_t i) {
      return args.command ? "the command after --, argument " + std::to_string(i + 1)
                          : std::string("--wrap");
    };
    if (core::Status s = CheckCommand(command, origin); !s.ok()) return Fail(s.message());
  } else if (spec_has_command) {
    const ArgumentOrigin origin = [&](size_t i) {
      return spec_shown + ": command[" + std::to_string(i) + "]";
    };
    if (core::Status s = CheckCommand((*spec_file)["command"], origin); !s.ok()) {
      return Fail(s.message());
    }
  } else if (!args.script.empty()) {
    command = ScriptCommand(script_text);
    const ArgumentOrigin origin = [&](size_t i) {
      return i + 1 == command.size() ? "the script " + script_shown
                                     : script_shown + ":1 (the #! line)";
    };
    if (core::Status s = CheckCommand(command, origin); !s.ok()) return Fail(s.message());
  } else {
    return Fail(
        "the job has no command: put it after --, as in `topo submit --gpus 8 -- python "
        "train.py`, give it as --wrap 'CMD', submit a batch script (topo submit train.sh), or "
        "put \"command\" in --spec");
  }
  std::vector<std::string> warnings;
  core::Result<api::SubmitRequest> request =
      BuildSubmitRequest(flags, spec_file, default_name, command, environment, &warnings);
  if (!request.ok()) return Fail(request.message());
  for (const std::string& w : warnings) std::cerr << "topo: warning: " << w << "\n";
  // An idempotency key of this submission (unless --request-id gave one):
  // a retry against another replica (--server A,B) never makes a second job.
  if (!args.dry_run && !request.value().client_request_id) {
    request.value().client_request_id = RandomRequestId();
  }
  const json body = json::parse(api::WriteSubmitRequest(request.value()));
  if (args.dry_run) {
    PrintJson(body);
    return kExitOk;
  }

  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  session->LabelFields([&](std::string_view field) { return SubmitFieldLabel(flags, field); });
  Reply reply = session->Call("POST", "/v1/jobs", body);
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  core::Result<api::SubmitAnswer> answer =
      api::ReadSubmitAnswer(reply.body, nullptr, api::Reading::kClient);
  if (!answer.ok()) {
    std::cerr << "topo: the server's answer does not read: " << TerminalSafe(answer.message())
              << "\n";
    return kExitServerError;
  }
  const api::JobView& job = answer.value().job;
  if (answer.value().ids && !answer.value().ids->empty()) {
    const std::vector<int64_t>& ids = *answer.value().ids;
    std::cout << "Submitted array job " << job.id << ": " << ids.size()
              << (ids.size() == 1 ? " task" : " tasks") << ", jobs " << ids.front() << "-"
              << ids.back();
    if (job.array && job.array->throttle > 0) {
      std::cout << ", at most " << job.array->throttle << " at once";
    }
    std::cout << " (topo queue shows each)\n";
  } else {
    std::string state(core::JobStateName(job.state));
    if (!job.reason.empty() && job.reason != state) state += ": " + TerminalSafe(job.reason);
    std::cout << "Submitted job " << job.id << " (" << state << ")\n";
  }
  return job.state == core::JobState::kRejected ? kExitInfeasible : kExitOk;
}

// ---- queue

// Every job of GET /v1/jobs that matches `filter`, paging through
// next_after, as the API's reader reads them (views) and as the server sent
// them (raw, for --json); kExitOk, or the exit code of the failure
// (reported).
int ListJobs(Session& session, const JobFilter& filter, std::vector<api::JobView>* views,
             json* raw = nullptr) {
  std::string after;
  int64_t last_after = 0;
  while (true) {
    Reply reply = session.Call("GET", JobsTarget(filter, after, kQueuePageSize));
    if (!reply.ok()) return reply.exit_code;
    std::string field;
    core::Result<api::JobList> page = api::ReadJobList(reply.body, &field, api::Reading::kClient);
    if (!page.ok()) {
      std::cerr << "topo: the server's job list does not read: " << TerminalSafe(page.message())
                << "\n";
      return kExitServerError;
    }
    for (api::JobView& j : page.value().jobs) views->push_back(std::move(j));
    if (raw != nullptr) {
      for (json& j : reply.body["jobs"]) raw->push_back(std::move(j));
    }
    if (!page.value().next_after) return kExitOk;
    const int64_t n = *page.value().next_after;
    if (n <= last_after) {
      std::cerr << "topo: the server's next_after (" << n << ") does not advance; stopping\n";
      return kExitServerError;
    }
    last_after = n;
    after = std::to_string(n);
  }
}

// --me: the caller's own user name (GET /v1/whoami), into filter->user.
int FilterOnCaller(Session& session, JobFilter* filter) {
  Reply who = session.Call("GET", "/v1/whoami");
  if (!who.ok()) return who.exit_code;
  if (!who.body.is_object() || !who.body.contains("user") || !who.body["user"].is_string()) {
    std::cerr << "topo: the server's whoami answer has no \"user\"\n";
    return kExitServerError;
  }
  filter->user = who.body["user"].get<std::string>();
  return kExitOk;
}

// The job filters `topo queue` and `topo cancel` share.
struct FilterArgs {
  bool me = false;
  std::string user;
  std::string tenant;
  std::string state;
};

// --me, --user, --tenant, --state on cmd; `states` are the ones --state
// takes, `what` names them in its error ("a job state").
void AddFilterFlags(CLI::App& cmd, FilterArgs* args, const std::vector<std::string>& states,
                    const std::string& what) {
  CLI::Option* me = cmd.add_flag("--me", args->me, "Only your own jobs (the token's user)");
  cmd.add_option("--user", args->user, "Only this user's jobs (within your scope)")
      ->type_name("NAME")
      ->excludes(me);
  cmd.add_option("--tenant", args->tenant, "Only this tenant's jobs (admins)")->type_name("TENANT");
  std::string names;
  for (const std::string& st : states) names += (names.empty() ? "" : ", ") + st;
  cmd.add_option("--state", args->state, "Only these states, comma-separated: " + names)
      ->type_name("STATE[,STATE...]")
      ->check(OneOfList(states, what));
}

int ResolveFilter(Session& session, const FilterArgs& args, JobFilter* filter) {
  filter->tenant = args.tenant;
  filter->user = args.user;
  filter->states = args.state;
  return args.me ? FilterOnCaller(session, filter) : kExitOk;
}

struct QueueArgs {
  bool all = false;
  FilterArgs filter;
  bool start = false;
  bool json = false;
};

int RunQueue(const QueueArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  JobFilter filter;
  filter.all = args.all;
  if (int e = ResolveFilter(*session, args.filter, &filter); e != kExitOk) return e;
  std::vector<api::JobView> jobs;
  json raw = json::array();
  if (int e = ListJobs(*session, filter, &jobs, &raw); e != kExitOk) return e;
  if (args.json) {
    PrintJson({{"jobs", raw}, {"next_after", nullptr}});
  } else {
    std::cout << FormatJobTable(jobs, NowMs(), args.start);
  }
  return kExitOk;
}

// ---- show

struct ShowArgs {
  std::string job;
  bool ranks = false;
  bool json = false;
};

int RunShow(const ShowArgs& args) {
  std::optional<int64_t> id = ParseJobId(args.job);
  if (!id) return kExitError;
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("GET", "/v1/jobs/" + std::to_string(*id));
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  core::Result<api::JobView> job = api::ReadJobView(reply.body, nullptr, api::Reading::kClient);
  if (!job.ok()) {
    std::cerr << "topo: the server's job view does not read: " << TerminalSafe(job.message())
              << "\n";
    return kExitServerError;
  }
  std::cout << FormatJobDetails(job.value(), NowMs(), args.ranks);
  return kExitOk;
}

// ---- cancel, hold, release

// Jobs chosen by filters (topo cancel --me ...) that are cancelled without
// --yes; more need it.
constexpr size_t kBulkCancelWithoutYes = 10;

struct JobActionArgs {
  std::vector<std::string> jobs;
  std::string reason;
  FilterArgs filter;  // cancel: the jobs by filters instead of ids
  bool yes = false;
  bool json = false;
};

bool HasFilter(const FilterArgs& f) {
  return f.me || !f.user.empty() || !f.tenant.empty() || !f.state.empty();
}

// The ids of the waiting and running jobs that args.filter matches, newest
// first: cancelling the newest first means no job of the set starts
// because an older one of it was cancelled before it. nullopt with
// *exit_code set when the list failed, or when there are more than
// kBulkCancelWithoutYes without --yes.
std::optional<std::vector<int64_t>> JobsToCancel(Session& session, const JobActionArgs& args,
                                                 int* exit_code) {
  JobFilter filter;
  if (int e = ResolveFilter(session, args.filter, &filter); e != kExitOk) {
    *exit_code = e;
    return std::nullopt;
  }
  std::vector<api::JobView> jobs;
  if (int e = ListJobs(session, filter, &jobs); e != kExitOk) {
    *exit_code = e;
    return std::nullopt;
  }
  std::vector<int64_t> ids;
  for (const api::JobView& j : jobs) ids.push_back(j.id);
  std::sort(ids.rbegin(), ids.rend());
  const std::string what = DescribeJobFilter(filter);
  const std::string count = std::to_string(ids.size()) + (ids.size() == 1 ? " job" : " jobs");
  if (ids.size() > kBulkCancelWithoutYes && !args.yes) {
    std::cerr << "topo: " << count << " match (" << TerminalSafe(what) << "): cancelling more than "
              << kBulkCancelWithoutYes
              << " jobs at once needs --yes; add --yes to cancel all of them (`topo queue` "
                 "with the same filters lists them)\n";
    *exit_code = kExitError;
    return std::nullopt;
  }
  // With --json, stdout holds the JSON alone.
  std::ostream& out = args.json ? std::cerr : std::cout;
  if (ids.empty()) {
    out << "No jobs match (" << TerminalSafe(what) << "); nothing to cancel\n";
  } else {
    out << "Cancelling " << count << " (" << TerminalSafe(what) << ")\n";
  }
  return ids;
}

int RunJobAction(const JobActionArgs& args, const std::string& action, const std::string& done) {
  const bool by_filter = HasFilter(args.filter);
  if (by_filter && !args.jobs.empty()) {
    return Fail("give job ids or filters (--me, --user, --tenant, --state), not both");
  }
  if (!by_filter && args.jobs.empty()) {
    return Fail("name the jobs to " + action + ": job ids (topo " + action +
                " 17 18), or filters: --me, --user NAME, --tenant TENANT, --state STATE (topo " +
                action + " --me --state queued)");
  }
  std::vector<int64_t> ids;
  for (const std::string& j : args.jobs) {
    std::optional<int64_t> id = ParseJobId(j);
    if (!id) return kExitError;
    ids.push_back(*id);
  }
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  if (by_filter) {
    std::optional<std::vector<int64_t>> chosen = JobsToCancel(*session, args, &exit_code);
    if (!chosen) return exit_code;
    ids = std::move(*chosen);
  }
  std::vector<std::string> paths;
  for (int64_t id : ids) paths.push_back("/v1/jobs/" + std::to_string(id) + "/" + action);
  json answers = json::array();
  const int first_error = PostEach(*session, paths, args.reason, [&](size_t i, const json& body) {
    const int64_t id = ids[i];
    if (args.json) {
      answers.push_back(body);
    } else if (action == "checkpoint") {
      const int64_t step = body.value("checkpoint_step", int64_t{-1});
      std::cout << "Asked job " << id << "'s ranks on " << body.value("nodes", 0)
                << " node(s) to checkpoint (newest stored step: "
                << (step >= 0 ? std::to_string(step) : std::string("none")) << ")\n";
    } else {
      std::cout << done << " job " << id << " (" << StateAndReason(body) << ")\n";
    }
  });
  if (args.json) PrintJson({{"jobs", answers}});
  return first_error;
}

void AddJobAction(CLI::App& app, int* exit_code, const std::string& name, const std::string& help,
                  const std::string& action, const std::string& done) {
  auto args = std::make_shared<JobActionArgs>();
  CLI::App* cmd = AddVerb(app, name, help);
  CLI::Option* ids = cmd->add_option("JOB", args->jobs, "Job ids");
  if (action == "cancel") {
    // Or chosen by filters, like topo queue's, among the jobs not yet ended.
    AddFilterFlags(*cmd, &args->filter, {"queued", "held", "running", "preempting"},
                   "a state of jobs that can be cancelled");
    cmd->add_flag("--yes,-y", args->yes,
                  "Cancel more than " + std::to_string(kBulkCancelWithoutYes) +
                      " jobs chosen by filters (without it, more are refused)");
  } else {
    ids->required();
  }
  if (action == "cancel" || action == "checkpoint") {
    cmd->add_option("--reason", args->reason, "Why (kept in the job's history)");
  }
  cmd->add_flag("--json", args->json,
                "Print {\"jobs\": [JOB...]}, the server's answer for each job");
  AddConnectionFlags(*cmd, SharedConnectionFlags());
  cmd->callback(
      [args, exit_code, action, done] { *exit_code = RunJobAction(*args, action, done); });
}

// ---- logs

}  // namespace

void SetSubmitCommand(std::vector<std::string> command) {
  SubmitArgsOfThisRun()->command = std::move(command);
}

void RegisterSubmit(CLI::App& app, int* exit_code) {
  std::shared_ptr<SubmitArgs> submit = SubmitArgsOfThisRun();
  CLI::App* s = AddVerb(
      app, "submit",
      "Submit a job to topo-scheduler.\n\n"
      "The job comes from flags, from a job spec (--spec FILE, - for standard input), or\n"
      "from a batch script whose leading comment block holds #TOPO lines, the way sbatch\n"
      "reads #SBATCH (flags on the command line win over #TOPO lines, which win over\n"
      "the spec file). Prints \"Submitted job ID (STATE: REASON)\"; exit status 3 when the\n"
      "daemon refused the job because it can never fit the cluster, even empty.\n\n"
      "The command every rank runs: what follows --, or --wrap 'CMD' (through /bin/sh -c),\n"
      "or the batch script (sent as text, run by its #! interpreter), or \"command\" in\n"
      "the spec; a job without one is refused. After --, nothing is read as a flag or a\n"
      "script: `-- /bin/true` runs /bin/true.\n\n"
      "Launch modes (--launch, docs/jobs.md):\n"
      "  rank (default)  the command runs once per GPU, with RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "                  MASTER_ADDR/PORT... set as torchrun sets them for its workers\n"
      "  node            the command runs once per node, with GROUP_RANK, GROUP_WORLD_SIZE,\n"
      "                  LOCAL_WORLD_SIZE, MASTER_ADDR/PORT: for a script that runs\n"
      "                  torchrun --nnodes $GROUP_WORLD_SIZE --node-rank $GROUP_RANK ...\n"
      "The processes' environment is the agent's (PATH, HOME, the variables above) plus\n"
      "--env NAME=VALUE and what --export sends of yours (default NONE).\n\n"
      "Examples:\n"
      "  topo submit --gpus 64 --tp 8 --pp 2 --time 2h --name llama-8b -- python train.py\n"
      "  topo submit --gpus 8 --wrap 'python train.py --lr 3e-4 > out.txt'\n"
      "  topo submit --gpus 16 --launch node -- sh -c 'exec torchrun --nnodes $GROUP_WORLD_SIZE "
      "\\\n"
      "      --nproc-per-node $LOCAL_WORLD_SIZE --node-rank $GROUP_RANK \\\n"
      "      --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py'\n"
      "  topo submit --gpus 8 --env NCCL_DEBUG=INFO --export HF_HOME --chdir /data/run \\\n"
      "      --output out-%j-%r.log -- python train.py\n"
      "  topo submit --spec job.json --tenant org/team --priority 10\n"
      "  topo submit -p gpu --gpus 16 --time 4h -- python train.py   # in partition gpu\n"
      "  topo submit --reservation demo --gpus 8 -- ./eval.sh        # on demo's nodes, in its "
      "window\n"
      "  topo submit train.sh              # with lines like: #TOPO --gpus 4096 --tp 8 --ep 8\n"
      "  topo submit train.sh --time 90m   # overrides the script's #TOPO --time\n"
      "  id=$(topo submit --gpus 8 --json -- ./run.sh | jq .id)\n"
      "  topo submit train.sh --dry-run    # print the request, send nothing");
  s->add_option("--wrap", submit->wrap,
                "Run CMD through /bin/sh -c as the job's command (like sbatch --wrap)")
      ->type_name("CMD");
  s->add_option("SCRIPT", submit->script,
                "Batch script with #TOPO lines (- for standard input); its file name names the "
                "job");
  for (const SubmitFlagInfo& f : SubmitFlagTable()) {
    const std::string name(f.name);
    // -p for --partition, as sbatch has it.
    const std::string names = name == "partition" ? "-p,--partition" : "--" + name;
    CLI::Option* opt = IsRepeatableSubmitFlag(name)
                           ? s->add_option(names, submit->lists[name], std::string(f.help))
                           : s->add_option(names, submit->values[name], std::string(f.help));
    opt->type_name(std::string(f.value_name));
    submit->options[name] = opt;
  }
  s->add_flag("--json", submit->json,
              "Print the server's answer ({\"id\", \"state\", \"reason\"})");
  s->add_flag("--dry-run", submit->dry_run, "Print the request body and send nothing");
  AddConnectionFlags(*s, SharedConnectionFlags());
  s->callback([submit, exit_code] { *exit_code = RunSubmit(*submit); });
}

void RegisterJobCommands(CLI::App& app, int* exit_code) {
  // queue
  auto queue = std::make_shared<QueueArgs>();
  CLI::App* q =
      AddVerb(app, "queue",
              "List jobs: waiting and running ones, or all with --all.\n\n"
              "TIME is the run time; REASON says why a job waits (#N is its place in the queue).\n"
              "--start adds START: the start time of started jobs, and for the job at the head of\n"
              "the queue the scheduler's estimate, from its reservation plan (the running jobs'\n"
              "time limits), marked ~14:05 (est.); jobs behind it show - (no estimate exists).\n\n"
              "Examples:\n"
              "  topo queue\n"
              "  topo queue --me --start          # your jobs, and when the next one should start\n"
              "  topo queue --all --tenant org/team\n"
              "  topo queue --user ada --state queued,held\n"
              "  topo queue --state running,preempting\n"
              "  topo queue --json | jq '.jobs[] | select(.state == \"queued\") | .id'");
  q->add_flag("--all,-a", queue->all, "Finished jobs too (completed, failed, cancelled, rejected)");
  AddFilterFlags(*q, &queue->filter, JobStateNames(), "a job state");
  q->add_flag("--start", queue->start,
              "Add START: when each job started, or, for the head of the queue, when the "
              "scheduler's reservation plan expects it to (~14:05 (est.)); - where there is no "
              "estimate");
  q->add_flag("--json", queue->json,
              "Print {\"jobs\": [JOB...]}, every page of the server's list (each JOB has "
              "estimated_start_ms)");
  AddConnectionFlags(*q, SharedConnectionFlags());
  q->callback([queue, exit_code] { *exit_code = RunQueue(*queue); });

  // show
  auto show = std::make_shared<ShowArgs>();
  CLI::App* sh = AddVerb(
      app, "show",
      "Show one job: its state, how it starts, where it runs and its history.\n\n"
      "State and reason, how its processes start (command, launch mode, the names of its\n"
      "--env variables, working directory, output files), placement per HBD, leaf and pod,\n"
      "placement metrics, ranks and history. Variables are shown by name only (values may\n"
      "be secrets); --json carries the values.\n\n"
      "Examples:\n"
      "  topo show 17\n"
      "  topo show 17 --ranks        # every rank's node and GPU\n"
      "  topo show 17 --json | jq .env   # the variables with their values\n"
      "  topo show 17 --json | jq .metrics");
  sh->add_option("JOB", show->job, "Job id")->required();
  sh->add_flag("--ranks", show->ranks, "List every rank (and every placement group)");
  sh->add_flag("--json", show->json, std::string(kJsonHelp));
  AddConnectionFlags(*sh, SharedConnectionFlags());
  sh->callback([show, exit_code] { *exit_code = RunShow(*show); });

  AddJobAction(app, exit_code, "cancel",
               "Cancel jobs (a running job is stopped).\n\n"
               "Name them by id, or choose them with filters among the jobs not yet ended\n"
               "(--me, --user, --tenant, --state, as topo queue takes them): it prints how many\n"
               "match and cancels them, newest first; more than " +
                   std::to_string(kBulkCancelWithoutYes) +
                   " need --yes. Each cancel is\n"
                   "checked against your rights, as when named by id.\n\n"
                   "Examples:\n"
                   "  topo cancel 17\n"
                   "  topo cancel 17 18 19 --reason 'wrong data set'\n"
                   "  topo cancel --me --state queued            # your waiting jobs\n"
                   "  topo cancel --user ada --tenant org/team --yes --reason 'quota reset'",
               "cancel", "Cancelled");
  AddJobAction(app, exit_code, "hold",
               "Hold waiting jobs: they stay queued but do not start until released.\n\n"
               "Examples:\n"
               "  topo hold 17\n"
               "  topo hold $(topo queue --state queued --json | jq '.jobs[].id')",
               "hold", "Held");
  AddJobAction(app, exit_code, "checkpoint",
               "Ask running jobs to checkpoint now.\n\n"
               "The agents signal every rank (SIGUSR1 unless the agent is set otherwise); the\n"
               "step the job completes is stored and shows in `topo show` as checkpoint_step.\n"
               "See node-agent/supervisor/CHECKPOINTS.md for what a job writes.\n\n"
               "Examples:\n"
               "  topo checkpoint 17\n"
               "  topo checkpoint 17 --reason 'before the switch upgrade'",
               "checkpoint", "Checkpointing");
  RegisterLogs(app, exit_code);
  AddJobAction(app, exit_code, "release",
               "Release held jobs back into the queue.\n\n"
               "Examples:\n"
               "  topo release 17 18",
               "release", "Released");
}

}  // namespace topo::cli
