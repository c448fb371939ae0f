// AgentCore (agent_core.hpp): starts exactly as the scheduler says,
// restarts, keep lists, stops, drains and launch failures.

#include <doctest/doctest.h>

#include "harness.hpp"

using namespace topo;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

LaunchOutcome Outcome(LaunchOutcome::Kind kind, bool permanent = false, std::string reason = "") {
  LaunchOutcome o;
  o.kind = kind;
  o.permanent = permanent;
  o.reason = std::move(reason);
  return o;
}

}  // namespace

TEST_CASE("a start becomes a launch with exactly the start's ranks, GPUs, account and layout") {
  Harness h;
  h.Register();
  // Ranks 4..7 and 12..15 of tp 4 x pp 2 x dp 2 on this node, on GPUs the
  // scheduler chose (not 0..7, not in rank order on the node).
  proto::Start s = MakeStart(42, 3, {4, 5, 6, 7, 12, 13, 14, 15}, {7, 6, 5, 4, 0, 1, 2, 3});
  s.checkpoint_step = 120;
  s.layout.order = "tp-cp-ep-pp-dp";
  s.launch = core::LaunchMode::kNode;
  s.output = "out-%j-%r.log";
  s.error = "/home/ada/err-%j.log";
  h.Send(s);
  REQUIRE(h.runner.launches.size() == 1);
  const JobLaunch& l = h.runner.launches[0].first;
  CHECK(h.runner.launches[0].second == 120);
  CHECK(l.job_id == "42");
  CHECK(l.restart_count == 3);
  CHECK(l.group_rank == 1);
  CHECK(l.group_world_size == 2);
  CHECK(l.master_addr == "10.0.0.7");
  CHECK(l.master_port == 20123);
  CHECK(l.unix_user == "ada");
  CHECK_FALSE(l.allow_root);
  CHECK(l.argv == std::vector<std::string>{"/usr/bin/python3", "train.py", "--steps", "10"});
  CHECK(l.env ==
        std::map<std::string, std::string>{{"LANG", "C.UTF-8"}, {"WANDB_MODE", "offline"}});
  CHECK(l.working_dir == "/home/ada/run");
  // How the processes start travels as the start says (the supervisor
  // expands the patterns).
  CHECK(l.mode == core::LaunchMode::kNode);
  CHECK(l.output == "out-%j-%r.log");
  CHECK(l.error == "/home/ada/err-%j.log");
  CHECK(l.parallelism.tp == 4);
  CHECK(l.parallelism.pp == 2);
  CHECK(l.parallelism.dp == 2);
  CHECK(l.parallelism.cp == 1);
  CHECK(l.parallelism.ep == 1);
  CHECK(l.parallelism.order == core::ParseRankOrder("tp-cp-ep-pp-dp").value());
  REQUIRE(l.ranks.size() == 8);
  const std::vector<int> want_rank = {4, 5, 6, 7, 12, 13, 14, 15};
  const std::vector<int> want_gpu = {7, 6, 5, 4, 0, 1, 2, 3};
  for (size_t i = 0; i < 8; ++i) {
    CHECK(l.ranks[i].rank == want_rank[i]);
    CHECK(l.ranks[i].local_rank == static_cast<int>(i));
    CHECK(l.ranks[i].gpus == std::vector<int>{want_gpu[i]});
  }
  // Defaults the protocol does not carry (yet): no limits, no root.
  CHECK(l.limits.memory_bytes == 0);
  CHECK(l.limits.cpus == 0);
  CHECK(
      h.log.Has("job 42 restart 3: started ranks 4,5,6,7,12,13,14,15 as ada (group rank 1 of 2, "
                "master 10.0.0.7:20123, from step 120) in one process (launch node)"));
  // Not rank 0's node: no port check here.
  CHECK(h.runner.port_checks.empty());
  // Nothing slow runs on the loop (the runner starts ranks in the
  // background), so a launch sends no heartbeat of its own.
  CHECK(h.link.Of<proto::Heartbeat>().empty());
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  // Launched: acknowledged once, with the start's restart count.
  CHECK(h.link.Of<proto::Started>() == std::vector<proto::Started>{{42, 3}});
}

