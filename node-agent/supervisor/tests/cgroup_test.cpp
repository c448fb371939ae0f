// One cgroup per job, with real cgroups: nothing a rank starts survives a
// stop, a failed launch leaves nothing running, a restarted agent adopts a
// job by its cgroup, and limits land where cgroup.hpp says. A case skips
// (with a message) only where the kernel has no usable cgroup hierarchy.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include "test_util.hpp"
#include "topo/agent/cgroup.hpp"
#include "topo/agent/supervisor.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

#define SKIP_WITHOUT_CGROUPS(sandbox)                                \
  do {                                                               \
    if (!(sandbox).cgroup.usable()) {                                \
      MESSAGE("skipped: no usable cgroup hierarchy on this kernel"); \
      return;                                                        \
    }                                                                \
  } while (0)

// A rank that escapes its process group and session: a double fork, setsid,
// SIGTERM ignored everywhere; every pid goes to OUT_DIR/pids-R.
const char* kEscapeScript =
    "trap '' TERM\n"
    "( setsid sh -c 'sleep 1000 & echo $! >> \"$OUT_DIR/pids-$RANK\"; "
    "echo $$ >> \"$OUT_DIR/pids-$RANK\"; while :; do wait; done' & )\n"
    "echo $$ >> \"$OUT_DIR/pids-$RANK\"\n"
    "touch \"$OUT_DIR/ready-$RANK\"\n"
    "while :; do sleep 0.05; done";

std::vector<pid_t> RecordedPids(const std::string& file, size_t want) {
  std::vector<pid_t> out;
  for (int i = 0; i < 500 && out.size() < want; ++i) {
    out.clear();
    std::istringstream ss(ReadFile(file));
    long v;
    while (ss >> v) out.push_back(static_cast<pid_t>(v));
    if (out.size() < want) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return out;
}

void NothingSurvivesStop(TestCgroupRoot::Kind kind) {
  Sandbox sb(kind);
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  // Unique per test process: ctest may run the two variants side by side,
  // and the /proc scan below must see only this one's processes.
  const std::string job = "escape-" + std::to_string(::getpid());
  auto script = WriteScript(sb.t / "rank.sh", kEscapeScript);
  REQUIRE(sup.Launch(sb.Job(job, script, 2)).ok());
  const std::string cg = sup.CgroupPath(job);
  REQUIRE(!cg.empty());
  CHECK(fs::is_directory(cg));
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    auto p = RecordedPids(sb.out + "/pids-" + std::to_string(r), 3);
    REQUIRE(p.size() == 3);
    pids.insert(pids.end(), p.begin(), p.end());
  }
  // The escaped helpers run in another session, yet in the job's cgroup.
  JobCgroup job_cg{sup.Cgroups().mode, {cg}};
  for (pid_t p : pids) {
    CAPTURE(p);
    CHECK(!ProcessGone(p));
    CHECK(job_cg.Contains(p));
  }
  const auto ranks = sup.List();
  REQUIRE(ranks.size() == 2);
  CHECK(std::any_of(pids.begin(), pids.end(),
                    [&](pid_t p) { return ::getsid(p) != ::getsid(ranks[0].pid); }));

  auto start = std::chrono::steady_clock::now();
  REQUIRE(sup.Stop(job, 300).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(!HasEvent(sup.Poll(), EventKind::kJobFinished, job));  // within the grace
  auto evs = PollUntil(sup, Finished(job));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, job));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  for (const auto& e : evs) {
    if (e.kind == EventKind::kRankExited) {
      CHECK((e.exit.signaled && e.exit.signal == SIGKILL && e.exit.stopped));
    }
  }
  // Every recorded pid is gone (a /proc scan), and so is the cgroup.
  for (pid_t p : pids) {
    CAPTURE(p);
    CHECK(WaitGone(p, 2000));
  }
  CHECK(ProcessesWithEnv("TOPO_JOB_ID=" + job).empty());
  CHECK(!fs::exists(cg));
}

// A rank that leaves a daemon (setsid) behind, its pid in
// $OUT_DIR/daemon.pid, and exits 0.
constexpr const char* kLeaverScript =
    "( setsid sh -c 'echo $$ > \"$OUT_DIR/daemon.pid\"; exec sleep 1000' & )\n"
    "while [ ! -s \"$OUT_DIR/daemon.pid\" ]; do sleep 0.01; done\nexit 0";

