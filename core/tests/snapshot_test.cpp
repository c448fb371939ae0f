// SchedulerCore::Snapshot and Restore: a restored core is the core that
// wrote the snapshot. Checked against the un-snapshotted core on seeded
// random histories: the same further events give the same commands, and the
// final states (their canonical snapshots) are equal.

#include <doctest/doctest.h>

#include <array>
#include <sstream>

#include "test_util.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

using namespace topo::core;

namespace {

struct Timed {
  TimeMs now;
  Event event;
};

Topology SmallCluster() {
  return testing::MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {2, 2, 2}, 2, 4);
}

SchedulerConfig Config(bool heartbeats) {
  SchedulerConfig config = SchedulerConfig::ForStack("toposched").value();
  config.heartbeats_required = heartbeats;
  config.preempt_grace = 5 * kMinute;
  return config;
}

std::string Describe(const std::vector<Command>& commands) {
  std::ostringstream o;
  for (const Command& c : commands) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, StartJob> || std::is_same_v<T, RestartJob>) {
            o << (std::is_same_v<T, StartJob> ? "start " : "restart ") << x.id << " port "
              << x.launch.master_port << " from " << x.launch.checkpoint_step;
            for (const GpuSlot& s : x.ranks) o << " " << s.node << ":" << s.gpu;
          } else if constexpr (std::is_same_v<T, StopJob> || std::is_same_v<T, RequestCheckpoint>) {
            o << "stop/ckpt " << x.id << " " << x.reason;
          } else if constexpr (std::is_same_v<T, DrainNode>) {
            o << "drain " << x.node << " " << x.reason;
          } else if constexpr (std::is_same_v<T, NodeStateChanged>) {
            o << "node " << x.node << " " << NodeStateName(x.state) << " " << x.reason;
          } else if constexpr (std::is_same_v<T, GpuHealthChanged>) {
            o << "gpu " << x.node << ":" << x.gpu << " " << GpuHealthName(x.health);
          } else if constexpr (std::is_same_v<T, JobStateChanged>) {
            o << "job " << x.id << " " << JobStateName(x.state) << " " << x.reason;
          }
        },
        c);
    o << "\n";
  }
  return o.str();
}

