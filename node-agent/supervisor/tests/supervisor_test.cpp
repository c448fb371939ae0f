// RankSupervisor with real processes: small /bin/sh scripts as ranks.

#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "test_util.hpp"
#include "topo/agent/supervisor.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {
const RankExit* FindExit(const std::vector<SupervisorEvent>& evs, int rank) {
  for (const auto& e : evs) {
    if (e.kind == EventKind::kRankExited && e.exit.rank == rank) return &e.exit;
  }
  return nullptr;
}
}  // namespace

TEST_CASE("each rank gets the torchrun-compatible and TOPO_* environment") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "env > \"$OUT_DIR/env-$RANK.txt\"");
  JobLaunch l;
  l.job_id = "envjob";
  l.argv = {script};
  l.unix_user = sb.user.name();
  l.env = {{"OUT_DIR", sb.out}};
  // tp 2, ep 2, pp 2, dp 2: world 8 in the order tp-cp-ep-dp-pp.
  l.parallelism.tp = 2;
  l.parallelism.ep = 2;
  l.parallelism.pp = 2;
  l.parallelism.dp = 2;
  l.master_addr = "10.1.2.3";
  l.master_port = 29511;
  l.group_rank = 2;
  l.group_world_size = 4;
  l.restart_count = 3;
  l.restart_step = 40;
  l.max_restarts = 5;
  l.omp_num_threads = 4;
  l.ranks = {LocalRankSpec{6, 1, {4}}, LocalRankSpec{5, 0, {7}}};
  REQUIRE(sup.Launch(l).ok());
  auto evs = PollUntil(sup, Finished("envjob"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "envjob"));

  topo::core::RankLayout layout(l.parallelism);
  for (const auto& spec : l.ranks) {
    auto env = ParseEnvDump(ReadFile(sb.out + ("/env-" + std::to_string(spec.rank) + ".txt")));
    CAPTURE(spec.rank);
    CHECK(env["RANK"] == std::to_string(spec.rank));
    CHECK(env["WORLD_SIZE"] == "8");
    CHECK(env["LOCAL_RANK"] == std::to_string(spec.local_rank));
    CHECK(env["LOCAL_WORLD_SIZE"] == "2");
    CHECK(env["GROUP_RANK"] == "2");
    CHECK(env["GROUP_WORLD_SIZE"] == "4");
    CHECK(env["MASTER_ADDR"] == "10.1.2.3");
    CHECK(env["MASTER_PORT"] == "29511");
    CHECK(env["TOPO_JOB_ID"] == "envjob");
    CHECK(env["TOPO_RESTART_COUNT"] == "3");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "3");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "5");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "topo-envjob");
    CHECK(env["ROLE_RANK"] == std::to_string(spec.rank));
    CHECK(env["ROLE_WORLD_SIZE"] == "8");
    CHECK(env["ROLE_NAME"] == "default");
    CHECK(env["OMP_NUM_THREADS"] == "4");
    // Every GPU of the job here, in local-rank order.
    CHECK(env["CUDA_VISIBLE_DEVICES"] == "7,4");
    CHECK(env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID");
    CHECK(env["TOPO_RESTART_STEP"] == "40");
    CHECK(env["TOPO_CHECKPOINT_DIR"] == t / "local/envjob");
    CHECK(env["TOPO_CHECKPOINT_SIGNAL"] == std::to_string(SIGUSR1));
    CHECK(env["OUT_DIR"] == sb.out);
    CHECK(env["PATH"] == "/usr/local/bin:/usr/bin:/bin");  // the documented base
    using topo::core::Dim;
    using topo::core::GroupKind;
    CHECK(env["TOPO_TP_RANK"] == std::to_string(layout.Coord(spec.rank, Dim::kTp)));
    CHECK(env["TOPO_EP_RANK"] == std::to_string(layout.Coord(spec.rank, Dim::kEp)));
    CHECK(env["TOPO_PP_RANK"] == std::to_string(layout.Coord(spec.rank, Dim::kPp)));
    CHECK(env["TOPO_CP_RANK"] == "0");
    CHECK(env["TOPO_TP_SIZE"] == "2");
    CHECK(env["TOPO_DP_SIZE"] == "2");
    CHECK(env["TOPO_TP_GROUP"] == std::to_string(layout.GroupOf(GroupKind::kTp, spec.rank)));
    CHECK(env["TOPO_PP_GROUP"] == std::to_string(layout.GroupOf(GroupKind::kPp, spec.rank)));
    CHECK(env["TOPO_DP_GROUP"] == std::to_string(layout.GroupOf(GroupKind::kDp, spec.rank)));
    CHECK(env["TOPO_EP_GROUP"] == std::to_string(layout.GroupOf(GroupKind::kEp, spec.rank)));
    CHECK(env["TOPO_CP_GROUP"] == std::to_string(layout.GroupOf(GroupKind::kCp, spec.rank)));
  }
  // Hand-computed for the default order (strides tp 1, ep 2, pp 4).
  auto e5 = ParseEnvDump(ReadFile(sb.out + "/env-5.txt"));
  auto e6 = ParseEnvDump(ReadFile(sb.out + "/env-6.txt"));
  CHECK(e5["TOPO_TP_RANK"] == "1");
  CHECK(e5["TOPO_EP_RANK"] == "0");
  CHECK(e5["TOPO_PP_RANK"] == "1");
  CHECK(e5["TOPO_DP_RANK"] == "0");  // DP group {5, 7}
  CHECK(e6["TOPO_TP_RANK"] == "0");
  CHECK(e6["TOPO_EP_RANK"] == "1");
  CHECK(e6["TOPO_DP_RANK"] == "1");  // DP group {4, 6}
  CHECK(e5["TOPO_PP_GROUP"] != e6["TOPO_PP_GROUP"]);
  CHECK(e5["TOPO_EP_GROUP"] == e6["TOPO_EP_GROUP"]);  // EP block 4..7
}

