// topo place: one placement, offline, on a file or a reference topology.

#include <iostream>
#include <set>

#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "commands/report.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/render.hpp"
#include "topo/core/fill.hpp"
#include "topo/core/perf_model.hpp"

namespace topo::cli {

namespace {

struct PlaceArgs {
  common::TopologySource source;
  double fill = 0;
  uint64_t seed = 1;
  std::string job_file;
  std::string policy = "toposched";
  bool json = false;
  bool ranks = false;
  bool no_map = false;
  std::string model;  // --model: a preset, overriding the job file's model
};

std::string Seconds(double s) {
  char buf[32];
  if (s >= 100) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s >= 0.1) {
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1000);
  }
  return buf;
}

void PrintPrediction(std::ostream& os, const core::StepPrediction& p, const std::string& model) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.3f", p.slowdown);
  os << "\npredicted step (" << model << "): " << Seconds(p.step.total_s) << ", ideal "
     << Seconds(p.ideal.total_s) << ", slowdown " << buf << "\n";
  struct Part {
    const char* name;
    double now, ideal;
  };
  for (Part part : {Part{"compute", p.step.compute_s, p.ideal.compute_s},
                    {"tp", p.step.tp_s, p.ideal.tp_s},
                    {"cp", p.step.cp_s, p.ideal.cp_s},
                    {"ep", p.step.ep_s, p.ideal.ep_s},
                    {"pp", p.step.pp_s, p.ideal.pp_s},
                    {"dp (exposed)", p.step.dp_s, p.ideal.dp_s},
                    {"bubble", p.step.bubble_s, p.ideal.bubble_s}}) {
    if (part.now == 0 && part.ideal == 0) continue;
    std::snprintf(buf, sizeof buf, "  %-13s %12s  (ideal %s)\n", part.name,
                  Seconds(part.now).c_str(), Seconds(part.ideal).c_str());
    os << buf;
  }
}

// Indented JSON, but one line per rank so a 16k-rank map stays readable.
void PrintJsonWithCompactRanks(std::ostream& os, const nlohmann::json& j) {
  os << "{\n";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    os << "  " << nlohmann::json(it.key()).dump() << ": ";
    if (it.key() == "ranks" && it->is_array() && !it->empty()) {
      os << "[\n";
      for (size_t r = 0; r < it->size(); ++r) {
        os << "    " << (*it)[r].dump() << (r + 1 < it->size() ? ",\n" : "\n");
      }
      os << "  ]";
    } else {
      std::string body = it->dump(2);
      // Re-indent nested lines under the key.
      for (size_t pos = 0; (pos = body.find('\n', pos)) != std::string::npos; pos += 3) {
        body.insert(pos + 1, "  ");
      }
      os << body;
    }
    os << (i + 1 < j.size() ? ",\n" : "\n");
  }
  os << "}\n";
}

