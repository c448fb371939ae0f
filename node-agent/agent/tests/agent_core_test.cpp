// AgentCore (agent_core.hpp): registration, heartbeats, reports held across
// reconnects, scheduler errors, messages the protocol does not allow, logs
// and GPU faults. Every message the core sends is read back with the
// protocol's strict reader (FakeLink::Messages).

#include <doctest/doctest.h>

#include "harness.hpp"

using namespace topo;
using namespace topo::agent;
using namespace topo::agent::testing;

TEST_CASE("register carries the node, its GPUs and the ranks it still runs, at protocol 2") {
  Harness h;
  h.options.addr = "10.1.2.3";
  h.options.agent_version = "topo-agent test";
  // An adopted job (after an agent restart) and one the scheduler did not
  // give (its id is not a job number): only the first is reported.
  h.runner.jobs["7"].running = {3, 4};
  h.runner.jobs["scratch"].running = {0};
  h.core.OnConnected();
  const auto regs = h.link.Of<proto::Register>();
  REQUIRE(regs.size() == 1);
  const proto::Register& r = regs[0];
  CHECK(r.node == "n0");
  CHECK(r.addr == "10.1.2.3");
  CHECK(r.agent == "topo-agent test");
  CHECK(r.protocol == proto::kProtocolVersion);
  REQUIRE(r.gpus.size() == 8);
  CHECK(r.gpus[5].index == 5);
  CHECK(r.gpus[5].model == "H100");
  CHECK(r.gpus[5].uuid == "GPU-sim-n0-5");
  CHECK(r.gpus[5].memory_mb == 81559);
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.ranks[0] == proto::RunningRank{7, 3, 4003});
  CHECK(r.ranks[1] == proto::RunningRank{7, 4, 4004});
  CHECK_FALSE(h.core.registered());
}

TEST_CASE("registered: the scheduler's heartbeat interval, a beat at once, heartbeats counted") {
  Harness h;
  h.core.OnConnected();
  h.core.Heartbeat();  // not registered yet: no heartbeat
  CHECK(h.link.Of<proto::Heartbeat>().empty());
  h.Send(proto::Registered{"n0", 250, {}, {}});
  CHECK(h.core.registered());
  CHECK(h.core.heartbeat_ms() == 250);
  CHECK(h.link.registrations == 1);
  CHECK(h.link.heartbeat_ms == 250);
  CHECK(h.log.Has("registered; heartbeat every 250 ms; keep []"));
  h.core.Heartbeat();
  h.core.Heartbeat();
  const auto beats = h.link.Of<proto::Heartbeat>();
  REQUIRE(beats.size() == 2);
  CHECK(beats[0].seq == 1);
  CHECK(beats[1].seq == 2);

  SUBCASE("--heartbeat-ms wins over the scheduler's") {
    Harness g;
    g.options.heartbeat_ms = 40;
    g.core.OnConnected();
    g.Send(proto::Registered{"n0", 250, {}, {}});
    CHECK(g.core.heartbeat_ms() == 40);
    CHECK(g.link.heartbeat_ms == 40);
  }
}

TEST_CASE("HA: a scheduler of an older leadership term is refused, its keep list ignored") {
  Harness h;
  h.link.connected = true;
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {}, 7});
  REQUIRE(h.core.registered());
  h.Send(MakeStart(9, 0, {8, 9}));
  REQUIRE(h.runner.jobs.count("9"));
  // The leader of term 7 is gone; a paused replica of term 5 answers first.
  h.core.OnDisconnected();
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {}, 5});
  CHECK_FALSE(h.core.registered());
  CHECK(h.link.drops == 1);
  CHECK(h.link.registrations == 1);  // no beat for it
  CHECK(h.runner.jobs.count("9"));   // its empty keep list stopped nothing
  CHECK(h.log.Has("refusing a scheduler of leadership term 5: term 7 leads now"));
  // The new leader (term 8) keeps the job.
  h.core.OnDisconnected();
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {9}, 8});
  CHECK(h.core.registered());
  CHECK(h.link.registrations == 2);
  CHECK(h.runner.jobs.count("9"));
  CHECK(h.log.Has("leadership moved to term 8 (was 7)"));
  // A scheduler that sends no term (no HA) is followed as before.
  h.core.OnDisconnected();
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {9}, {}});
  CHECK(h.core.registered());
}

