#pragma once
// Reference topologies of ../shared/BENCHMARKS.md, by name.

#include <string>
#include <string_view>
#include <vector>

#include "topo/core/topology.hpp"

namespace topo::core {

// "tiny", "meta-24k", "nvl72-64k", "cm384-166k", "mixed-10k" (a mixed
// cluster: HGX H100 nodes, GB200 NVL72 racks marked as HBDs, an A100 unit)
// and "h100-10k" (mixed-10k's homogeneous twin: the same tree and GPUs per
// domain, every node an 8-GPU HGX H100 node).
// (crux-847 is real data and is read from its CSV by common/.)
// gpus_per_node > 0 overrides the node size (of every node).
Result<Topology> GenerateTopology(std::string_view name, int gpus_per_node = 0);
std::vector<std::string> GeneratorNames();

}  // namespace topo::core
