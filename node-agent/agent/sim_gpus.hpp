#pragma once
// SimGpus: the GPU backend of each node of `topo-agent --simulate`
// (simulate.hpp). N GPUs of one model, faults injected in memory by the
// simulator's control commands, no file descriptor (WaitFd() is -1: the
// simulator calls AgentCore::PollGpus right after an injection), so
// thousands of nodes fit under one process's RLIMIT_NOFILE, which their
// sockets need. A real agent's simulated GPUs (gpu::SimulatedBackend) keep
// a pipe or FIFO per node for injections from outside the process.
//
// Fault semantics follow gpu::SimulatedBackend: every injection is one
// event (ECC with both counts: two); thermal off is followed by `cleared`
// when the GPU has no other fault since the last clear; `clear` clears
// everything.
//
// Thread safety: none (the simulator's one thread).

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_backend.hpp"

namespace topo::agent {

class SimGpus final : public gpu::GpuBackend {
 public:
  // uuids: GPU-sim-NODE-INDEX; memory 81,559 MiB (an H100 80GB).
  SimGpus(const std::string& node, int gpus, const std::string& model);

  std::string_view Name() const override { return "simulated"; }
  const gpu::GpuInventory& Inventory() const override { return inventory_; }
  std::vector<gpu::HealthEvent> Poll(core::TimeMs now) override;
  int WaitFd() const override { return -1; }

  // One injection (gpu::ParseInjectLine's language). A GPU out of range is
  // an error naming it.
  core::Status Inject(const gpu::InjectCommand& command);
  // Forgets faults and pending events (a fresh node).
  void Reset();

 private:
  gpu::GpuInventory inventory_;
  std::vector<gpu::HealthEvent> pending_;
  std::vector<uint8_t> faulty_;  // per GPU: a fault since the last clear
};

}  // namespace topo::agent