// `n` fake GPU device nodes DIR/nvidia0.. (the nvidia major, no driver
// behind them), open to everyone; returns DIR.
std::string FakeGpuDevices(const fs::path& dir, int n) {
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0755);
  for (int i = 0; i < n; ++i) {
    const std::string node = (dir / ("nvidia" + std::to_string(i))).string();
    REQUIRE(::mknod(node.c_str(), S_IFCHR | 0666, makedev(195, i)) == 0);
    ::chmod(node.c_str(), 0666);
  }
  return dir.string();
}

}  // namespace

TEST_CASE("the node's cgroup layout is detected, and a bad root is refused") {
  auto m = CgroupManager::Detect(CgroupOptions{});
  const auto& info = m.Describe();
  MESSAGE("this node: " << info.summary);
  if (!m.usable()) {
    MESSAGE("skipped: no usable cgroup hierarchy: " << m.problem());
    return;
  }
  CHECK(fs::path(info.track_root).filename() == "toposched");
  CHECK(fs::exists(fs::path(info.track_root).parent_path() / "cgroup.procs"));
  if (info.mode == CgroupMode::kV2) {
    CHECK(info.freezer);
    // GPUs are isolated by a v1 devices hierarchy mounted beside, else by a
    // BPF device program where the kernel loads one for us.
    if (fs::exists("/sys/fs/cgroup/devices/devices.deny")) {
      CHECK(info.gpu_devices.find("devices.deny") == 0);
    } else {
      CHECK((info.gpu_devices.empty() || info.gpu_devices == "BPF device program (cgroup v2)"));
    }
  }
  CHECK(!info.summary.empty());

  auto bad = CgroupManager::Detect(CgroupOptions{"/tmp/not-a-cgroup"});
  CHECK(!bad.usable());
  CHECK(bad.problem().find("cgroup_root /tmp/not-a-cgroup") != std::string::npos);
  auto off = CgroupManager::Detect(CgroupOptions{"none"});
  CHECK(!off.usable());
  CHECK(off.Describe().summary.find("process group only") != std::string::npos);
}

TEST_CASE("setsid and a double fork do not survive Stop (the node's cgroup layout)") {
  NothingSurvivesStop(TestCgroupRoot::Kind::kDetected);
}

TEST_CASE("setsid and a double fork do not survive Stop (v1 freezer)") {
  if (!fs::exists("/sys/fs/cgroup/freezer/cgroup.procs")) {
    MESSAGE("skipped: no v1 freezer hierarchy here");
    return;
  }
  NothingSurvivesStop(TestCgroupRoot::Kind::kV1Freezer);
}

TEST_CASE("what a rank leaves behind when it exits is ended with it") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", kLeaverScript);
  REQUIRE(sup.Launch(sb.Job("leaver", script, 1)).ok());
  const std::string cg = sup.CgroupPath("leaver");
  auto evs = PollUntil(sup, Finished("leaver"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "leaver"));
  pid_t daemon = ReadPidFile(sb.out + "/daemon.pid");
  REQUIRE(daemon > 0);
  CHECK(WaitGone(daemon, 2000));
  CHECK(!fs::exists(cg));
}