TEST_CASE("a start without a command runs --job-command, without either it fails for good") {
  Harness h;
  h.Register();
  proto::Start s = MakeStart(5, 0, {0});
  s.command.clear();
  h.Send(s);
  REQUIRE(h.runner.launches.size() == 1);
  CHECK(h.runner.launches[0].first.argv ==
        std::vector<std::string>{"/bin/sh", "-c", "echo default"});

  Harness g;
  g.options.job_command.clear();
  g.Register();
  g.Send(s);
  CHECK(g.runner.launches.empty());
  const auto failed = g.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].job == 5);
  CHECK(failed[0].permanent);
  CHECK(failed[0].reason.find("no command") != std::string::npos);
  CHECK(g.core.pending_launches() == 0);
}

TEST_CASE("a start's limits become the job cgroup's limits on this node") {
  proto::Start s = MakeStart(5, 0, {0});
  s.memory_mb = 65536;
  s.cpu_millis = 12500;
  core::Result<JobLaunch> l = LaunchFromStart(s, "true");
  REQUIRE(l.ok());
  CHECK(l.value().limits.memory_bytes == int64_t{65536} << 20);
  CHECK(l.value().limits.cpus == doctest::Approx(12.5));
  s.memory_mb = 0;
  s.cpu_millis = 0;
  l = LaunchFromStart(s, "true");
  REQUIRE(l.ok());
  CHECK(l.value().limits.memory_bytes == 0);
  CHECK(l.value().limits.cpus == 0);
}

TEST_CASE("LaunchFromStart refuses a layout whose order does not read") {
  proto::Start s = MakeStart(5, 0, {0});
  s.layout.order = "tp-xx";
  core::Result<JobLaunch> l = LaunchFromStart(s, "true");
  REQUIRE_FALSE(l.ok());
  CHECK(l.message().find("layout") != std::string::npos);
}

TEST_CASE(
    "a restart waits for the earlier run's ranks, exits are reported with their run's count") {
  Harness h;
  h.Register();
  h.Send(MakeStart(8, 0, {0, 1, 2}));
  REQUIRE(h.runner.launches.size() == 1);

  // The restart: the earlier run is stopped, the launch waits.
  h.Send(MakeStart(8, 1, {0, 1, 2}));
  REQUIRE(h.runner.stops.size() == 1);
  CHECK(h.runner.stops[0] == std::pair<std::string, int>{"8", h.options.stop_grace_ms});
  CHECK(h.runner.launches.size() == 1);
  CHECK(h.core.pending_launches() == 1);
  CHECK(h.log.Has("launch waits: ranks of the job's earlier run have not exited yet"));

  // Rank 1 of run 0 had crashed on its own before the stop reached it: news
  // of run 0, with run 0's count. The others end by the stop: not news.
  h.runner.jobs["8"].stop_requested = false;
  h.runner.Exit("8", 1, 1);
  h.runner.jobs["8"].stop_requested = true;
  h.runner.Exit("8", 0, 15, true);
  h.runner.Exit("8", 2, 15, true);
  h.Ticks(1);
  REQUIRE(h.runner.launches.size() == 2);
  CHECK(h.runner.launches[1].first.restart_count == 1);
  auto exits = h.link.Of<proto::RankExited>();
  REQUIRE(exits.size() == 1);
  CHECK(exits[0] == proto::RankExited{8, 1, 0, 1, 0, true});

  // Run 1's exits carry count 1.
  h.runner.Exit("8", 2, 0);
  h.core.Tick();
  exits = h.link.Of<proto::RankExited>();
  REQUIRE(exits.size() == 2);
  CHECK(exits[1] == proto::RankExited{8, 2, 1, 0, 0, true});
}

TEST_CASE("an earlier run that never exits fails the restart as launch_failed, transient") {
  Harness h;
  h.options.stop_grace_ms = 1000;
  h.options.launch_wait_ms = 2000;
  h.Register();
  h.Send(MakeStart(8, 0, {0, 1}));
  h.Send(MakeStart(8, 1, {0, 1}));
  h.clock.now += 2999;
  h.core.Tick();
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  h.clock.now += 1;
  h.core.Tick();
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].job == 8);
  CHECK(failed[0].restart_count == 1);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find("earlier run") != std::string::npos);
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.runner.launches.size() == 1);
}

