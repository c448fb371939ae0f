#pragma once
// Text views of placements for people: a compact cluster map and tables.

#include <string>

#include "topo/core/cluster_state.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/job.hpp"
#include "topo/core/placement.hpp"

namespace topo::common {

// One character per HBD, grouped by leaf (a space between leaves) and by the
// tier above the leaf (one block of lines each), for the domains the job
// touches:
//   0-9 a-z  the job's pipeline stage in that HBD (of its first rank there)
//   *        several of the job's stages share the HBD
//   .        free   +  partly used by other jobs   #  full   x  failed/down
// `state` is the cluster before the job. Lines wrap at `width` columns.
std::string RenderPlacementMap(const core::JobSpec& job, const core::ClusterState& state,
                               const core::Placement& placement, int width = 100);

// Where the job landed, one line per leaf: HBDs used, rank ranges and stages.
std::string RenderLeafSummary(const core::JobSpec& job, const core::Topology& topology,
                              const core::Placement& placement, int max_lines = 40);

// "0.93" or "-" for an absent metric.
std::string FormatMetric(const std::optional<double>& value, int decimals = 2);

}  // namespace topo::common