TEST_CASE("a launch in steps owns its cgroup: the earlier run's clean-up cannot touch it") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  // The first run's rank leaves a daemon behind and exits: its exit is
  // seen while the daemon still holds the job's cgroup.
  auto leaver = WriteScript(sb.t / "rank.sh", kLeaverScript);
  REQUIRE(sup.Launch(sb.Job("again", leaver, 1)).ok());
  auto exited = [](const std::vector<SupervisorEvent>& evs) {
    int n = 0;
    for (const auto& e : evs) n += e.kind == EventKind::kRankExited && e.job_id == "again";
    return n;
  };
  auto evs = PollUntil(sup, [&](const auto& seen) { return exited(seen) > 0; });
  REQUIRE(exited(evs) == 1);
  REQUIRE_FALSE(HasEvent(evs, EventKind::kJobFinished, "again"));
  const pid_t daemon = ReadPidFile(sb.out + "/daemon.pid");
  REQUIRE(daemon > 0);
  // The next run in three steps, as the agent makes it, the event loop's
  // Poll() between them: the earlier run's leftovers and cgroup are the
  // launch's to remove, so Poll() neither removes the new cgroup nor kills
  // the new ranks in it as leftovers.
  auto sleeper = WriteScript(sb.t / "sleep.sh", "exec sleep 30");
  topo::core::Result<StartingLaunch> prepared = sup.PrepareLaunch(sb.Job("again", sleeper, 2));
  REQUIRE_MESSAGE(prepared.ok(), prepared.message());
  for (auto& e : sup.Poll()) evs.push_back(std::move(e));
  REQUIRE_MESSAGE(prepared.value().Run().ok(), "run");
  auto poll_for = [&](int ms) {
    for (int waited = 0; waited < ms; waited += 20) {
      for (auto& e : sup.Poll()) evs.push_back(std::move(e));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  poll_for(300);
  REQUIRE(sup.FinishLaunch(std::move(prepared).value()).ok());
  poll_for(300);
  CHECK(exited(evs) == 1);  // the first run's rank alone
  CHECK(sup.List(true).size() == 2);
  CHECK(WaitGone(daemon, 2000));
  REQUIRE(sup.Stop("again", 0).ok());
  evs = PollUntil(sup, Finished("again"));
  CHECK(HasEvent(evs, EventKind::kJobFinished, "again"));
}

TEST_CASE("a launch whose second rank fails leaves no process of the first running") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", kEscapeScript);
  // Rank 1's log cannot be opened: a directory sits at its path.
  fs::create_directories(sb.t / "logs/half/rank-1.log");
  const std::string job_env = "TOPO_JOB_ID=half";
  auto st = sup.Launch(sb.Job("half", script, 2));
  REQUIRE(!st.ok());
  CHECK(st.message().find("rank 1: cannot open the log") != std::string::npos);
  CHECK(st.message().find("1 rank(s) already started were killed") != std::string::npos);
  CHECK(sup.List(false).empty());
  CHECK(ProcessesWithEnv(job_env).empty());
  CHECK(!fs::exists(fs::path(sb.cgroup.root()) / "job-half"));
  // What rank 0 managed to record before it died is gone too.
  std::istringstream ss(ReadFile(sb.out + "/pids-0"));
  long v;
  while (ss >> v) CHECK(WaitGone(static_cast<pid_t>(v), 2000));
}

TEST_CASE("a launch whose first rank fails starts nothing, and the job launches again later") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", kEscapeScript);
  fs::create_directories(sb.t / "logs/first/rank-0.log");
  auto st = sup.Launch(sb.Job("first", script, 3));
  REQUIRE(!st.ok());
  CHECK(st.message().find("rank 0: cannot open the log") != std::string::npos);
  CHECK(st.message().find("already started") == std::string::npos);
  CHECK(sup.List(false).empty());
  CHECK(ProcessesWithEnv("TOPO_JOB_ID=first").empty());
  CHECK(!fs::exists(fs::path(sb.cgroup.root()) / "job-first"));
  // Nothing of the failed launch is left to block the next one.
  fs::remove_all(sb.t / "logs/first/rank-0.log");
  REQUIRE(sup.Launch(sb.Job("first", script, 3)).ok());
  CHECK(sup.List(false).size() == 3);
  REQUIRE(sup.Stop("first", 0).ok());
  PollUntil(sup, Finished("first"));
  CHECK(ProcessesWithEnv("TOPO_JOB_ID=first").empty());
}

