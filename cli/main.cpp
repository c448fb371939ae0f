// topo: the toposched command line.

#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/commands.hpp"
#include "commands/options.hpp"

int main(int argc, char** argv) {
  CLI::App app{
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
      "topo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "topo 0.1.0");
  int exit_code = topo::cli::kExitOk;
  topo::cli::RegisterPlace(app, &exit_code);
  topo::cli::RegisterTopology(app, &exit_code);
  topo::cli::RegisterDemo(app, &exit_code);
  topo::cli::RegisterSim(app, &exit_code);
  topo::cli::RegisterJobCommands(app, &exit_code);
  topo::cli::RegisterHistoryCommands(app, &exit_code);
  topo::cli::RegisterClusterCommands(app, &exit_code);
  topo::cli::RegisterAdminCommands(app, &exit_code);
  for (const char* name : {"place", "topology", "demo", "sim"}) {
    app.get_subcommand(name)->group("Offline tools");
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_group() == "Subcommands") sub->group("Cluster (talk to topo-scheduler)");
  }
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
