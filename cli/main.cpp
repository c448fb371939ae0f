// topo: the toposched command line.

#include <algorithm>
#include <exception>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/version.hpp"

namespace {

// The verbs each Register* function adds, so that a command builds only the
// options of its own group: building every verb's CLI11 options is a tenth of
// a `topo submit`'s CPU (docs/benchmarks.md, CLI submissions). The table only
// saves work: a verb missing here, or registered by another group than it
// says, gets the whole tree (BuildApp checks), so it can never change what a
// command does.
struct VerbGroup {
  void (*add)(CLI::App&, int*);
  std::initializer_list<std::string_view> verbs;
};
const VerbGroup kGroups[] = {
    {topo::cli::RegisterPlace, {"place"}},
    {topo::cli::RegisterTopology, {"topology"}},
    {topo::cli::RegisterDemo, {"demo"}},
    {topo::cli::RegisterSim, {"sim"}},
    {topo::cli::RegisterSubmit, {"submit"}},
    {topo::cli::RegisterRelay, {"relay"}},
    {topo::cli::RegisterJobCommands,
     {"queue", "show", "logs", "cancel", "hold", "checkpoint", "release"}},
    {topo::cli::RegisterHistoryCommands, {"history", "report"}},
    {topo::cli::RegisterClusterCommands, {"nodes", "drain", "resume", "gpu", "events", "whoami"}},
    {topo::cli::RegisterAdminCommands, {"tenants", "quota", "config", "users", "audit", "token"}},
    {topo::cli::RegisterNodeSetCommands, {"partition", "reservation"}},
};

// Help that lists verbs shows each one's first line, its summary; the rest
// of a description (details, examples) is for `topo VERB --help`.
class SummaryFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string& d = sub->get_description();
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), d.substr(0, d.find('\n')),
                             get_column_width());
    return out.str();
  }
};

std::unique_ptr<CLI::App> NewApp() {
  auto app = std::make_unique<CLI::App>(
      "topo - topology-aware placement for GPU gang jobs.\n\n"
      "Examples:\n"
      "  topo place --generate nvl72-64k --fill 60 --job job.json\n"
      "  topo place --topology topology.conf --gpus-per-node 8 --job job.json --json\n"
      "  topo topology export --generate tiny --format slurm\n"
      "  topo demo\n"
      "  topo sim --generate meta-24k --synthetic --jobs 10000\n"
      "  topo submit --gpus 64 --tp 8 --time 2h      # to topo-scheduler (docs/cli.md)\n"
      "  topo queue\n\n"
      "Exit status: 0 ok, 1 bad input or usage, 2 busy (would fit later), 3 infeasible\n"
      "(can never fit; a submitted job was rejected), 4 not found, 5 unauthenticated or\n"
      "forbidden, 6 conflict (the job's or cluster's state forbids it), 7 server\n"
      "unreachable, TLS failure or timeout, 8 request rejected as invalid, 9 other\n"
      "server error.\n",
      "topo");
  app->require_subcommand(1);
  app->set_version_flag("--version", std::string("topo ") + topo::kVersion);
  app->formatter(std::make_shared<SummaryFormatter>());
  return app;
}

// The app for a command line whose first word is `verb`: that verb's group
// only when the table says which it is, else every verb with the help's
// groups (--help, --version, a mistyped verb).
std::unique_ptr<CLI::App> BuildApp(std::string_view verb, int* exit_code) {
  for (const VerbGroup& g : kGroups) {
    if (std::find(g.verbs.begin(), g.verbs.end(), verb) == g.verbs.end()) continue;
    std::unique_ptr<CLI::App> app = NewApp();
    g.add(*app, exit_code);
    for (const CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == verb) return app;
    }
    break;  // the table is out of date: build everything
  }
  std::unique_ptr<CLI::App> app = NewApp();
  for (const VerbGroup& g : kGroups) g.add(*app, exit_code);
  for (const char* name : {"place", "topology", "demo", "sim"}) {
    app->get_subcommand(name)->group("Offline tools");
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_group() == "Subcommands") sub->group("Cluster (talk to topo-scheduler)");
  }
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = topo::cli::kExitOk;
  std::unique_ptr<CLI::App> built = BuildApp(argc > 1 ? argv[1] : "", &exit_code);
  CLI::App& app = *built;
  std::vector<char*> args(argv, argv + argc);
  if (argc > 1 && std::string_view(argv[1]) == "submit") {
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--") {
        topo::cli::SetSubmitCommand({argv + i + 1, argv + argc});
        args.resize(i);
        break;
      }
    }
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error is 1, as documented.
    if (e.get_exit_code() != 0) {
      const std::string hint =
          topo::cli::SuggestForUnknown(app, std::vector<std::string>(args.begin() + 1, args.end()));
      // Every error is "topo: <message>" (docs/cli.md), CLI11's own too.
      std::cerr << "topo: " << (hint.empty() ? topo::cli::UsageError(app, e.what()) : hint) << "\n";
      return topo::cli::kExitError;
    }
    return app.exit(e) == 0 ? topo::cli::kExitOk : topo::cli::kExitError;
  } catch (const std::exception& e) {
    std::cerr << "topo: " << e.what() << "\n";
    return topo::cli::kExitError;
  }
  return exit_code;
}