TEST_CASE("keep: every job not kept is stopped, launches waiting included") {
  Harness h;
  // Adopted jobs 5 and 6 run; a restart of 6 waits for them.
  h.runner.jobs["5"].running = {0};
  h.runner.jobs["6"].running = {1};
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {5}, {}});
  REQUIRE(h.runner.stops.size() == 1);
  CHECK(h.runner.stops[0].first == "6");
  CHECK(h.log.Has("job 6 is not in the scheduler's keep list"));
  CHECK_FALSE(h.log.Has("job 5 is not in"));

  h.runner.ExitAll("6");
  h.core.Tick();
  h.Send(MakeStart(7, 0, {3}));
  REQUIRE(h.runner.launches.size() == 1);
  h.Send(MakeStart(7, 1, {3}));  // waits for run 0
  CHECK(h.core.pending_launches() == 1);
  h.core.OnDisconnected();
  h.core.OnConnected();
  h.Send(proto::Registered{"n0", 200, {5}, {}});
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.runner.stops.back().first == "7");
}

TEST_CASE("stop: the job's ranks are stopped, a launch waiting is dropped") {
  Harness h;
  h.Register();
  h.Send(MakeStart(4, 0, {0}));
  h.Send(MakeStart(4, 1, {0}));
  CHECK(h.core.pending_launches() == 1);
  h.Send(proto::Stop{4, "cancelled"});
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.log.Has("stopping job 4 (cancelled)"));
  h.runner.ExitAll("4");
  h.core.Tick();
  CHECK(h.runner.launches.size() == 1);
  CHECK(h.link.Of<proto::RankExited>().empty());
  h.Send(proto::Stop{99, "cancelled"});
  CHECK(h.log.Has("stop of job 99 (cancelled): nothing runs here"));
}

TEST_CASE("launch failures are reported as launch_failed, permanent or not, and nothing waits") {
  Harness h;
  h.Register();
  h.runner.outcomes = {Outcome(LaunchOutcome::Kind::kFailed, true, "no Unix account 'ada'"),
                       Outcome(LaunchOutcome::Kind::kFailed, false, "cannot create\na dir")};
  h.Send(MakeStart(11, 0, {0}));
  h.Send(MakeStart(12, 2, {0}));
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 2);
  CHECK(failed[0] == proto::LaunchFailed{11, 0, "no Unix account 'ada'", true});
  // One line: newlines in a reason become spaces.
  CHECK(failed[1] == proto::LaunchFailed{12, 2, "cannot create a dir", false});
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.link.Of<proto::RankExited>().empty());  // never a fake exit 127
  CHECK(h.link.Of<proto::Started>().empty());     // nothing was launched
}

TEST_CASE("a busy runner is retried until the wait ends") {
  Harness h;
  h.options.stop_grace_ms = 0;
  h.options.launch_wait_ms = 1000;
  h.Register();
  const LaunchOutcome busy = Outcome(LaunchOutcome::Kind::kBusy, false, "copy in flight");
  h.runner.outcomes = {busy, busy};
  h.Send(MakeStart(13, 0, {1}));  // tried on receipt and after the message
  CHECK(h.runner.launches.size() == 2);
  CHECK(h.core.pending_launches() == 1);
  CHECK(h.log.Has("job 13 restart 0: launch waits: copy in flight"));
  h.clock.now += 500;
  h.core.Tick();  // started
  CHECK(h.runner.launches.size() == 3);
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());

  h.runner.outcomes = std::vector<LaunchOutcome>(10, busy);
  h.Send(MakeStart(14, 0, {2}));
  h.clock.now += 999;
  h.core.Tick();
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  h.clock.now += 1;
  h.core.Tick();
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].job == 14);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find("copy in flight") != std::string::npos);
  CHECK(h.core.pending_launches() == 0);
}