TEST_CASE(
    "reports made while disconnected are held and sent, in order, after the next registration") {
  Harness h;
  h.Register();
  h.Send(MakeStart(9, 0, {8, 9}));
  REQUIRE(h.runner.jobs.count("9"));
  h.link.Clear();

  h.core.OnDisconnected();
  h.link.connected = false;
  h.runner.Exit("9", 8, 3);
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kXid, 2, 79, 0}).ok());
  h.core.Tick();
  h.core.PollGpus();
  CHECK(h.link.sent.empty());
  CHECK(h.core.queued_reports() == 2);

  // A new connection registers first; the held reports follow the
  // `registered`, never before it.
  h.link.connected = true;
  h.core.OnConnected();
  CHECK(h.link.Of<proto::RankExited>().empty());
  h.Send(proto::Registered{"n0", 200, {9}, {}});
  const auto messages = h.link.Messages();
  REQUIRE(messages.size() == 3);
  CHECK(std::holds_alternative<proto::Register>(messages[0]));
  const auto* exited = std::get_if<proto::RankExited>(&messages[1]);
  REQUIRE(exited != nullptr);
  CHECK(*exited == proto::RankExited{9, 8, 0, 3, 0, true});
  const auto* xid = std::get_if<proto::GpuEventReport>(&messages[2]);
  REQUIRE(xid != nullptr);
  CHECK(*xid == proto::GpuEventReport{2, core::GpuEventKind::kXid, 79});
  CHECK(h.core.queued_reports() == 0);
}

TEST_CASE("held reports are bounded: the oldest go first") {
  Harness h;
  h.options.max_queued_reports = 10;
  h.link.connected = false;
  for (int i = 0; i < 25; ++i) {
    REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kXid, 0, 10 + i, 0}).ok());
    h.core.PollGpus();
  }
  CHECK(h.core.queued_reports() <= 10);
  CHECK(h.log.Has("oldest report(s) held while disconnected", LogLevel::kWarning));
  h.link.connected = true;
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {}, {}});
  const auto xids = h.link.Of<proto::GpuEventReport>();
  REQUIRE(xids.size() == h.link.Of<proto::GpuEventReport>().size());
  REQUIRE(xids.size() <= 10);
  CHECK(xids.back().code == 34);  // the newest survived
  CHECK(xids.front().code > 10);  // the oldest did not
}

TEST_CASE("an error from the scheduler is logged with its type and field, nothing else happens") {
  Harness h;
  h.Register();
  h.Send(proto::Error{"checkpoint.job: job 12 has no ranks on node n0", "checkpoint.job",
                      "checkpoint"});
  CHECK(
      h.log.Has("the scheduler refused checkpoint (field checkpoint.job): checkpoint.job: job 12 "
                "has no ranks on node n0",
                LogLevel::kWarning));
  CHECK(h.core.last_refusal() == "checkpoint.job: job 12 has no ranks on node n0");
  // Still registered, still beating, nothing sent in answer.
  CHECK(h.core.registered());
  CHECK(h.link.sent.empty());
  h.core.Heartbeat();
  CHECK(h.link.Of<proto::Heartbeat>().size() == 1);
  // The next connection starts without it.
  h.core.OnConnected();
  CHECK(h.core.last_refusal().empty());
}

TEST_CASE("a message the protocol does not allow is logged with its field and ignored") {
  Harness h;
  h.Register();
  h.core.OnText(R"({"type":"stop","job":"12","reason":"x"})");
  CHECK(h.log.Has("(field stop.job)", LogLevel::kWarning));
  h.core.OnText(R"({"type":"reboot","now":true})");
  CHECK(h.log.Has("(field type)", LogLevel::kWarning));
  h.core.OnText("this is not JSON");
  CHECK(h.log.Has("(field -)", LogLevel::kWarning));
  h.core.OnText(R"({"type":"start","job":5})");  // fields missing
  CHECK(h.runner.launches.empty());
  CHECK(h.link.sent.empty());
  CHECK(h.runner.stops.empty());
  CHECK(h.core.registered());
}

