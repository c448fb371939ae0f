#include "topo/core/fill.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "topo/core/rng.hpp"

namespace topo::core {

namespace {

// Job sizes 1..64, log-uniform, so small jobs dominate as in real clusters.
int SmallJobSize(Rng& rng) {
  double x = rng.Uniform() * std::log(64.0);
  return std::clamp(static_cast<int>(std::exp(x) + 0.5), 1, 64);
}

}  // namespace

std::vector<FillJob> FillCluster(ClusterState& state, double fraction, uint64_t seed) {
  const Topology& topo = state.topology();
  Rng rng(seed);
  std::vector<FillJob> jobs;
  const int total = topo.total_gpus();
  const int target = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * total));
  if (target == 0) return jobs;
  // Overshoot, then release random jobs so the busy GPUs are not one block.
  const int overshoot = target + std::min(total / 10, (total - target) / 2);
  int busy = state.total_busy_gpus();
  int stalls = 0;
  while (busy < overshoot && stalls < 64) {
    int size = std::min(SmallJobSize(rng), overshoot - busy);
    // Contiguous free GPUs from a random node onwards, as a packing
    // scheduler would leave them.
    NodeId start = static_cast<NodeId>(rng.Below(topo.node_count()));
    FillJob job;
    for (int step = 0; step < topo.node_count() && static_cast<int>(job.gpus.size()) < size;
         ++step) {
      NodeId n = (start + step) % topo.node_count();
      uint64_t free = state.usable_free_mask(n);
      while (free != 0 && static_cast<int>(job.gpus.size()) < size) {
        int g = std::countr_zero(free);
        free &= free - 1;
        job.gpus.push_back(GpuSlot{n, g});
      }
    }
    if (job.gpus.empty() || !state.Allocate(job.gpus).ok()) {
      ++stalls;
      continue;
    }
    busy += static_cast<int>(job.gpus.size());
    jobs.push_back(std::move(job));
  }
  while (busy > target && !jobs.empty()) {
    size_t victim = rng.Below(jobs.size());
    int size = static_cast<int>(jobs[victim].gpus.size());
    if (busy - size < target - 64 && size > 1) {
      // Shrinking below the target by a lot: try a smaller job next.
      size_t alt = rng.Below(jobs.size());
      if (jobs[alt].gpus.size() < jobs[victim].gpus.size()) victim = alt;
      size = static_cast<int>(jobs[victim].gpus.size());
    }
    (void)state.Release(jobs[victim].gpus);
    busy -= size;
    jobs[victim] = std::move(jobs.back());
    jobs.pop_back();
  }
  return jobs;
}

}  // namespace topo::core