TEST_CASE("a restarted agent adopts a job by its cgroup and Stop ends all of it") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  auto script = WriteScript(sb.t / "rank.sh", kEscapeScript);
  auto first = std::make_unique<RankSupervisor>(sb.Options());
  REQUIRE(first->Launch(sb.Job("kept", script, 2)).ok());
  auto lost = sb.Job("lost", script, 1);
  lost.env["OUT_DIR"] = sb.out + "/lost";  // its pid files apart from kept's
  fs::create_directories(sb.out + "/lost");
  ::chmod((sb.out + "/lost").c_str(), 01777);
  REQUIRE(first->Launch(lost).ok());
  const std::string kept_cg = first->CgroupPath("kept");
  const std::string lost_cg = first->CgroupPath("lost");
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    auto p = RecordedPids(sb.out + "/pids-" + std::to_string(r), 3);
    REQUIRE(p.size() == 3);
    pids.insert(pids.end(), p.begin(), p.end());
  }
  const auto before = first->List();
  first.reset();  // the agent goes away; its ranks keep running

  // While no agent runs, job "lost" is killed and its cgroup removed; an
  // empty cgroup of a job nobody knows is left behind; and a state file
  // names a live process (this test) that is not in its job's cgroup.
  JobCgroup{sb.cgroup.info().mode, {lost_cg}}.KillAndRemove(3000);
  REQUIRE(!fs::exists(lost_cg));
  const fs::path orphan = fs::path(sb.cgroup.root()) / "job-orphan";
  fs::create_directories(orphan);
  const fs::path outsider_cg = fs::path(sb.cgroup.root()) / "job-outsider";
  fs::create_directories(outsider_cg);
  {
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream ss(line.substr(line.rfind(')') + 2));
    std::string f;
    for (int i = 3; i <= 21; ++i) ss >> f;
    uint64_t start = 0;
    ss >> start;
    std::ofstream out(sb.t / "state/jobs/outsider.json");
    out << R"({"job_id":"outsider","cgroup":{"version":)"
        << (sb.cgroup.info().mode == CgroupMode::kV2 ? 2 : 1) << R"(,"dirs":[")"
        << outsider_cg.string() << R"("],"live":true},"ranks":[{"rank":0,"local_rank":0,"pid":)"
        << ::getpid() << R"(,"start_time":)" << start << R"(,"running":true}]})";
  }

  RankSupervisor second(sb.Options());
  CHECK(!fs::exists(orphan));  // removed: empty and unknown
  std::vector<RankInfo> kept;
  for (const auto& r : second.List()) {
    if (r.job_id == "kept") kept.push_back(r);
  }
  REQUIRE(kept.size() == 2);
  for (size_t i = 0; i < kept.size(); ++i) {
    CHECK(kept[i].adopted);
    CHECK(kept[i].pid == before[i].pid);
  }
  CHECK(second.CgroupPath("kept") == kept_cg);
  auto evs = PollUntil(second, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kJobFinished, "lost") &&
           HasEvent(e, EventKind::kJobFinished, "outsider");
  });
  CHECK(HasEvent(evs, EventKind::kJobFinished, "lost"));
  CHECK(HasEvent(evs, EventKind::kJobFinished, "outsider"));
  CHECK(!HasEvent(evs, EventKind::kRankExited, "kept"));
  for (const auto& e : evs) {
    if (e.kind == EventKind::kRankExited) CHECK(!e.exit.exit_status_known);
  }
  CHECK(::kill(::getpid(), 0) == 0);  // the outsider was not signalled
  CHECK(!fs::exists(outsider_cg));    // its (empty) cgroup went with it

  REQUIRE(second.Stop("kept", 300).ok());
  evs = PollUntil(second, Finished("kept"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "kept"));
  for (pid_t p : pids) {
    CAPTURE(p);
    CHECK(WaitGone(p, 2000));
  }
  CHECK(ProcessesWithEnv("TOPO_JOB_ID=kept").empty());
  CHECK(!fs::exists(kept_cg));
}

