// Launch: the per-node grouping of a rank map (GROUP_RANK, LOCAL_RANK, the
// GPUs in local-rank order) and master ports, by hand and as a property of
// every start the core makes over random layouts.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "test_util.hpp"
#include "topo/core/launch.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

SchedulerConfig Config() {
  SchedulerConfig c;
  c.heartbeats_required = false;
  c.default_checkpoint_interval = -1;
  return c;
}

JobRequest Request(const JobSpec& spec) {
  JobRequest r;
  r.spec = spec;
  r.time_limit = kHour;
  r.checkpoint_interval = -1;
  r.command = {"/bin/true"};
  r.process.launch = LaunchMode::kNode;
  r.process.env = {{"LANG", "C.UTF-8"}};
  r.process.working_dir = "/srv/run";
  r.process.output = "out-%j-%r.txt";
  r.unix_user = "ada";
  return r;
}

template <typename T>
std::vector<T> Only(const std::vector<Command>& cmds) {
  std::vector<T> out;
  for (const Command& c : cmds) {
    if (const T* t = std::get_if<T>(&c)) out.push_back(*t);
  }
  return out;
}

// Everything torchrun promises about its environment, checked on a launch
// made for rank map `ranks`.
void CheckContract(const Launch& l, const std::vector<GpuSlot>& ranks) {
  REQUIRE(l.world_size == static_cast<int>(ranks.size()));
  std::vector<int> seen(ranks.size(), 0);
  std::set<NodeId> nodes;
  for (size_t g = 0; g < l.nodes.size(); ++g) {
    const NodeLaunch& n = l.nodes[g];
    CHECK(n.group_rank == static_cast<int>(g));  // 0..N-1, once each
    CHECK(nodes.insert(n.node).second);          // one entry per node
    REQUIRE(n.ranks.size() == n.gpus.size());
    CHECK(std::is_sorted(n.ranks.begin(), n.ranks.end()));
    std::set<int> gpus(n.gpus.begin(), n.gpus.end());
    CHECK(gpus.size() == n.gpus.size());
    for (size_t local = 0; local < n.ranks.size(); ++local) {
      const int r = n.ranks[local];
      REQUIRE(r >= 0);
      REQUIRE(r < l.world_size);
      ++seen[r];
      // LOCAL_RANK indexes the node's GPUs in local-rank order.
      CHECK(ranks[r].node == n.node);
      CHECK(ranks[r].gpu == n.gpus[local]);
    }
    if (g > 0) CHECK(l.nodes[g - 1].ranks.front() < n.ranks.front());
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  CHECK(l.master_node == ranks[0].node);
  CHECK(l.nodes.front().ranks.front() == 0);
  // RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK wherever every node
  // holds one contiguous block of equal size.
  const size_t k = l.nodes.front().ranks.size();
  bool blocks = true;
  for (const NodeLaunch& n : l.nodes) {
    blocks = blocks && n.ranks.size() == k && n.ranks.back() - n.ranks.front() + 1 == int(k);
  }
  if (blocks) {
    for (const NodeLaunch& n : l.nodes) {
      for (size_t local = 0; local < k; ++local) {
        CHECK(n.ranks[local] == n.group_rank * static_cast<int>(k) + static_cast<int>(local));
      }
    }
  }
}

}  // namespace

TEST_CASE("GroupByNode numbers nodes by their lowest rank and keeps local-rank order") {
  // Rank 0 on n1, rank 1 on n0, rank 2 on n1, rank 3 on n0.
  const std::vector<GpuSlot> ranks = {{1, 5}, {0, 3}, {1, 2}, {0, 7}};
  const std::vector<NodeLaunch> nodes = GroupByNode(ranks);
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0] == NodeLaunch{1, 0, {0, 2}, {5, 2}});
  CHECK(nodes[1] == NodeLaunch{0, 1, {1, 3}, {3, 7}});
  CHECK(GroupByNode({}).empty());
}