TEST_CASE("a launch waiting for its checkpoint's copy waits stage_wait_ms, without extra beats") {
  Harness h;
  h.options.stop_grace_ms = 0;
  h.options.launch_wait_ms = 1000;
  h.options.stage_wait_ms = 10000;
  h.Register();
  const std::string copying = "copying checkpoint step 3 from the persistent tier to this node";
  LaunchOutcome staging = Outcome(LaunchOutcome::Kind::kBusy, false, copying);
  staging.staging = true;
  // The first try starts the copy; the runner says it runs until it ends.
  h.runner.outcomes = {staging};
  h.Send(MakeStart(15, 0, {1}));
  REQUIRE(h.runner.launches.size() == 1);
  // Far past launch_wait_ms: still waiting, and not tried again meanwhile.
  h.Ticks(50);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  CHECK(h.link.Of<proto::Started>().empty());  // acknowledged once launched, not before
  CHECK(h.core.pending_launches() == 1);
  CHECK(h.runner.launches.size() == 1);
  CHECK(h.log.Has("job 15 restart 0: launch waits: " + copying));
  // The scheduler is told once how long this start may wait (the copy, then
  // the launch), so it does not requeue the run at its own shorter timeout.
  CHECK(h.link.Of<proto::StartWaiting>() ==
        std::vector<proto::StartWaiting>{{15, 0, 10000 + 1000, copying}});
  // No heartbeat while it waits (a Tick beats only through Heartbeat()).
  CHECK(h.link.Of<proto::Heartbeat>().empty());
  // `topo logs` meanwhile: the rank has no log here yet, and the answer says why.
  h.runner.log_error = "no log file on this node (/state/logs/15/rank-0.log)";
  h.Send(proto::LogsRequest{1, 15, 0, 0, 100});
  h.Send(proto::LogsRequest{2, 99, 0, 0, 100});  // no launch of job 99 waits here
  const auto logs = h.link.Of<proto::LogsReply>();
  REQUIRE(logs.size() == 2);
  CHECK(logs[0].error ==
        "rank 0 has not started on this node yet (its launch waits: " + copying + ")");
  CHECK(logs[1].error == "no log file on this node (/state/logs/15/rank-0.log)");
  h.runner.log_error.reset();
  // The copy is done: launched at the next Tick.
  h.runner.underway.clear();
  h.Ticks(1);
  CHECK(h.runner.launches.size() == 2);
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  CHECK(h.link.Of<proto::Heartbeat>().empty());
  CHECK(h.link.Of<proto::Started>() == std::vector<proto::Started>{{15, 0}});

  // A copy that never ends fails the launch after stage_wait_ms, transient.
  h.runner.outcomes = {staging};
  h.Send(MakeStart(16, 0, {2}));
  h.Ticks(99);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  h.Ticks(1);
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].job == 16);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find(copying + " took longer than 10000 ms") != std::string::npos);
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.runner.launches.size() == 3);
}