// A seeded history: submissions of every shape, ends, cancels, holds,
// checkpoints, rank failures, GPU faults, node losses and drains, policy
// changes, heartbeats and ticks. The events depend on the core's state, so
// the history is made by stepping a core.
std::vector<Timed> History(uint64_t seed, bool heartbeats, int events) {
  Rng rng(seed);
  Topology topo = SmallCluster();
  SchedulerCore core(topo, Config(heartbeats));
  std::vector<Timed> out;
  TimeMs now = 0;
  auto step = [&](Event e) {
    core.Step(e, now);
    core.TakeFinishedJobs();  // as the daemon does after every commit
    out.push_back({now, std::move(e)});
  };
  step(TenantConfigured{{"org/a", 16, 16, 24, 3, 2.0}});
  step(TenantConfigured{{"org/b", 8, -1, 0, 0, 1.0}});
  if (heartbeats) {
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      step(NodeStateRequested{n, NodeState::kUp, "agent registered"});
    }
  }
  JobId next = 1;
  for (int i = 0; i < events; ++i) {
    now += static_cast<TimeMs>(rng.Below(heartbeats ? 4 * kSecond : 10 * kMinute));
    std::vector<JobId> active, running;
    for (const auto& [id, job] : core.jobs()) {
      if (!IsTerminal(job.state)) active.push_back(id);
      if (job.state == JobState::kRunning) running.push_back(id);
    }
    const uint64_t kind = rng.Below(100);
    const NodeId node = static_cast<NodeId>(rng.Below(topo.node_count()));
    if (kind < 35) {
      JobRequest r;
      const int tp = std::array<int, 3>{1, 4, 8}[rng.Below(3)];
      const int dp = static_cast<int>(rng.Range(1, 4));
      r.spec = testing::MakeJob(tp * dp, tp);
      if (rng.Below(8) == 0) r.spec.spares = 1;
      if (next % 3 == 0) r.spec.pids_max = 512;  // carried, never interpreted
      r.tenant = rng.Below(2) == 0 ? "org/a" : "org/b";
      r.user = "u" + std::to_string(rng.Below(3));
      r.priority = static_cast<int>(rng.Below(3));
      r.time_limit = static_cast<TimeMs>(rng.Range(10, 240)) * kMinute;
      r.checkpoint_interval = 20 * kMinute;
      r.command = {"python", "train.py"};
      step(JobSubmitted{next++, r});
    } else if (kind < 55 && !active.empty()) {
      step(JobFinished{active[rng.Below(active.size())], 0});
    } else if (kind < 60 && !active.empty()) {
      step(JobCancelled{active[rng.Below(active.size())], "test"});
    } else if (kind < 63 && !active.empty()) {
      step(JobHoldChanged{active[rng.Below(active.size())], rng.Below(2) == 0});
    } else if (kind < 70 && !active.empty()) {
      step(CheckpointCompleted{active[rng.Below(active.size())], static_cast<int64_t>(i)});
    } else if (kind < 73 && !running.empty()) {
      step(RankExited{running[rng.Below(running.size())], 0, 1});
    } else if (kind < 78) {
      const int codes[] = {79, 48, 94, 13};
      step(GpuEvent{node, static_cast<int>(rng.Below(4)), GpuEventKind::kXid, codes[rng.Below(4)]});
    } else if (kind < 81) {
      step(GpuEvent{node, static_cast<int>(rng.Below(4)), GpuEventKind::kCleared, 0});
    } else if (kind < 83) {
      step(NodeStateRequested{node, NodeState::kDown, "lost"});
    } else if (kind < 85) {
      step(NodeStateRequested{node, NodeState::kDraining, "maintenance"});
    } else if (kind < 88) {
      step(NodeStateRequested{node, NodeState::kUp, "back"});
    } else if (kind < 89) {
      PolicyChanged p{SchedulingPolicy::Of(core.config()), "backfill", "", ""};
      p.policy.backfill = !p.policy.backfill;
      p.policy.max_app_failures = static_cast<int>(rng.Range(1, 4));
      step(p);
    } else if (kind < 97 && heartbeats) {
      for (NodeId n = 0; n < topo.node_count(); ++n) {
        if (rng.Below(10) != 0) step(Heartbeat{n});
      }
    } else {
      step(Tick{});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a restored core makes the same decisions as the one that wrote the snapshot") {
  Topology topo = SmallCluster();
  for (bool heartbeats : {false, true}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(heartbeats);
      CAPTURE(seed);
      const std::vector<Timed> history = History(seed, heartbeats, 500);
      // The reference: every event through one core.
      SchedulerCore full(topo, Config(heartbeats));
      std::vector<std::string> commands;
      for (const Timed& t : history) {
        commands.push_back(Describe(full.Step(t.event, t.now)));
        full.TakeFinishedJobs();
      }
      for (size_t cut : {size_t{1}, history.size() / 3, history.size() / 2, history.size() - 1}) {
        CAPTURE(cut);
        SchedulerCore head(topo, Config(heartbeats));
        for (size_t i = 0; i < cut; ++i) {
          head.Step(history[i].event, history[i].now);
          head.TakeFinishedJobs();
        }
        const std::string snapshot = head.Snapshot();
        SchedulerCore restored(topo, Config(heartbeats));
        REQUIRE(restored.Restore(snapshot).ok());
        // Canonical: the restored core writes the same bytes.
        CHECK(restored.Snapshot() == snapshot);
        CHECK(restored.NextWakeup() == head.NextWakeup());
        CHECK(restored.WaitingJobs() == head.WaitingJobs());
        size_t diverged = 0;
        for (size_t i = cut; i < history.size(); ++i) {
          const std::string got = Describe(restored.Step(history[i].event, history[i].now));
          restored.TakeFinishedJobs();
          if (got != commands[i] && diverged++ == 0) {
            CAPTURE(i);
            CHECK(got == commands[i]);
          }
        }
        CHECK(diverged == 0);
        // The whole state, compared through its canonical bytes.
        CHECK(restored.Snapshot() == full.Snapshot());
      }
    }
  }
}

