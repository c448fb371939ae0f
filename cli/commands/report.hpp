#pragma once
// The human report of one placement, shared by `topo place` and `topo demo`.

#include <ostream>
#include <string>

#include "topo/core/cluster_state.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/job.hpp"
#include "topo/core/placement.hpp"

namespace topo::cli {

// "leaf" -> "leaves", "hbd" -> "hbds" (one -> unchanged).
std::string Plural(const std::string& noun, size_t count);
std::string DescribeJob(const core::JobSpec& job);
std::string DescribeSpan(const core::Topology& topo, const core::Placement& placement);
std::string DescribeHistogram(const core::Topology& topo, const core::PlacementMetrics& m);

// Outcome line, map, per-leaf summary and metrics.
void PrintPlacementReport(std::ostream& out, const core::JobSpec& job,
                          const core::ClusterState& state, const core::Placement& placement,
                          std::string_view policy, bool show_map);

}  // namespace topo::cli
