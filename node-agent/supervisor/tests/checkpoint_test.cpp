// The checkpoint protocol on the file system: complete steps, the restart
// choice and the crash-safe persistent copy.

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test_util.hpp"
#include "topo/agent/supervisor.hpp"

namespace fs = std::filesystem;
using namespace topo::agent;
using namespace topo::agent::testing;

namespace {
void MakeStep(const std::string& dir, int64_t step, bool complete, size_t bytes = 16) {
  const fs::path d = fs::path(dir) / ("step-" + std::to_string(step));
  fs::create_directories(d);
  {
    std::ofstream out(d / "model.bin", std::ios::binary);
    std::string data(bytes, 'x');
    out << data;
  }
  if (complete) std::ofstream(d / "COMPLETE") << step << "\n";
}
}  // namespace

TEST_CASE("CompleteSteps lists only step-N directories that hold COMPLETE") {
  TempDir t;
  const std::string d = t / "ck";
  CHECK(CompleteSteps(d).empty());  // missing directory
  MakeStep(d, 10, true);
  MakeStep(d, 2, true);
  MakeStep(d, 30, false);
  fs::create_directories(t / "ck/step-x");
  fs::create_directories(t / "ck/.step-40.tmp");
  std::ofstream(t / "ck/step-50") << "a file, not a step";
  CHECK(CompleteSteps(d) == std::vector<int64_t>{2, 10});
}

TEST_CASE("NewestRestartStep: persistent tier, or the local tier where the node survived") {
  TempDir t;
  const std::string local = t / "local", pers = t / "pers";
  CHECK(!NewestRestartStep(local, pers, true));
  MakeStep(local, 5, true);
  MakeStep(local, 8, true);
  MakeStep(local, 9, false);  // being written
  MakeStep(pers, 5, true);
  MakeStep(pers, 8, false);  // copy in progress
  auto survived = NewestRestartStep(local, pers, true);
  REQUIRE(survived);
  CHECK(survived->step == 8);
  CHECK(survived->tier == CheckpointTier::kLocal);
  CHECK(survived->dir == local + "/step-8");
  auto lost = NewestRestartStep(local, pers, false);
  REQUIRE(lost);
  CHECK(lost->step == 5);
  CHECK(lost->tier == CheckpointTier::kPersistent);
  // A tie goes to the persistent tier.
  std::ofstream(pers + "/step-8/COMPLETE") << "8\n";
  auto tie = NewestRestartStep(local, pers, true);
  REQUIRE(tie);
  CHECK(tie->step == 8);
  CHECK(tie->tier == CheckpointTier::kPersistent);
  // Only the local tier, and the node is gone: nothing to restart from.
  CHECK(!NewestRestartStep(local, t / "none", false));
  CHECK(NewestRestartStep(local, t / "none", true)->step == 8);
}

TEST_CASE("CopyCompleteStep refuses an incomplete step and replaces a crashed copy") {
  TempDir t;
  const std::string local = t / "local", pers = t / "pers";
  MakeStep(local, 3, false);
  CHECK(!CopyCompleteStep(local, pers, 3).ok());
  CHECK(!fs::exists(pers + "/step-3"));
  std::ofstream(local + "/step-3/COMPLETE") << "3\n";
  // A copy that crashed before COMPLETE left a partial step-3.
  fs::create_directories(pers + "/step-3");
  std::ofstream(pers + "/step-3/garbage") << "partial";
  REQUIRE(CopyCompleteStep(local, pers, 3).ok());
  CHECK(!fs::exists(pers + "/step-3/garbage"));
  CHECK(ReadFile(pers + "/step-3/model.bin") == std::string(16, 'x'));
  CHECK(ReadFile(pers + "/step-3/COMPLETE") == "3\n");
  CHECK(CompleteSteps(pers) == std::vector<int64_t>{3});
  // Staging a persistent step onto a fresh node's local tier is the same call.
  REQUIRE(CopyCompleteStep(pers, t / "fresh-node", 3).ok());
  CHECK(CompleteSteps(t / "fresh-node") == std::vector<int64_t>{3});
}

