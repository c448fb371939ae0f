#pragma once
// Placement quality, with the binding definitions of ../shared/BENCHMARKS.md.
//
//   tp_in_hbd / ep_in_hbd  share of TP groups / EP blocks whose GPUs all sit
//                          in one HBD (absent when the job has no such group
//                          of more than one rank)
//   leaf_span_ratio        leaves spanned / fewest leaves of the empty cluster
//                          that could hold the job (largest first, counting
//                          whole HBD-bound blocks); pod_span_ratio likewise
//                          for the tier above the leaf
//   comm_cost_ratio        sum over groups of weight(kind) x cost(widest tier
//                          spanned) / the same sum with every group in the
//                          innermost tier that could hold it

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

struct PlacementMetrics {
  std::optional<double> tp_in_hbd;
  std::optional<double> ep_in_hbd;
  std::optional<double> leaf_span_ratio;
  std::optional<double> pod_span_ratio;
  std::optional<double> comm_cost_ratio;
  int leaves_spanned = 0;
  int pods_spanned = 0;
  int min_leaves = 0;
  int min_pods = 0;
  double comm_cost = 0;
  double comm_cost_bound = 0;
  // tier_histogram[kind][tier]: groups of that kind whose widest span is that
  // tier (tiers 0 .. root).
  std::array<std::vector<int>, kGroupKindCount> tier_histogram;
  // Every required constraint of the job holds.
  bool required_met = true;
};

// REQUIRES: ValidateJobSpec(job).ok(); ranks.size() == job.gpus.
PlacementMetrics Evaluate(const JobSpec& job, const Topology& topology,
                          std::span<const GpuSlot> ranks);

// Fewest domains of `tier` on the empty cluster that could hold the job,
// counting in whole HBD-bound blocks of the job (TP groups, EP blocks).
int MinDomainsForJob(const JobSpec& job, const Topology& topology, int tier);

}  // namespace topo::core
