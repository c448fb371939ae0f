#pragma once
// The BPF device program that isolates a job's GPUs on cgroup v2
// (cgroup.hpp; the program itself is described in device_filter.cpp).
// Internal to the supervisor.

#include <linux/bpf.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::agent {

struct DeviceNumber {
  uint32_t major = 0;
  uint32_t minor = 0;
};

// Far above any node's GPU count, far below the verifier's limits.
constexpr size_t kMaxDeniedDevices = 1024;

// The program: EPERM for each character device in `denied`, everything
// else allowed. Pure.
std::vector<bpf_insn> DeviceDenyProgram(const std::vector<DeviceNumber>& denied);

// Ok when this kernel loads a device program for the agent (an empty deny
// list, loaded and closed at once; nothing is attached).
core::Status DeviceFilterAvailable();

// Attaches to the cgroup v2 directory a program refusing `denied`; it
// replaces one attached there before and stays until the cgroup is
// removed. REQUIRES: denied.size() <= kMaxDeniedDevices.
core::Status AttachDeviceDenyList(const std::string& cgroup_dir,
                                  const std::vector<DeviceNumber>& denied);

}  // namespace topo::agent
