#pragma once
// One AgentCore over the fakes (fakes.hpp) and simulated GPUs, and the
// scheduler messages the tests send it.

#include <string>
#include <vector>

#include "agent_core.hpp"
#include "fakes.hpp"
#include "sim_gpus.hpp"

namespace topo::agent::testing {

struct Harness {
  Harness() { options.job_command = "echo default"; }
  // Scheduler -> agent, as text, the way the connection delivers it.
  void Send(const proto::SchedulerMessage& m) { core.OnText(proto::WriteSchedulerMessage(m)); }
  // Connected and registered with `keep`; what was sent so far is cleared.
  void Register(std::vector<int64_t> keep = {}, int heartbeat_ms = 200) {
    link.connected = true;
    core.OnConnected();
    Send(proto::Registered{"n0", heartbeat_ms, std::move(keep), {}});
    link.Clear();
  }
  // `n` Ticks, the clock 100 ms further before each.
  void Ticks(int n) {
    for (int i = 0; i < n; ++i) {
      clock.now += 100;
      core.Tick();
    }
  }

  FakeClock clock;
  FakeLink link;
  CaptureLog log;
  FakeRunner runner;
  SimGpus gpus{"n0", 8, "H100"};
  AgentCoreOptions options;
  AgentCore core{"n0", options, runner, gpus, link, clock, log};
};

// A start of `job` with the given global ranks on GPUs 0..k-1 (local ranks
// in order), 16 ranks in all (tp 4, pp 2, dp 2), this node group rank 1 of 2.
inline proto::Start MakeStart(int64_t job, int restart, std::vector<int> ranks,
                              std::vector<int> gpus = {}) {
  proto::Start s;
  s.job = job;
  s.restart_count = restart;
  s.world_size = 16;
  s.master_addr = "10.0.0.7";
  s.master_port = 20123;
  s.group_rank = 1;
  s.group_world_size = 2;
  s.layout = proto::Layout{4, 1, 1, 2, 2, "tp-cp-ep-dp-pp"};
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int gpu = gpus.empty() ? static_cast<int>(i) : gpus[i];
    s.ranks.push_back(proto::StartRank{ranks[i], static_cast<int>(i), gpu});
  }
  s.command = {"/usr/bin/python3", "train.py", "--steps", "10"};
  s.unix_user = "ada";
  s.env = {{"LANG", "C.UTF-8"}, {"WANDB_MODE", "offline"}};
  s.working_dir = "/home/ada/run";
  return s;
}

}  // namespace topo::agent::testing