// docs/jobs.md: with ep 1 the EP group is still the tp x cp x ep block, the
// rank's TP x CP group, not a group per rank. Hand-computed for tp 2, cp 2,
// dp 2 in the default order (strides tp 1, cp 2, dp 4).
TEST_CASE("with ep 1 TOPO_EP_GROUP is the rank's tp x cp block, as docs/jobs.md says") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", "env > \"$OUT_DIR/env-$RANK.txt\"");
  auto l = sb.Job("epjob", script, 8);
  l.parallelism.tp = 2;
  l.parallelism.cp = 2;
  l.parallelism.dp = 2;
  REQUIRE(sup.Launch(l).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("epjob")), EventKind::kJobFinished, "epjob"));
  const char* tp_group[] = {"0", "0", "1", "1", "2", "2", "3", "3"};
  const char* ep_group[] = {"0", "0", "0", "0", "1", "1", "1", "1"};
  for (int r = 0; r < 8; ++r) {
    CAPTURE(r);
    auto env = ParseEnvDump(ReadFile(sb.out + "/env-" + std::to_string(r) + ".txt"));
    CHECK(env["TOPO_EP_SIZE"] == "1");
    CHECK(env["TOPO_EP_RANK"] == "0");
    CHECK(env["TOPO_TP_GROUP"] == tp_group[r]);
    CHECK(env["TOPO_EP_GROUP"] == ep_group[r]);  // 4 ranks each, not 8 groups of one
    CHECK(env["TOPO_DP_GROUP"] == std::to_string(r % 4));
  }
  // cp 1 as well: the EP group is then exactly the TP group.
  auto m = sb.Job("epjob2", script, 4);
  m.parallelism.tp = 2;
  m.parallelism.dp = 2;
  REQUIRE(sup.Launch(m).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("epjob2")), EventKind::kJobFinished, "epjob2"));
  for (int r = 0; r < 4; ++r) {
    auto env = ParseEnvDump(ReadFile(sb.out + "/env-" + std::to_string(r) + ".txt"));
    CHECK(env["TOPO_EP_GROUP"] == std::to_string(r / 2));
    CHECK(env["TOPO_EP_GROUP"] == env["TOPO_TP_GROUP"]);
  }
}

