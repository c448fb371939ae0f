// tests/torch/train_ddp.py run by RankSupervisor (ctest label `torch`):
// a 2-rank gloo job is checkpointed on SIGUSR1, persisted, stopped, restarted
// on "another node" from the persistent tier, and its final parameters equal
// those of an uninterrupted run, bit for bit. Exits 77 (skip) when
// /usr/bin/python3 cannot import torch.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {

int FreePort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

JobLaunch TorchJob(const std::string& id, const std::string& out, const std::string& user) {
  JobLaunch l;
  l.job_id = id;
  l.unix_user = user;
  l.argv = {"/usr/bin/python3",
            TOPO_TORCH_TRAIN_SCRIPT,
            "--steps",
            "30",
            "--hidden",
            "32",
            "--step-sleep",
            "0.1",
            "--out",
            out};
  l.env = {{"OMP_NUM_THREADS", "1"}};
  l.parallelism.dp = 2;
  l.master_port = FreePort();
  l.ranks = {LocalRankSpec{0, 0, {}}, LocalRankSpec{1, 1, {}}};
  return l;
}

bool AllExitedZero(const std::vector<SupervisorEvent>& evs) {
  int n = 0;
  for (const auto& e : evs) {
    if (e.kind != EventKind::kRankExited) continue;
    if (e.exit.signaled || e.exit.exit_code != 0) return false;
    ++n;
  }
  return n == 2;
}

}  // namespace

TEST_CASE("a DDP job checkpointed, lost and restarted elsewhere ends bit-identical") {
  // Run as an ordinary account, in the job's cgroup, like every job.
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  const std::string user = sb.user.name();
  // Reference: uninterrupted.
  const std::string ref = sb.out + "/ref.bin";
  {
    SupervisorOptions o = sb.Options();
    o.local_checkpoint_root = t / "ref-local";
    o.persistent_checkpoint_root = "";
    RankSupervisor sup(o);
    REQUIRE(sup.Launch(TorchJob("ref", ref, user)).ok());
    auto evs = PollUntil(sup, Finished("ref"), 240000);
    REQUIRE(AllExitedZero(evs));
  }
  REQUIRE(fs::exists(ref));

  // Node A: checkpoint on request, persisted, then the job is stopped.
  const std::string out = sb.out + "/resumed.bin";
  int64_t step = -1;
  {
    SupervisorOptions o = sb.Options();
    o.local_checkpoint_root = t / "nodeA";
    RankSupervisor sup(o);
    REQUIRE(sup.Launch(TorchJob("ddp", out, user)).ok());
    const std::string log0 = sup.LogPath("ddp", 0);
    auto evs = PollUntil(
        sup,
        [&](const std::vector<SupervisorEvent>&) {
          return ReadFile(log0).find("step 5 ") != std::string::npos;
        },
        120000);
    REQUIRE(sup.RequestCheckpoint("ddp").ok());
    evs = PollUntil(
        sup,
        [](const std::vector<SupervisorEvent>& e) {
          for (const auto& x : e) {
            if (x.kind == EventKind::kCheckpointPersisted || x.kind == EventKind::kPersistFailed)
              return true;
          }
          return false;
        },
        // Generous: with other torch tests on the same two cores the step
        // that answers the request can take most of a minute.
        180000);
    for (const auto& e : evs) {
      if (e.kind == EventKind::kCheckpointPersisted) step = e.step;
    }
    REQUIRE(step >= 5);
    REQUIRE(step < 30);
    REQUIRE(sup.Stop("ddp", 2000).ok());
    PollUntil(sup, Finished("ddp"), 30000);
  }
  REQUIRE(!fs::exists(out));

  // Node A is lost; node B restarts the job from the persistent tier.
  SupervisorOptions o = sb.Options();
  o.local_checkpoint_root = t / "nodeB";
  RankSupervisor sup(o);
  auto rp = NewestRestartStep(t / "nodeB/ddp", t / "persistent/ddp", false);
  REQUIRE(rp);
  CHECK(rp->step == step);
  REQUIRE(CopyCompleteStep(t / "persistent/ddp", t / "nodeB/ddp", rp->step).ok());
  auto job = TorchJob("ddp", out, user);
  job.restart_count = 1;
  job.restart_step = rp->step;
  REQUIRE(sup.Launch(job).ok());
  auto evs = PollUntil(sup, Finished("ddp"), 240000);
  REQUIRE(AllExitedZero(evs));
  CHECK(ReadFile(sup.LogPath("ddp", 0)).find("starting at step " + std::to_string(step)) !=
        std::string::npos);
  REQUIRE(fs::exists(out));
  CHECK(ReadFile(out) == ReadFile(ref));
}

int main(int argc, char** argv) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::puts("SKIP: /usr/bin/python3 cannot import torch (apt-get install python3-torch)");
    return 77;
  }
  if (!IsRoot()) {
    std::puts("SKIP: the supervisor tests create Unix accounts and cgroups: run them as root");
    return 77;
  }
  CleanStaleTestArtifacts();
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