TEST_CASE("the persistent copy appears complete, and only after the local COMPLETE") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "exec sleep 30");
  REQUIRE(sup.Launch(sb.Job("tiers", script, 1)).ok());
  const std::string local = t / "local/tiers", pers = t / "persistent/tiers";
  constexpr size_t kBytes = 32u << 20;
  MakeStep(local, 3, false, kBytes);  // written, not yet complete
  for (int i = 0; i < 5; ++i) {
    auto evs = sup.Poll();
    CHECK(!HasEvent(evs, EventKind::kCheckpointComplete, "tiers"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(!fs::exists(pers + "/step-3"));
  CHECK(!sup.NewestCompleteStep("tiers"));

  // A watcher: whenever COMPLETE exists on the persistent tier, the data is whole.
  std::atomic<bool> stop{false}, violated{false}, seen_complete{false};
  std::thread watcher([&] {
    // One more look after stop: a loaded machine may not have run this
    // thread between the copy's end and the stop.
    for (bool last = false; !last;) {
      last = stop;
      std::error_code ec;
      if (fs::exists(pers + "/step-3/COMPLETE", ec)) {
        seen_complete = true;
        if (fs::file_size(pers + "/step-3/model.bin", ec) != kBytes || ec) violated = true;
      } else if (fs::exists(pers + "/step-3", ec) && !fs::exists(pers + "/step-3/model.bin", ec)) {
        violated = true;  // step-3 is renamed into place with its data
      }
    }
  });
  std::ofstream(local + "/step-3/COMPLETE") << "3\n";
  auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kCheckpointPersisted, "tiers", 3);
  });
  stop = true;
  watcher.join();
  CHECK(HasEvent(evs, EventKind::kCheckpointComplete, "tiers", 3));
  REQUIRE(HasEvent(evs, EventKind::kCheckpointPersisted, "tiers", 3));
  CHECK(seen_complete);
  CHECK(!violated);
  // The event order: complete on the local tier before persisted.
  size_t ci = evs.size(), pi = evs.size();
  for (size_t i = 0; i < evs.size(); ++i) {
    if (evs[i].kind == EventKind::kCheckpointComplete) ci = i;
    if (evs[i].kind == EventKind::kCheckpointPersisted) pi = i;
  }
  CHECK(ci < pi);
  CHECK(fs::file_size(pers + "/step-3/model.bin") == kBytes);

  // Two newer steps at once: only the newest is reported and copied.
  MakeStep(local, 4, true);
  MakeStep(local, 5, true);
  evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kCheckpointPersisted, "tiers", 5);
  });
  CHECK(HasEvent(evs, EventKind::kCheckpointComplete, "tiers", 5));
  CHECK(!HasEvent(evs, EventKind::kCheckpointComplete, "tiers", 4));
  CHECK(CompleteSteps(pers) == std::vector<int64_t>{3, 5});
  CHECK(sup.NewestPersistedStep("tiers") == 5);
  auto rp = sup.NewestRestartStep("tiers", false);
  REQUIRE(rp);
  CHECK(rp->step == 5);

  // The wake fd is readable after a copy ends (the event loop's hint).
  REQUIRE(sup.Stop("tiers", 1000).ok());
  PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kJobFinished, "tiers");
  });
  CHECK(sup.wake_fd() >= 0);
}

TEST_CASE("a restarted supervisor does not report or copy old steps again") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  auto script = WriteScript(t / "rank.sh", "exec sleep 30");
  const std::string local = t / "local/again";
  {
    RankSupervisor sup(sb.Options());
    REQUIRE(sup.Launch(sb.Job("again", script, 1)).ok());
    MakeStep(local, 2, true);
    auto evs = PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
      return HasEvent(e, EventKind::kCheckpointPersisted, "again", 2);
    });
    REQUIRE(HasEvent(evs, EventKind::kCheckpointPersisted, "again", 2));
  }
  RankSupervisor sup(sb.Options());
  CHECK(sup.NewestCompleteStep("again") == 2);
  CHECK(sup.NewestPersistedStep("again") == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto evs = sup.Poll();
  CHECK(!HasEvent(evs, EventKind::kCheckpointComplete, "again"));
  CHECK(!HasEvent(evs, EventKind::kCheckpointPersisted, "again"));
  REQUIRE(sup.Stop("again", 1000).ok());
  PollUntil(sup, [](const std::vector<SupervisorEvent>& e) {
    return HasEvent(e, EventKind::kJobFinished, "again");
  });
}

