#pragma once
// topo-agent on a real node: one process per node. Speaks
// docs/agent-protocol.md to topo-scheduler over a mutually authenticated
// TLS WebSocket (connection.hpp), with the agent's logic in AgentCore
// (agent_core.hpp) over RankSupervisor (supervisor_runner.hpp) and a
// GpuBackend (NVML, or simulated GPUs with the inject FIFO).
//
// Everything runs on one thread: an Asio io_context with the connection's
// coroutines, a 100 ms tick (runner and GPU polls, launches waiting,
// drains), watchers on the GPU backend's and the supervisor's wake fds,
// SIGCHLD, and SIGTERM/SIGINT.
//
// The state directory (trust boundaries, ARCHITECTURE.md): STATE is root
// 0711 (traversable, not listable); STATE/supervisor (pids, accounts) root
// 0700; STATE/logs and STATE/checkpoints root 0711 with one 0700 directory
// per job owned by the job's account (account.hpp); STATE/inject (simulated
// GPUs) a root 0600 FIFO. The persistent tier's root is made root 0711 too.
// The agent refuses a --key that other users could read.

#include <cstdint>
#include <string>

#include "connection.hpp"  // ServerUrl, ParseServerUrl

namespace topo::agent {

struct AgentOptions {
  std::string node;
  std::string server_url;  // wss://HOST:PORT/PATH
  // Read again after a failed attempt (ConnectionSettings::endpoint_file):
  // a local daemon's STATE/agent-endpoint, "" for a fixed --server.
  std::string endpoint_file;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string state_dir;                  // made root 0711 (see above)
  std::string persistent_checkpoint_dir;  // empty: no persistent tier
  std::string addr = "127.0.0.1";         // what `register` says
  // GPU backend.
  std::string gpu_backend = "auto";  // auto | nvml | simulated
  int gpus = 8;
  std::string gpu_model = "H100";
  std::string nvml_library = "libnvidia-ml.so.1";
  int heartbeat_ms = 0;  // 0: what `registered` says
  // The command run for every rank of a `start` that carries no `command`
  // (a job submitted without one): a shell command line for /bin/sh -c.
  std::string job_command;
  int stop_grace_ms = 5000;
  int drain_checkpoint_ms = 3000;     // graceful drain: wait this long for a checkpoint
  int64_t stage_wait_ms = 3'600'000;  // a restart's checkpoint copy onto this node, at most
  bool stop_ranks_on_exit = false;
  // Site policy: ranks may run as uid 0 (default: such starts fail, permanently).
  bool allow_root_jobs = false;
  // No rank runs as an account with a uid in 1..min_job_uid-1 (system
  // accounts), whatever the scheduler says (AccountPolicy, account.hpp).
  uint32_t min_job_uid = 1000;
  // pids.max of every job's cgroup: the start's pids_max when lower, else
  // this (0: no node limit).
  int64_t job_pids_max = 16384;
  // Private /tmp and /dev/shm per job (job_scratch.hpp): "auto", "on", "off";
  // tmpfs sizes (bytes with k/m/g/t, or N% of RAM).
  std::string job_scratch = "auto";
  std::string job_tmp_size = "50%";
  std::string job_shm_size = "50%";
  // The persistent tier keeps each job's newest K complete steps (0: all).
  int keep_checkpoints = 2;
  // Leave /dev/nvidia* of other jobs' GPUs open to every job (the default
  // restricts each job's cgroup to its own GPUs where the node can).
  bool no_gpu_device_isolation = false;
  // Job cgroups: "" = detect, "none" = process groups only, else a
  // directory in a cgroup v2 or v1 freezer/pids hierarchy (cgroup.hpp).
  std::string cgroup_root;
  uint64_t seed = 0;  // backoff jitter; 0: derived from the node name and pid
};

// Runs until SIGTERM/SIGINT; returns the process exit code.
int RunAgent(const AgentOptions& options);

}  // namespace topo::agent