TEST_CASE("a reclaim deferred to the promise's deadline survives a snapshot") {
  // 64 GPUs. Tenant b borrows 56 with 8-GPU jobs whose limits end at
  // 90 min; tenant a runs one 8-GPU job and at 1 min submits a 16-GPU job
  // with a 1 h limit: the plan starts it at 90 min, within twice its limit,
  // so the reclaim waits for 59 min (1 min + 1 h - the 2 min grace).
  const Topology topo = testing::MakeRegular({"node", "leaf", "spine"}, 0, {2, 2}, 2, 8);
  SchedulerConfig config = SchedulerConfig::ForStack("toposched").value();
  config.heartbeats_required = false;
  config.preempt_grace = 2 * kMinute;
  auto request = [](int gpus, TimeMs limit, const char* tenant) {
    JobRequest r;
    r.spec = testing::MakeJob(gpus, 8);
    r.time_limit = limit;
    r.tenant = tenant;
    r.checkpoint_interval = -1;
    return r;
  };
  SchedulerCore core(topo, config);
  core.Step(TenantConfigured{TenantConfig{"a", 32, -1, 0, 0, 1}}, 0);
  core.Step(TenantConfigured{TenantConfig{"b", 32, -1, 0, 0, 1}}, 0);
  core.Step(JobSubmitted{9, request(8, 24 * kHour, "a")}, 0);
  for (JobId id = 1; id <= 7; ++id) core.Step(JobSubmitted{id, request(8, 90 * kMinute, "b")}, 0);
  core.Step(JobSubmitted{10, request(16, kHour, "a")}, kMinute);
  REQUIRE(core.job(10)->state == JobState::kQueued);
  const TimeMs deadline = kMinute + kHour - 2 * kMinute;
  REQUIRE(core.NextWakeup() == deadline);

  SchedulerCore restored(topo, config);
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  CHECK(restored.Snapshot() == core.Snapshot());
  CHECK(restored.NextWakeup() == deadline);
  // Both cores reclaim at the deadline, with the same commands.
  const std::string want = Describe(core.Step(Tick{}, deadline));
  CHECK(want.find("stop/ckpt") != std::string::npos);
  CHECK(Describe(restored.Step(Tick{}, deadline)) == want);
  CHECK(restored.Snapshot() == core.Snapshot());

  // Format version 2 (before the retry time) still restores.
  SchedulerCore old(topo, config);
  REQUIRE(old.Restore(restored.Snapshot(2)).ok());
  CHECK(old.Snapshot(2) == restored.Snapshot(2));
}