TEST_CASE("exit codes and signals are reported once, never blocking") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script =
      WriteScript(t / "rank.sh", "case \"$RANK\" in 0) exit 0;; 1) exit 3;; 2) kill -9 $$;; esac");
  REQUIRE(sup.Launch(sb.Job("exits", script, 3)).ok());
  auto evs = PollUntil(sup, Finished("exits"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "exits"));
  const RankExit* e0 = FindExit(evs, 0);
  const RankExit* e1 = FindExit(evs, 1);
  const RankExit* e2 = FindExit(evs, 2);
  REQUIRE(e0);
  REQUIRE(e1);
  REQUIRE(e2);
  CHECK((!e0->signaled && e0->exit_code == 0 && e0->exit_status_known));
  CHECK((!e1->signaled && e1->exit_code == 3));
  CHECK((e2->signaled && e2->signal == SIGKILL));
  CHECK(std::count_if(evs.begin(), evs.end(), [](const SupervisorEvent& e) {
          return e.kind == EventKind::kRankExited;
        }) == 3);
  // The job-finished event comes after the exits, and nothing is repeated.
  CHECK(evs.back().kind == EventKind::kJobFinished);
  CHECK(sup.Poll().empty());
  CHECK(sup.List().empty());
  CHECK(sup.List(false).size() == 3);
}

TEST_CASE("a command that cannot be executed exits 127 with the reason in its log") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  REQUIRE(sup.Launch(sb.Job("noexec", t / "does-not-exist", 1)).ok());
  auto evs = PollUntil(sup, Finished("noexec"));
  const RankExit* e = FindExit(evs, 0);
  REQUIRE(e);
  CHECK(e->exit_code == 127);
  CHECK(ReadFile(sup.LogPath("noexec", 0)).find("exec failed") != std::string::npos);
}

TEST_CASE("bad launches are refused without starting anything") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "exit 0");
  auto bad = sb.Job("../escape", script, 1);
  CHECK(!sup.Launch(bad).ok());
  bad = sb.Job("ok", script, 2);
  bad.ranks[1].rank = 5;  // outside world 2
  CHECK(!sup.Launch(bad).ok());
  bad = sb.Job("ok", script, 2);
  bad.parallelism.tp = 3;
  bad.parallelism.dp = 1;
  bad.parallelism.ep = 2;  // ep must divide dp
  CHECK(!sup.Launch(bad).ok());
  CHECK(sup.List(false).empty());
}

TEST_CASE("stdout and stderr go to the per-rank log, appended across restarts") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh",
                            "echo \"out rank $RANK restart $TOPO_RESTART_COUNT\"; "
                            "echo \"err rank $RANK\" >&2");
  auto job = sb.Job("logs", script, 2);
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("logs"));
  job.restart_count = 1;
  REQUIRE(sup.Launch(job).ok());
  auto evs = PollUntil(sup, Finished("logs"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "logs"));
  auto log = ReadFile(t / "logs/logs/rank-1.log");
  CHECK(log == ReadFile(sup.LogPath("logs", 1)));
  CHECK(log.find("out rank 1 restart 0") != std::string::npos);
  CHECK(log.find("out rank 1 restart 1") != std::string::npos);
  CHECK(log.find("err rank 1") != std::string::npos);
  CHECK(log.find("rank 0") == std::string::npos);
  size_t headers = 0;
  for (size_t p = log.find(" start job "); p != std::string::npos;
       p = log.find(" start job ", p + 1)) {
    ++headers;
  }
  CHECK(headers == 2);
  CHECK(log.find("start job logs rank 1 local_rank 1 restart 1") != std::string::npos);
}

TEST_CASE("a second launch of a job that still runs is refused") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "exec sleep 30");
  REQUIRE(sup.Launch(sb.Job("busy", script, 1)).ok());
  CHECK(!sup.Launch(sb.Job("busy", script, 1)).ok());
  CHECK(!sup.Forget("busy").ok());
  REQUIRE(sup.Stop("busy", 1000).ok());
  auto evs = PollUntil(sup, Finished("busy"));
  const RankExit* e = FindExit(evs, 0);
  REQUIRE(e);
  CHECK((e->signaled && e->signal == SIGTERM && e->stopped));
  CHECK(sup.Forget("busy").ok());
  CHECK(!fs::exists(sup.StatePath("busy")));
}

