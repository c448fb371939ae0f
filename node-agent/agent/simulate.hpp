#pragma once
// `topo-agent --simulate N`: N simulated nodes in one process, for scale
// and recovery tests against a real topo-scheduler.
//
// Each simulated node runs the real agent: its own AgentCore (agent_core.hpp:
// registration, keep lists, starts, stops, checkpoints, drains, logs,
// restart counts, launches waiting, reports held across reconnects) over
// its own AgentConnection (connection.hpp: mutual-TLS WebSocket, backoff
// with jitter, heartbeats at the interval `registered` gives), with a
// client certificate (CN = node name) minted in memory at startup from the
// scheduler's CA certificate and key (simulate_cert.hpp). Only the node
// itself is simulated: SimRunner (sim_runner.hpp) instead of processes,
// SimGpus (sim_gpus.hpp) instead of GPUs.
//
// Control (stdin, one command a line; answers and events on stdout):
//   kill NODE              drop the connection without a close frame and go
//                          silent; the node's ranks are gone (an agent killed,
//                          a host lost)
//   hang NODE              stay connected but send nothing and ignore what
//                          comes (a network cut the TCP connection does not see)
//   revive NODE            a fresh agent on NODE: reconnect and register (a
//                          node that was neither killed nor hung only loses
//                          its ranks)
//   xid NODE GPU CODE      an XID on a GPU, reported at once
//   gpu NODE GPU KIND CODE a GPU fault of a protocol kind: xid CODE,
//                          ecc_single_bit COUNT, ecc_double_bit COUNT,
//                          thermal 1|0 (on, off), off_bus, cleared
//   exit NODE JOB RANK CODE  a rank of the job here exits with CODE (0-255)
//   checkpoint JOB         the job's rank-0 node reports its current step now
//   status                 one "status" event with the counters
//   quit                   stop (as SIGTERM)
// Events are JSON objects, one a line, each with "ev" and "t" (wall-clock
// milliseconds since the epoch): ready, up (a node registered), start (a
// node's ranks started: job, restart_count, checkpoint_step, ranks,
// group_rank, world_size), stop, checkpoint_request, ckpt (a checkpoint
// reported), drain, refused (an `error` from the scheduler), finished (a
// node's ranks all exited after --run-ms), lost (a registered connection
// ended), ack (a control command done, or "error"; "t_cmd" is when it was
// read, before it was carried out), status.
// The agents' own log lines at warning level go to stderr, prefixed with
// the node.
//
// Threading: one io_context thread runs every node; nothing is shared with
// other threads.

#include <cstdint>
#include <string>
#include <vector>

namespace topo::agent {

struct SimulateOptions {
  int nodes = 0;                   // how many simulated nodes
  std::vector<std::string> names;  // node names; empty: node_prefix + index
  std::string node_prefix = "n";
  int node_width = 0;   // zero-padded index width (0: none)
  int first_index = 0;  // the first index (or the first line of names used)
  std::string server_url;
  std::string endpoint_file;  // read again after failures (ConnectionSettings::endpoint_file)
  std::string ca_file;        // the scheduler's ca.pem
  std::string ca_key_file;    // its ca-key.pem: signs the nodes' certificates
  std::string addr = "127.0.0.1";
  int gpus = 8;
  std::string gpu_model = "H100";
  int heartbeat_ms = 0;            // 0: what `registered` says
  int drain_checkpoint_ms = 3000;  // as the real agent's
  int max_connecting = 256;        // connections being set up at once
  int step_ms = 1000;              // one simulated training step
  int checkpoint_every_ms = 0;     // > 0: rank 0's node also checkpoints on its own
  int run_ms = 0;                  // > 0: ranks exit 0 after this long; 0: until stopped
  bool up_events = true;           // print an "up" event per registration
  int stats_every_s = 10;          // a summary line on stderr (0: never)
  uint64_t seed = 0;               // connection jitter
};

// Node names the options give (names[first_index..] or prefix + index).
std::vector<std::string> SimulatedNodeNames(const SimulateOptions& options);

// Runs until SIGTERM/SIGINT or `quit`; returns the process exit code.
// Raises RLIMIT_NOFILE to its hard limit and refuses more nodes than it
// allows (one socket per node).
int RunSimulation(const SimulateOptions& options);

}  // namespace topo::agent
