// A topology change while jobs run: DiffTopologies (hand-computed) and
// SchedulerCore::SnapshotOnto, checked against a core that never changed.

#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>

#include "test_util.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/topology_diff.hpp"

namespace topo::core {
namespace {

// Leaves of 8-GPU nodes: `leaves` lists each leaf's node names.
Topology Leaves(const std::vector<std::vector<std::string>>& leaves, int resized_gpus = 8,
                const std::string& resized = "", const std::string& h100_to = "H100") {
  TopologyBuilder b("leaves", {"node", "leaf", "spine"}, 0);
  const int spine = b.AddDomain("spine0", 2, TopologyBuilder::kTop);
  for (size_t l = 0; l < leaves.size(); ++l) {
    const int leaf = b.AddDomain("leaf" + std::to_string(l), 1, spine);
    for (const std::string& n : leaves[l]) {
      b.AddNode(n, leaf, n == resized ? resized_gpus : 8, n == "n1" ? h100_to : "H100");
    }
  }
  return std::move(b).Build().value();
}

SchedulerConfig Config() {
  SchedulerConfig c = SchedulerConfig::ForStack("toposched").value();
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;
  return c;
}

JobRequest Request(int gpus, const std::string& tenant = "default") {
  JobRequest r;
  r.spec = testing::MakeJob(gpus, 8);
  r.tenant = tenant;
  r.time_limit = 10 * kHour;
  r.checkpoint_interval = -1;
  return r;
}

// A step's starts and restarts with node names, so cores over two
// topologies compare.
std::string Starts(const Topology& t, const std::vector<Command>& cmds) {
  std::ostringstream o;
  for (const Command& c : cmds) {
    auto ranks = [&](JobId id, const std::vector<GpuSlot>& r) {
      o << id << ":";
      for (const GpuSlot& s : r) o << t.node(s.node).name << "/" << s.gpu << " ";
      o << "\n";
    };
    if (const auto* s = std::get_if<StartJob>(&c)) ranks(s->id, s->ranks);
    if (const auto* s = std::get_if<RestartJob>(&c)) ranks(s->id, s->ranks);
  }
  return o.str();
}

TEST_CASE("DiffTopologies: added, removed, moved, resized and changed nodes, by name") {
  const Topology a = Leaves({{"n0", "n1", "n2"}, {"n3", "n4"}});
  const Topology b = Leaves({{"n0", "n1", "n4"}, {"n3", "n5", "n2"}, {"n6"}}, 4, "n3", "GB200");
  const TopologyDiff d = DiffTopologies(a, b);
  CHECK(d.added == std::vector<std::string>{"n5", "n6"});
  CHECK(d.removed.empty());
  CHECK(d.moved == std::vector<std::string>{"n2", "n4"});
  CHECK(d.resized == std::vector<std::string>{"n3"});
  CHECK(d.changed == std::vector<std::string>{"n1"});
  CHECK(d.domains_added == 1);  // leaf2
  CHECK(d.domains_removed == 0);
  CHECK_FALSE(d.tiers_changed);
  CHECK(d.to_new[a.FindNode("n2")] == b.FindNode("n2"));
  CHECK(d.to_new[a.FindNode("n3")] == -1);
  CHECK(d.old_of[b.FindNode("n5")] == -1);
  CHECK(d.old_of[b.FindNode("n4")] == a.FindNode("n4"));
  CHECK(DiffTopologies(a, a).empty());
  const TopologyDiff back = DiffTopologies(b, a);
  CHECK(back.removed == std::vector<std::string>{"n5", "n6"});
  CHECK(back.domains_removed == 1);
}

TEST_CASE("SnapshotOnto: jobs, queue and usage carried, a new node comes up down") {
  const Topology before = Leaves({{"n0", "n1", "n2", "n3"}, {"n4", "n5", "n6", "n7"}});
  // A rack added (leaf2), n7 moved to it, n6 removed.
  const Topology after = Leaves({{"n0", "n1", "n2", "n3"}, {"n4", "n5"}, {"n7", "n8", "n9"}});
  SchedulerCore old_core(before, Config());
  // n6 is drained before it goes (what an admin does first).
  old_core.Step(NodeStateRequested{before.FindNode("n6"), NodeState::kDrained, "to be removed"}, 0);
  old_core.Step(JobSubmitted{1, Request(16, "a")}, 0);
  old_core.Step(JobSubmitted{2, Request(24, "b")}, kMinute);
  old_core.Step(JobSubmitted{3, Request(32, "a")}, 2 * kMinute);  // 16 GPUs free: waits
  REQUIRE(old_core.job(1)->state == JobState::kRunning);
  REQUIRE(old_core.job(2)->state == JobState::kRunning);
  REQUIRE(old_core.job(3)->state == JobState::kQueued);
  Result<std::string> onto = old_core.SnapshotOnto(after);
  REQUIRE_MESSAGE(onto.ok(), onto.message());
  SchedulerCore moved(after, Config());
  REQUIRE_MESSAGE(moved.Restore(onto.value()).ok(), "restore");
  for (JobId id : {1, 2, 3}) {
    CAPTURE(id);
    const JobRecord& was = *old_core.job(id);
    const JobRecord& now = *moved.job(id);
    CHECK(now.state == was.state);
    CHECK(now.request.tenant == was.request.tenant);
    REQUIRE(now.ranks.size() == was.ranks.size());
    for (size_t r = 0; r < now.ranks.size(); ++r) {
      CHECK(after.node(now.ranks[r].node).name == before.node(was.ranks[r].node).name);
      CHECK(now.ranks[r].gpu == was.ranks[r].gpu);
    }
  }
  CHECK(moved.TenantUsage("a") == old_core.TenantUsage("a"));
  CHECK(moved.TenantUsage("b") == old_core.TenantUsage("b"));
  for (const char* added : {"n8", "n9"}) {
    CHECK(moved.cluster().node_state(after.FindNode(added)) == NodeState::kDown);
  }
  CHECK(moved.cluster().total_busy_gpus() == old_core.cluster().total_busy_gpus());

  // The same further events give the same starts, by node name, while the
  // new nodes stay down (the old core never had them) and n6 stays drained.
  const std::string a = Starts(before, old_core.Step(JobFinished{1, 0}, 4 * kMinute));
  const std::string b = Starts(after, moved.Step(JobFinished{1, 0}, 4 * kMinute));
  CHECK_FALSE(a.empty());  // job 3 starts
  CHECK(a == b);
  CHECK(moved.job(1)->state == JobState::kCompleted);
  CHECK(moved.job(3)->state == JobState::kRunning);
  old_core.Step(JobSubmitted{4, Request(8, "b")}, kHour);
  moved.Step(JobSubmitted{4, Request(8, "b")}, kHour);
  const std::string a2 = Starts(before, old_core.Step(JobFinished{2, 0}, 90 * kMinute));
  const std::string b2 = Starts(after, moved.Step(JobFinished{2, 0}, 90 * kMinute));
  CHECK_FALSE(a2.empty());  // job 4 starts
  CHECK(a2 == b2);
  // The added nodes take work once up.
  moved.Step(NodeStateRequested{after.FindNode("n8"), NodeState::kUp, "registered"}, 2 * kHour);
  moved.Step(NodeStateRequested{after.FindNode("n9"), NodeState::kUp, "registered"}, 2 * kHour);
  const int busy = moved.cluster().total_busy_gpus();
  moved.Step(JobSubmitted{5, Request(16, "a")}, 2 * kHour);
  CHECK(moved.cluster().total_busy_gpus() >= busy);
  for (NodeId n : {after.FindNode("n8"), after.FindNode("n9")}) {
    CHECK(moved.cluster().NodeAcceptsWork(n));
  }
}

TEST_CASE("SnapshotOnto refuses a change under a running job's node, naming both") {
  const Topology before = Leaves({{"n0", "n1"}});
  SchedulerCore core(before, Config());
  core.Step(JobSubmitted{7, Request(16)}, 0);
  REQUIRE(core.job(7)->state == JobState::kRunning);
  const Topology fewer = Leaves({{"n0"}});
  Result<std::string> r = core.SnapshotOnto(fewer);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kConflict);
  CHECK(r.message().find("job 7 on n1") != std::string::npos);
  const Topology resized = Leaves({{"n0", "n1"}}, 4, "n1");
  CHECK_FALSE(core.SnapshotOnto(resized).ok());
  // A change that keeps its nodes is fine.
  const Topology more = Leaves({{"n0", "n1"}, {"n2"}});
  CHECK(core.SnapshotOnto(more).ok());
}

}  // namespace
}  // namespace topo::core
