// topo-agent: the node agent (agent.hpp, docs/agent-protocol.md).

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <string>

#include "agent.hpp"

int main(int argc, char** argv) {
  topo::agent::AgentOptions o;
  std::string scheduler_state_dir;
  CLI::App app{
      "topo-agent: the toposched node agent. One process per node: registers the node's GPUs "
      "with topo-scheduler over a mutually authenticated TLS WebSocket, starts and watches the "
      "node's ranks, relays checkpoints and reports GPU faults at once."};
  app.footer(R"(Examples:
  # certificates for node n0, signed by the scheduler's CA
  topo-scheduler --state-dir /var/lib/topo ca issue --node n0 --out /etc/topo-agent

  # a real node (NVML when libnvidia-ml.so.1 loads, else simulated GPUs)
  topo-agent --node n0 --server wss://sched.example:8444/v1/agent \
      --ca /etc/topo-agent/ca.pem --cert /etc/topo-agent/n0.pem --key /etc/topo-agent/n0-key.pem \
      --state-dir /var/lib/topo-agent --persistent-checkpoint-dir /shared/ckpt

  # a simulated node next to a local daemon (endpoint and CA read from its state dir)
  topo-agent --node n1 --scheduler-state-dir /tmp/sched --cert n1.pem --key n1-key.pem \
      --state-dir /tmp/agent-n1 --gpu-backend simulated --gpus 8 --gpu-model H100 \
      --job-command 'sleep 1'

  # inject a fault into a simulated GPU of a running agent
  timeout 5 sh -c 'echo "xid 3 79" > /tmp/agent-n1/inject'

Protocol gap: `start` messages from topo-scheduler carry no command yet. The agent runs the
message's optional `command` array when present, else --job-command with /bin/sh -c.)");
  app.add_option("--node", o.node, "this node's name (the CN of its certificate)")->required();
  app.add_option("--server", o.server_url,
                 "the scheduler's agent endpoint, wss://HOST:PORT/v1/agent (default: "
                 "SCHEDULER_STATE/agent-endpoint with --scheduler-state-dir)");
  app.add_option("--scheduler-state-dir", scheduler_state_dir,
                 "a local daemon's state directory: --server and --ca default from it");
  app.add_option("--ca", o.ca_file, "the scheduler's CA certificate (ca.pem)");
  app.add_option("--cert", o.cert_file, "this node's client certificate (NAME.pem)")->required();
  app.add_option("--key", o.key_file, "its private key (NAME-key.pem)")->required();
  app.add_option("--state-dir", o.state_dir,
                 "agent state: supervisor state, rank logs, local checkpoints, the inject FIFO "
                 "(created 0700)")
      ->required();
  app.add_option("--persistent-checkpoint-dir", o.persistent_checkpoint_dir,
                 "the persistent checkpoint tier (shared storage); none by default");
  app.add_option("--addr", o.addr, "the address this node registers (MASTER_ADDR of its jobs)")
      ->capture_default_str();
  app.add_option("--gpu-backend", o.gpu_backend, "auto, nvml or simulated")
      ->check(CLI::IsMember({"auto", "nvml", "simulated"}))
      ->capture_default_str();
  app.add_option("--gpus", o.gpus, "simulated backend: GPU count")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--gpu-model", o.gpu_model, "simulated backend: GPU model")->capture_default_str();
  app.add_option("--nvml-library", o.nvml_library, "what dlopen opens for NVML")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", o.heartbeat_ms,
                 "heartbeat interval (default: what the scheduler says when registering)")
      ->check(CLI::Range(10, 600000));
  app.add_option("--job-command", o.job_command,
                 "shell command line (/bin/sh -c) run for every rank of a start message that "
                 "carries no command");
  app.add_option("--stop-grace-ms", o.stop_grace_ms, "SIGTERM to SIGKILL grace when stopping ranks")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app.add_option("--drain-checkpoint-ms", o.drain_checkpoint_ms,
                 "graceful drain: how long to wait for the ranks' checkpoint before stopping them")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app.add_flag("--stop-ranks-on-exit", o.stop_ranks_on_exit,
               "on SIGTERM/SIGINT stop every rank (default: leave them for the next agent)");
  app.add_option("--seed", o.seed, "reconnect jitter seed (0: from the node name and pid)");
  CLI11_PARSE(app, argc, argv);

  if (!scheduler_state_dir.empty()) {
    if (o.server_url.empty()) {
      std::ifstream f(scheduler_state_dir + "/agent-endpoint");
      std::getline(f, o.server_url);
      if (o.server_url.empty()) {
        std::cerr << "topo-agent: cannot read " << scheduler_state_dir
                  << "/agent-endpoint (is the daemon running with agents enabled?)\n";
        return 2;
      }
    }
    if (o.ca_file.empty()) o.ca_file = scheduler_state_dir + "/ca.pem";
  }
  if (o.server_url.empty()) {
    std::cerr << "topo-agent: --server is required (or --scheduler-state-dir)\n";
    return 2;
  }
  if (o.ca_file.empty()) {
    std::cerr << "topo-agent: --ca is required (or --scheduler-state-dir)\n";
    return 2;
  }
  return topo::agent::RunAgent(o);
}
