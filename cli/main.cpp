// topo: the toposched command line.

#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "topo - topology-aware placement for GPU gang jobs.\n\n"
      "Examples:\n"
      "  topo place --generate nvl72-64k --fill 60 --job job.json\n"
      "  topo place --topology topology.conf --gpus-per-node 8 --job job.json --json\n"
      "  topo topology export --generate tiny --format slurm\n"
      "  topo demo\n"
      "  topo sim --generate meta-24k --synthetic --jobs 10000\n",
      "topo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "topo 0.1.0");
  int exit_code = topo::cli::kExitOk;
  topo::cli::RegisterPlace(app, &exit_code);
  topo::cli::RegisterTopology(app, &exit_code);
  topo::cli::RegisterDemo(app, &exit_code);
  topo::cli::RegisterSim(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "topo: " << e.what() << "\n";
    return topo::cli::kExitError;
  }
  return exit_code;
}
