#include "commands/options.hpp"

#include <iostream>

#include "commands/commands.hpp"

namespace topo::cli {

void AddTopologyFlags(CLI::App& cmd, common::TopologySource* source,
                      const std::string& format_flag) {
  std::string names;
  for (const std::string& n : common::ReferenceTopologyNames()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  auto* file = cmd.add_option("--topology", source->file,
                              "Topology file: toposched JSON, Slurm topology.conf or Crux CSV");
  cmd.add_option(format_flag, source->format,
                 "Format of --topology: json, slurm or crux (default: guessed from content)")
      ->check(CLI::IsMember({"json", "slurm", "crux"}));
  auto* gen = cmd.add_option("--generate", source->generate, "Reference topology: " + names);
  file->excludes(gen);
  cmd.add_option("--gpus-per-node", source->gpus_per_node,
                 "GPUs per node (Slurm files have none; overrides a generator's)")
      ->check(CLI::Range(1, 64));
}

int Fail(const std::string& message) {
  std::cerr << "topo: " << message << "\n";
  return kExitError;
}

}  // namespace topo::cli