TEST_CASE("without cgroups, Stop kills the rank's whole process group and the log says so") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  auto opt = sb.Options();
  opt.cgroup_root = "none";
  RankSupervisor sup(opt);
  CHECK(sup.Cgroups().mode == CgroupMode::kNone);
  auto script =
      WriteScript(t / "rank.sh", "sleep 1000 & echo $! > \"$OUT_DIR/child-$RANK.pid\"; wait");
  auto job = sb.Job("pgroup", script, 2);
  REQUIRE(sup.Launch(job).ok());
  std::vector<pid_t> children;
  for (int r = 0; r < 2; ++r) {
    children.push_back(ReadPidFile(sb.out + ("/child-" + std::to_string(r) + ".pid")));
    REQUIRE(children.back() > 0);
  }
  auto ranks = sup.List();
  REQUIRE(ranks.size() == 2);
  for (const auto& r : ranks) CHECK(::getpgid(r.pid) == r.pid);  // its own group
  for (pid_t c : children) CHECK(::getpgid(c) != ::getpgrp());
  REQUIRE(sup.Stop("pgroup", 2000).ok());
  auto evs = PollUntil(sup, Finished("pgroup"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "pgroup"));
  for (pid_t c : children) CHECK(WaitGone(c));
  CHECK(sup.CgroupPath("pgroup").empty());
  CHECK(ReadFile(sup.LogPath("pgroup", 0)).find("no cgroups (disabled") != std::string::npos);
}

TEST_CASE("Stop escalates to SIGKILL after the grace when SIGTERM is ignored") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh",
                            "trap '' TERM; sleep 1000 & echo $! > \"$OUT_DIR/child.pid\"; "
                            "while :; do wait; done");
  auto job = sb.Job("stubborn", script, 1);
  REQUIRE(sup.Launch(job).ok());
  const pid_t child = ReadPidFile(sb.out + "/child.pid");
  REQUIRE(child > 0);
  auto start = std::chrono::steady_clock::now();
  REQUIRE(sup.Stop("stubborn", 300).ok());
  // Still there within the grace.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(sup.Poll().empty());
  auto evs = PollUntil(sup, Finished("stubborn"));
  auto took = std::chrono::steady_clock::now() - start;
  const RankExit* e = FindExit(evs, 0);
  REQUIRE(e);
  CHECK((e->signaled && e->signal == SIGKILL && e->stopped));
  CHECK(took >= std::chrono::milliseconds(300));
  CHECK(WaitGone(child));
}

TEST_CASE("SIGUSR1 reaches every rank and the checkpoint it writes is detected and persisted") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  // Rank 0 writes step-7 on SIGUSR1; every rank records the signal.
  auto script = WriteScript(
      t / "rank.sh",
      "on_usr1() {\n"
      "  echo got > \"$OUT_DIR/usr1-$RANK\"\n"
      "  if [ \"$RANK\" = 0 ]; then\n"
      "    d=\"$TOPO_CHECKPOINT_DIR/step-7\"; mkdir -p \"$d\"\n"
      "    echo weights > \"$d/model.bin\"; mkdir -p \"$d/optim\"; echo m > \"$d/optim/m.bin\"\n"
      "    echo 7 > \"$d/COMPLETE\"\n"
      "  fi\n"
      "}\n"
      "trap on_usr1 USR1\n"
      "touch \"$OUT_DIR/ready-$RANK\"\n"
      "while :; do sleep 0.05; done");
  auto job = sb.Job("ckpt", script, 2);
  REQUIRE(sup.Launch(job).ok());
  REQUIRE(WaitForFile(sb.out + "/ready-0"));
  REQUIRE(WaitForFile(sb.out + "/ready-1"));
  CHECK(sup.Poll().empty());
  REQUIRE(sup.RequestCheckpoint("ckpt").ok());
  auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kCheckpointPersisted, "ckpt", 7);
  });
  CHECK(HasEvent(evs, EventKind::kCheckpointComplete, "ckpt", 7));
  CHECK(HasEvent(evs, EventKind::kCheckpointPersisted, "ckpt", 7));
  // Rank 0's checkpoint may be persisted before rank 1's trap has run (each
  // shell runs it only once its `sleep` returns): wait for rank 1's mark.
  CHECK(fs::exists(sb.out + "/usr1-0"));
  CHECK(WaitForFile(sb.out + "/usr1-1"));
  CHECK(ReadFile(t / "persistent/ckpt/step-7/model.bin") == "weights\n");
  CHECK(ReadFile(t / "persistent/ckpt/step-7/optim/m.bin") == "m\n");
  CHECK(ReadFile(t / "persistent/ckpt/step-7/COMPLETE") == "7\n");
  CHECK(!fs::exists(t / "persistent/ckpt/.step-7.tmp"));
  CHECK(sup.NewestCompleteStep("ckpt") == 7);
  CHECK(sup.NewestPersistedStep("ckpt") == 7);
  // Reported once: a second request that writes the same step adds nothing.
  REQUIRE(sup.RequestCheckpoint("ckpt").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto more = sup.Poll();
  CHECK(!HasEvent(more, EventKind::kCheckpointComplete, "ckpt"));
  auto rp = sup.NewestRestartStep("ckpt", false);
  REQUIRE(rp);
  CHECK(rp->step == 7);
  CHECK(rp->tier == CheckpointTier::kPersistent);
  REQUIRE(sup.Stop("ckpt", 1000).ok());
  PollUntil(sup, Finished("ckpt"));
  CHECK(!sup.RequestCheckpoint("ckpt").ok());  // nothing left to signal
}

