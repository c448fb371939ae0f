// Private /tmp and /dev/shm per job (job_scratch.hpp), with real mount
// namespaces, tmpfs mounts, cgroups and accounts: what a rank writes there is
// its job's alone, charged to its memory cgroup, shared by its local ranks,
// kept across an agent restart and gone from the node's RAM once the job has
// ended. A case skips (with a message) where the node cannot make them.
//
// The sandboxes live under /var/tmp: a rank's /tmp is its own, so it could
// not reach a sandbox under the node's /tmp.

#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "topo/agent/job_scratch.hpp"
#include "topo/agent/supervisor.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

constexpr const char* kBase = "/var/tmp";

// A sandbox whose supervisors give jobs private scratch; the namespaces'
// private mount is undone at the end (the sandbox is then removed).
struct ScratchSandbox {
  ScratchSandbox() : sb(TestCgroupRoot::Kind::kDetected, kBase) {}
  ~ScratchSandbox() { ::umount2((sb.t / "state/namespaces").c_str(), MNT_DETACH); }
  SupervisorOptions Options() const {
    SupervisorOptions o = sb.Options();
    o.job_scratch = ScratchMode::kOn;
    o.job_tmp_size = "256m";
    o.job_shm_size = "256m";
    return o;
  }
  Sandbox sb;
};

#define SKIP_WITHOUT_SCRATCH(sup)                                                 \
  do {                                                                            \
    if (!(sup).Scratch().enabled()) {                                             \
      MESSAGE("skipped: no private scratch here: " << (sup).Scratch().problem()); \
      return;                                                                     \
    }                                                                             \
  } while (0)

int64_t MeminfoKb(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb;
  }
  return -1;
}

// The bytes charged to the memory cgroup of process pid (v1 memory
// hierarchy or v2), -1 when it is in none that counts.
int64_t MemoryCharged(pid_t pid, const std::string& v2_dir) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (line.substr(a + 1, b - a - 1) == "memory") {
      const std::string text =
          ReadFile("/sys/fs/cgroup/memory" + line.substr(b + 1) + "/memory.usage_in_bytes");
      return text.empty() ? -1 : std::stoll(text);
    }
  }
  const std::string text = ReadFile(v2_dir + "/memory.current");
  return text.empty() ? -1 : std::stoll(text);
}

bool IsMounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, dev, root, point;
    if (ss >> id >> parent >> dev >> root >> point && point == path) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a rank's 100 MB in /dev/shm is its job's: charged to its cgroup, gone after it") {
  ScratchSandbox s;
  REQUIRE(s.sb.user.ok());
  RankSupervisor sup(s.Options());
  SKIP_WITHOUT_SCRATCH(sup);
  MESSAGE(sup.Scratch().Summary());
  auto script =
      WriteScript(s.sb.t / "shm.sh",
                  "head -c 104857600 /dev/zero > /dev/shm/big || exit 3\n"
                  "grep -E ' /(tmp|dev/shm) ' /proc/self/mountinfo > \"$OUT_DIR/mounts\"\n"
                  "touch \"$OUT_DIR/written\"\nexec sleep 60");
  auto job = s.sb.Job("shm", script, 1);
  REQUIRE(sup.Launch(job).ok());
  const std::string pin = sup.ScratchPin("shm");
  REQUIRE(pin == s.sb.t / "state/namespaces/shm");
  CHECK(IsMounted(pin));
  REQUIRE(WaitForFile(s.sb.out + "/written", 30000));
  const std::string mounts = ReadFile(s.sb.out + "/mounts");
  CAPTURE(mounts);
  CHECK(mounts.find(" /tmp ") != std::string::npos);
  CHECK(mounts.find(" /dev/shm ") != std::string::npos);
  CHECK(mounts.find("tmpfs") != std::string::npos);
  // Not the node's /dev/shm.
  CHECK_FALSE(fs::exists("/dev/shm/big"));
  // Charged to the job: its memory cgroup holds the 100 MB.
  const pid_t pid = sup.List()[0].pid;
  const int64_t charged = MemoryCharged(pid, sup.CgroupPath("shm"));
  CHECK(charged >= 100ll << 20);
  const int64_t shmem_running = MeminfoKb("Shmem");

  // The job ends: its namespace goes, and the 100 MB with it.
  REQUIRE(sup.Stop("shm", 200).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("shm")), EventKind::kJobFinished, "shm"));
  CHECK(sup.ScratchPin("shm").empty());
  CHECK_FALSE(fs::exists(pin));
  CHECK_FALSE(IsMounted(pin));
  // The kernel frees the tmpfs once the last reference is gone; poll for it.
  int64_t shmem_after = MeminfoKb("Shmem");
  for (int i = 0; i < 500 && shmem_running - shmem_after < 90 * 1024; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    shmem_after = MeminfoKb("Shmem");
  }
  CAPTURE(shmem_running);
  CAPTURE(shmem_after);
  CHECK(shmem_running - shmem_after >= 90 * 1024);  // kB: the 100 MB left the node's RAM
}

