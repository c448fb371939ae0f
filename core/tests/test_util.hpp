#pragma once
// Small topologies and jobs for the core tests.

#include <string>
#include <vector>

#include "topo/core/job.hpp"
#include "topo/core/topology.hpp"

namespace topo::core::testing {

// A regular tree: tiers innermost first (tiers[0] is the node tier),
// fanout[i] children per domain of tier i+1, `top` domains at the top tier.
inline Topology MakeRegular(std::vector<std::string> tiers, int hbd_tier, std::vector<int> fanout,
                            int top, int gpus) {
  TopologyBuilder b("test", tiers, hbd_tier);
  const int tier_count = static_cast<int>(tiers.size());
  int nodes = 0;
  int domains = 0;
  auto build = [&](auto&& self, int parent, int tier) -> void {
    const int n = tier == tier_count - 1 ? top : fanout[tier];
    for (int i = 0; i < n; ++i) {
      if (tier == 0) {
        b.AddNode("n" + std::to_string(nodes++), parent, gpus);
      } else {
        int h = b.AddDomain(tiers[tier] + std::to_string(domains++), tier, parent);
        self(self, h, tier - 1);
      }
    }
  };
  build(build, TopologyBuilder::kTop, tier_count - 1);
  Result<Topology> t = std::move(b).Build();
  return std::move(t).value();
}

inline JobSpec MakeJob(int gpus, int tp = 1, int pp = 1, int ep = 1, int cp = 1) {
  JobSpec job;
  job.gpus = gpus;
  job.parallelism.tp = tp;
  job.parallelism.pp = pp;
  job.parallelism.ep = ep;
  job.parallelism.cp = cp;
  job.parallelism.dp = gpus / (tp * pp * cp);
  return job;
}

// `leaves` 8-GPU H100 nodes, each its own leaf, under one root whose fabric is
// 2:1 oversubscribed (10 GB/s per GPU, 5 us); scale-up and leaf links 100 GB/s.
inline Topology OversubscribedLeaves(int leaves) {
  TopologyBuilder b("leaves-" + std::to_string(leaves), {"node", "leaf"}, 0);
  b.SetTierLink(0, {100, 1});
  b.SetTierLink(1, {100, 1});
  b.SetTierLink(2, {10, 5, 2});
  for (int i = 0; i < leaves; ++i) {
    int leaf = b.AddDomain("l" + std::to_string(i), 1, TopologyBuilder::kTop);
    b.AddNode("n" + std::to_string(i), leaf, 8, "H100");
  }
  return std::move(b).Build().value();
}

}  // namespace topo::core::testing