TEST_CASE("a restarted agent adopts the ranks it started through the state file") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  auto script = WriteScript(t / "rank.sh", "exec sleep 30");
  auto first = std::make_unique<RankSupervisor>(sb.Options());
  REQUIRE(first->Launch(sb.Job("adopt", script, 2)).ok());
  auto before = first->List();
  REQUIRE(before.size() == 2);
  CHECK(fs::exists(first->StatePath("adopt")));
  first.reset();  // the agent goes away; its ranks keep running
  for (const auto& r : before) CHECK(!ProcessGone(r.pid));

  // A stale job in the state dir (no cgroup recorded, as an older agent
  // wrote it): a pid that now belongs to another process (ours, with another
  // start time) and a dead one.
  {
    std::ofstream out(t / "state/jobs/stale.json");
    out << R"({"job_id":"stale","ranks":[)"
        << R"({"rank":0,"local_rank":0,"pid":)" << ::getpid()
        << R"(,"start_time":1,"running":true},)"
        << R"({"rank":1,"local_rank":1,"pid":999999999,"start_time":5,"running":true}]})";
  }
  RankSupervisor second(sb.Options());
  auto after = second.List();
  std::vector<RankInfo> adopt;
  for (const auto& r : after) {
    if (r.job_id == "adopt") adopt.push_back(r);
  }
  REQUIRE(adopt.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(adopt[i].rank == before[i].rank);
    CHECK(adopt[i].pid == before[i].pid);
    CHECK(adopt[i].start_time == before[i].start_time);
    CHECK(adopt[i].adopted);
  }
  // The stale ranks are reported as exited, status unknown; the live ones not.
  auto evs = second.Poll();
  CHECK(HasEvent(evs, EventKind::kJobFinished, "stale"));
  CHECK(!HasEvent(evs, EventKind::kRankExited, "adopt"));
  for (const auto& e : evs) {
    if (e.kind == EventKind::kRankExited) {
      CHECK(e.job_id == "stale");
      CHECK(!e.exit.exit_status_known);
    }
  }
  CHECK(::kill(::getpid(), 0) == 0);  // the pid-reused "rank" was not signalled
  // The adopted ranks can be stopped.
  REQUIRE(second.Stop("adopt", 1000).ok());
  auto stopped = PollUntil(second, Finished("adopt"));
  CHECK(HasEvent(stopped, EventKind::kJobFinished, "adopt"));
  for (const auto& r : before) CHECK(WaitGone(r.pid));
  CHECK(second.List().empty());
}