TEST_CASE("every rank sees all the job's GPUs in local-rank order, LOCAL_RANK picks its own") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh",
                            "echo \"cvd=$CUDA_VISIBLE_DEVICES\"\n"
                            "set -- $(echo \"$CUDA_VISIBLE_DEVICES\" | tr , ' ')\n"
                            "shift \"$LOCAL_RANK\"\n"
                            "echo \"mine=$1\"");
  auto job = sb.Job("gpus", script, 2);
  // Given out of order: rank 1 has local rank 0 and GPU 5.
  job.ranks = {LocalRankSpec{0, 1, {2}}, LocalRankSpec{1, 0, {5}}};
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("gpus"));
  const std::string l0 = ReadFile(sup.LogPath("gpus", 0));
  const std::string l1 = ReadFile(sup.LogPath("gpus", 1));
  CHECK(l0.find("cvd=5,2\n") != std::string::npos);
  CHECK(l1.find("cvd=5,2\n") != std::string::npos);
  CHECK(l1.find("mine=5\n") != std::string::npos);  // local rank 0
  CHECK(l0.find("mine=2\n") != std::string::npos);  // local rank 1
  auto env = RankEnvironment(job, job.ranks[0], "/ck");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "5,2");
  CHECK(env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID");  // the order NVML's numbers count in
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env.count("TOPO_ARRAY_JOB_ID") == 0);  // not a task of an array
  auto task = job;
  task.array_job = 40;
  task.array_task = 7;
  for (const auto& e :
       {RankEnvironment(task, task.ranks[0], "/ck"), NodeEnvironment(task, "/ck")}) {
    CHECK(e.at("TOPO_ARRAY_JOB_ID") == "40");
    CHECK(e.at("TOPO_ARRAY_TASK_ID") == "7");
  }

  // A rank with two GPUs, a GPU twice, or sparse local ranks break LOCAL_RANK.
  auto bad = job;
  bad.ranks = {LocalRankSpec{0, 0, {2, 3}}, LocalRankSpec{1, 1, {5}}};
  CHECK(sup.Launch(bad).message().find("a rank drives one GPU") != std::string::npos);
  bad.ranks = {LocalRankSpec{0, 0, {2}}, LocalRankSpec{1, 1, {2}}};
  CHECK(!sup.Launch(bad).ok());
  bad.ranks = {LocalRankSpec{0, 0, {2}}, LocalRankSpec{1, 3, {5}}};
  CHECK(sup.Launch(bad).message().find("0..LOCAL_WORLD_SIZE-1") != std::string::npos);
  bad.ranks = {LocalRankSpec{0, 0, {2}}, LocalRankSpec{1, 1, {}}};
  CHECK(!sup.Launch(bad).ok());
}

TEST_CASE("limits land where the node enforces them, the others are named in the log") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  const std::string dev = FakeGpuDevices(sb.t / "dev", 2);
  auto opt = sb.Options();
  opt.gpu_device_dir = dev;
  RankSupervisor sup(opt);
  const CgroupInfo& info = sup.Cgroups();
  MESSAGE("enforced here: " << info.summary);
  auto script = WriteScript(
      sb.t / "rank.sh",
      "for g in 0 1; do if head -c1 \"$DEV/nvidia$g\" >/dev/null 2>\"$OUT_DIR/err$g\"; then "
      "echo \"nvidia$g=opened\"; else echo \"nvidia$g=$(cat \"$OUT_DIR/err$g\")\"; fi; done\n"
      "cat /proc/self/cgroup > \"$OUT_DIR/cgroups\"");
  auto job = sb.Job("lim", script, 1);
  job.env["DEV"] = dev;
  job.ranks[0].gpus = {1};
  job.limits.memory_bytes = 256ll << 20;
  job.limits.cpus = 0.5;
  job.limits.restrict_gpu_devices = true;
  REQUIRE(sup.Launch(job).ok());
  auto evs = PollUntil(sup, Finished("lim"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "lim"));
  const std::string log = ReadFile(sup.LogPath("lim", 0));
  CAPTURE(log);
  const std::string cgroups = ReadFile(sb.out + "/cgroups");
  CAPTURE(cgroups);
  // Where the memory limit went: read it back from the rank's own cgroup
  // (the rank recorded /proc/self/cgroup; the cgroup itself is gone now, so
  // check the record and the log's absence of a "not enforced" note).
  if (info.memory.empty()) {
    CHECK(log.find("memory limit of 268435456 bytes is not enforced") != std::string::npos);
  } else {
    CHECK(log.find("memory limit") == std::string::npos);
    if (info.memory.find("v1") != std::string::npos) {
      CHECK(cgroups.find(":memory:") != std::string::npos);
      CHECK(cgroups.find("/job-lim") != std::string::npos);
    }
  }
  if (info.cpu.empty()) {
    CHECK(log.find("CPU limit of") != std::string::npos);
  } else {
    CHECK(log.find("CPU limit") == std::string::npos);
  }
  if (info.gpu_devices.empty()) {
    CHECK(log.find("GPU isolation is CUDA_VISIBLE_DEVICES only") != std::string::npos);
    CHECK(log.find("nvidia0=opened") == std::string::npos);  // no driver: ENXIO either way
  } else {
    CHECK(log.find("nvidia0=") != std::string::npos);
    CHECK(log.find("Operation not permitted") != std::string::npos);  // denied by the cgroup
    // nvidia1 is allowed: it reaches the (absent) driver.
    CHECK(log.find("nvidia1=head: cannot open") != std::string::npos);
    CHECK(log.find("No such device") != std::string::npos);
  }
}

