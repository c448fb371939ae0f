#pragma once
// Pre-fills a cluster the way workload P of ../shared/BENCHMARKS.md asks: a
// seeded mix of small jobs (1-64 GPUs) placed, then some released to leave
// holes, until the busy share is the target.

#include <cstdint>
#include <vector>

#include "topo/core/cluster_state.hpp"

namespace topo::core {

struct FillJob {
  std::vector<GpuSlot> gpus;
};

// Fills `state` to about `fraction` (0..1) busy GPUs with small jobs and
// returns them (so callers can release them). Deterministic for a seed.
std::vector<FillJob> FillCluster(ClusterState& state, double fraction, uint64_t seed);

}  // namespace topo::core
