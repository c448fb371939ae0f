#pragma once
// Shared by the store tests and store_crash_writer: a small topology, a
// seeded workload that drives a SchedulerCore, a temporary directory.

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::store::testing {

// node < hbd (2 nodes) < leaf (2 HBDs) < spine (2 leaves), 2 spines; 4 GPUs
// per node: 16 nodes "n0".."n15", 64 GPUs.
inline core::Topology MakeTestTopology() {
  core::TopologyBuilder b("store-test", {"node", "hbd", "leaf", "spine"}, 1);
  int node = 0, domain = 0;
  for (int s = 0; s < 2; ++s) {
    int spine = b.AddDomain("spine" + std::to_string(domain++), 3, core::TopologyBuilder::kTop);
    for (int l = 0; l < 2; ++l) {
      int leaf = b.AddDomain("leaf" + std::to_string(domain++), 2, spine);
      for (int h = 0; h < 2; ++h) {
        int hbd = b.AddDomain("hbd" + std::to_string(domain++), 1, leaf);
        for (int n = 0; n < 2; ++n) b.AddNode("n" + std::to_string(node++), hbd, 4);
      }
    }
  }
  return std::move(b).Build().value();
}

inline core::SchedulerConfig MakeTestConfig(bool heartbeats) {
  core::SchedulerConfig c;
  c.heartbeats_required = heartbeats;
  c.preempt_grace = 5 * core::kMinute;
  return c;
}

inline std::vector<core::TenantConfig> TestTenants() {
  return {{"org/a", 16, 16, 32, 3, 2.0}, {"org/b", 8, -1, 0, 0, 1.0}, {"lab", 8, 8, 0, 2, 0.5}};
}

// Seeded events over a core's current state: submissions, completions,
// cancellations, holds, checkpoints, rank failures, GPU faults and repairs,
// node loss and return, ticks; with heartbeats, most nodes heartbeat and a
// few fall silent now and then.
class Workload {
 public:
  Workload(const core::Topology& topology, uint64_t seed, core::JobId next_id, bool heartbeats)
      : topo_(topology), rng_(seed), next_id_(next_id), heartbeats_(heartbeats) {}

  core::JobId next_id() const { return next_id_; }

  // The next event; advances now.
  core::Event Next(const core::SchedulerCore& core, core::TimeMs& now) {
    now += heartbeats_ ? static_cast<core::TimeMs>(rng_.Below(200))
                       : static_cast<core::TimeMs>(rng_.Below(10 * core::kMinute));
    std::vector<core::JobId> active, running, waiting;
    for (const auto& [id, job] : core.jobs()) {
      if (core::IsTerminal(job.state)) continue;
      active.push_back(id);
      if (job.state == core::JobState::kRunning) running.push_back(id);
      if (job.state == core::JobState::kQueued || job.state == core::JobState::kHeld)
        waiting.push_back(id);
    }
    auto pick = [&](const std::vector<core::JobId>& v) { return v[rng_.Below(v.size())]; };
    auto node = [&] { return static_cast<core::NodeId>(rng_.Below(topo_.node_count())); };
    if (heartbeats_ && rng_.Below(100) < 60) {
      // Nodes 0..13 heartbeat; 14 and 15 only register now and then.
      core::NodeId n = static_cast<core::NodeId>(rng_.Below(14));
      if (core.cluster().node_state(n) == core::NodeState::kDown) {
        return core::NodeStateRequested{n, core::NodeState::kUp, "agent registered"};
      }
      return core::Heartbeat{n};
    }
    const uint64_t kind = rng_.Below(100);
    // Submissions pause while many jobs wait, which keeps Step cheap.
    if ((kind < 30 && waiting.size() < 24) || active.empty()) {
      core::JobRequest r;
      const int tp = std::array<int, 3>{1, 2, 4}[rng_.Below(3)];
      const int dp = static_cast<int>(rng_.Range(1, 4));
      const int pp = rng_.Below(3) == 0 ? 2 : 1;
      r.spec.name = "job" + std::to_string(next_id_);
      r.spec.gpus = tp * dp * pp;
      r.spec.parallelism.tp = tp;
      r.spec.parallelism.dp = dp;
      r.spec.parallelism.pp = pp;
      if (tp == 2 && dp % 2 == 0 && rng_.Below(4) == 0) r.spec.parallelism.ep = 2;
      if (rng_.Below(8) == 0) r.spec.spares = 1;
      r.tenant = TestTenants()[rng_.Below(3)].name;
      r.user = "u" + std::to_string(rng_.Below(5));
      r.priority = static_cast<int>(rng_.Below(3));
      r.time_limit = static_cast<core::TimeMs>(rng_.Range(10, 240)) * core::kMinute;
      r.checkpoint_interval = 20 * core::kMinute;
      return core::JobSubmitted{next_id_++, r};
    }
    if (kind < 50 && !running.empty()) return core::JobFinished{pick(running), 0};
    if (kind < 53 && !running.empty()) return core::JobFinished{pick(running), 1};
    if (kind < 57) return core::JobCancelled{pick(active), "changed my mind"};
    if (kind < 60 && !waiting.empty())
      return core::JobHoldChanged{pick(waiting), rng_.Below(2) == 0};
    if (kind < 68) {
      return core::CheckpointCompleted{pick(active), static_cast<int64_t>(rng_.Below(1000))};
    }
    if (kind < 72 && !running.empty()) {
      return core::RankExited{pick(running), static_cast<int>(rng_.Below(4)), 139};
    }
    if (kind < 78) {
      const int codes[] = {79, 48, 94, 13};
      return core::GpuEvent{node(), static_cast<int>(rng_.Below(4)), core::GpuEventKind::kXid,
                            codes[rng_.Below(4)]};
    }
    if (kind < 84) {
      return core::GpuEvent{node(), static_cast<int>(rng_.Below(4)), core::GpuEventKind::kCleared,
                            0};
    }
    if (kind < 87) return core::NodeStateRequested{node(), core::NodeState::kDown, "lost"};
    if (kind < 92) return core::NodeStateRequested{node(), core::NodeState::kUp, "back"};
    if (kind < 94) return core::NodeStateRequested{node(), core::NodeState::kDrained, "repair"};
    return core::Tick{};
  }

 private:
  const core::Topology& topo_;
  core::Rng rng_;
  core::JobId next_id_;
  bool heartbeats_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/topo-store-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace topo::store::testing
