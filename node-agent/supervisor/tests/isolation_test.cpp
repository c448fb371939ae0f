// The trust boundary with real accounts: a rank runs as its account, with a
// clean environment and no inherited descriptors, and cannot reach another
// job's files or the supervisor's state.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "test_util.hpp"
#include "topo/agent/account.hpp"
#include "topo/agent/supervisor.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

std::set<long> Numbers(const std::string& text) {
  std::set<long> out;
  std::istringstream ss(text);
  long v;
  while (ss >> v) out.insert(v);
  return out;
}

// The value after "KEY=" on a line of the log.
std::string LogValue(const std::string& log, const std::string& key) {
  std::istringstream ss(log);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

TEST_CASE("a rank runs as its account, with the account's groups") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh",
                            "echo \"uid=$(id -u)\"; echo \"euid=$(id -u)\"; echo \"gid=$(id -g)\"; "
                            "echo \"groups=$(id -G)\"; echo \"pwd=$(pwd)\"");
  REQUIRE(sup.Launch(sb.Job("who", script, 1)).ok());
  auto evs = PollUntil(sup, Finished("who"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "who"));
  auto acct = ResolveUnixAccount(sb.user.name());
  REQUIRE(acct.ok());
  CHECK(acct.value().uid != 0);
  const std::string log = ReadFile(sup.LogPath("who", 0));
  CAPTURE(log);
  CHECK(LogValue(log, "uid") == std::to_string(acct.value().uid));
  CHECK(LogValue(log, "gid") == std::to_string(acct.value().gid));
  std::set<long> want(acct.value().groups.begin(), acct.value().groups.end());
  CHECK(want.size() == 2);  // its own group and the extra one
  CHECK(Numbers(LogValue(log, "groups")) == want);
  // No home directory (--no-create-home): the job's node-local dir.
  CHECK(LogValue(log, "pwd") == sb.t / "local/who");
  CHECK(log.find("as " + sb.user.name() + " (uid ") != std::string::npos);
}

TEST_CASE("a missing account, an empty one and root are refused, and nothing starts") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", "echo \"uid=$(id -u)\"");
  auto job = sb.Job("refused", script, 1);
  job.unix_user = TestPrefix() + "nobody-here";
  auto st = sup.Launch(job);
  REQUIRE(!st.ok());
  CHECK(st.message().find("no Unix account '" + job.unix_user + "' on this node") !=
        std::string::npos);
  CHECK(st.message().find("create it or set the user's unix_user") != std::string::npos);
  CHECK(st.message().find(NodeName()) != std::string::npos);

  // In steps, as the agent launches: the account is Run()'s to look up
  // (NSS may wait for a directory server; the agent runs Run() off its
  // event loop), and a missing one is a failure no retry helps.
  topo::core::Result<StartingLaunch> prepared = sup.PrepareLaunch(job);
  REQUIRE_MESSAGE(prepared.ok(), prepared.message());
  st = prepared.value().Run();
  REQUIRE(!st.ok());
  CHECK(st.message().find("no Unix account '" + job.unix_user + "'") != std::string::npos);
  CHECK(prepared.value().permanent());
  CHECK(sup.FinishLaunch(std::move(prepared).value()).message() == st.message());

  job.unix_user = "";
  st = sup.Launch(job);
  REQUIRE(!st.ok());
  CHECK(st.message().find("names no Unix account") != std::string::npos);

  job.unix_user = "root";
  st = sup.Launch(job);
  REQUIRE(!st.ok());
  CHECK(st.message().find("jobs may not run as root;") != std::string::npos);
  prepared = sup.PrepareLaunch(job);
  REQUIRE(prepared.ok());
  CHECK_FALSE(prepared.value().Run().ok());
  CHECK(prepared.value().permanent());
  // An account that exists and may run the job: a failure later is not
  // permanent (a directory where the log goes).
  JobLaunch other = job;
  other.job_id = "refused-log";
  other.unix_user = sb.user.name();
  fs::create_directories(sb.t / "logs/refused-log/rank-0.log");
  prepared = sup.PrepareLaunch(other);
  REQUIRE(prepared.ok());
  st = prepared.value().Run();
  CHECK(st.message().find("cannot open the log") != std::string::npos);
  CHECK_FALSE(prepared.value().permanent());
  CHECK_FALSE(sup.FinishLaunch(std::move(prepared).value()).ok());
  CHECK(sup.List(false).empty());
  CHECK(!fs::exists(sup.LogPath("refused", 0)));

  // Allowed for this launch, it runs as uid 0.
  job.allow_root = true;
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("refused"));
  CHECK(LogValue(ReadFile(sup.LogPath("refused", 0)), "uid") == "0");
}

