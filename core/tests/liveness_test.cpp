// LivenessTracker against hand-worked deadlines, and the core's heartbeat
// path that keeps its deadlines in it.

#include <doctest/doctest.h>

#include "test_util.hpp"
#include "topo/core/liveness.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;
using Expiry = LivenessTracker::Expiry;

TEST_CASE("liveness: suspect, then down, each reported once") {
  LivenessTracker t;
  CHECK(t.NextDeadline() == kNever);
  CHECK(t.last_heard(3) == -1);
  t.Heard(3, 1000);
  t.Watch(3, {4000, 11000});
  CHECK(t.NextDeadline() == 4000);
  CHECK(t.Expire(3999).empty());
  CHECK(t.Expire(4000) == std::vector<Expiry>{{3, Liveness::kSuspect, 1000}});
  CHECK(t.Expire(5000).empty());  // reported once
  CHECK(t.NextDeadline() == 11000);
  CHECK(t.Expire(11000) == std::vector<Expiry>{{3, Liveness::kDown, 1000}});
  CHECK(t.NextDeadline() == kNever);
  CHECK(t.deadlines(3) == LivenessTracker::Deadlines{});
  CHECK(t.Expire(kNever - 1).empty());
}

TEST_CASE("liveness: a node found late is down only, and nodes come out by node") {
  LivenessTracker t;
  t.Heard(9, 0);
  t.Watch(9, {3000, 10000});
  t.Heard(2, 500);
  t.Watch(2, {kNever, 2000});
  t.Heard(5, 0);
  t.Watch(5, {3000, 10000});
  // One check long after: 9 and 5 skip their suspect step; 2 was due first
  // but the answer is by node.
  CHECK(t.Expire(20000) == std::vector<Expiry>{{2, Liveness::kDown, 500},
                                               {5, Liveness::kDown, 0},
                                               {9, Liveness::kDown, 0}});
  CHECK(t.NextDeadline() == kNever);
}

TEST_CASE("liveness: watching again replaces the deadlines, forgetting drops them") {
  LivenessTracker t;
  t.Heard(0, 0);
  t.Watch(0, {3000, 10000});
  t.Heard(0, 2500);
  t.Watch(0, {5500, 12500});  // a heartbeat moved both
  CHECK(t.Expire(4000).empty());
  CHECK(t.NextDeadline() == 5500);
  t.Watch(0, {kNever, 12500});  // not up any more: down only
  CHECK(t.Expire(6000).empty());
  t.Forget(0);
  CHECK(t.NextDeadline() == kNever);
  CHECK(t.Expire(20000).empty());
  CHECK(t.last_heard(0) == 2500);
}

TEST_CASE("liveness: the core's heartbeat deadlines follow the node's state") {
  // One node, heartbeats required: suspect at 3 s of silence, down at 10 s
  // (the config's defaults), drained nodes go down but are never suspect,
  // and a restored core keeps the same deadlines.
  Topology topo = testing::MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 1, 8);
  SchedulerConfig config;
  REQUIRE(config.heartbeats_required);
  SchedulerCore core(topo, config);
  core.Step(NodeStateRequested{0, NodeState::kUp, "registered"}, 1000);
  core.Step(NodeStateRequested{1, NodeState::kUp, "registered"}, 1000);
  core.Step(NodeStateRequested{1, NodeState::kDrained, "maintenance"}, 1000);
  CHECK(core.NextWakeup() == 4000);
  core.Step(Tick{}, 4000);
  CHECK(core.cluster().node_state(0) == NodeState::kSuspect);
  CHECK(core.cluster().node_state(1) == NodeState::kDrained);
  CHECK(core.NextWakeup() == 11000);
  core.Step(Heartbeat{0}, 6000);  // back up; its deadlines count from now
  CHECK(core.cluster().node_state(0) == NodeState::kUp);
  CHECK(core.NextWakeup() == 9000);

  SchedulerCore restored(topo, config);
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  CHECK(restored.NextWakeup() == 9000);
  for (SchedulerCore* c : {&core, &restored}) {
    c->Step(Tick{}, 11000);
    CHECK(c->cluster().node_state(0) == NodeState::kSuspect);
    CHECK(c->cluster().node_state(1) == NodeState::kDown);
    CHECK(c->NextWakeup() == 16000);
  }
  CHECK(restored.Snapshot() == core.Snapshot());
}
