#include "commands/options.hpp"

#include <algorithm>
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

CLI::Validator OneOfList(std::vector<std::string> allowed, std::string what) {
  return CLI::Validator(
      [allowed = std::move(allowed), what = std::move(what)](std::string& value) -> std::string {
        size_t start = 0;
        while (start <= value.size()) {
          size_t comma = value.find(',', start);
          if (comma == std::string::npos) comma = value.size();
          const std::string item = value.substr(start, comma - start);
          if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
            std::string list;
            for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
            return "'" + item + "' is not " + what + "; use one or more of " + list +
                   ", comma-separated";
          }
          start = comma + 1;
        }
        return std::string();
      },
      "LIST");
}

}  // namespace topo::cli