TEST_CASE("an account below the uid floor is refused for good, whatever the launch says") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  SupervisorOptions opt = sb.Options();
  opt.min_job_uid = kDefaultMinJobUid;  // the agent's default: 1000
  RankSupervisor sup(opt);
  auto script = WriteScript(sb.t / "rank.sh", "echo \"uid=$(id -u)\"");
  const uid_t uid = ResolveUnixAccount(sb.user.name()).value().uid;
  REQUIRE(uid < kDefaultMinJobUid);  // useradd --system
  // `daemon` (uid 1 on Debian) and the test's system account: neither runs,
  // root allowed or not (the floor is not the root rule).
  for (const std::string& account : {std::string("daemon"), sb.user.name()}) {
    auto job = sb.Job("low-uid", script, 2);
    job.unix_user = account;
    job.allow_root = true;
    topo::core::Result<StartingLaunch> prepared = sup.PrepareLaunch(job);
    REQUIRE_MESSAGE(prepared.ok(), prepared.message());
    auto st = prepared.value().Run();
    REQUIRE_FALSE(st.ok());
    CAPTURE(st.message());
    const UnixAccount acct = ResolveUnixAccount(account).value();
    CHECK(st.message().find("Unix account '" + account + "' has uid " + std::to_string(acct.uid) +
                            " on node " + NodeName() + ", below this node's floor of 1000") !=
          std::string::npos);
    CHECK(st.message().find("--min-job-uid") != std::string::npos);
    CHECK(st.message().find("TOPO_AGENT_MIN_JOB_UID") != std::string::npos);
    CHECK(prepared.value().permanent());
    CHECK_FALSE(sup.FinishLaunch(std::move(prepared).value()).ok());
    CHECK(sup.List(false).empty());
    CHECK_FALSE(fs::exists(sup.LogPath("low-uid", 0)));
  }
  // Root stays the allow-root rule's: allowed for this launch, it runs.
  auto job = sb.Job("root-ok", script, 1);
  job.unix_user = "root";
  job.allow_root = true;
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("root-ok"));
  CHECK(LogValue(ReadFile(sup.LogPath("root-ok", 0)), "uid") == "0");
  // A floor at or below the account's uid lets it run.
  opt.min_job_uid = uid;
  opt.state_dir = sb.t / "state2";
  RankSupervisor lowered(opt);
  job = sb.Job("at-floor", script, 1);
  REQUIRE(lowered.Launch(job).ok());
  PollUntil(lowered, Finished("at-floor"));
  CHECK(LogValue(ReadFile(lowered.LogPath("at-floor", 0)), "uid") == std::to_string(uid));
}