TEST_CASE("on cgroup v2 alone a BPF device program refuses the job's other GPUs, nothing else") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  // Four fake GPUs, and a block device with nvidia0's numbers: the program
  // refuses character devices only.
  const std::string dev = FakeGpuDevices(sb.t / "dev", 4);
  REQUIRE(::mknod((dev + "/block0").c_str(), S_IFBLK | 0666, makedev(195, 0)) == 0);
  ::chmod((dev + "/block0").c_str(), 0666);
  // A name whose number no int holds is not a GPU (and not a crash).
  REQUIRE(::mknod((dev + "/nvidia99999999999999").c_str(), S_IFCHR | 0666, makedev(195, 7)) == 0);
  auto opt = sb.Options();
  opt.gpu_device_dir = dev;
  opt.use_v1_cgroup_controllers = false;  // as on a node with cgroup v2 alone
  RankSupervisor sup(opt);
  const CgroupInfo& info = sup.Cgroups();
  MESSAGE("enforced here: " << info.summary);
  if (info.mode != CgroupMode::kV2) {
    MESSAGE("skipped: no cgroup v2 on this node");
    return;
  }
  CHECK(info.v1_roots.empty());
  if (info.gpu_devices.empty()) {
    MESSAGE("skipped: this kernel refuses BPF device programs to the agent");
    return;
  }
  CHECK(info.gpu_devices == "BPF device program (cgroup v2)");
  auto script = WriteScript(
      sb.t / "rank.sh",
      "for d in nvidia0 nvidia1 nvidia2 nvidia3 block0 null; do f=\"$DEV/$d\"; "
      "[ $d = null ] && f=/dev/null; if head -c1 \"$f\" >/dev/null 2>\"$OUT_DIR/err\"; then "
      "echo \"$d=opened\"; else echo \"$d=$(cat \"$OUT_DIR/err\")\"; fi; done\n");
  auto job = sb.Job("bpf", script, 1);
  job.env["DEV"] = dev;
  job.ranks[0].gpus = {2};
  job.limits.restrict_gpu_devices = true;
  REQUIRE(sup.Launch(job).ok());
  auto evs = PollUntil(sup, Finished("bpf"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "bpf"));
  const std::string log = ReadFile(sup.LogPath("bpf", 0));
  CAPTURE(log);
  CHECK(log.find("GPU isolation") == std::string::npos);  // no "not enforced" note
  auto line = [&](const std::string& d) {
    const auto at = log.find("\n" + d + "=");
    if (at == std::string::npos) return std::string();
    return log.substr(at + 1, log.find('\n', at + 1) - at - 1);
  };
  // The other GPUs (first, middle and last of the list): refused by the cgroup.
  for (const char* d : {"nvidia0", "nvidia1", "nvidia3"}) {
    CAPTURE(d);
    CHECK(line(d).find("Operation not permitted") != std::string::npos);
  }
  // The job's own GPU and the block device reach the (absent) driver.
  CHECK(line("nvidia2").find("No such device") != std::string::npos);
  CHECK(line("block0").find("Operation not permitted") == std::string::npos);
  CHECK_FALSE(line("block0").empty());
  CHECK(line("null") == "null=opened");

  // Without the restriction, nothing is refused.
  job.job_id = "bpf-off";
  job.limits.restrict_gpu_devices = false;
  REQUIRE(sup.Launch(job).ok());
  evs = PollUntil(sup, Finished("bpf-off"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "bpf-off"));
  const std::string off = ReadFile(sup.LogPath("bpf-off", 0));
  CAPTURE(off);
  CHECK(off.find("Operation not permitted") == std::string::npos);
  CHECK(off.find("nvidia0=") != std::string::npos);
}