TEST_CASE("a snapshot keeps the records of running, held and backing-off jobs") {
  Topology topo = SmallCluster();
  const std::vector<Timed> history = History(11, false, 300);
  SchedulerCore core(topo, Config(false));
  for (const Timed& t : history) core.Step(t.event, t.now);
  SchedulerCore restored(topo, Config(false));
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  REQUIRE(restored.jobs().size() == core.jobs().size());
  for (const auto& [id, job] : core.jobs()) {
    const JobRecord* r = restored.job(id);
    REQUIRE(r != nullptr);
    CHECK(r->state == job.state);
    CHECK(r->reason == job.reason);
    CHECK(r->ranks == job.ranks);
    CHECK(r->spares == job.spares);
    CHECK(r->restarts == job.restarts);
    CHECK(r->preemptions == job.preemptions);
    CHECK(r->lost_gpu_ms == job.lost_gpu_ms);
    CHECK(r->request.command == job.request.command);
    CHECK(r->request.spec.parallelism.tp == job.request.spec.parallelism.tp);
    CHECK(r->request.spec.pids_max == job.request.spec.pids_max);
  }
  // Format version 5 (before pids_max) still restores, every job with the
  // node's limit.
  SchedulerCore v5(topo, Config(false));
  REQUIRE(v5.Restore(core.Snapshot(5)).ok());
  bool some_limit = false;
  for (const auto& [id, job] : core.jobs()) {
    some_limit |= job.request.spec.pids_max > 0;
    CHECK(v5.job(id)->request.spec.pids_max == 0);
  }
  CHECK(some_limit);
  // Format 6 (pids_max, before the attribution window) keeps the limits.
  SchedulerCore v6(topo, Config(false));
  REQUIRE(v6.Restore(core.Snapshot(6)).ok());
  for (const auto& [id, job] : core.jobs()) {
    CHECK(v6.job(id)->request.spec.pids_max == job.request.spec.pids_max);
  }
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    CHECK(restored.cluster().node_state(n) == core.cluster().node_state(n));
    CHECK(restored.cluster().busy_mask(n) == core.cluster().busy_mask(n));
    CHECK(restored.cluster().failed_mask(n) == core.cluster().failed_mask(n));
  }
  for (const char* t : {"org/a", "org/b", "default"}) {
    CHECK(restored.TenantUsage(t) == core.TenantUsage(t));
  }
  CHECK(restored.config().backfill == core.config().backfill);
}

TEST_CASE("a bad snapshot is refused with the reason and leaves the core as it was") {
  Topology topo = SmallCluster();
  const std::vector<Timed> history = History(5, false, 200);
  SchedulerCore core(topo, Config(false));
  for (const Timed& t : history) core.Step(t.event, t.now);
  const std::string good = core.Snapshot();
  REQUIRE(!core.jobs().empty());

  auto refused = [&](const std::string& bytes, const std::string& words) {
    SchedulerCore fresh(topo, Config(false));
    const std::string before = fresh.Snapshot();
    Status s = fresh.Restore(bytes);
    CHECK_FALSE(s.ok());
    CHECK_MESSAGE(s.message().find(words) != std::string::npos, s.message());
    CHECK(fresh.Snapshot() == before);
    CHECK(fresh.jobs().empty());
  };
  refused("", "not a scheduler snapshot");
  refused("hello world, this is no snapshot", "not a scheduler snapshot");
  refused(good.substr(0, good.size() / 2), "checksum");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  refused(flipped, "checksum");
  std::string newer = good;
  newer[8] = static_cast<char>(SchedulerCore::kSnapshotVersion + 1);
  refused(newer, "format version " + std::to_string(SchedulerCore::kSnapshotVersion + 1));
  std::string zero = good;
  zero[8] = 0;
  refused(zero, "format version 0");

  // Over another topology, or under another config.
  Topology other = testing::MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {2, 2, 3}, 2, 4);
  SchedulerCore elsewhere(other, Config(false));
  Status s = elsewhere.Restore(good);
  CHECK(s.message().find("another topology") != std::string::npos);
  SchedulerConfig fifo = Config(false);
  fifo.queue_order = "fifo";
  SchedulerCore otherwise(topo, fifo);
  s = otherwise.Restore(good);
  CHECK(s.message().find("another scheduler config") != std::string::npos);
  // The live policy is the snapshot's, whatever the restoring core had.
  SchedulerConfig no_backfill = Config(false);
  no_backfill.backfill = !core.config().backfill;
  SchedulerCore live(topo, no_backfill);
  REQUIRE(live.Restore(good).ok());
  CHECK(live.config().backfill == core.config().backfill);
}

