// Allocations: GPUs, the node index and spares of running jobs.

#include <doctest/doctest.h>

#include "test_util.hpp"
#include "topo/core/allocations.hpp"

using namespace topo::core;
using testing::MakeRegular;

TEST_CASE("allocations: allocate and release ranks and spares") {
  const Topology topo = MakeRegular({"node", "leaf"}, 0, {4}, 2, 4);  // 8 nodes x 4
  Allocations a(topo);
  const std::vector<GpuSlot> ranks = {{2, 0}, {2, 1}, {0, 0}, {0, 1}};
  CHECK(a.Allocate(7, ranks, std::vector<NodeId>{5}) == 8);
  CHECK(a.cluster().total_busy_gpus() == 8);
  CHECK(a.cluster().busy_mask(5) == 0xF);
  CHECK(a.jobs_on(0) == std::vector<JobId>{7});
  CHECK(a.jobs_on(2) == std::vector<JobId>{7});
  CHECK(a.jobs_on(1).empty());
  CHECK(a.spare_owner(5) == 7);
  CHECK(a.occupied(5));
  CHECK_FALSE(a.occupied(1));
  CHECK(a.holders() == std::set<JobId>{7});
  CHECK(a.Allocate(8, std::vector<GpuSlot>{{0, 2}}, {}) == 1);
  CHECK(a.jobs_on(0) == std::vector<JobId>{7, 8});
  CHECK(a.Held(ranks, std::vector<NodeId>{5}).size() == 8);

  // Left: the ranks' nodes ascending, then the spares.
  CHECK(a.Release(7, ranks, std::vector<NodeId>{5}) == std::vector<NodeId>{0, 2, 5});
  CHECK(a.cluster().total_busy_gpus() == 1);
  CHECK(a.jobs_on(0) == std::vector<JobId>{8});
  CHECK(a.jobs_on(2).empty());
  CHECK(a.spare_owner(5) == 0);
  CHECK(a.holders() == std::set<JobId>{8});
  CHECK(a.SpareSlots(std::vector<NodeId>{3}) ==
        std::vector<GpuSlot>{{3, 0}, {3, 1}, {3, 2}, {3, 3}});
}

TEST_CASE("allocations: every allocation gets a fresh stamp, a released job none") {
  const Topology topo = MakeRegular({"node", "leaf"}, 0, {4}, 2, 4);
  Allocations a(topo);
  CHECK(a.stamp(7) == 0);
  a.Allocate(7, std::vector<GpuSlot>{{0, 0}}, {});
  a.Allocate(8, std::vector<GpuSlot>{{0, 1}}, {});
  const uint64_t first = a.stamp(7);
  CHECK(first != 0);
  CHECK(a.stamp(8) != first);
  // The same job on the same GPUs again is another allocation.
  a.Release(7, std::vector<GpuSlot>{{0, 0}}, {});
  CHECK(a.stamp(7) == 0);
  a.Allocate(7, std::vector<GpuSlot>{{0, 0}}, {});
  CHECK(a.stamp(7) != first);
  CHECK(a.stamp(7) != a.stamp(8));
}
