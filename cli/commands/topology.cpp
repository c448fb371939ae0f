// topo topology: look at and convert topologies offline; import one into a
// running topo-scheduler, or export the daemon's (cluster.cpp).

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::cli {

namespace {

struct ExportArgs {
  common::TopologySource source;
  std::string format = "json";
  std::string out;
};

int RunExport(const ExportArgs& args) {
  if (args.source.file.empty() && args.source.generate.empty()) {
    return RunServerTopologyExport(args.format, args.out);
  }
  core::Result<core::Topology> topo = common::LoadTopology(args.source);
  if (!topo.ok()) return Fail(topo.message());
  std::string text = args.format == "slurm" ? common::TopologyToSlurm(topo.value())
                                            : common::TopologyToJson(topo.value());
  if (args.out.empty() || args.out == "-") {
    std::cout << text;
    if (!text.empty() && text.back() != '\n') std::cout << "\n";
    return kExitOk;
  }
  std::ofstream f(args.out, std::ios::trunc);
  f << text;
  if (!text.empty() && text.back() != '\n') f << "\n";
  f.close();
  if (!f) return Fail(args.out + ": write failed");
  return kExitOk;
}

struct ShowArgs {
  common::TopologySource source;
  bool json = false;
};

int RunShow(const ShowArgs& args) {
  core::Result<core::Topology> topo_or = common::LoadTopology(args.source);
  if (!topo_or.ok()) return Fail(topo_or.message());
  const core::Topology& topo = topo_or.value();
  nlohmann::json tiers = nlohmann::json::array();
  for (int t = 0; t <= topo.root_tier(); ++t) {
    std::string role = t == 0 ? "node" : "";
    if (t == topo.hbd_tier()) role += role.empty() ? "hbd" : ", hbd";
    if (t == topo.leaf_tier()) role = "leaf";
    if (t == topo.pod_tier() && t != topo.leaf_tier() && t < topo.root_tier()) role = "pod";
    if (t == topo.root_tier()) role = "root";
    tiers.push_back({{"name", topo.tier(t).name},
                     {"role", role},
                     {"domains", topo.tier_size(t)},
                     {"max_gpus", topo.max_domain_gpus(t)},
                     {"cost", topo.tier(t).cost}});
  }
  if (args.json) {
    nlohmann::json out = {{"name", topo.name()},
                          {"nodes", topo.node_count()},
                          {"gpus", topo.total_gpus()},
                          {"hbd_tier", topo.tier(topo.hbd_tier()).name},
                          {"tiers", tiers}};
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << topo.name() << ": " << topo.node_count() << " nodes, " << topo.total_gpus()
            << " GPUs\n";
  std::printf("%-10s %-10s %8s %10s %6s\n", "TIER", "ROLE", "DOMAINS", "MAX GPUS", "COST");
  for (const auto& t : tiers) {
    std::printf("%-10s %-10s %8d %10d %6g\n", t["name"].get<std::string>().c_str(),
                t["role"].get<std::string>().c_str(), t["domains"].get<int>(),
                t["max_gpus"].get<int>(), t["cost"].get<double>());
  }
  return kExitOk;
}

}  // namespace

void RegisterTopology(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "topology", "Show and convert cluster topologies; import one into topo-scheduler");
  cmd->require_subcommand(1);

  auto exp = std::make_shared<ExportArgs>();
  CLI::App* e = cmd->add_subcommand(
      "export",
      "Write a topology as toposched JSON or as Slurm topology.conf.\n\n"
      "A file's or a generator's, or, with neither --topology nor --generate,\n"
      "topo-scheduler's.\n\n"
      "Examples:\n"
      "  topo topology export --generate nvl72-64k --format slurm --out topology.conf\n"
      "  topo topology export --topology topology.conf --from slurm --gpus-per-node 8\n"
      "  topo topology export --format slurm     # the running daemon's topology");
  AddTopologyFlags(*e, &exp->source, "--from");
  e->add_option("--format", exp->format, "Output format: json (default) or slurm")
      ->check(CLI::IsMember({"json", "slurm"}));
  e->add_option("--out,-o", exp->out, "Output file (default: standard output)");
  AddConnectionFlags(*e, SharedConnectionFlags());
  e->callback([exp, exit_code] { *exit_code = RunExport(*exp); });
  AddTopologyImport(*cmd, exit_code);

  auto show = std::make_shared<ShowArgs>();
  CLI::App* s = cmd->add_subcommand("show", "Summarise a topology's tiers and sizes");
  AddTopologyFlags(*s, &show->source);
  s->add_flag("--json", show->json, "Print as JSON");
  s->callback([show, exit_code] { *exit_code = RunShow(*show); });
}

}  // namespace topo::cli
