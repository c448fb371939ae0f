// The simulated node (SimRunner, SimGpus) under the real AgentCore, as
// `topo-agent --simulate` runs it.

#include <doctest/doctest.h>

#include "harness.hpp"
#include "sim_runner.hpp"

using namespace topo;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

class RecordingHost final : public SimHost {
 public:
  void WakeAt(int64_t at_ms, int node_index) override { wakes.emplace_back(at_ms, node_index); }
  void Emit(nlohmann::json event) override { events.push_back(std::move(event)); }
  std::vector<nlohmann::json> Of(const std::string& ev) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : events) {
      if (e.value("ev", "") == ev) out.push_back(e);
    }
    return out;
  }
  std::vector<std::pair<int64_t, int>> wakes;
  std::vector<nlohmann::json> events;
};

// One simulated node: the real core over SimRunner and SimGpus.
struct SimNodeHarness {
  explicit SimNodeHarness(SimRunnerSettings s) : settings(s) {
    options.job_command = "(simulated)";
  }
  void Send(const proto::SchedulerMessage& m) { core.OnText(proto::WriteSchedulerMessage(m)); }
  void Register() {
    core.OnConnected();
    Send(proto::Registered{"s7", 200, {}, {}});
    link.Clear();
  }
  std::string name = "s7";
  SimRunnerSettings settings;
  FakeClock clock;
  RecordingHost host;
  FakeLink link;
  CaptureLog log;
  SimGpus gpus{name, 4, "GB200"};
  SimRunner runner{name, 3, settings, clock, host};
  AgentCoreOptions options;
  AgentCore core{name, options, runner, gpus, link, clock, log};
};

}  // namespace

TEST_CASE("SimGpus: inventory, injected faults, thermal and off-bus semantics") {
  SimGpus g("s1", 4, "GB200");
  REQUIRE(g.Inventory().count() == 4);
  CHECK(g.Inventory().gpus[3].uuid == "GPU-sim-s1-3");
  CHECK(g.Inventory().gpus[3].name == "GB200");
  CHECK(g.WaitFd() == -1);
  using K = gpu::HealthEventKind;
  CHECK_FALSE(g.Inject({K::kXid, 4, 79, 0}).ok());
  REQUIRE(g.Inject({K::kThermal, 1, 1, 0}).ok());
  REQUIRE(g.Inject({K::kThermal, 1, 1, 0}).ok());  // already on: nothing
  REQUIRE(g.Inject({K::kOffBus, 2, 0, 0}).ok());
  REQUIRE(g.Inject({K::kOffBus, 2, 0, 0}).ok());  // already lost: nothing
  REQUIRE(g.Inject({K::kXid, 1, 48, 0}).ok());
  REQUIRE(g.Inject({K::kThermal, 1, 0, 0}).ok());  // off, but an XID since: no cleared
  auto events = g.Poll(77);
  REQUIRE(events.size() == 4);
  CHECK(events[0].kind == K::kThermal);
  CHECK(events[0].on);
  CHECK(events[0].at == 77);
  CHECK(events[1].kind == K::kOffBus);
  CHECK(events[2].kind == K::kXid);
  CHECK(events[2].code == 48);
  CHECK(events[3].kind == K::kThermal);
  CHECK_FALSE(events[3].on);
  CHECK(g.Poll(78).empty());
  REQUIRE(g.Inject({K::kCleared, 1, 0, 0}).ok());
  REQUIRE(g.Inject({K::kThermal, 1, 1, 0}).ok());
  REQUIRE(g.Inject({K::kThermal, 1, 0, 0}).ok());
  events = g.Poll(79);
  REQUIRE(events.size() == 4);
  CHECK(events[3].kind == K::kCleared);
}