TEST_CASE("ranks started in the background: waited for without a deadline, then the outcome") {
  Harness h;
  h.options.stop_grace_ms = 0;
  h.options.launch_wait_ms = 1000;
  h.Register();
  const std::string what = "starting 1 rank(s) of restart 0";
  LaunchOutcome starting = Outcome(LaunchOutcome::Kind::kBusy, false, what);
  starting.starting = true;
  h.runner.outcomes = {starting};
  h.Send(MakeStart(17, 0, {0}));  // rank 0 here: its port is checked once, before
  REQUIRE(h.runner.launches.size() == 1);
  CHECK(h.runner.port_checks.size() == 1);
  // Far past launch_wait_ms (a start cannot be called off): still waiting,
  // not tried again, the port not checked again (rank 0 may listen on it).
  h.Ticks(30);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  CHECK(h.core.pending_launches() == 1);
  CHECK(h.runner.launches.size() == 1);
  CHECK(h.runner.port_checks.size() == 1);
  CHECK(h.log.Has("job 17 restart 0: launch waits: " + what));
  // The ranks are up: the next Tick asks for the outcome (the runner's
  // ranks run already, which is not "an earlier run").
  h.runner.underway.clear();
  h.Ticks(1);
  CHECK(h.runner.launches.size() == 2);
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.link.Of<proto::LaunchFailed>().empty());
  CHECK(
      h.log.Has("job 17 restart 0: started ranks 0 as ada (group rank 1 of 2, master "
                "10.0.0.7:20123) in 3100 ms"));
  CHECK(h.link.Of<proto::Heartbeat>().empty());
  // A failure found in the background is the launch's failure.
  h.runner.outcomes = {starting, Outcome(LaunchOutcome::Kind::kFailed, false, "fork failed")};
  h.Send(MakeStart(18, 0, {2}));
  h.runner.underway.clear();
  h.core.Tick();
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].job == 18);
  CHECK(failed[0].reason == "fork failed");
  CHECK(h.core.pending_launches() == 0);
  // A rank that ends before its launch's outcome is read is reported with
  // that launch's restart count; a run already over is not remembered.
  h.runner.outcomes = {starting};
  h.Send(MakeStart(20, 2, {1}));
  h.runner.underway.clear();
  h.runner.Exit("20", 1, 3);
  h.core.Tick();
  const auto exited = h.link.Of<proto::RankExited>();
  REQUIRE(exited.size() == 1);
  CHECK(exited[0].job == 20);
  CHECK(exited[0].restart_count == 2);
  CHECK(exited[0].exit_code == 3);
  CHECK(h.core.pending_launches() == 0);
  // A stop while ranks start goes to the runner (they count as running),
  // and the launch is dropped.
  h.runner.outcomes = {starting};
  h.Send(MakeStart(19, 0, {3}));
  CHECK(h.core.pending_launches() == 1);
  h.Send(proto::Stop{19, "cancelled"});
  CHECK(h.core.pending_launches() == 0);
  REQUIRE_FALSE(h.runner.stops.empty());
  CHECK(h.runner.stops.back().first == "19");
  CHECK(h.log.Has("stopping job 19 (cancelled)"));
}

TEST_CASE("the node holding rank 0 checks MASTER_PORT first, a busy port is a transient failure") {
  Harness h;
  h.Register();
  h.runner.port_check = [](int port) {
    return port == 20123 ? core::Status::Error("port 20123 is in use") : core::Status::Ok();
  };
  h.Send(MakeStart(21, 0, {0, 1, 2, 3}));
  CHECK(h.runner.port_checks == std::vector<int>{20123});
  CHECK(h.runner.launches.empty());
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find("MASTER_PORT 20123 is in use on node n0") != std::string::npos);
  CHECK(h.core.pending_launches() == 0);

  // The scheduler's restart with a fresh port starts.
  proto::Start again = MakeStart(21, 1, {0, 1, 2, 3});
  again.master_port = 20124;
  h.Send(again);
  CHECK(h.runner.launches.size() == 1);
}

TEST_CASE("a GPU the node does not have fails the start, transiently") {
  Harness h;
  h.Register();
  h.Send(MakeStart(30, 0, {0, 1}, {6, 8}));
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find("GPU 8 but node n0 has 8 GPU(s)") != std::string::npos);
  CHECK(h.runner.launches.empty());
}

TEST_CASE("graceful drain: checkpoint, wait for a newer persisted step, stop, drained") {
  Harness h;
  h.Register();
  h.Send(MakeStart(50, 0, {8, 9}));
  h.runner.persisted["50"] = 4;
  h.Send(proto::Drain{proto::DrainMode::kGraceful, "maintenance"});
  CHECK(h.core.draining());
  CHECK(h.runner.checkpoint_requests == std::vector<std::string>{"50"});
  CHECK(h.runner.stops.empty());
  h.core.Tick();
  CHECK(h.runner.stops.empty());  // step 4 is not newer
  h.runner.persisted["50"] = 5;
  h.core.Tick();
  REQUIRE(h.runner.stops.size() == 1);
  CHECK(h.runner.stops[0] == std::pair<std::string, int>{"50", h.options.stop_grace_ms});
  CHECK(h.link.Of<proto::Drained>().empty());  // ranks still running
  h.runner.ExitAll("50");
  h.core.Tick();
  CHECK(h.link.Of<proto::Drained>().size() == 1);
  CHECK_FALSE(h.core.draining());
  CHECK(h.link.Of<proto::RankExited>().empty());
  CHECK(h.log.Has("drained: no rank runs here"));

  SUBCASE("without a persistent tier the local step counts") {
    Harness g;
    g.runner.persistent_tier = false;
    g.Register();
    g.Send(MakeStart(51, 0, {0}));
    g.Send(proto::Drain{proto::DrainMode::kGraceful, "maintenance"});
    g.runner.complete["51"] = 1;
    g.core.Tick();
    CHECK(g.runner.stops.size() == 1);
  }
}