TEST_CASE("two accounts' jobs cannot read or write each other's files or the state dir") {
  Sandbox sb;
  TestAccount other("b");
  REQUIRE(sb.user.ok());
  REQUIRE(other.ok());
  RankSupervisor sup(sb.Options());
  const TempDir& t = sb.t;
  // Job A writes a checkpoint (persisted by the supervisor) and waits.
  auto writer = WriteScript(t / "writer.sh",
                            "d=\"$TOPO_CHECKPOINT_DIR/step-1\"; mkdir -p \"$d\"\n"
                            "echo secret > \"$d/model.bin\"; echo 1 > \"$d/COMPLETE\"\n"
                            "echo a-log-line\n"
                            "exec sleep 60");
  REQUIRE(sup.Launch(sb.Job("ja", writer, 1)).ok());
  auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kCheckpointPersisted, "ja", 1);
  });
  REQUIRE(HasEvent(evs, EventKind::kCheckpointPersisted, "ja", 1));

  // Job B (the other account) tries everything and reports each outcome;
  // its own directories are the control (they must be allowed).
  auto prober = WriteScript(
      t / "prober.sh",
      "p() { if sh -c \"$2\" >/dev/null 2>&1; then echo \"$1=allowed\"; else echo \"$1=denied\"; "
      "fi; }\n"
      "A=ja; L=\"$LOGS\"; C=\"$LOCAL\"; P=\"$PERS\"; S=\"$STATE\"\n"
      "p list_log_root \"ls $L\"\n"
      "p list_local_root \"ls $C\"\n"
      "p list_pers_root \"ls $P\"\n"
      "p read_log \"cat $L/$A/rank-0.log\"\n"
      "p list_log_dir \"ls $L/$A\"\n"
      "p write_log_dir \"touch $L/$A/x\"\n"
      "p append_log \"echo x >> $L/$A/rank-0.log\"\n"
      "p read_local \"cat $C/$A/step-1/model.bin\"\n"
      "p write_local \"touch $C/$A/x\"\n"
      "p read_pers \"cat $P/$A/step-1/model.bin\"\n"
      "p write_pers \"touch $P/$A/x\"\n"
      "p list_state \"ls $S\"\n"
      "p read_state \"cat $S/jobs/ja.json\"\n"
      "p write_state \"touch $S/jobs/x\"\n"
      "p own_local \"touch $TOPO_CHECKPOINT_DIR/mine && cat $TOPO_CHECKPOINT_DIR/mine\"\n"
      "p own_log \"ls $L/jb\"\n");
  auto jb = sb.Job("jb", prober, 1);
  jb.unix_user = other.name();
  jb.env = {{"LOGS", t / "logs"},
            {"LOCAL", t / "local"},
            {"PERS", t / "persistent"},
            {"STATE", t / "state"}};
  REQUIRE(sup.Launch(jb).ok());
  evs = PollUntil(sup, Finished("jb"));
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "jb"));
  const std::string log = ReadFile(sup.LogPath("jb", 0));
  CAPTURE(log);
  for (const char* probe :
       {"list_log_root", "list_local_root", "list_pers_root", "read_log", "list_log_dir",
        "write_log_dir", "append_log", "read_local", "write_local", "read_pers", "write_pers",
        "list_state", "read_state", "write_state"}) {
    CAPTURE(probe);
    CHECK(LogValue(log, probe) == "denied");
  }
  CHECK(LogValue(log, "own_local") == "allowed");
  CHECK(LogValue(log, "own_log") == "allowed");
  CHECK(ReadFile(sup.LogPath("ja", 0)).find("a-log-line") != std::string::npos);

  // The modes and owners behind it.
  auto a = ResolveUnixAccount(sb.user.name());
  auto b = ResolveUnixAccount(other.name());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const uid_t ua = a.value().uid, ub = b.value().uid;
  for (const char* root : {"logs", "local", "persistent"}) {
    CAPTURE(root);
    CHECK(StatOf(t / root).mode == 0711u);
    CHECK(StatOf(t / root).uid == 0u);
  }
  CHECK(StatOf(t / "state").mode == 0700u);
  CHECK(StatOf(t / "state/jobs").mode == 0700u);
  CHECK(StatOf(t / "state/jobs/ja.json").mode == 0600u);
  CHECK(StatOf(t / "state/jobs/ja.json").uid == 0u);
  for (const char* dir : {"logs/ja", "local/ja", "persistent/ja", "persistent/ja/step-1"}) {
    CAPTURE(dir);
    CHECK(StatOf(t / dir).mode == 0700u);
    CHECK(StatOf(t / dir).uid == ua);
  }
  CHECK(StatOf(t / "logs/jb").uid == ub);
  for (const char* file :
       {"logs/ja/rank-0.log", "persistent/ja/step-1/model.bin", "persistent/ja/step-1/COMPLETE"}) {
    CAPTURE(file);
    CHECK(StatOf(t / file).mode == 0600u);
    CHECK(StatOf(t / file).uid == ua);
  }
  CHECK(ReadFile(t / "persistent/ja/step-1/model.bin") == "secret\n");
  REQUIRE(sup.Stop("ja", 1000).ok());
  PollUntil(sup, Finished("ja"));
}