TEST_CASE("simulated node: a start runs, the exit command reports with the run's count") {
  SimNodeHarness n({1000, 0, 0});
  n.Register();
  proto::Start s = MakeStart(5, 2, {4, 5, 6, 7}, {0, 1, 2, 3});
  s.checkpoint_step = 40;
  n.Send(s);
  const auto starts = n.host.Of("start");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0]["node"] == "s7");
  CHECK(starts[0]["job"] == 5);
  CHECK(starts[0]["restart_count"] == 2);
  CHECK(starts[0]["checkpoint_step"] == 40);
  CHECK(starts[0]["ranks"] == 4);
  CHECK(starts[0]["group_rank"] == 1);
  CHECK(starts[0]["world_size"] == 16);
  CHECK(n.runner.Running().size() == 4);
  CHECK(n.log.Has("job 5 restart 2: started ranks 4,5,6,7"));

  CHECK_FALSE(n.runner.Exit(5, 3, 1).ok());    // not a rank here
  CHECK_FALSE(n.runner.Exit(6, 4, 1).ok());    // not a job here
  CHECK_FALSE(n.runner.Exit(5, 4, 300).ok());  // not an exit code
  REQUIRE(n.runner.Exit(5, 6, 17).ok());
  n.core.Tick();
  const auto exits = n.link.Of<proto::RankExited>();
  REQUIRE(exits.size() == 1);
  CHECK(exits[0] == proto::RankExited{5, 6, 2, 17, 0, true});
  CHECK(n.runner.Running().size() == 3);

  // A restart replaces the run; a stop ends it without reports.
  n.Send(MakeStart(5, 3, {4, 5}, {0, 1}));
  CHECK(n.host.Of("start").size() == 2);
  CHECK(n.runner.RestartCountOf("5") == 3);
  n.Send(proto::Stop{5, "cancelled"});
  CHECK(n.runner.Running().empty());
  CHECK(n.link.Of<proto::RankExited>().size() == 1);
}

TEST_CASE("simulated node: --run-ms ends every rank with 0, rank 0's node checkpoints on its own") {
  SimNodeHarness n({100, 1000, 5000});
  n.Register();
  n.Send(MakeStart(9, 0, {0, 1}, {0, 1}));
  // Wake-ups asked for: the checkpoint and the end.
  REQUIRE(n.host.wakes.size() == 2);
  CHECK(n.host.wakes[0].second == 3);
  n.clock.now += 1000;
  n.core.Tick();
  auto ckpts = n.link.Of<proto::CheckpointReport>();
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0] == proto::CheckpointReport{9, 10, proto::CheckpointTier::kPersistent});
  CHECK(n.host.Of("ckpt").size() == 1);
  n.clock.now += 4000;
  n.core.Tick();
  const auto exits = n.link.Of<proto::RankExited>();
  REQUIRE(exits.size() == 2);
  CHECK(exits[0] == proto::RankExited{9, 0, 0, 0, 0, true});
  CHECK(exits[1] == proto::RankExited{9, 1, 0, 0, 0, true});
  CHECK(n.host.Of("finished").size() == 1);
  CHECK(n.runner.Running().empty());
}

TEST_CASE(
    "simulated node: checkpoint requests, only rank 0's node reports, drains finish at once") {
  SimNodeHarness rank0({100, 0, 0});
  rank0.Register();
  rank0.Send(MakeStart(3, 0, {0, 1}, {0, 1}));
  rank0.clock.now += 250;
  rank0.Send(proto::CheckpointRequest{3, "asked"});
  auto ckpts = rank0.link.Of<proto::CheckpointReport>();
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0].step == 2);
  // A second request at the same time: the next step, never the same one.
  rank0.Send(proto::CheckpointRequest{3, "asked"});
  ckpts = rank0.link.Of<proto::CheckpointReport>();
  REQUIRE(ckpts.size() == 2);
  CHECK(ckpts[1].step == 3);

  SimNodeHarness other({100, 0, 0});
  other.Register();
  other.Send(MakeStart(3, 0, {2, 3}, {0, 1}));
  other.Send(proto::Drain{proto::DrainMode::kGraceful, "maintenance"});
  CHECK(other.link.Of<proto::CheckpointReport>().empty());
  CHECK(other.link.Of<proto::Drained>().size() == 1);
  CHECK(other.runner.Running().empty());
  CHECK(other.log.Has("drained: no rank runs here"));
  CHECK_FALSE(other.log.Has("stopping anyway"));
}

TEST_CASE("simulated node: logs are one synthetic line, adopted ranks are re-registered") {
  SimNodeHarness n({100, 0, 0});
  n.Register();
  n.Send(MakeStart(4, 1, {0}, {0}));
  n.Send(proto::LogsRequest{7, 4, 0, 0, 1000});
  const auto logs = n.link.Of<proto::LogsReply>();
  REQUIRE(logs.size() == 1);
  CHECK(logs[0].req == 7);
  CHECK(logs[0].data.value().find("job 4 rank 0 restart 1") != std::string::npos);
  CHECK(logs[0].next_offset == logs[0].size);
  // A reconnect reports the ranks still "running".
  n.core.OnDisconnected();
  n.link.Clear();
  n.core.OnConnected();
  const auto regs = n.link.Of<proto::Register>();
  REQUIRE(regs.size() == 1);
  REQUIRE(regs[0].ranks.size() == 1);
  CHECK(regs[0].ranks[0].job == 4);
  CHECK(regs[0].gpus.size() == 4);
}