TEST_CASE("a logs request is answered at once with the runner's piece and the request's id") {
  Harness h;
  h.Register();
  h.Send(proto::LogsRequest{41, 9, 3, -100, 4096});
  REQUIRE(h.runner.log_requests.size() == 1);
  CHECK(h.runner.log_requests[0] == proto::LogsRequest{41, 9, 3, -100, 4096});
  const auto replies = h.link.Of<proto::LogsReply>();
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].req == 41);
  CHECK(replies[0].data == "hello\n");
  CHECK(replies[0].size == 6);

  SUBCASE("while disconnected an answer is dropped, not held (it belongs to that connection)") {
    h.link.connected = false;
    h.Send(proto::LogsRequest{42, 9, 3, 0, 10});
    CHECK(h.core.queued_reports() == 0);
  }
}

TEST_CASE("GPU faults are reported at once, thermal throttling that ends is reported as cleared") {
  Harness h;
  h.Register();
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kEccSingleBit, 1, 5, 2}).ok());
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kThermal, 6, 1, 0}).ok());
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kThermal, 6, 0, 0}).ok());
  h.core.PollGpus();
  const auto events = h.link.Of<proto::GpuEventReport>();
  REQUIRE(events.size() == 4);
  CHECK(events[0] == proto::GpuEventReport{1, core::GpuEventKind::kEccSingleBit, 5});
  CHECK(events[1] == proto::GpuEventReport{1, core::GpuEventKind::kEccDoubleBit, 2});
  CHECK(events[2] == proto::GpuEventReport{6, core::GpuEventKind::kThermal, 0});
  CHECK(events[3] == proto::GpuEventReport{6, core::GpuEventKind::kCleared, 0});
  // The heartbeat polls too.
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kOffBus, 4, 0, 0}).ok());
  h.core.Heartbeat();
  CHECK(h.link.Of<proto::GpuEventReport>().back() ==
        proto::GpuEventReport{4, core::GpuEventKind::kOffBus, 0});
}

TEST_CASE(
    "rank exits: signals as 128+N, adopted ranks as status unknown, stopped ranks not at all") {
  Harness h;
  h.Register();
  h.Send(MakeStart(3, 2, {0, 1, 2}));
  h.runner.Exit("3", 0, 9, /*signaled=*/true);
  SupervisorEvent adopted{EventKind::kRankExited, "3", {}, -1, {}};
  adopted.exit.job_id = "3";
  adopted.exit.rank = 1;
  adopted.exit.exit_status_known = false;
  h.runner.jobs["3"].running = {2};
  h.runner.events.push_back(adopted);
  h.Send(proto::Stop{3, "cancelled"});
  h.runner.ExitAll("3");
  h.core.Tick();
  const auto exits = h.link.Of<proto::RankExited>();
  REQUIRE(exits.size() == 2);
  CHECK(exits[0] == proto::RankExited{3, 0, 2, 128 + 9, 9, true});
  CHECK(exits[1] == proto::RankExited{3, 1, 2, -1, 0, false});
  CHECK(h.log.Has("job 3: every local rank has exited"));
}

TEST_CASE("Reset forgets the session, the held reports and the launches waiting") {
  Harness h;
  h.Register();
  h.link.connected = false;
  h.core.OnDisconnected();
  REQUIRE(h.gpus.Inject({gpu::HealthEventKind::kXid, 0, 31, 0}).ok());
  h.core.PollGpus();
  CHECK(h.core.queued_reports() == 1);
  h.core.Reset();
  CHECK(h.core.queued_reports() == 0);
  CHECK_FALSE(h.core.registered());
  CHECK(h.core.pending_launches() == 0);
}
