#pragma once
// Reporting for the workload-P placement benchmark: the table for people
// (plain text or Markdown), the goal summary, and the JSON record.

#include <cstdint>
#include <string>

#include <vector>
#include "machine.hpp"

#include <nlohmann/json.hpp>

#include "workload.hpp"

namespace topo::bench {

struct Params {
  std::vector<std::string> topologies;
  std::vector<int> fills;  // percent
  std::vector<int> sizes;  // GPUs
  std::vector<std::string> policies;
  // Timed placements per cell by job size. The whole default grid at 1,000
  // everywhere (32 fill states) takes about 65 s on one core of the 2-core dev
  // machine.
  int reps = 1000;        // gpus < kLargeFromGpus
  int reps_large = 1000;  // kLargeFromGpus <= gpus < kHugeFromGpus
  int reps_huge = 1000;   // gpus >= kHugeFromGpus
  uint64_t seed = 1;
  int fill_states = 32;
  bool quick = false;
  std::string out;
  std::string markdown;

  static constexpr int kLargeFromGpus = 1024;
  static constexpr int kHugeFromGpus = 16384;
  int RepsFor(int gpus) const {
    return gpus >= kHugeFromGpus ? reps_huge : gpus >= kLargeFromGpus ? reps_large : reps;
  }
};

struct FillInfo {
  int fill_pct = 0;
  std::vector<uint64_t> seeds;
  std::vector<double> busy_share;
  double fill_seconds = 0;  // building the states (not part of any latency)
};

struct TopologyInfo {
  std::string name;
  int gpus = 0;
  int nodes = 0;
  int hbd_gpus = 0;                // largest HBD
  std::vector<std::string> tiers;  // tier 0 .. root
  std::vector<FillInfo> fills;
};

struct Report {
  Params params;
  MachineInfo machine;
  std::vector<TopologyInfo> topologies;
  std::vector<CellResult> cells;
  double wall_seconds = 0;
};

std::string RenderText(const Report& report);
std::string RenderMarkdown(const Report& report);
nlohmann::json ToJson(const Report& report);

}  // namespace topo::bench