TEST_CASE("limit files hold the values asked for while the job runs") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  const CgroupInfo& info = sup.Cgroups();
  if (info.memory.empty() && info.cpu.empty()) {
    MESSAGE("skipped: this node enforces neither memory nor CPU limits");
    return;
  }
  auto job = sb.Job("files", "/bin/sleep", 1);
  job.argv = {"/bin/sleep", "30"};
  job.limits.memory_bytes = 128ll << 20;
  job.limits.cpus = 1.5;
  REQUIRE(sup.Launch(job).ok());
  const pid_t pid = sup.List()[0].pid;
  // The rank's cgroups, from /proc/PID/cgroup, mapped to the mounts.
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, mem_dir, cpu_dir;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    const std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (ctrls == "memory") mem_dir = "/sys/fs/cgroup/memory" + path;
    if (ctrls == "cpu" || ctrls == "cpu,cpuacct") cpu_dir = "/sys/fs/cgroup/" + ctrls + path;
  }
  if (info.memory.find("v1") != std::string::npos) {
    CHECK(ReadFile(mem_dir + "/memory.limit_in_bytes") == std::to_string(128ll << 20) + "\n");
  } else if (!info.memory.empty()) {
    CHECK(ReadFile(sup.CgroupPath("files") + "/memory.max") == std::to_string(128ll << 20) + "\n");
  }
  if (info.cpu.find("v1") != std::string::npos) {
    CHECK(ReadFile(cpu_dir + "/cpu.cfs_quota_us") == "150000\n");
    CHECK(ReadFile(cpu_dir + "/cpu.cfs_period_us") == "100000\n");
  } else if (!info.cpu.empty()) {
    CHECK(ReadFile(sup.CgroupPath("files") + "/cpu.max") == "150000 100000\n");
  }
  REQUIRE(sup.Stop("files", 200).ok());
  PollUntil(sup, Finished("files"));
  if (!mem_dir.empty()) CHECK(!fs::exists(mem_dir));
}

TEST_CASE("a job that forks far more than its pids limit cannot exceed it") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  RankSupervisor sup(sb.Options());
  const CgroupInfo& info = sup.Cgroups();
  if (info.pids.empty()) {
    MESSAGE("skipped: this node has no pids controller (" << info.summary << ")");
    return;
  }
  // 300 forks, each child sleeping: a fork past the limit fails inside the
  // job (EAGAIN); the rank reports how many of each it saw, then waits.
  const std::string bomb = sb.t / "bomb.py";
  {
    std::ofstream out(bomb);
    out << "#!/usr/bin/python3\n"
           "import os, time\n"
           "ok = failed = 0\n"
           "for i in range(300):\n"
           "    try:\n"
           "        pid = os.fork()\n"
           "    except OSError:\n"
           "        failed += 1\n"
           "        continue\n"
           "    if pid == 0:\n"
           "        time.sleep(60)\n"
           "        os._exit(0)\n"
           "    ok += 1\n"
           "with open(os.environ['OUT_DIR'] + '/forks.tmp', 'w') as f:\n"
           "    f.write('forked=%d failed=%d\\n' % (ok, failed))\n"
           "os.rename(os.environ['OUT_DIR'] + '/forks.tmp', os.environ['OUT_DIR'] + '/forks')\n"
           "time.sleep(60)\n";
  }
  ::chmod(bomb.c_str(), 0755);
  auto job = sb.Job("bomb", bomb, 1);
  job.limits.pids_max = 40;
  REQUIRE(sup.Launch(job).ok());
  REQUIRE(WaitForFile(sb.out + "/forks", 30000));
  const std::string forks = ReadFile(sb.out + "/forks");
  CAPTURE(forks);
  int forked = -1, failed = -1;
  REQUIRE(std::sscanf(forks.c_str(), "forked=%d failed=%d", &forked, &failed) == 2);
  // The rank itself is one of the 40 tasks.
  CHECK(forked <= 39);
  CHECK(forked >= 1);
  CHECK(failed >= 300 - 39);
  // The limit file says so, and the job's tracking cgroup never holds more.
  const pid_t pid = sup.List()[0].pid;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, pids_dir;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (line.substr(a + 1, b - a - 1) == "pids")
      pids_dir = "/sys/fs/cgroup/pids" + line.substr(b + 1);
  }
  const std::string dir =
      info.pids.find("v1") != std::string::npos ? pids_dir : sup.CgroupPath("bomb");
  REQUIRE_FALSE(dir.empty());
  CHECK(ReadFile(dir + "/pids.max") == "40\n");
  CHECK(std::stoi(ReadFile(dir + "/pids.current")) <= 40);
  CHECK(sup.Launch(job).ok() == false);  // still running: no second launch
  const size_t members = JobCgroup{info.mode, {sup.CgroupPath("bomb")}}.Members().size();
  CHECK(members == static_cast<size_t>(forked) + 1);
  REQUIRE(sup.Stop("bomb", 200).ok());
  PollUntil(sup, Finished("bomb"));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("CgroupScope names the node and the scheduler, safe as one directory name") {
  const std::string a = CgroupScope("n0", "CA one");
  CHECK(a.rfind("n0.", 0) == 0);
  CHECK(a.size() == 3 + 12);
  CHECK(a == CgroupScope("n0", "CA one"));  // the same agent after a restart
  CHECK(a != CgroupScope("n0", "CA two"));  // another scheduler's n0
  CHECK(a != CgroupScope("n1", "CA one"));  // another node of this scheduler
  // Made safe, and two names that read the same once made safe still differ.
  const std::string odd = CgroupScope("rack/1.node:7", "CA one");
  CHECK(odd.rfind("rack_1_node_7.", 0) == 0);
  CHECK(odd != CgroupScope("rack_1_node_7", "CA one"));
  CHECK(CgroupScope(std::string(300, 'x'), "CA").size() == 64 + 1 + 12);
}