TEST_CASE("a job's ranks share its /dev/shm, another user's job sees none of its /tmp") {
  ScratchSandbox s;
  REQUIRE(s.sb.user.ok());
  TestAccount other("o");
  REQUIRE(other.ok());
  RankSupervisor sup(s.Options());
  SKIP_WITHOUT_SCRATCH(sup);
  // Rank 0 leaves a world-readable file in /tmp and a message in /dev/shm;
  // rank 1 waits for the message.
  auto writer = WriteScript(
      s.sb.t / "writer.sh",
      "if [ \"$RANK\" = 0 ]; then\n"
      "  echo secret > /tmp/left-behind && chmod 644 /tmp/left-behind\n"
      "  echo hello > /dev/shm/.m && mv /dev/shm/.m /dev/shm/msg\n"
      "else\n"
      "  i=0; while [ ! -f /dev/shm/msg ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done\n"
      "  echo \"saw=$(cat /dev/shm/msg 2>/dev/null)\" > \"$OUT_DIR/rank1\"\n"
      "fi\n"
      "touch \"$OUT_DIR/done-$RANK\"\nexec sleep 60");
  REQUIRE(sup.Launch(s.sb.Job("first", writer, 2)).ok());
  REQUIRE(WaitForFile(s.sb.out + "/done-0", 30000));
  REQUIRE(WaitForFile(s.sb.out + "/done-1", 30000));
  CHECK(ReadFile(s.sb.out + "/rank1") == "saw=hello\n");
  CHECK_FALSE(fs::exists("/tmp/left-behind"));  // not the node's /tmp either

  // Another account's job on the same node.
  auto reader = WriteScript(s.sb.t / "reader.sh",
                            "{ ls -A /tmp /dev/shm; cat /tmp/left-behind /dev/shm/msg; } "
                            "> \"$OUT_DIR/second\" 2>&1\ntouch \"$OUT_DIR/second-done\"");
  auto second = s.sb.Job("second", reader, 1);
  second.unix_user = other.name();
  REQUIRE(sup.Launch(second).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("second")), EventKind::kJobFinished, "second"));
  const std::string seen = ReadFile(s.sb.out + "/second");
  CAPTURE(seen);
  CHECK(seen.find("\nleft-behind\n") == std::string::npos);  // not listed
  CHECK(seen.find("\nmsg\n") == std::string::npos);
  CHECK(seen.find("secret") == std::string::npos);
  CHECK(seen.find("hello") == std::string::npos);
  CHECK(seen.find("No such file") != std::string::npos);
  REQUIRE(sup.Stop("first", 200).ok());
  PollUntil(sup, Finished("first"));
}

TEST_CASE("a restarted agent keeps a running job's /tmp, the job's end removes it") {
  ScratchSandbox s;
  REQUIRE(s.sb.user.ok());
  auto first = std::make_unique<RankSupervisor>(s.Options());
  SKIP_WITHOUT_SCRATCH(*first);
  // The rank writes /tmp/kept, then reports what it reads there on USR1.
  auto script = WriteScript(s.sb.t / "keep.sh",
                            "echo mine > /tmp/kept\n"
                            "trap 'cat /tmp/kept > \"$OUT_DIR/read.tmp\" && "
                            "mv \"$OUT_DIR/read.tmp\" \"$OUT_DIR/read\"' USR1\n"
                            "touch \"$OUT_DIR/ready\"\nwhile :; do sleep 0.05; done");
  REQUIRE(first->Launch(s.sb.Job("kept", script, 1)).ok());
  REQUIRE(WaitForFile(s.sb.out + "/ready", 30000));
  const std::string pin = first->ScratchPin("kept");
  first.reset();  // the agent goes; the pin stays (a mount of the node's)
  CHECK(IsMounted(pin));
  // Meanwhile a pin of a job no state file names (the next agent removes it).
  const std::string stale = s.sb.t / "state/namespaces/ghost";
  { std::ofstream(stale) << ""; }

  RankSupervisor second(s.Options());
  CHECK_FALSE(fs::exists(stale));
  CHECK(second.ScratchPin("kept") == pin);
  CHECK(IsMounted(pin));  // "kept" is known: left alone
  REQUIRE(second.List().size() == 1);
  REQUIRE(second.RequestCheckpoint("kept").ok());  // SIGUSR1
  REQUIRE(WaitForFile(s.sb.out + "/read", 10000));
  CHECK(ReadFile(s.sb.out + "/read") == "mine\n");
  REQUIRE(second.Stop("kept", 200).ok());
  PollUntil(second, Finished("kept"));
  CHECK_FALSE(IsMounted(pin));
  CHECK_FALSE(fs::exists(pin));
}

TEST_CASE("tmpfs sizes and scratch modes are checked") {
  for (const char* ok : {"50%", "100%", "1%", "64g", "512m", "1024k", "1t", "4096"}) {
    CAPTURE(ok);
    CHECK(CheckTmpfsSize(ok).ok());
  }
  for (const char* bad :
       {"", "0", "0%", "101%", "50 %", "-1g", "1x", "g", "1gb", "08m", "99999999999999999999"}) {
    CAPTURE(bad);
    auto st = CheckTmpfsSize(bad);
    CHECK_FALSE(st.ok());
    CHECK(st.message().find("percentage of the node's RAM") != std::string::npos);
  }
  ScratchMode m = ScratchMode::kOff;
  CHECK(ParseScratchMode("on", &m));
  CHECK(m == ScratchMode::kOn);
  CHECK_FALSE(ParseScratchMode("yes", &m));
  // Off: nothing is made, and the summary says jobs share the node's.
  JobScratch off = JobScratch::Open(ScratchOptions{});
  CHECK_FALSE(off.enabled());
  CHECK(off.Summary().find("shared by every job") != std::string::npos);
}
