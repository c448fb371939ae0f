// FailurePolicy decisions and the replacement search, against hand-worked
// cases.

#include <doctest/doctest.h>

#include "test_util.hpp"
#include "topo/core/failure_policy.hpp"

using namespace topo::core;
using testing::MakeRegular;
using Action = FailurePolicy::Decision::Action;

TEST_CASE("failure policy: backoff doubles from the initial wait up to the cap") {
  FailurePolicy p(4, 10 * kSecond, 60 * kSecond);
  CHECK(p.Backoff(0) == 0);
  CHECK(p.Backoff(1) == 10 * kSecond);
  CHECK(p.Backoff(2) == 20 * kSecond);
  CHECK(p.Backoff(3) == 40 * kSecond);
  CHECK(p.Backoff(4) == 60 * kSecond);
  CHECK(p.Backoff(40) == 60 * kSecond);
  CHECK(FailurePolicy(4, 0, kMinute).Backoff(3) == 0);
  CHECK(FailurePolicy(4, kMinute, kSecond).Backoff(5) == kMinute);  // cap below initial
}

TEST_CASE("failure policy: application and launch failures") {
  FailurePolicy p(3, 10 * kSecond, kMinute);
  CHECK(p.max_app_failures() == 3);
  CHECK(p.AfterAppFailure(1) == FailurePolicy::Decision{Action::kBackoff, 10 * kSecond});
  CHECK(p.AfterAppFailure(2) == FailurePolicy::Decision{Action::kBackoff, 20 * kSecond});
  CHECK(p.AfterAppFailure(3) == FailurePolicy::Decision{Action::kFail, 0});
  // The first launch failure restarts at once, the second waits the first step.
  CHECK(p.AfterLaunchFailure(1, false) == FailurePolicy::Decision{Action::kRestartNow, 0});
  CHECK(p.AfterLaunchFailure(2, false) == FailurePolicy::Decision{Action::kBackoff, 10 * kSecond});
  CHECK(p.AfterLaunchFailure(1, true) == FailurePolicy::Decision{Action::kFail, 0});
  FailurePolicy no_wait(0, 0, 0);
  CHECK(no_wait.max_app_failures() == 1);
  CHECK(no_wait.AfterAppFailure(1).action == Action::kFail);
  CHECK(FailurePolicy(5, 0, 0).AfterAppFailure(2) ==
        FailurePolicy::Decision{Action::kRestartNow, 0});
}

TEST_CASE("replacements: nearest first, a spare before a free node at the same distance") {
  // n0 n1 | n2 n3 under spine 0; n4 n5 | n6 n7 under spine 1 (8 GPUs each).
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  ClusterState state(topo);
  std::vector<GpuSlot> ranks;
  for (NodeId n : {0, 4}) {
    for (int g = 0; g < 8; ++g) ranks.push_back({n, g});
  }
  REQUIRE(state.Allocate(ranks).ok());
  std::vector<JobId> owner(topo.node_count(), 0);

  SUBCASE("the free node in the same leaf") {
    Replacement r = FindReplacements(topo, state, ranks, {0}, {}, owner);
    CHECK(r.complete);
    for (int i = 0; i < 8; ++i) CHECK(r.ranks[i] == GpuSlot{1, i});
    for (int i = 8; i < 16; ++i) CHECK(r.ranks[i] == ranks[i]);
  }
  SUBCASE("the leaf full: the job's spare beats a lower free node in the spine") {
    REQUIRE(state.Allocate(std::vector<GpuSlot>{{1, 0}}).ok());  // n1 taken by another job
    for (int g = 0; g < 8; ++g) REQUIRE(state.Allocate(std::vector<GpuSlot>{{3, g}}).ok());
    owner[3] = 9;  // n3 is this job's spare (held, all busy)
    Replacement r = FindReplacements(topo, state, ranks, {0}, std::vector<NodeId>{3}, owner);
    CHECK(r.complete);
    CHECK(r.ranks[0] == GpuSlot{3, 0});
    CHECK(r.spares_left.empty());
    // Without the spare: n2, the free node in the same spine.
    owner[3] = 0;
    Replacement free = FindReplacements(topo, state, ranks, {0}, {}, owner);
    CHECK(free.ranks[0] == GpuSlot{2, 0});
  }
  SUBCASE("a degraded GPU disqualifies a node that must take 8 ranks") {
    state.SetGpuHealth(1, 5, GpuHealth::kDegraded);
    Replacement r = FindReplacements(topo, state, ranks, {0}, {}, owner);
    CHECK(r.ranks[0] == GpuSlot{2, 0});
  }
  SUBCASE("nothing free: incomplete, spares kept") {
    for (NodeId n : {1, 2, 3, 5, 6, 7}) state.SetNodeState(n, NodeState::kDrained);
    Replacement r = FindReplacements(topo, state, ranks, {0, 4}, {}, owner);
    CHECK_FALSE(r.complete);
  }
  SUBCASE("with node costs: the cheapest of the nearest, never a farther node for its price") {
    // n1 (same leaf) is dear, n2 and n3 (same spine) cost 5 and 2.
    std::vector<double> cost(topo.node_count(), 0.0);
    cost[1] = 100;
    cost[2] = 5;
    cost[3] = 2;
    Replacement r = FindReplacements(topo, state, ranks, {0}, {}, owner, cost);
    CHECK(r.ranks[0] == GpuSlot{1, 0});  // distance first
    REQUIRE(state.Allocate(std::vector<GpuSlot>{{1, 0}}).ok());
    r = FindReplacements(topo, state, ranks, {0}, {}, owner, cost);
    CHECK(r.ranks[0] == GpuSlot{3, 0});  // then price: n3 before the lower n2
  }
  SUBCASE("two nodes left, each gets its own nearest") {
    Replacement r = FindReplacements(topo, state, ranks, {0, 4}, {}, owner);
    CHECK(r.complete);
    CHECK(r.ranks[0].node == 1);
    CHECK(r.ranks[8].node == 5);
  }
}