// CHECKPOINTS.md, Retention: the persistent tier keeps the newest K (2)
// complete steps while the job runs, older ones go once a newer one is
// persisted; the newest K stay after the job as its output; the node-local
// tier goes once the run here has ended and the persistent tier holds its
// newest step, and stays as the only copy otherwise.
TEST_CASE("retention: the newest 2 persisted steps stay, the local tier goes with the run") {
  Sandbox sb;
  REQUIRE(sb.user.ok());
  const TempDir& t = sb.t;
  RankSupervisor sup(sb.Options());
  auto script = WriteScript(t / "rank.sh", "exec sleep 30");
  REQUIRE(sup.Launch(sb.Job("kept", script, 1)).ok());
  const std::string local = t / "local/kept", pers = t / "persistent/kept";
  for (int64_t step = 1; step <= 4; ++step) {
    MakeStep(local, step, true);
    // The account's, as a rank would have written it (the agent removes a
    // job's files as its account).
    REQUIRE(Run("chown -R " + sb.user.name() + ": " + local) == 0);
    auto evs = PollUntil(sup, [step](const std::vector<SupervisorEvent>& e) {
      return HasEvent(e, EventKind::kCheckpointPersisted, "kept", step);
    });
    REQUIRE(HasEvent(evs, EventKind::kCheckpointPersisted, "kept", step));
    const std::vector<int64_t> want =
        step == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{step - 1, step};
    CHECK(CompleteSteps(pers) == want);
  }
  CHECK_FALSE(fs::exists(pers + "/step-1"));
  CHECK_FALSE(fs::exists(pers + "/step-2"));
  // The job runs: nothing local goes.
  CHECK_FALSE(sup.RemoveLocalCheckpoints("kept").value());
  CHECK(CompleteSteps(local) == std::vector<int64_t>{1, 2, 3, 4});
  REQUIRE(sup.Stop("kept", 200).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("kept")), EventKind::kJobFinished, "kept"));
  auto removed = sup.RemoveLocalCheckpoints("kept");
  REQUIRE_MESSAGE(removed.ok(), removed.message());
  CHECK(removed.value());
  CHECK_FALSE(fs::exists(local));
  CHECK(CompleteSteps(pers) == std::vector<int64_t>{3, 4});  // the job's output
  // The next run on this node restarts from the persistent tier.
  auto rp = sup.NewestRestartStep("kept", true);
  REQUIRE(rp);
  CHECK(rp->step == 4);
  CHECK(rp->tier == CheckpointTier::kPersistent);

  // A local step that could not be copied to the persistent tier (its
  // directory is a file here): the only copy, kept.
  REQUIRE(sup.Launch(sb.Job("newer", script, 1)).ok());
  REQUIRE(sup.Stop("newer", 200).ok());
  REQUIRE(HasEvent(PollUntil(sup, Finished("newer")), EventKind::kJobFinished, "newer"));
  fs::remove_all(t / "persistent/newer");
  std::ofstream(t / "persistent/newer") << "not a directory\n";
  const std::string newer = t / "local/newer";
  MakeStep(newer, 1, true);
  REQUIRE(HasEvent(PollUntil(sup,
                             [](const std::vector<SupervisorEvent>& e) {
                               return HasEvent(e, EventKind::kPersistFailed, "newer", 1);
                             }),
                   EventKind::kPersistFailed, "newer", 1));
  auto kept = sup.RemoveLocalCheckpoints("newer");
  REQUIRE(kept.ok());
  CHECK_FALSE(kept.value());
  CHECK(CompleteSteps(newer) == std::vector<int64_t>{1});
  fs::remove(t / "persistent/newer");

  // Without a persistent tier the local tier is the only one: it stays.
  auto opt = sb.Options();
  opt.persistent_checkpoint_root.clear();
  opt.state_dir = t / "state-nopers";
  RankSupervisor lone(opt);
  REQUIRE(lone.Launch(sb.Job("alone", "/bin/true", 1)).ok());
  const std::string alone = t / "local/alone";
  MakeStep(alone, 1, true);
  REQUIRE(HasEvent(PollUntil(lone, Finished("alone")), EventKind::kJobFinished, "alone"));
  CHECK_FALSE(lone.RemoveLocalCheckpoints("alone").value());
  CHECK(CompleteSteps(alone) == std::vector<int64_t>{1});
}
