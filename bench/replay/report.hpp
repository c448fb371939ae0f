#pragma once
// Reporting for the replay benchmark (workloads K, S and F of
// ../shared/BENCHMARKS.md): the table for people, the goal checks and the
// JSON record.

#include <optional>
#include <string>
#include <utility>

#include <vector>
#include "machine.hpp"

#include <nlohmann/json.hpp>

#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"
#include "topo/core/status.hpp"

namespace topo::bench {

// Workload M's homogeneous twin topology (core generators): "M/h100-10k" is
// M's jobs without their GPU types on it.
inline constexpr const char* kMixedTwin = "h100-10k";

struct Params {
  std::vector<std::string> workloads;  // K, K+F, S/meta-24k, S/meta-24k+F, ...
  std::vector<std::string> policies;
  int jobs = 100000;  // workload S
  double load = 0.9;
  uint64_t seed = 1;            // the first of seeds: the tables and sensitivity
  std::vector<uint64_t> seeds;  // every seed; the base workloads run at each
  int large_gpus = 512;
  int ettr_gpus = 1024;
  int threads = 1;
  bool quick = false;
  std::string out;
  core::SyntheticOptions synthetic;
  core::KalosOptions kalos;
  core::MixedOptions mixed;     // workload M (its load is `load`)
  int change_jobs = 10000;      // workload M+T
  core::FailureModel failures;  // the model of the +F workloads
  core::SimOptions sim;         // base options (seed, ticks, checkpoints)
};

struct WorkloadResult {
  std::string name;    // "K", "K+F", "S/meta-24k", ...
  std::string family;  // "K", "S", "M" (M and M/h100-10k) or "T" (M+T, M+T/static)
  bool failures = false;
  std::string topology;
  int capacity_gpus = 0;
  int nodes = 0;
  size_t jobs = 0;
  double offered_load = 0;
  double load_factor = 1;  // arrivals scaled by it (K); 1 for S (generated at the load)
  uint64_t seed = 1;
  double build_seconds = 0;
  std::vector<core::SimReport> reports;  // one per policy, in Params order
};

struct Goal {
  Goal() = default;
  Goal(std::string f, std::string w, std::string m, std::string t, std::optional<bool> ok)
      : figure(std::move(f)),
        workload(std::move(w)),
        measured(std::move(m)),
        target(std::move(t)),
        met(ok) {}
  std::string figure;
  std::string workload;
  std::string measured;  // printable
  std::string target;
  std::optional<bool> met;  // nullopt: not measurable in this run
  // The number the goal is about (a ratio, points, a percentage), for the
  // summary over seeds: printed with `decimals` and `unit`.
  std::optional<double> value;
  std::string unit;
  int decimals = 2;
};

// One goal over every seed of a multi-seed run.
struct GoalAcrossSeeds {
  Goal goal;  // figure, workload, target and the value's unit
  int seeds = 0;
  int met = 0;       // seeds whose run met the goal
  int measured = 0;  // seeds whose run could measure it
  std::optional<double> mean, min, max;
};

struct Report {
  Params params;
  MachineInfo machine;
  std::vector<WorkloadResult> workloads;
  std::vector<Goal> goals;                    // of the first seed
  std::vector<GoalAcrossSeeds> across_seeds;  // empty with one seed
  double wall_seconds = 0;
};

// The goals of the first seed's workloads.
std::vector<Goal> EvaluateGoals(const Report& report);
// Every goal of the workloads run at more than one seed, over those seeds, in
// the order of EvaluateGoals.
std::vector<GoalAcrossSeeds> EvaluateAcrossSeeds(const Report& report);
// "1-8" or "1,3,5" (ranges and single seeds, comma-separated) -> seeds, in
// the order given; an error names what is wrong.
core::Result<std::vector<uint64_t>> ParseSeeds(const std::string& text);
std::string RenderText(const Report& report);
nlohmann::ordered_json ToJson(const Report& report);

}  // namespace topo::bench
