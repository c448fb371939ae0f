// What the real node checks: MASTER_PORT with real sockets, the log reader
// against files a job could plant, and SupervisorRunner's classification
// of launch failures.

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "connection.hpp"
#include "harness.hpp"
#include "port_check.hpp"
#include "supervisor_runner.hpp"
#include "topo/agent/system_state.hpp"

using namespace topo;
using namespace topo::agent;
using namespace topo::agent::testing;
namespace fs = std::filesystem;

namespace {

// A TCP socket bound (and listening) on addr:0; its port.
struct Listener {
  explicit Listener(int family, bool any) {
    fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    int rc;
    if (family == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(any ? INADDR_ANY : INADDR_LOOPBACK);
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      socklen_t len = sizeof a;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      port = ntohs(a.sin_port);
    } else {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = any ? in6addr_any : in6addr_loopback;
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      socklen_t len = sizeof a;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      port = ntohs(a.sin6_port);
    }
    ok = rc == 0 && ::listen(fd, 4) == 0;
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int fd = -1;
  int port = 0;
  bool ok = false;
};

bool HaveIpv6() {
  Listener l(AF_INET6, false);
  return l.ok;
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/topo-agent-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE(
    "CheckTcpPortFree: a port held by a listener is busy, and named, once closed it is free") {
  Listener loopback(AF_INET, false);
  REQUIRE(loopback.ok);
  core::Status st = CheckTcpPortFree(loopback.port);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("port " + std::to_string(loopback.port) + " is in use") !=
        std::string::npos);
  loopback.Close();
  CHECK(CheckTcpPortFree(loopback.port).ok());

  Listener any(AF_INET, true);
  REQUIRE(any.ok);
  CHECK_FALSE(CheckTcpPortFree(any.port).ok());

  if (HaveIpv6()) {
    Listener v6(AF_INET6, false);
    REQUIRE(v6.ok);
    st = CheckTcpPortFree(v6.port);
    CHECK_FALSE(st.ok());
    CHECK(st.message().find("IPv6") != std::string::npos);
  }
  CHECK_FALSE(CheckTcpPortFree(0).ok());
  CHECK_FALSE(CheckTcpPortFree(70000).ok());
}

TEST_CASE("a start whose MASTER_PORT a real socket holds fails as launch_failed naming the port") {
  Listener held(AF_INET, true);
  REQUIRE(held.ok);
  Harness h;
  h.runner.port_check = [](int port) { return CheckTcpPortFree(port); };
  h.Register();
  proto::Start s = MakeStart(77, 0, {0, 1});
  s.master_port = held.port;
  h.Send(s);
  CHECK(h.runner.launches.empty());
  const auto failed = h.link.Of<proto::LaunchFailed>();
  REQUIRE(failed.size() == 1);
  CHECK_FALSE(failed[0].permanent);
  CHECK(failed[0].reason.find("MASTER_PORT " + std::to_string(held.port) +
                              " is in use on node n0") != std::string::npos);

  held.Close();
  s.restart_count = 1;
  h.Send(s);
  CHECK(h.runner.launches.size() == 1);
}

TEST_CASE("ReadLogPiece reads pieces of a plain file and refuses what a job could plant") {
  TempDir dir;
  const std::string log = dir.path + "/rank-0.log";
  WriteFile(log, "0123456789");
  proto::LogsReply r = ReadLogPiece(log, 2, 5);
  REQUIRE_FALSE(r.error);
  CHECK(r.data == "23456");
  CHECK(r.offset == 2);
  CHECK(r.next_offset == 7);
  CHECK(r.size == 10);
  r = ReadLogPiece(log, -3, 100);
  CHECK(r.data == "789");
  CHECK(r.offset == 7);
  r = ReadLogPiece(log, 50, 100);
  CHECK(r.data == "");
  CHECK(r.offset == 10);

  const std::string secret = dir.path + "/agent-key.pem";
  WriteFile(secret, "PRIVATE KEY");
  const std::string link = dir.path + "/rank-1.log";
  fs::create_symlink(secret, link);
  r = ReadLogPiece(link, 0, 100);
  REQUIRE(r.error);
  CHECK(r.error->find("symbolic link") != std::string::npos);
  CHECK_FALSE(r.data);

  const std::string hard = dir.path + "/rank-2.log";
  fs::create_hard_link(secret, hard);
  r = ReadLogPiece(hard, 0, 100);
  REQUIRE(r.error);
  CHECK(r.error->find("one link") != std::string::npos);

  const std::string fifo = dir.path + "/rank-3.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = ReadLogPiece(fifo, 0, 100);  // must not block
  REQUIRE(r.error);

  r = ReadLogPiece(dir.path + "/rank-9.log", 0, 100);
  REQUIRE(r.error);
  CHECK(r.error->find("no log file on this node") != std::string::npos);
}

namespace {

// A supervisor's options in `dir`, without cgroups, allowing root jobs;
// `persistent`: with that tier.
SupervisorOptions RunnerTestOptions(const TempDir& dir, bool persistent) {
  SupervisorOptions so;
  so.state_dir = dir.path + "/supervisor";
  so.log_dir = dir.path + "/logs";
  so.local_checkpoint_root = dir.path + "/checkpoints";
  if (persistent) so.persistent_checkpoint_root = dir.path + "/persistent";
  so.cgroup_root = "none";
  so.allow_root_jobs = true;
  return so;
}

// Launch() again, after a Poll() as the agent's loop makes, until it is not
// busy; `busy`: each new busy reason seen; `events`: what the polls gave.
LaunchOutcome LaunchWaiting(SupervisorRunner& runner, const JobLaunch& l, int64_t step,
                            std::vector<std::string>* busy = nullptr,
                            std::vector<SupervisorEvent>* events = nullptr) {
  LaunchOutcome out = runner.Launch(l, step);
  for (int i = 0; i < 1000 && out.kind == LaunchOutcome::Kind::kBusy; ++i) {
    if (busy && (busy->empty() || busy->back() != out.reason)) busy->push_back(out.reason);
    ::usleep(10000);
    for (SupervisorEvent& e : runner.Poll()) {
      if (events) events->push_back(std::move(e));
    }
    out = runner.Launch(l, step);
  }
  return out;
}

}  // namespace

TEST_CASE("SupervisorRunner: missing, root and low-uid accounts fail for good, staging") {
  TempDir dir;
  SupervisorOptions so = RunnerTestOptions(dir, /*persistent=*/true);
  so.allow_root_jobs = false;
  std::optional<RankSupervisor> strict(std::in_place, so);
  std::optional<SupervisorRunner> runner(
      std::in_place, *strict,
      SupervisorRunnerOptions{true, so.local_checkpoint_root, so.persistent_checkpoint_root});
  CHECK(runner->HasPersistentTier());

  // The account is looked up off the caller's thread (NSS may wait for a
  // directory server): the first answer is "busy, starting", the failure
  // comes with the outcome, permanent.
  JobLaunch l;
  l.job_id = "5";
  l.argv = {"/bin/true"};
  l.unix_user = "topo-no-such-account-x";
  l.ranks = {LocalRankSpec{0, 0, {}}};
  LaunchOutcome out = runner->Launch(l, -1);
  CHECK(out.kind == LaunchOutcome::Kind::kBusy);
  CHECK(out.starting);
  out = LaunchWaiting(*runner, l, -1);
  CHECK(out.kind == LaunchOutcome::Kind::kFailed);
  CHECK(out.permanent);
  CHECK(out.reason.find("no Unix account 'topo-no-such-account-x'") != std::string::npos);
  CHECK(out.reason.find("accounts must exist on every node") != std::string::npos);

  l.unix_user = "root";
  out = LaunchWaiting(*runner, l, -1);
  CHECK(out.kind == LaunchOutcome::Kind::kFailed);
  CHECK(out.permanent);
  CHECK(out.reason.find("jobs may not run as root") != std::string::npos);
  CHECK(out.reason.find("--allow-root-jobs") != std::string::npos);
  CHECK(runner->Running().empty());
  // The same on a restart that stages its step: the staging thread looks
  // the account up (it copies as the account) and fails for good too.
  out = LaunchWaiting(*runner, l, 3);
  CHECK(out.kind == LaunchOutcome::Kind::kFailed);
  CHECK(out.permanent);
  CHECK(out.reason.find("jobs may not run as root") != std::string::npos);
  l.unix_user = "topo-no-such-account-x";
  out = LaunchWaiting(*runner, l, 3);
  CHECK(out.permanent);
  CHECK(out.reason.find("no Unix account 'topo-no-such-account-x'") != std::string::npos);
  // A system account (daemon: uid 1) is below the node's uid floor (1000 by
  // default): refused for good, at the start and when staging, whatever
  // the start says.
  l.unix_user = "daemon";
  l.allow_root = true;
  for (int64_t step : {int64_t{-1}, int64_t{3}}) {
    out = LaunchWaiting(*runner, l, step);
    CHECK(out.kind == LaunchOutcome::Kind::kFailed);
    CHECK(out.permanent);
    CHECK(out.reason.find("Unix account 'daemon' has uid 1 on node") != std::string::npos);
    CHECK(out.reason.find("below this node's floor of 1000") != std::string::npos);
    CHECK(out.reason.find("--min-job-uid") != std::string::npos);
  }
  l.allow_root = false;
  CHECK(runner->Running().empty());
  CHECK_FALSE(fs::exists(so.local_checkpoint_root + "/5"));
  runner.reset();
  strict.reset();

  if (::geteuid() != 0) return;  // the rest starts a rank as root
  l.unix_user = "root";
  so.allow_root_jobs = true;
  RankSupervisor sup(so);
  SupervisorRunner root_ok(sup, {true, so.local_checkpoint_root, so.persistent_checkpoint_root});
  // Step 3 only on the persistent tier: staged onto the local one, on a
  // thread of its own. The first answer is always "busy, staging" (the copy
  // has only just begun); later ones while it runs too; then it starts.
  const std::string step = so.persistent_checkpoint_root + "/5/step-3";
  fs::create_directories(step);
  WriteFile(step + "/state", "weights");
  WriteFile(step + "/COMPLETE", "3\n");
  out = root_ok.Launch(l, 3);
  CHECK(out.kind == LaunchOutcome::Kind::kBusy);
  CHECK(out.staging);
  CHECK(out.reason == "copying checkpoint step 3 from the persistent tier to this node");
  CHECK(root_ok.Underway("5") == out.reason);
  CHECK(root_ok.Running().empty());
  // Then the ranks start, also in the background; then it has started.
  std::vector<std::string> busy;
  std::vector<SupervisorEvent> events;
  out = LaunchWaiting(root_ok, l, 3, &busy, &events);
  REQUIRE_MESSAGE(out.kind == LaunchOutcome::Kind::kStarted, out.reason);
  REQUIRE_FALSE(busy.empty());
  CHECK(busy.back() == "starting 1 rank(s) of restart 0");
  CHECK(busy.front() != busy.back());  // staging first
  CHECK(out.restart_step == 3);
  CHECK(out.note.find("staged checkpoint step 3") != std::string::npos);
  CHECK(fs::exists(so.local_checkpoint_root + "/5/step-3/COMPLETE"));
  CHECK(root_ok.RestartCountOf("5") == 0);
  // The rank (/bin/true) ends; its exit comes through Poll.
  bool exited = false;
  for (const SupervisorEvent& e : events) exited |= e.kind == EventKind::kRankExited;
  for (int i = 0; i < 200 && !exited; ++i) {
    for (const SupervisorEvent& e : root_ok.Poll()) exited |= e.kind == EventKind::kRankExited;
    if (!exited) ::usleep(20000);
  }
  CHECK(exited);
  {
    std::ifstream in(so.local_checkpoint_root + "/5/step-3/state");
    std::string copied((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(copied == "weights");
  }
  // A copy that fails fails that launch once, with the reason; nothing runs.
  // (Job 6 runs as nobody, and the copy is made as the account: a
  // directory of the step only root can read stops it.)
  JobLaunch other = l;
  other.job_id = "6";
  other.unix_user = "nobody";
  const std::string step4 = so.persistent_checkpoint_root + "/6/step-4";
  fs::create_directories(step4 + "/private");
  WriteFile(step4 + "/private/state", "weights");
  WriteFile(step4 + "/COMPLETE", "4\n");
  fs::permissions(step4 + "/private", fs::perms::owner_all);
  out = LaunchWaiting(root_ok, other, 4);
  CHECK(out.kind == LaunchOutcome::Kind::kFailed);
  CHECK_FALSE(out.permanent);
  CHECK(out.reason.find("checkpoint step 4 could not be copied from the persistent tier") !=
        std::string::npos);
  CHECK(root_ok.Running().empty());
  // A copy's outcome that nobody comes back for is dropped by Poll() after
  // staging_keep_ms (the job moved on): the step it copied is on the local
  // tier, where the next start finds it without staging again.
  {
    SupervisorRunner forgetful(sup, {true, so.local_checkpoint_root, so.persistent_checkpoint_root,
                                     /*pids_max=*/0, /*staging_keep_ms=*/0});
    JobLaunch ten = l;
    ten.job_id = "10";
    fs::create_directories(so.persistent_checkpoint_root + "/10/step-2");
    WriteFile(so.persistent_checkpoint_root + "/10/step-2/COMPLETE", "2\n");
    out = forgetful.Launch(ten, 2);
    CHECK(out.staging);
    for (int i = 0; i < 500 && forgetful.Underway("10"); ++i) ::usleep(10000);
    REQUIRE_FALSE(forgetful.Underway("10"));
    (void)forgetful.Poll();
    out = LaunchWaiting(forgetful, ten, 2);
    REQUIRE_MESSAGE(out.kind == LaunchOutcome::Kind::kStarted, out.reason);
    CHECK(out.restart_step == 2);
    CHECK(out.note.empty());  // not "staged ...": that outcome was dropped
    for (int i = 0; i < 200 && !forgetful.Running().empty(); ++i) {
      (void)forgetful.Poll();
      ::usleep(20000);
    }
    CHECK(forgetful.Running().empty());
  }
  // A step on neither tier: looked for on the persistent tier off the
  // caller's thread (the first answer is "staging"), then started without
  // TOPO_RESTART_STEP, and said so.
  l.restart_count = 1;
  out = root_ok.Launch(l, 9);
  CHECK(out.kind == LaunchOutcome::Kind::kBusy);
  CHECK(out.staging);
  out = LaunchWaiting(root_ok, l, 9);
  REQUIRE_MESSAGE(out.kind == LaunchOutcome::Kind::kStarted, out.reason);
  CHECK_FALSE(out.restart_step);
  CHECK(out.note.find("neither checkpoint tier") != std::string::npos);
  for (int i = 0; i < 200 && !root_ok.Running().empty(); ++i) {
    (void)root_ok.Poll();
    ::usleep(20000);
  }
  (void)root_ok.Poll();
}

TEST_CASE("SupervisorRunner: ranks start off the caller's thread, a stop meanwhile reaches them") {
  if (::geteuid() != 0) return;  // ranks as root and as nobody
  TempDir dir;
  const SupervisorOptions so = RunnerTestOptions(dir, /*persistent=*/false);
  RankSupervisor sup(so);
  SupervisorRunner runner(sup, {true, so.local_checkpoint_root, ""});

  JobLaunch l;
  l.job_id = "7";
  l.argv = {"/bin/sleep", "30"};
  l.unix_user = "root";
  l.ranks = {LocalRankSpec{0, 0, {}}, LocalRankSpec{1, 1, {}}};
  l.parallelism.dp = 2;
  LaunchOutcome out = runner.Launch(l, -1);
  // The first answer is always "busy, starting": the ranks start on a thread.
  REQUIRE(out.kind == LaunchOutcome::Kind::kBusy);
  CHECK(out.starting);
  CHECK(out.reason == "starting 2 rank(s) of restart 0");
  CHECK(runner.Underway("7") == out.reason);
  // They are the node's already: listed without a pid until handed over.
  std::vector<RankInfo> running = runner.Running();
  REQUIRE(running.size() == 2);
  CHECK(running[0].job_id == "7");
  CHECK(running[1].rank == 1);
  CHECK(running[0].pid == 0);
  // The thread wakes the loop when it is done.
  pollfd wake{sup.wake_fd(), POLLIN, 0};
  CHECK(::poll(&wake, 1, 30000) == 1);
  // A stop now is kept until the ranks are the supervisor's, then sent.
  CHECK(runner.Stop("7", 100).ok());
  CHECK(runner.Underway("7"));
  std::vector<RankExit> exits;
  for (int i = 0; i < 500 && exits.size() < 2; ++i) {
    for (const SupervisorEvent& e : runner.Poll()) {
      if (e.kind == EventKind::kRankExited) exits.push_back(e.exit);
    }
    if (exits.size() < 2) ::usleep(10000);
  }
  CHECK_FALSE(runner.Underway("7"));
  REQUIRE(exits.size() == 2);
  for (const RankExit& x : exits) {
    CHECK(x.stopped);
    CHECK(x.pid > 0);
  }
  CHECK(runner.Running().empty());

  // A failure before exec, found on the thread, is the launch's failure,
  // and nothing of it runs: nobody cannot enter its checkpoint directory's
  // parent (root's, 0700).
  JobLaunch blocked = l;
  blocked.job_id = "8";
  blocked.unix_user = "nobody";
  fs::create_directories(dir.path + "/private");
  fs::permissions(dir.path + "/private", fs::perms::owner_all);
  blocked.local_checkpoint_dir = dir.path + "/private/8";
  out = LaunchWaiting(runner, blocked, -1);
  CHECK(out.kind == LaunchOutcome::Kind::kFailed);
  CHECK_FALSE(out.permanent);
  CHECK(out.reason.find("job 8") != std::string::npos);
  CHECK(runner.Running().empty());
  CHECK(sup.List(false).empty() == false);  // job 7's ranks, known and ended

  // An agent about to exit waits for a launch still starting: its ranks are
  // the supervisor's then (to stop, or to leave for the next agent).
  l.job_id = "9";
  l.argv = {"/bin/sleep", "30"};
  out = runner.Launch(l, -1);
  CHECK(out.starting);
  runner.WaitForLaunches();
  CHECK_FALSE(runner.Underway("9"));
  int nine = 0;
  for (const RankInfo& r : sup.List(true)) nine += r.job_id == "9" && r.pid > 0;
  CHECK(nine == 2);
  out = runner.Launch(l, -1);
  CHECK(out.kind == LaunchOutcome::Kind::kStarted);
  CHECK(runner.Stop("9", 0).ok());
  for (int i = 0; i < 500 && !runner.Running().empty(); ++i) {
    (void)runner.Poll();
    ::usleep(10000);
  }
  CHECK(runner.Running().empty());
}

TEST_CASE("SystemStopping: systemd's 'stopping' alone, from a real command, within its bound") {
  TempDir dir;
  auto fake = [&](const std::string& name, const std::string& body) {
    const std::string path = dir.path + "/" + name;
    WriteFile(path, "#!/bin/sh\n" + body + "\n");
    fs::permissions(path, fs::perms::owner_all);
    return path;
  };
  // It asks `is-system-running`, and only "stopping" means the machine goes.
  CHECK(SystemStopping(fake("stopping", "[ \"$1\" = is-system-running ] && echo stopping")));
  CHECK_FALSE(SystemStopping(fake("wrong-verb", "[ \"$1\" = is-active ] && echo stopping")));
  for (const char* state : {"running", "degraded", "starting", "offline", "stopping-not"}) {
    CAPTURE(state);
    CHECK_FALSE(SystemStopping(fake("state", std::string("echo ") + state + "; exit 1")));
  }
  CHECK_FALSE(SystemStopping(dir.path + "/no-such-systemctl"));
  // No live process of a group is left (a killed one may wait as a zombie
  // for whoever reaps orphans here); the group is the fake's shell's pid,
  // which it wrote to `file`.
  auto group_gone = [](const std::string& file) {
    std::ifstream in(file);
    long group = 0;
    in >> group;
    REQUIRE(group > 1);
    auto live = [group] {
      int n = 0;
      for (const auto& entry : fs::directory_iterator("/proc")) {
        std::ifstream stat(entry.path() / "stat");
        std::string line;
        if (!std::getline(stat, line)) continue;
        const size_t close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 1));
        char state = 0;
        long ppid = 0, pg = 0;
        rest >> state >> ppid >> pg;
        n += pg == group && state != 'Z' && state != 'X';
      }
      return n;
    };
    for (int i = 0; i < 100 && live() > 0; ++i) ::usleep(20000);
    return live() == 0;
  };
  // An answer after the bound is no answer: the command is killed with
  // what it started (its sleep would otherwise hold the pipe open).
  const std::string group_file = dir.path + "/group";
  CHECK_FALSE(
      SystemStopping(fake("late", "echo $$ > " + group_file + "; sleep 30; echo stopping"), 200));
  CHECK(group_gone(group_file));
  // More output than any answer: not read on, and not waited for either.
  CHECK_FALSE(SystemStopping(
      fake("chatty", "echo $$ > " + group_file + "; head -c 300 /dev/zero | tr '\\0' x; sleep 30"),
      20000));
  CHECK(group_gone(group_file));
  CHECK(SystemStopping(fake("in-time", "sleep 0.1; echo stopping"), 20000));
  // This machine's own systemctl, where there is one: not shutting down.
  if (fs::exists("/usr/bin/systemctl")) CHECK_FALSE(SystemStopping());
}

TEST_CASE("--server: one or several scheduler addresses, each wss://HOST:PORT[/PATH]") {
  core::Result<std::vector<topo::agent::ConnectionTarget>> two =
      topo::agent::ParseServerList("wss://10.0.0.1:7443/v1/agent, wss://[::1]:7443");
  REQUIRE_MESSAGE(two.ok(), two.message());
  REQUIRE(two.value().size() == 2);
  CHECK(two.value()[0].url.host == "10.0.0.1");
  CHECK(two.value()[0].url_text == "wss://10.0.0.1:7443/v1/agent");
  CHECK(two.value()[1].url.host == "::1");
  CHECK(two.value()[1].url.path == "/v1/agent");
  for (const char* bad : {"", "wss://a:1,", "https://a:1", "wss://a:1,wss://b", "wss://a:x"}) {
    CAPTURE(bad);
    core::Result<std::vector<topo::agent::ConnectionTarget>> r = topo::agent::ParseServerList(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("is not wss://HOST:PORT/PATH") != std::string::npos);
  }
  std::string many;
  for (int i = 0; i < 17; ++i) many += (i ? ",wss://h:" : "wss://h:") + std::to_string(7000 + i);
  CHECK(topo::agent::ParseServerList(many).message().find("at most 16") != std::string::npos);
}

TEST_CASE("SupervisorRunner: a run's end removes its node-local checkpoints once persisted") {
  if (::geteuid() != 0) return;  // starts a rank as root
  TempDir dir;
  SupervisorOptions so = RunnerTestOptions(dir, /*persistent=*/true);
  RankSupervisor sup(so);
  SupervisorRunner runner(sup, {true, so.local_checkpoint_root, so.persistent_checkpoint_root});
  JobLaunch l;
  l.job_id = "11";
  l.argv = {"/bin/sh", "-c",
            "mkdir -p \"$TOPO_CHECKPOINT_DIR/step-1\" && echo w > \"$TOPO_CHECKPOINT_DIR/step-1/w\""
            " && echo 1 > \"$TOPO_CHECKPOINT_DIR/step-1/COMPLETE\""};
  l.unix_user = "root";
  l.ranks = {LocalRankSpec{0, 0, {}}};
  std::vector<SupervisorEvent> events;
  REQUIRE(LaunchWaiting(runner, l, -1, nullptr, &events).kind == LaunchOutcome::Kind::kStarted);
  const SupervisorEvent* finished = nullptr;
  for (int i = 0; i < 500 && !finished; ++i) {
    for (SupervisorEvent& e : runner.Poll()) events.push_back(std::move(e));
    for (const SupervisorEvent& e : events) {
      if (e.kind == EventKind::kJobFinished) finished = &e;
    }
    if (!finished) ::usleep(20000);
  }
  REQUIRE(finished != nullptr);
  CHECK(finished->message.find("its node-local checkpoints removed") != std::string::npos);
  // The step reached the persistent tier before the run was called ended.
  bool persisted = false;
  for (const SupervisorEvent& e : events) {
    persisted |= e.kind == EventKind::kCheckpointPersisted && e.step == 1;
  }
  CHECK(persisted);
  CHECK_FALSE(fs::exists(so.local_checkpoint_root + "/11"));
  CHECK(fs::exists(so.persistent_checkpoint_root + "/11/step-1/COMPLETE"));
}