TEST_CASE("graceful drain: a job that does not checkpoint in time is stopped anyway") {
  Harness h;
  h.options.drain_checkpoint_ms = 3000;
  h.Register();
  h.Send(MakeStart(52, 0, {0}));
  h.Send(proto::Drain{proto::DrainMode::kGraceful, "maintenance"});
  h.clock.now += 2999;
  h.core.Tick();
  CHECK(h.runner.stops.empty());
  h.clock.now += 1;
  h.core.Tick();
  CHECK(h.runner.stops.size() == 1);
  CHECK(
      h.log.Has("drain: not every job checkpointed in time; stopping anyway", LogLevel::kWarning));
  h.runner.ExitAll("52");
  h.core.Tick();
  CHECK(h.link.Of<proto::Drained>().size() == 1);
}

TEST_CASE("immediate drain: stop at once (no grace), drained once every rank is gone") {
  Harness h;
  h.Register();
  h.Send(MakeStart(60, 0, {0, 1}));
  h.Send(MakeStart(61, 0, {2}, {2}));
  h.Send(MakeStart(61, 1, {2}, {2}));  // waits for run 0: dropped by the drain
  h.Send(proto::Drain{proto::DrainMode::kImmediate, "now"});
  CHECK(h.core.pending_launches() == 0);
  CHECK(h.log.Has("job 61: launch dropped by the drain"));
  CHECK(h.runner.checkpoint_requests.empty());
  REQUIRE(h.runner.stops.size() == 3);  // 61 by the restart, then 60 and 61 by the drain
  CHECK(h.runner.stops[1] == std::pair<std::string, int>{"60", 0});
  CHECK(h.runner.stops[2] == std::pair<std::string, int>{"61", 0});
  h.runner.ExitAll("60");
  h.core.Tick();
  CHECK(h.link.Of<proto::Drained>().empty());
  h.runner.ExitAll("61");
  h.core.Tick();
  CHECK(h.link.Of<proto::Drained>().size() == 1);

  SUBCASE("a drain of an idle node is drained at once") {
    Harness g;
    g.Register();
    g.Send(proto::Drain{proto::DrainMode::kImmediate, "now"});
    CHECK(g.link.Of<proto::Drained>().size() == 1);
  }
}

TEST_CASE("checkpoint requests reach the runner, a job that is not here is logged") {
  Harness h;
  h.Register();
  h.Send(MakeStart(70, 0, {0}));
  h.Send(proto::CheckpointRequest{70, "preempting"});
  h.Send(proto::CheckpointRequest{71, "asked"});
  CHECK(h.runner.checkpoint_requests == std::vector<std::string>{"70", "71"});
  CHECK(h.log.Has("checkpoint of job 70 requested (preempting)"));
  CHECK(h.log.Has("checkpoint of job 71 requested (asked): no job 71"));
  // Checkpoint steps from the runner are reported by tier.
  h.runner.events.push_back(SupervisorEvent{EventKind::kCheckpointComplete, "70", {}, 3, {}});
  h.runner.events.push_back(SupervisorEvent{EventKind::kCheckpointPersisted, "70", {}, 3, {}});
  h.core.Tick();
  const auto reports = h.link.Of<proto::CheckpointReport>();
  REQUIRE(reports.size() == 2);
  CHECK(reports[0] == proto::CheckpointReport{70, 3, proto::CheckpointTier::kLocal});
  CHECK(reports[1] == proto::CheckpointReport{70, 3, proto::CheckpointTier::kPersistent});
}