TEST_CASE("a rank sees none of the agent's environment and inherits no descriptor") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  ::setenv("TOPO_AGENT_ONLY_MARKER", "leaked", 1);
  ::setenv("LANG", "C.UTF-8", 1);
  // A descriptor the agent leaves inheritable by mistake.
  int leak = ::open("/dev/null", O_RDONLY);
  REQUIRE(leak >= 0);
  REQUIRE(::dup2(leak, 77) == 77);
  ::close(leak);

  auto job = sb.Job("env", "/usr/bin/env", 1);
  job.env = {{"JOB_VAR", "from-the-job"}};
  REQUIRE(sup.Launch(job).ok());
  auto fdjob = sb.Job("fds", "/bin/ls", 1);
  fdjob.argv = {"/bin/ls", "/proc/self/fd"};
  REQUIRE(sup.Launch(fdjob).ok());
  auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kJobFinished, "env") &&
           HasEvent(e, EventKind::kJobFinished, "fds");
  });
  ::close(77);
  ::unsetenv("TOPO_AGENT_ONLY_MARKER");
  ::unsetenv("LANG");
  REQUIRE(HasEvent(evs, EventKind::kJobFinished, "env"));

  auto env = ParseEnvDump(ReadFile(sup.LogPath("env", 0)));
  CHECK(env.count("TOPO_AGENT_ONLY_MARKER") == 0);
  CHECK(env.count("LANG") == 0);
  CHECK(env["JOB_VAR"] == "from-the-job");
  auto acct = ResolveUnixAccount(sb.user.name());
  REQUIRE(acct.ok());
  // Exactly the documented variables: base + job + supervisor + signal.
  std::map<std::string, std::string> want = RankBaseEnvironment(acct.value());
  for (const auto& [k, v] : job.env) want[k] = v;
  for (const auto& [k, v] : RankEnvironment(job, job.ranks[0], sb.t / "local/env")) want[k] = v;
  want["TOPO_CHECKPOINT_SIGNAL"] = std::to_string(SIGUSR1);
  CHECK(env == want);
  CHECK(env["PATH"] == "/usr/local/bin:/usr/bin:/bin");
  CHECK(env["USER"] == sb.user.name());
  CHECK(env["LOGNAME"] == sb.user.name());
  CHECK(env["HOME"] == acct.value().home);
  CHECK(env["SHELL"] == "/usr/sbin/nologin");

  // ls lists its own descriptors: 0-2 and the one it reads /proc/self/fd with.
  const std::string fds = ReadFile(sup.LogPath("fds", 0));
  CAPTURE(fds);
  std::set<long> got;
  std::istringstream ss(fds);
  std::string line;
  while (std::getline(ss, line)) {
    if (!line.empty() && line.find_first_not_of("0123456789") == std::string::npos) {
      got.insert(std::stol(line));
    }
  }
  CHECK(got == std::set<long>{0, 1, 2, 3});

  CHECK(env["OMP_NUM_THREADS"] == "1");  // omp_num_threads' default

  // The job's LANG is passed when it gives one, and its own OMP_NUM_THREADS
  // wins over omp_num_threads (as under torchrun); RANK and the like are
  // refused: they are the agent's.
  job.job_id = "env2";
  job.env["LANG"] = "C.UTF-8";
  job.env["OMP_NUM_THREADS"] = "3";
  job.env["RANK"] = "99";
  job.omp_num_threads = 8;
  const auto refused = sup.Launch(job);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("env.RANK: reserved") != std::string::npos);
  job.env.erase("RANK");
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("env2"));
  auto env2 = ParseEnvDump(ReadFile(sup.LogPath("env2", 0)));
  CHECK(env2["LANG"] == "C.UTF-8");
  CHECK(env2["OMP_NUM_THREADS"] == "3");
  CHECK(env2["RANK"] == "0");
}