TEST_CASE("two agents on one host with one cgroup root never share a job's cgroup") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SKIP_WITHOUT_CGROUPS(sb);
  // Two nodes of one scheduler on this host, each with its own state: the
  // same job id runs on both.
  auto opt_a = sb.Options();
  opt_a.cgroup_scope = CgroupScope("n0", "CA");
  auto opt_b = sb.Options();
  opt_b.cgroup_scope = CgroupScope("n1", "CA");
  opt_b.state_dir = sb.t / "state-b";
  opt_b.log_dir = sb.t / "logs-b";
  opt_b.local_checkpoint_root = sb.t / "local-b";
  RankSupervisor a(opt_a);
  auto b = std::make_unique<RankSupervisor>(opt_b);
  auto sleeper = WriteScript(sb.t / "sleep.sh", "exec sleep 60");
  auto quick = WriteScript(sb.t / "quick.sh", "exit 0");
  REQUIRE(a.Launch(sb.Job("17", sleeper, 2)).ok());
  REQUIRE(b->Launch(sb.Job("17", quick, 1)).ok());
  CHECK(a.CgroupPath("17") != b->CgroupPath("17"));
  CHECK(fs::path(a.CgroupPath("17")).filename() == "job-17." + opt_a.cgroup_scope);
  // b's ranks end and b cleans up its cgroup: a's ranks run on.
  REQUIRE(HasEvent(PollUntil(*b, Finished("17")), EventKind::kJobFinished, "17"));
  CHECK_FALSE(fs::exists(b->CgroupPath("17")));
  const auto ranks = a.List();
  REQUIRE(ranks.size() == 2);
  for (const RankInfo& r : ranks) CHECK_FALSE(ProcessGone(r.pid));
  // An empty cgroup of b's scope b does not know is b's to remove at
  // start; a's (running) and another scope's empty one are left alone.
  const fs::path mine = fs::path(sb.cgroup.root()) / ("job-99." + opt_b.cgroup_scope);
  const fs::path theirs = fs::path(sb.cgroup.root()) / ("job-99." + CgroupScope("n2", "CA"));
  fs::create_directories(mine);
  fs::create_directories(theirs);
  b.reset();
  b = std::make_unique<RankSupervisor>(opt_b);
  CHECK_FALSE(fs::exists(mine));
  CHECK(fs::exists(theirs));
  CHECK(fs::exists(a.CgroupPath("17")));
  for (const RankInfo& r : a.List()) CHECK_FALSE(ProcessGone(r.pid));
  ::rmdir(theirs.c_str());
  REQUIRE(a.Stop("17", 100).ok());
  PollUntil(a, Finished("17"));
}