TEST_CASE("node mode: one process per node with the environment torchrun reads") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  // The node's process records its environment and how many of it ran, then
  // exits 3: every rank of the node is reported with that status.
  auto script = WriteScript(t / "node.sh",
                            "env > \"$OUT_DIR/env-node-$GROUP_RANK.txt\"\n"
                            "echo started >> \"$OUT_DIR/starts.txt\"\n"
                            "echo node-output\nexit 3");
  JobLaunch l = sb.Job("nodejob", script, 0);
  l.mode = topo::core::LaunchMode::kNode;
  l.parallelism.tp = 4;
  l.parallelism.dp = 2;
  l.master_addr = "10.9.8.7";
  l.master_port = 29600;
  l.group_rank = 1;
  l.group_world_size = 2;
  l.restart_count = 2;
  l.restart_step = 7;
  l.ranks = {LocalRankSpec{4, 0, {3}}, LocalRankSpec{5, 1, {2}}, LocalRankSpec{6, 2, {1}},
             LocalRankSpec{7, 3, {0}}};
  REQUIRE(sup.Launch(l).ok());
  auto evs = PollUntil(sup, Finished("nodejob"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "nodejob"));
  CHECK(ReadFile(sb.out + "/starts.txt") == "started\n");  // one process, not four
  for (int r = 4; r < 8; ++r) {
    const RankExit* e = FindExit(evs, r);
    CAPTURE(r);
    REQUIRE(e);
    CHECK((!e->signaled && e->exit_code == 3 && e->exit_status_known));
  }
  CHECK(std::count_if(evs.begin(), evs.end(), [](const SupervisorEvent& e) {
          return e.kind == EventKind::kRankExited;
        }) == 4);
  auto env = ParseEnvDump(ReadFile(sb.out + "/env-node-1.txt"));
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["MASTER_ADDR"] == "10.9.8.7");
  CHECK(env["MASTER_PORT"] == "29600");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "3,2,1,0");
  CHECK(env["TOPO_NODE_RANKS"] == "4,5,6,7");
  CHECK(env["TOPO_JOB_ID"] == "nodejob");
  CHECK(env["TOPO_RESTART_COUNT"] == "2");
  CHECK(env["TOPO_RESTART_STEP"] == "7");
  CHECK(env["TOPO_TP_SIZE"] == "4");
  CHECK(env["TOPO_CHECKPOINT_DIR"] == t / "local/nodejob");
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(env["OUT_DIR"] == sb.out);
  // What torchrun gives its workers is not set here.
  for (const char* k : {"RANK", "LOCAL_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID", "TOPO_TP_RANK"}) {
    CAPTURE(k);
    CHECK(env.count(k) == 0);
  }
  // One log for the node, which every rank of it reads as its own.
  const std::string log = ReadFile(t / "logs/nodejob/node-1.log");
  CHECK(log.find("start job nodejob node 1 of 2 (ranks 4,5,6,7)") != std::string::npos);
  CHECK(log.find("node-output") != std::string::npos);
  CHECK(sup.LogPath("nodejob", 6) == t / "logs/nodejob/node-1.log");
  CHECK_FALSE(fs::exists(t / "logs/nodejob/rank-4.log"));
  // Once the job is forgotten (it ended, or the agent restarted), `topo
  // logs` of its ranks still finds the node's log, not a missing rank-R.log.
  REQUIRE(sup.Forget("nodejob").ok());
  CHECK(sup.LogPath("nodejob", 6) == t / "logs/nodejob/node-1.log");
  CHECK(sup.LogPath("never-ran", 0) == t / "logs/never-ran/rank-0.log");
}

TEST_CASE("--output and --error patterns are opened as the account, relative to chdir") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "echo out-$RANK\necho err-$RANK >&2");
  auto job = sb.Job("files", script, 2);
  job.working_dir = sb.out;
  job.output = "o-%j-%r.txt";                 // relative: in working_dir
  job.error = sb.out + "/e-%j-%r-100%%.txt";  // absolute
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("files"));
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const std::string out = sb.out + "/o-files-" + std::to_string(r) + ".txt";
    const std::string err = sb.out + "/e-files-" + std::to_string(r) + "-100%.txt";
    CHECK(ReadFile(out) == "out-" + std::to_string(r) + "\n");
    CHECK(ReadFile(err) == "err-" + std::to_string(r) + "\n");
    CHECK(StatOf(out).uid == ResolveUnixAccount(sb.user.name()).value().uid);  // not root
    // The log keeps the agent's lines and says where the output went.
    const std::string log = ReadFile(sup.LogPath("files", r));
    CHECK(log.find("standard output goes to o-files-" + std::to_string(r) + ".txt (in " + sb.out +
                   "), standard error to " + err) != std::string::npos);
    CHECK(log.find("out-") == std::string::npos);
  }
  REQUIRE(sup.Forget("files").ok());

  // A file the account may not write (root's, 0644): nothing is written to
  // it, the log says why, exit 126. Without --error, stderr follows --output.
  const std::string roots = t / "roots.txt";
  { std::ofstream(roots) << "root's\n"; }
  ::chmod(roots.c_str(), 0644);
  job.output = roots;
  job.error.clear();
  REQUIRE(sup.Launch(job).ok());
  auto evs = PollUntil(sup, Finished("files"));
  const RankExit* e = FindExit(evs, 0);
  REQUIRE(e);
  CHECK(e->exit_code == 126);
  CHECK(ReadFile(roots) == "root's\n");
  CHECK(ReadFile(sup.LogPath("files", 0))
            .find("cannot open the output file " + roots + " as " + sb.user.name()) !=
        std::string::npos);
}