TEST_CASE("a working directory the account cannot enter: exit 126, the reason in the log") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(sb.t / "rank.sh", "echo \"pwd=$(pwd)\"");
  const std::string closed = sb.t / "root-only";
  fs::create_directories(closed);
  ::chmod(closed.c_str(), 0700);
  auto job = sb.Job("wd", script, 2);
  // A missing directory and one the account may not enter fail alike: the
  // process starts, says why in its log and exits 126 (as a command that
  // cannot be executed exits 127), so the job's failure says it.
  for (const std::string& dir : {closed, sb.t / "missing"}) {
    CAPTURE(dir);
    job.working_dir = dir;
    REQUIRE(sup.Launch(job).ok());
    auto evs = PollUntil(sup, Finished("wd"));
    for (int r = 0; r < 2; ++r) {
      const SupervisorEvent* e = nullptr;
      for (const auto& ev : evs) {
        if (ev.kind == EventKind::kRankExited && ev.exit.rank == r) e = &ev;
      }
      REQUIRE(e != nullptr);
      CHECK(e->exit.exit_code == 126);
      const std::string log = ReadFile(sup.LogPath("wd", r));
      CHECK(log.find("cannot enter the working directory " + dir + " as " + sb.user.name()) !=
            std::string::npos);
      CHECK(log.find("pwd=") == std::string::npos);
    }
    REQUIRE(sup.Forget("wd").ok());
  }

  job.working_dir = sb.out;
  REQUIRE(sup.Launch(job).ok());
  PollUntil(sup, Finished("wd"));
  CHECK(LogValue(ReadFile(sup.LogPath("wd", 1)), "pwd") == sb.out);
}

TEST_CASE("roots under a directory the account cannot traverse fail the launch, saying why") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  auto script = WriteScript(sb.t / "rank.sh", "exit 0");
  fs::create_directories(sb.t / "closed");
  ::chmod((sb.t / "closed").c_str(), 0700);
  auto opt = sb.Options();
  opt.log_dir = sb.t / "closed/logs";
  RankSupervisor sup(opt);
  auto st = sup.Launch(sb.Job("shut", script, 1));
  REQUIRE(!st.ok());
  CHECK(st.message().find("cannot open the log " + sb.t / "closed/logs/shut/rank-0.log") !=
        std::string::npos);
  CHECK(st.message().find("traversable by others") != std::string::npos);

  opt = sb.Options();
  opt.local_checkpoint_root = sb.t / "closed/local";
  RankSupervisor sup2(opt);
  st = sup2.Launch(sb.Job("shut2", script, 1));
  REQUIRE(!st.ok());
  CHECK(st.message().find("the job's directory " + sb.t / "closed/local/shut2" +
                          " is not usable by") != std::string::npos);
  CHECK(sup2.List(false).empty());
}