TEST_CASE("master ports rotate and are never handed out twice on a node while held") {
  MasterPorts ports(2, PortRange{30000, 4});
  CHECK(ports.Take(0, 1) == 30000);
  CHECK(ports.Take(0, 2) == 30001);
  CHECK(ports.Take(1, 3) == 30002);  // one rotation for every node
  ports.Release(0, 1);
  // The next job does not reuse the port job 1 just gave back.
  CHECK(ports.Take(0, 4) == 30003);
  CHECK(ports.Take(0, 5) == 30000);
  CHECK(ports.Take(0, 6) == 30002);  // held on node 1 only
  CHECK(ports.Take(0, 7) == -1);     // all four held on node 0
  CHECK(ports.held(0) == 4);
  ports.Release(0, 2);
  CHECK(ports.Take(0, 7) == 30001);
  CHECK(ports.Take(1, 8) == 30003);  // 30002 is held on node 1
  CHECK(ports.Take(-1, 9) == -1);
  CHECK(ports.Take(2, 9) == -1);
}

TEST_CASE("tp 4 x pp 2 x dp 2 on 8-GPU nodes: distinct GROUP_RANK, torchrun's identity holds") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerCore core(topo, Config());
  const auto starts = Only<StartJob>(core.Step(JobSubmitted{1, Request(MakeJob(16, 4, 2))}, 0));
  REQUIRE(starts.size() == 1);
  const Launch& l = starts[0].launch;
  CheckContract(l, starts[0].ranks);
  REQUIRE(l.nodes.size() == 2);
  CHECK(l.nodes[0].ranks == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(l.nodes[1].ranks == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  // Carried from the request.
  CHECK(l.command == std::vector<std::string>{"/bin/true"});
  CHECK(l.process == Request(JobSpec{}).process);
  CHECK(l.process.launch == LaunchMode::kNode);
  CHECK(l.unix_user == "ada");
  CHECK(l.parallelism.tp == 4);
  CHECK(l.master_port >= Config().master_ports.first);
}

TEST_CASE("a restart gets a fresh master port and the launch of its new nodes") {
  const Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {4, 2}, 1, 8);
  SchedulerConfig config = Config();
  SchedulerCore core(topo, config);
  JobRequest r = Request(MakeJob(16, 8));
  r.spec.spares = 1;
  const auto starts = Only<StartJob>(core.Step(JobSubmitted{1, r}, 0));
  REQUIRE(starts.size() == 1);
  const int first_port = starts[0].launch.master_port;
  core.Step(CheckpointCompleted{1, 50}, kMinute);
  const NodeId lost = starts[0].ranks[0].node;
  const auto restarts = Only<RestartJob>(
      core.Step(NodeStateRequested{lost, NodeState::kDown, "agent lost"}, 2 * kMinute));
  REQUIRE(restarts.size() == 1);
  const Launch& l = restarts[0].launch;
  CheckContract(l, restarts[0].ranks);
  CHECK(l.restart_count == 1);
  CHECK(l.checkpoint_step == 50);
  CHECK(l.master_port != first_port);
  for (const NodeLaunch& n : l.nodes) CHECK(n.node != lost);
}

TEST_CASE("property: every start over random layouts keeps torchrun's contract") {
  Rng rng(20261123);
  for (int trial = 0; trial < 60; ++trial) {
    const int gpus_per_node = rng.Below(2) == 0 ? 4 : 8;
    const int hbd_nodes = 1 + static_cast<int>(rng.Below(3));
    const Topology topo =
        MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {hbd_nodes, 2, 2}, 2, gpus_per_node);
    SchedulerCore core(topo, Config());
    // Fill some GPUs first so placements are not all aligned.
    JobId id = 1;
    for (int k = static_cast<int>(rng.Below(4)); k > 0; --k) {
      core.Step(JobSubmitted{id++, Request(MakeJob(1 + static_cast<int>(rng.Below(3))))}, 0);
    }
    const int tp = 1 << rng.Below(gpus_per_node == 8 ? 4 : 3);
    const int pp = 1 + static_cast<int>(rng.Below(3));
    const int dp = 1 + static_cast<int>(rng.Below(3));
    const int gpus = tp * pp * dp;
    if (gpus > topo.total_gpus() / 2) continue;
    JobSpec spec = MakeJob(gpus, tp, pp);
    CAPTURE(trial);
    CAPTURE(tp);
    CAPTURE(pp);
    CAPTURE(dp);
    const auto starts = Only<StartJob>(core.Step(JobSubmitted{id, Request(spec)}, kMinute));
    for (const StartJob& s : starts) {
      if (s.id == id) CheckContract(s.launch, s.ranks);
    }
  }
}
