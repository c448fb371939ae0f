#pragma once
// Reporting for the replay benchmark (workloads K, S and F of
// ../shared/BENCHMARKS.md): the table for people, the goal checks and the
// JSON record.

#include <optional>
#include <string>

#include <vector>
#include "machine.hpp"

#include <nlohmann/json.hpp>

#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"

namespace topo::bench {

struct Params {
  std::vector<std::string> workloads;  // K, K+F, S/meta-24k, S/meta-24k+F, ...
  std::vector<std::string> policies;
  int jobs = 100000;  // workload S
  double load = 0.9;
  uint64_t seed = 1;
  int large_gpus = 512;
  int ettr_gpus = 1024;
  int threads = 1;
  bool quick = false;
  std::string out;
  core::SyntheticOptions synthetic;
  core::KalosOptions kalos;
  core::FailureModel failures;  // the model of the +F workloads
  core::SimOptions sim;         // base options (seed, ticks, checkpoints)
};

struct WorkloadResult {
  std::string name;    // "K", "K+F", "S/meta-24k", ...
  std::string family;  // "K" or "S"
  bool failures = false;
  std::string topology;
  int capacity_gpus = 0;
  int nodes = 0;
  size_t jobs = 0;
  double offered_load = 0;
  double load_factor = 1;  // arrivals scaled by it (K); 1 for S (generated at the load)
  double build_seconds = 0;
  std::vector<core::SimReport> reports;  // one per policy, in Params order
};

struct Goal {
  std::string figure;
  std::string workload;
  std::string measured;  // printable
  std::string target;
  std::optional<bool> met;  // nullopt: not measurable in this run
};

struct Report {
  Params params;
  MachineInfo machine;
  std::vector<WorkloadResult> workloads;
  std::vector<Goal> goals;
  double wall_seconds = 0;
};

std::vector<Goal> EvaluateGoals(const Report& report);
std::string RenderText(const Report& report);
nlohmann::ordered_json ToJson(const Report& report);

}  // namespace topo::bench