TEST_CASE("a checkpoint staged by root before the launch is handed to the job's account") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  // The persistent tier of another node, and the agent's staging copy (as
  // root, no owner given) into this node's local tier.
  fs::create_directories(t / "elsewhere/st/step-4/sub");
  std::ofstream(t / "elsewhere/st/step-4/model.bin") << "weights";
  std::ofstream(t / "elsewhere/st/step-4/sub/opt.bin") << "moments";
  std::ofstream(t / "elsewhere/st/step-4/COMPLETE") << "4";
  REQUIRE(CopyCompleteStep(t / "elsewhere/st", t / "local/st", 4).ok());
  CHECK(StatOf(t / "local/st/step-4/model.bin").uid == 0u);
  CHECK(StatOf(t / "local/st/step-4/model.bin").mode == 0600u);
  CHECK(StatOf(t / "local/st").mode == 0700u);

  RankSupervisor sup(sb.Options());
  auto script =
      WriteScript(t / "rank.sh",
                  "echo \"model=$(cat $TOPO_CHECKPOINT_DIR/step-$TOPO_RESTART_STEP/model.bin)\"\n"
                  "echo \"opt=$(cat $TOPO_CHECKPOINT_DIR/step-$TOPO_RESTART_STEP/sub/opt.bin)\"");
  auto job = sb.Job("st", script, 1);
  job.restart_step = 4;
  REQUIRE(sup.Launch(job).ok());
  // It runs, and the staged step also reaches this node's persistent tier.
  auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kJobFinished, "st") &&
           HasEvent(e, EventKind::kCheckpointPersisted, "st", 4);
  });
  CHECK(HasEvent(evs, EventKind::kCheckpointPersisted, "st", 4));
  const std::string log = ReadFile(sup.LogPath("st", 0));
  CHECK(LogValue(log, "model") == "weights");
  CHECK(LogValue(log, "opt") == "moments");
  auto acct = ResolveUnixAccount(sb.user.name());
  REQUIRE(acct.ok());
  for (const char* p : {"local/st", "local/st/step-4", "local/st/step-4/sub",
                        "local/st/step-4/model.bin", "local/st/step-4/sub/opt.bin"}) {
    CAPTURE(p);
    CHECK(StatOf(t / p).uid == acct.value().uid);
  }
  CHECK(StatOf(t / "local/st/step-4/sub").mode == 0700u);
  CHECK(StatOf(t / "persistent/st/step-4/sub/opt.bin").uid == acct.value().uid);

  // A directory of another account is not taken over.
  TestAccount other("c");
  REQUIRE(other.ok());
  auto job2 = sb.Job("st", script, 1);
  job2.unix_user = other.name();
  auto st = sup.Launch(job2);
  REQUIRE(!st.ok());
  CHECK(st.message().find("not to the job's account") != std::string::npos);
}

TEST_CASE("CopyCompleteStep as an owner: owned files, 0600/0700, symlinks not followed") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  auto acct = ResolveUnixAccount(sb.user.name());
  REQUIRE(acct.ok());
  const FileOwner owner{acct.value().uid, acct.value().gid};
  // A root-only file, which a link in the checkpoint points at.
  std::ofstream(t / "root-secret") << "root only";
  ::chmod((t / "root-secret").c_str(), 0600);
  fs::create_directories(t / "src/step-2/d");
  std::ofstream(t / "src/step-2/w.bin") << "w";
  std::ofstream(t / "src/step-2/d/x.bin") << "x";
  fs::create_symlink(t / "root-secret", t / "src/step-2/link");
  std::ofstream(t / "src/step-2/COMPLETE") << "2";
  ::chmod((t / "src/step-2/w.bin").c_str(), 0644);
  REQUIRE(EnsurePrivateDir(t / "dst", owner).ok());
  REQUIRE(CopyCompleteStep(t / "src", t / "dst", 2, owner).ok());
  for (const char* f : {"dst/step-2/w.bin", "dst/step-2/d/x.bin", "dst/step-2/COMPLETE"}) {
    CAPTURE(f);
    CHECK(StatOf(t / f).uid == owner.uid);
    CHECK(StatOf(t / f).mode == 0600u);
  }
  CHECK(StatOf(t / "dst/step-2").mode == 0700u);
  CHECK(StatOf(t / "dst/step-2/d").mode == 0700u);
  CHECK(fs::is_symlink(t / "dst/step-2/link"));
  CHECK(fs::read_symlink(t / "dst/step-2/link") == fs::path(t / "root-secret"));
  // This thread is root again afterwards.
  CHECK(::access((t / "root-secret").c_str(), R_OK) == 0);
  std::ofstream probe(t / "state-probe");
  CHECK(probe.good());
  probe.close();
  CHECK(StatOf(t / "state-probe").uid == 0u);

  // As the owner, the copy cannot write where the owner cannot.
  fs::create_directories(t / "closed");
  ::chmod((t / "closed").c_str(), 0700);
  auto st = CopyCompleteStep(t / "src", t / "closed/dst", 2, owner);
  CHECK(!st.ok());
  CHECK(!fs::exists(t / "closed/dst"));
}
