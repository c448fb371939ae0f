#include <doctest/doctest.h>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

// 2 nodes of 4 GPUs per HBD, 2 HBDs per leaf, 2 leaves per pod, 2 pods.
Topology Small() { return MakeRegular({"node", "hbd", "leaf", "pod"}, 1, {2, 2, 2}, 2, 4); }

std::vector<GpuSlot> OnNodes(const std::vector<NodeId>& nodes, int per_node) {
  std::vector<GpuSlot> out;
  for (NodeId n : nodes) {
    for (int g = 0; g < per_node; ++g) out.push_back({n, g});
  }
  return out;
}

}  // namespace

TEST_CASE("metrics of a hand-checked placement") {
  Topology topo = Small();
  // tp 8 (two nodes), pp 2, dp 1 -> 16 GPUs on nodes 0,1 (hbd 0) and 4,5 (hbd 2, other leaf).
  JobSpec job = MakeJob(16, 8, 2);
  std::vector<GpuSlot> ranks = OnNodes({0, 1, 4, 5}, 4);
  PlacementMetrics m = Evaluate(job, topo, ranks);
  CHECK(m.tp_in_hbd.value() == 1.0);
  CHECK_FALSE(m.ep_in_hbd.has_value());  // no experts
  CHECK(m.leaves_spanned == 2);
  CHECK(m.min_leaves == 1);  // a leaf of 16 GPUs holds it
  CHECK(m.leaf_span_ratio.value() == 2.0);
  CHECK(m.pods_spanned == 1);
  CHECK(m.pod_span_ratio.value() == 1.0);
  // tp: 2 groups x 16 x hbd(1); pp: 8 groups x 2 x pod(16).
  CHECK(m.comm_cost == doctest::Approx(32 + 256));
  // Bound: pp groups of 2 fit a node: 8 x 2 x 1.
  CHECK(m.comm_cost_bound == doctest::Approx(32 + 16));
  CHECK(m.comm_cost_ratio.value() == doctest::Approx(288.0 / 48.0));
  CHECK(m.tier_histogram[static_cast<int>(GroupKind::kPp)][3] == 8);
  CHECK(m.tier_histogram[static_cast<int>(GroupKind::kTp)][1] == 2);
  CHECK(m.required_met);
}

TEST_CASE("a TP group across HBDs breaks the required constraint") {
  Topology topo = Small();
  JobSpec job = MakeJob(8, 8);
  std::vector<GpuSlot> ranks = OnNodes({1, 2}, 4);  // hbd 0 and hbd 1
  PlacementMetrics m = Evaluate(job, topo, ranks);
  CHECK(m.tp_in_hbd.value() == 0.0);
  CHECK_FALSE(m.required_met);
  CHECK(m.tier_histogram[static_cast<int>(GroupKind::kTp)][2] == 1);
}

TEST_CASE("ep_in_hbd counts EP blocks of tp x cp x ep ranks") {
  Topology topo = Small();
  JobSpec job = MakeJob(16, 2, 1, 4);  // tp2 ep4 dp8: EP blocks of 8
  std::vector<GpuSlot> good = OnNodes({0, 1, 2, 3}, 4);
  CHECK(Evaluate(job, topo, good).ep_in_hbd.value() == 1.0);
  std::vector<GpuSlot> split = OnNodes({0, 1, 3, 4}, 4);  // second block on hbd 1 + hbd 2
  PlacementMetrics m = Evaluate(job, topo, split);
  CHECK(m.ep_in_hbd.value() == 0.5);
  CHECK(m.tp_in_hbd.value() == 1.0);
}

TEST_CASE("minimum domains count whole HBD-bound blocks, largest first") {
  // HBDs of 3 nodes x 4 = 12 GPUs; an EP block of 8 leaves 4 GPUs unused.
  Topology topo = MakeRegular({"node", "hbd", "leaf", "pod"}, 1, {3, 2, 2}, 2, 4);
  JobSpec job = MakeJob(32, 2, 1, 4);  // blocks of 8, 4 blocks; a leaf holds 2 blocks
  CHECK(MinDomainsForJob(job, topo, topo.leaf_tier()) == 2);
  JobSpec dense = MakeJob(32, 2);  // blocks of 2: a leaf of 24 GPUs holds 12 blocks
  CHECK(MinDomainsForJob(dense, topo, topo.leaf_tier()) == 2);
  JobSpec fits = MakeJob(24, 2);
  CHECK(MinDomainsForJob(fits, topo, topo.leaf_tier()) == 1);
}
