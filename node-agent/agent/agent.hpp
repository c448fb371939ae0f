#pragma once
// topo-agent: one process per node. Speaks docs/agent-protocol.md to
// topo-scheduler over a mutually authenticated TLS WebSocket, launches and
// watches the node's ranks through RankSupervisor and reports GPU faults
// from a GpuBackend at once (its wait fd is watched by the event loop).
//
// Everything runs on one thread: an Asio io_context with coroutines for the
// connection (connect, register, read loop), a heartbeat loop, a 100 ms tick
// (supervisor and GPU Poll, deferred launches, drains), watchers on the GPU
// backend's and the supervisor's wake fds, SIGCHLD, and SIGTERM/SIGINT.

#include <cstdint>
#include <memory>
#include <string>

namespace topo::agent {

struct AgentOptions {
  std::string node;
  std::string server_url;  // wss://HOST:PORT/PATH
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string state_dir;                  // created 0700
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
  int drain_checkpoint_ms = 3000;  // graceful drain: wait this long for a checkpoint
  bool stop_ranks_on_exit = false;
  uint64_t seed = 0;  // backoff jitter; 0: derived from the node name and pid
};

// Runs until SIGTERM/SIGINT; returns the process exit code.
int RunAgent(const AgentOptions& options);

// "wss://host:port/path" -> parts; false when the URL is not of that form.
struct ServerUrl {
  std::string host;
  std::string port;
  std::string path;
};
bool ParseServerUrl(const std::string& url, ServerUrl* out);

}  // namespace topo::agent
