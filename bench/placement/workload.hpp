#pragma once
// Workload P of ../shared/BENCHMARKS.md: one gang job placed on a cluster
// pre-filled by core::FillCluster, per topology x fill x job size x layout x
// policy. This header holds the grid's rules (layouts, fill seeds) and the
// measurement of one cell; reporting lives in report.hpp.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/topology.hpp"

namespace topo::bench {

// One parallelism layout of a job size. Layout rules (documented in the
// output too):
//   dense        TP 8; PP = min(16, gpus / 64) for gpus >= 128, else 1;
//                DP the rest. Default constraints (tp required in the HBD,
//                pp preferred in a leaf).
//   moe          TP 8 x EP 8; PP 4 for gpus >= 2048, else 1; DP the rest
//                (EP divides DP). Default constraints: the 64-GPU EP block
//                (tp x ep) is required in one HBD.
//   moe-ep-pref  moe with the EP constraint relaxed to preferred; only on
//                topologies whose HBD is smaller than the EP block.
// A layout that cannot be built for the size (EP 8 needs dp divisible by 8)
// is returned with possible == false and the reason.
struct Layout {
  std::string name;
  bool possible = true;
  std::string why_not;
  core::JobSpec job;
};

std::vector<Layout> LayoutsFor(int gpus, const core::Topology& topology);

// "tp8 ep8 pp4 dp128" (degrees > 1 only, tp always shown).
std::string DescribeParallelism(const core::Parallelism& p);

// Seed of fill state `index` of (topology, fill %), derived from the run's
// seed so that it does not depend on which other cells are selected.
uint64_t FillSeed(uint64_t seed, const std::string& topology, int fill_pct, int index);

struct FillStates {
  int fill_pct = 0;
  std::vector<core::ClusterState> states;
  std::vector<uint64_t> seeds;
  std::vector<double> busy_share;  // achieved busy GPUs / total per state
};

// Builds `count` states of the topology filled to fill_pct % (one state when
// fill_pct is 0: they would all be the empty cluster).
// REQUIRES: topology outlives the result.
FillStates MakeFillStates(const core::Topology& topology, int fill_pct, int count, uint64_t seed);

// A lower bound for leaf_span_ratio on a filled state rather than the
// empty cluster: the fewest leaves whose whole free nodes, counted in the
// job's HBD-bound blocks (EP block, else TP group, where required), could
// hold the job now, over core::MinDomainsForJob of the empty cluster.
// nullopt where the job does not fit that way or the topology has no leaf
// tier. Placements that break the required constraints (the baselines) can
// go below it.
std::optional<double> FilledLeafBound(const core::JobSpec& job, const core::ClusterState& state);

struct LatencyStats {
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  double mean_us = 0;
};

// Nearest-rank percentiles of the samples (microseconds).
LatencyStats Summarize(std::vector<double> samples_us);

struct CellResult {
  std::string topology;
  int fill_pct = 0;
  int gpus = 0;
  std::string layout;
  std::string parallelism;
  std::string policy;
  bool skipped = false;  // layout impossible for this size
  std::string skip_reason;

  int reps = 0;
  int placed = 0;
  int busy = 0;
  int infeasible = 0;
  LatencyStats latency;
  // Means over placed reps (absent when no rep placed or the metric does
  // not apply, e.g. ep_in_hbd without experts).
  std::optional<double> tp_in_hbd;
  std::optional<double> ep_in_hbd;
  std::optional<double> leaf_span_ratio;
  std::optional<double> pod_span_ratio;
  std::optional<double> comm_cost_ratio;
  std::optional<double> required_met;  // share of placed reps
  // Mean groups per widest tier spanned, [kind][tier 0 .. root], placed reps.
  std::array<std::vector<double>, core::kGroupKindCount> tier_histogram;
  // Reason of the first rep that was not placed, per outcome.
  std::string busy_reason;
  std::string infeasible_reason;
  // Timed reps whose answer differed from the untimed first answer on the
  // same state (placers promise determinism; anything but 0 is a bug).
  int nondeterministic = 0;
  // FilledLeafBound of the state of each placed rep, mean over placed reps
  // (so it pairs with leaf_span_ratio).
  std::optional<double> leaf_bound_now;
};

// Places `job` with `placer` on the fill states: first one untimed placement
// per state (evaluated with core::Evaluate for the metrics), then `reps`
// timed placements cycling over the states (rep i uses state i mod count),
// steady_clock around Placer::Place only. Metrics are weighted by the reps
// each state received.
CellResult RunCell(const core::Placer& placer, const core::JobSpec& job, const FillStates& fill,
                   int reps);

}  // namespace topo::bench
