#pragma once
// `topo-agent --simulate N`: N light simulated nodes in one process, for
// scale and recovery tests against a real topo-scheduler.
//
// Each simulated node is a distinct agent to the daemon: its own mutually
// authenticated TLS WebSocket (docs/agent-protocol.md), its own client
// certificate (CN = node name) minted in memory at startup from the
// scheduler's CA certificate and key, its own `register` (simulated GPUs),
// heartbeats at the interval `registered` gives, and answers to the daemon's
// commands. No rank processes run: a `start` is recorded (the ranks "run" at
// one training step per --step-ms), `stop` forgets them, `checkpoint` makes
// the node holding rank 0 report the current step as a persistent
// checkpoint, `drain` reports `drained`, `logs` gets a one-line synthetic
// log.
//
// Control (stdin, one command a line; answers and events on stdout):
//   kill NODE              drop the connection without a close frame and go
//                          silent (an agent killed, a host lost)
//   hang NODE              stay connected but send nothing (a network cut the
//                          TCP connection does not see)
//   revive NODE            a fresh agent on NODE: reconnect and register
//   xid NODE GPU CODE      gpu_event kind xid at once
//   gpu NODE GPU KIND CODE gpu_event of any protocol kind
//   exit NODE JOB RANK CODE  rank_exited for a local rank (CODE 0: success)
//   checkpoint JOB         the job's rank-0 node reports its current step now
//   status                 one "status" event with the counters
//   quit                   stop (as SIGTERM)
// Events are JSON objects, one a line, each with "ev" and "t" (wall-clock
// milliseconds since the epoch): ready, up (a node registered), start, stop,
// checkpoint_request, ckpt (a checkpoint reported), drain, refused, lost (a
// connection ended), ack (a control command done, or "error"; "t_cmd" is
// when it was read, before it was carried out), status.
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
  std::string ca_file;      // the scheduler's ca.pem
  std::string ca_key_file;  // its ca-key.pem: signs the nodes' certificates
  std::string addr = "127.0.0.1";
  int gpus = 8;
  std::string gpu_model = "H100";
  int heartbeat_ms = 0;         // 0: what `registered` says
  int max_connecting = 256;     // connections being set up at once
  int step_ms = 1000;           // one simulated training step
  int checkpoint_every_ms = 0;  // > 0: rank 0's node also checkpoints on its own
  int run_ms = 0;               // > 0: ranks exit 0 after this long; 0: until stopped
  bool up_events = true;        // print an "up" event per registration
  int stats_every_s = 10;       // a summary line on stderr (0: never)
  uint64_t seed = 0;            // connection jitter
};

// Node names the options give (names[first_index..] or prefix + index).
std::vector<std::string> SimulatedNodeNames(const SimulateOptions& options);

// Runs until SIGTERM/SIGINT or `quit`; returns the process exit code.
// Raises RLIMIT_NOFILE to its hard limit and refuses more nodes than it
// allows.
int RunSimulation(const SimulateOptions& options);

}  // namespace topo::agent