// The fields of format version 4, each corrupted on its own with the
// checksum made good again: the reader must refuse every one by name.
TEST_CASE("a snapshot's kept reservation plan and allocation stamps are checked field by field") {
  Topology topo = SmallCluster();  // 16 nodes x 4 GPUs
  SchedulerCore core(topo, Config(false));
  // Eight 8-GPU jobs fill the cluster with different limits; a 64-GPU head
  // waits for all of them: its plan is kept in the snapshot.
  for (JobId id = 1; id <= 8; ++id) {
    JobRequest r;
    r.spec = testing::MakeJob(8, 4);
    r.time_limit = id * kHour;
    core.Step(JobSubmitted{id, r}, 0);
    REQUIRE(core.job(id)->state == JobState::kRunning);
  }
  JobRequest big;
  big.spec = testing::MakeJob(64, 4);
  big.time_limit = kHour;
  core.Step(JobSubmitted{9, big}, kMinute);
  REQUIRE(core.EstimatedStart(9) == 8 * kHour);
  const std::string good = core.Snapshot();

  auto u64 = [](uint64_t v) {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    return b;
  };
  auto checksum = [](std::string_view bytes) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ull;
    }
    return h;
  };
  // `bytes` with the 8 bytes at `at` replaced by v and the checksum redone.
  auto patched = [&](size_t at, uint64_t v) {
    std::string b = good;
    b.replace(at, 8, u64(v));
    b.replace(b.size() - 8, 8, u64(checksum(std::string_view(b).substr(0, b.size() - 8))));
    return b;
  };
  auto refused = [&](const std::string& bytes, const std::string& words) {
    SchedulerCore fresh(topo, Config(false));
    Status st = fresh.Restore(bytes);
    CHECK_FALSE(st.ok());
    CHECK_MESSAGE(st.message().find(words) != std::string::npos, st.message());
  };
  // The holders (jobs 1-8), then one stamp each, then the next stamp.
  std::string holders = u64(8);
  for (JobId id = 1; id <= 8; ++id) holders += u64(static_cast<uint64_t>(id));
  const size_t stamps = good.find(holders);
  REQUIRE(stamps != std::string::npos);
  const size_t next_stamp = stamps + holders.size() + 8 * 8;
  refused(patched(next_stamp, 0), "allocation stamp of job");
  // The kept plan: live, job 9, 8 holdings of (end, id, stamp), the
  // answer's index, the free GPUs before it, the usable GPUs from it on.
  const size_t plan = good.find(std::string(1, '\1') + u64(9) + u64(8));
  REQUIRE(plan != std::string::npos);
  const size_t holdings = plan + 1 + 8 + 8;
  const size_t answer_at = holdings + 8 * 24;
  {
    // The control: the answer is job 8's end (index 7), and writing that
    // again restores.
    const std::string same = patched(answer_at, 7);
    CHECK(same == good);
    SchedulerCore fresh(topo, Config(false));
    CHECK(fresh.Restore(same).ok());
  }
  refused(patched(answer_at, 8), "kept plan's answer");
  refused(patched(answer_at + 8, static_cast<uint64_t>(-1)), "kept plan's free GPUs");
  refused(patched(answer_at + 16, 2), "kept plan's usable GPUs");
  refused(patched(holdings, static_cast<uint64_t>(kNever)), "kept plan's holders");
}

TEST_CASE("random corruption never crashes a restore") {
  Topology topo = SmallCluster();
  const std::vector<Timed> history = History(7, true, 200);
  SchedulerCore core(topo, Config(true));
  for (const Timed& t : history) core.Step(t.event, t.now);
  const std::string good = core.Snapshot();
  Rng rng(99);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng.Below(4));
    for (int f = 0; f < flips; ++f) {
      bad[rng.Below(bad.size())] = static_cast<char>(rng.Below(256));
    }
    if (rng.Below(3) == 0) bad.resize(rng.Below(bad.size()));
    SchedulerCore fresh(topo, Config(true));
    refused += fresh.Restore(bad).ok() ? 0 : 1;
  }
  CHECK(refused >= 290);  // a flip that restores a byte's value is no corruption
}
