// topo demo: the offline demonstration that `make demo` runs. Two reference
// clusters, filled part-way; a 4,096-GPU MoE job and a 16,384-GPU dense job
// placed by every policy; toposched's placement drawn as a map, every
// policy's metrics side by side; --json gives the same as one object.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "commands/report.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/render.hpp"
#include "topo/core/fill.hpp"
#include "topo/core/generators.hpp"

namespace topo::cli {

namespace {

struct DemoArgs {
  double fill = 20;
  uint64_t seed = 1;
  bool no_map = false;
  bool json = false;
};

core::JobSpec DemoJob(const char* name, int gpus, int tp, int ep, int pp) {
  core::JobSpec job;
  job.name = name;
  job.gpus = gpus;
  job.parallelism.tp = tp;
  job.parallelism.ep = ep;
  job.parallelism.pp = pp;
  job.parallelism.dp = gpus / (tp * pp);
  return job;
}

// One policy's placement of the case's job: its row, or (json) its object.
nlohmann::json CompareRow(const core::Topology& topo, const core::JobSpec& job,
                          const core::ClusterState& state, const std::string& policy, bool json) {
  auto placer = core::MakePlacer(policy);
  auto t0 = std::chrono::steady_clock::now();
  core::Placement p = placer->Place(job, state);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    nlohmann::json row = {{"policy", policy},
                          {"outcome", std::string(core::PlaceOutcomeName(p.outcome))},
                          {"time_ms", ms}};
    if (!p.placed()) {
      row["reason"] = p.reason;
      return row;
    }
    row["metrics"] = common::MetricsToJson(core::Evaluate(job, topo, p.ranks), topo);
    core::Result<core::ResolvedModel> model = core::ResolveModel(job);
    core::Result<core::StepPrediction> predicted = core::PredictPlacement(job, topo, p.ranks);
    if (model.ok() && predicted.ok()) {
      row["predicted"] = common::PredictionToJson(
          predicted.value(),
          model.value().spec.preset.empty() ? "custom" : model.value().spec.preset);
    }
    return row;
  }
  if (!p.placed()) {
    std::printf("  %-11s %-10s %s\n", policy.c_str(),
                std::string(core::PlaceOutcomeName(p.outcome)).c_str(), p.reason.c_str());
    return nullptr;
  }
  core::PlacementMetrics m = core::Evaluate(job, topo, p.ranks);
  using common::FormatMetric;
  std::printf("  %-11s %-10s %8.2f %9s %9s %6d/%-4d %5s %6d/%-4d %5s %9s %s\n", policy.c_str(),
              "placed", ms, FormatMetric(m.tp_in_hbd).c_str(), FormatMetric(m.ep_in_hbd).c_str(),
              m.leaves_spanned, m.min_leaves, FormatMetric(m.leaf_span_ratio).c_str(),
              m.pods_spanned, m.min_pods, FormatMetric(m.pod_span_ratio).c_str(),
              FormatMetric(m.comm_cost_ratio).c_str(), m.required_met ? "met" : "VIOLATED");
  return nullptr;
}

int RunDemo(const DemoArgs& args) {
  if (!args.json) {
    std::printf(
        "toposched offline demo: two reference clusters pre-filled to %.0f %% with small jobs;\n"
        "each big job is placed by toposched and by the two baselines on the same state.\n",
        args.fill);
  }
  struct Case {
    const char* topology;
    core::JobSpec job;
    const char* note;
  };
  core::JobSpec moe = DemoJob("moe-4k", 4096, 8, 8, 4);
  core::JobSpec moe_hgx = moe;
  // An EP block of 64 GPUs cannot sit inside an 8-GPU HGX node (nor a
  // 16-GPU rack); on such a cluster the demo asks for it inside a pod.
  moe_hgx.constraints[static_cast<int>(core::GroupKind::kEp)] = {core::Strength::kPreferred, "pod"};
  core::JobSpec dense = DemoJob("dense-16k", 16384, 8, 1, 16);
  std::vector<Case> cases = {
      {"meta-24k", moe_hgx,
       "64-GPU EP blocks (TP 8 x EP 8) cannot fit an 8-GPU HBD, so EP is only preferred "
       "inside a pod here"},
      {"meta-24k", dense, ""},
      {"nvl72-64k", moe, "EP blocks of 64 GPUs each inside one NVL72 rack (required)"},
      {"nvl72-64k", dense, ""},
  };
  nlohmann::json out = {
      {"fill_percent", args.fill}, {"seed", args.seed}, {"cases", nlohmann::json::array()}};
  for (const Case& c : cases) {
    core::Result<core::Topology> topo_or = core::GenerateTopology(c.topology);
    if (!topo_or.ok()) return Fail(topo_or.message());
    const core::Topology& topo = topo_or.value();
    core::ClusterState state(topo);
    core::FillCluster(state, args.fill / 100.0, args.seed);
    if (args.json) {
      nlohmann::json one = {
          {"topology", c.topology},
          {"gpus", topo.total_gpus()},
          {"busy_fraction", static_cast<double>(state.total_busy_gpus()) / topo.total_gpus()},
          {"job", common::JobSpecToJson(c.job)},
          {"note", c.note},
          {"policies", nlohmann::json::array()}};
      for (const std::string& policy : core::PlacerNames()) {
        one["policies"].push_back(CompareRow(topo, c.job, state, policy, true));
      }
      out["cases"].push_back(std::move(one));
      continue;
    }
    std::printf("\n==== %s (%d GPUs, %.1f %% busy): %s\n", c.topology, topo.total_gpus(),
                100.0 * state.total_busy_gpus() / topo.total_gpus(), DescribeJob(c.job).c_str());
    if (*c.note) std::printf("     %s\n", c.note);
    core::Placement p = core::MakePlacer("toposched")->Place(c.job, state);
    std::cout << "\n";
    PrintPlacementReport(std::cout, c.job, state, p, "toposched", !args.no_map);
    std::printf("\n  %-11s %-10s %8s %9s %9s %11s %5s %11s %5s %9s %s\n", "POLICY", "OUTCOME",
                "TIME ms", "TP_IN_HBD", "EP_IN_HBD", "LEAVES/MIN", "RATIO", "PODS/MIN", "RATIO",
                "COMM_COST", "REQUIRED");
    for (const std::string& policy : core::PlacerNames()) {
      CompareRow(topo, c.job, state, policy, false);
    }
  }
  if (args.json) {
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::printf(
      "\nReproduce one placement: topo place --generate nvl72-64k --fill %.0f --seed %llu "
      "--job JOB.json\n",
      args.fill, static_cast<unsigned long long>(args.seed));
  return kExitOk;
}

}  // namespace

void RegisterDemo(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Offline demonstration: big gang jobs on reference clusters, all policies");
  cmd->add_option("--fill", args->fill, "Pre-fill PCT % of each cluster (default 20)")
      ->check(CLI::Range(0.0, 95.0));
  cmd->add_option("--seed", args->seed, "Seed of the pre-fill (default 1)");
  cmd->add_flag("--no-map", args->no_map, "Leave out the cluster maps");
  cmd->add_flag("--json", args->json,
                "Print every case as JSON: the job, and per policy its outcome, time, metrics "
                "and predicted step (no maps)");
  cmd->callback([args, exit_code] { *exit_code = RunDemo(*args); });
}

}  // namespace topo::cli