int RunPlace(const PlaceArgs& args) {
  core::Result<core::Topology> topo_or = common::LoadTopology(args.source);
  if (!topo_or.ok()) return Fail(topo_or.message());
  const core::Topology& topo = topo_or.value();
  core::Result<std::string> text =
      args.job_file == "-"
          ? core::Result<std::string>(std::string(std::istreambuf_iterator<char>(std::cin), {}))
          : common::ReadFile(args.job_file);
  if (!text.ok()) return Fail(text.message());
  core::Result<core::JobSpec> job_or = common::ParseJobSpec(text.value());
  if (!job_or.ok()) return Fail(args.job_file + ": " + job_or.message());
  core::JobSpec& job = job_or.value();
  if (!args.model.empty()) {
    core::ModelSpec m;
    m.preset = args.model;
    job.model = m;
  }
  core::Result<core::ResolvedModel> model = core::ResolveModel(job);
  if (!model.ok()) return Fail(model.message());
  const std::string model_name =
      model.value().spec.preset.empty() ? "custom" : model.value().spec.preset;
  auto placer = core::MakePlacer(args.policy);
  if (placer == nullptr) return Fail("unknown policy '" + args.policy + "'");

  core::ClusterState state(topo);
  if (args.fill > 0) core::FillCluster(state, args.fill / 100.0, args.seed);
  core::Placement placement = placer->Place(job, state);

  if (args.json) {
    nlohmann::json out = common::PlacementToJson(placement, topo);
    out["policy"] = args.policy;
    out["topology"] = topo.name();
    out["busy_fraction"] = static_cast<double>(state.total_busy_gpus()) / topo.total_gpus();
    if (placement.placed()) {
      out["metrics"] = common::MetricsToJson(core::Evaluate(job, topo, placement.ranks), topo);
      core::Result<core::StepPrediction> p = core::PredictPlacement(job, topo, placement.ranks);
      if (p.ok()) out["predicted"] = common::PredictionToJson(p.value(), model_name);
    }
    PrintJsonWithCompactRanks(std::cout, out);
  } else {
    std::cout << "job " << DescribeJob(job) << "\n"
              << "on " << topo.name() << ": " << topo.total_gpus() << " GPUs, " << topo.node_count()
              << " nodes, "
              << common::FormatMetric(100.0 * state.total_busy_gpus() / topo.total_gpus(), 1)
              << "% busy before the job\n\n";
    PrintPlacementReport(std::cout, job, state, placement, args.policy, !args.no_map);
    if (placement.placed()) {
      core::Result<core::StepPrediction> p = core::PredictPlacement(job, topo, placement.ranks);
      if (p.ok()) PrintPrediction(std::cout, p.value(), model_name);
    }
    if (args.ranks && placement.placed()) {
      std::cout << "\nrank  node            gpu\n";
      for (size_t r = 0; r < placement.ranks.size(); ++r) {
        std::printf("%-5zu %-15s %d\n", r, topo.node(placement.ranks[r].node).name.c_str(),
                    placement.ranks[r].gpu);
      }
    }
  }
  switch (placement.outcome) {
    case core::PlaceOutcome::kPlaced:
      return kExitOk;
    case core::PlaceOutcome::kBusy:
      return kExitBusy;
    case core::PlaceOutcome::kInfeasible:
      return kExitInfeasible;
  }
  return kExitError;
}

}  // namespace

void RegisterPlace(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlaceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "place",
      "Place one job offline and print its rank map and metrics.\n\n"
      "Exit status: 0 placed, 2 busy (fits the cluster but not its free capacity now),\n"
      "3 infeasible (can never fit as asked), 1 bad input.\n\n"
      "Examples:\n"
      "  topo place --generate cm384-166k --fill 60 --job moe.json\n"
      "  topo place --topology topology.conf --gpus-per-node 4 --job job.json --json\n"
      "  echo '{\"gpus\": 64, \"parallelism\": {\"tp\": 8, \"pp\": 2}}' | topo place --generate "
      "tiny --job -");
  AddTopologyFlags(*cmd, &args->source);
  cmd->add_option("--fill", args->fill, "Pre-fill the cluster to PCT % with small jobs (0-100)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--seed", args->seed, "Seed of the pre-fill (default 1)");
  cmd->add_option("--job", args->job_file, "Job spec v1 JSON file, or - for standard input")
      ->required();
  cmd->add_option("--policy", args->policy, "Placement policy (default toposched)")
      ->check(CLI::IsMember(core::PlacerNames()));
  cmd->add_flag("--json", args->json, "Print the outcome, rank map and metrics as JSON");
  cmd->add_flag("--ranks", args->ranks, "Also list every rank's node and GPU");
  cmd->add_flag("--no-map", args->no_map, "Leave out the cluster map");
  cmd->add_option("--model", args->model,
                  "Model preset for the predicted step time (overrides the job's \"model\")")
      ->check(CLI::IsMember(core::ModelPresetNames()));
  cmd->callback([args, exit_code] { *exit_code = RunPlace(*args); });
}

}  // namespace topo::cli
