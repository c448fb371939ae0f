// topo-agent: the node agent (agent.hpp, docs/agent-protocol.md).

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <string>

#include <ctime>

#include "agent.hpp"
#include "cert_check.hpp"
#include "simulate.hpp"
#include "topo/agent/job_scratch.hpp"
#include "topo/common/version.hpp"

int main(int argc, char** argv) {
  topo::agent::AgentOptions o;
  std::string scheduler_state_dir;
  topo::agent::SimulateOptions sim;
  std::string sim_nodes_file;
  CLI::App app{
      "topo-agent: the toposched node agent. One process per node: registers the node's GPUs "
      "with topo-scheduler over a mutually authenticated TLS WebSocket, starts and watches the "
      "node's ranks, relays checkpoints and reports GPU faults at once."};
  app.footer(R"(Examples:
  # certificates for node n0, signed by the scheduler's CA, valid agent_cert_days (90);
  # the agent warns --cert-warn-days (14) before they expire: renew them then
  topo-scheduler --state-dir /var/lib/topo ca issue --node n0 --out /etc/topo-agent
  topo-scheduler --state-dir /var/lib/topo ca renew --node n0 --out /etc/topo-agent

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

  # 1,000 simulated nodes n0000..n0999 in this one process (certificates minted
  # from the local daemon's CA key); control commands on stdin, events on stdout
  topo-agent --simulate 1000 --node-prefix n --node-width 4 --scheduler-state-dir /tmp/sched

Jobs: a `start` message's `command` (argv) is what every rank runs; a start without one
runs --job-command with /bin/sh -c. Ranks run as the start's `unix_user` (the submitter's
account; never one below --min-job-uid; uid 0 only with --allow-root-jobs) in one cgroup per
job, with the environment of docs/jobs.md and nothing of the agent's. A start that cannot
run here is reported to the scheduler as `launch_failed` (permanent when no node can run it).

State: --state-dir is made root 0711; inside it supervisor/ (root 0700), logs/ and
checkpoints/ (root 0711, one 0700 directory per job owned by its account). --key must not
be readable by other users.

Simulate mode (--simulate N) runs the same agent logic for N nodes in one process, with
simulated ranks (no processes) and GPUs: each simulated node has its own TLS WebSocket,
certificate and registration. It reads commands on stdin: kill NODE | hang NODE |
revive NODE | xid NODE GPU CODE | gpu NODE GPU KIND CODE | exit NODE JOB RANK CODE |
checkpoint JOB | status | quit, and prints events (JSON, one a line, with wall-clock "t" in ms) on stdout.)");
  app.add_option("--node", o.node, "this node's name (the CN of its certificate)");
  app.add_option("--server", o.server_url,
                 "the scheduler's agent endpoint, wss://HOST:PORT/v1/agent (default: "
                 "SCHEDULER_STATE/agent-endpoint with --scheduler-state-dir); HA replicas: "
                 "several, comma-separated, tried in turn");
  app.add_option("--scheduler-state-dir", scheduler_state_dir,
                 "a local daemon's state directory: --server and --ca default from it (its "
                 "agent-endpoint is read again after a failed reconnect, so a daemon restarted "
                 "on another port is followed)");
  app.add_option("--ca", o.ca_file, "the scheduler's CA certificate (ca.pem)");
  app.add_option("--cert", o.cert_file, "this node's client certificate (NAME.pem)");
  app.add_option("--key", o.key_file, "its private key (NAME-key.pem)");
  app.add_option("--state-dir", o.state_dir,
                 "agent state: supervisor state, rank logs, local checkpoints, the inject FIFO "
                 "(made root 0711; see below)");
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
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "the persistent tier keeps each job's newest K complete checkpoint steps, older "
                 "ones removed once a newer one is copied there (the last K stay after the job "
                 "as its output); 0 keeps every step. At least 2: the scheduler's step lags the "
                 "newest by a message")
      ->check([](const std::string& v) {
        return v == "0" ||
                       (!v.empty() && v.size() < 6 &&
                        v.find_first_not_of("0123456789") == std::string::npos && std::stoi(v) >= 2)
                   ? std::string()
                   : std::string("must be 0 (keep all) or 2..99999");
      })
      ->capture_default_str();
  app.add_option("--stage-wait-ms", o.stage_wait_ms,
                 "a restart onto this node: how long to wait while the job's checkpoint is "
                 "copied from the persistent tier to the local one (on its own thread; "
                 "heartbeats go on) before the start is reported failed")
      ->check(CLI::Range(int64_t{1000}, int64_t{86400000}))
      ->capture_default_str();
  app.add_flag("--stop-ranks-on-exit", o.stop_ranks_on_exit,
               "on SIGTERM/SIGINT stop every rank (default: leave them for the next agent)");
  app.add_flag("--allow-root-jobs", o.allow_root_jobs,
               "let ranks run as uid 0 (default: a start whose account is root fails, "
               "permanently)");
  app.add_option("--min-job-uid", o.min_job_uid,
                 "refuse, permanently, a start whose account has a uid in 1..N-1 (system "
                 "accounts), whatever the scheduler says; uid 0 is --allow-root-jobs' alone")
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967294U}))
      ->capture_default_str();
  app.add_option("--job-pids-max", o.job_pids_max,
                 "pids.max of every job's cgroup: the most tasks (processes and threads) a job "
                 "has at once on this node; a job's own pids_max may only lower it (0: no limit "
                 "but the job's)")
      ->check(CLI::Range(int64_t{0}, int64_t{4194304}))
      ->capture_default_str();
  app.add_option("--job-scratch", o.job_scratch,
                 "a private /tmp and /dev/shm per job (tmpfs in a mount namespace of the job's, "
                 "charged to its memory cgroup, removed when it ends): auto (where the node can: "
                 "the agent is root and may make mount namespaces; else the node's, said in each "
                 "rank's log), on (a node that cannot fails the start) or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  auto tmpfs_size = [](const std::string& v) {
    topo::core::Status st = topo::agent::CheckTmpfsSize(v);
    return st.ok() ? std::string() : st.message();
  };
  app.add_option("--job-tmp-size", o.job_tmp_size,
                 "size of each job's /tmp tmpfs: bytes with k, m, g or t, or N% of the node's RAM")
      ->check(tmpfs_size)
      ->capture_default_str();
  app.add_option("--job-shm-size", o.job_shm_size, "size of each job's /dev/shm tmpfs, as above")
      ->check(tmpfs_size)
      ->capture_default_str();
  app.add_flag("--no-gpu-device-isolation", o.no_gpu_device_isolation,
               "let every job open every GPU's device node (default: a job's cgroup opens only "
               "its own GPUs where the node enforces it; CUDA_VISIBLE_DEVICES always lists them)");
  app.add_option("--cgroup-root", o.cgroup_root,
                 "where job cgroups go: a directory in a cgroup v2 or v1 freezer/pids "
                 "hierarchy; \"none\" for process groups only (default: detected)");
  app.add_option("--seed", o.seed, "reconnect jitter seed (0: from the node name and pid)");
  int cert_warn_days = 14;
  app.add_option("--cert-warn-days", cert_warn_days,
                 "warn (at start and every 12 h) when --cert expires within this many days; "
                 "an error line once it has expired (0: only then)")
      ->check(CLI::Range(0, 3650))
      ->capture_default_str();

  auto* simulate =
      app.add_option("--simulate", sim.nodes,
                     "run N simulated nodes in this process instead of one real node (no "
                     "--node, --cert, --key or --state-dir; see below)")
          ->check(CLI::Range(1, 1000000));
  app.add_option("--simulate-nodes", sim_nodes_file,
                 "simulate: node names, one a line (default: --node-prefix and an index)")
      ->needs(simulate);
  app.add_option("--node-prefix", sim.node_prefix, "simulate: node name prefix")
      ->needs(simulate)
      ->capture_default_str();
  app.add_option("--node-width", sim.node_width, "simulate: zero-padded index width")
      ->needs(simulate)
      ->check(CLI::Range(0, 12))
      ->capture_default_str();
  app.add_option("--node-first", sim.first_index,
                 "simulate: the first index (or the first line of --simulate-nodes) used")
      ->needs(simulate)
      ->check(CLI::Range(0, 100000000))
      ->capture_default_str();
  app.add_option("--ca-key", sim.ca_key_file,
                 "simulate: the scheduler's CA key, to mint each node's certificate (default: "
                 "SCHEDULER_STATE/ca-key.pem)")
      ->needs(simulate);
  app.add_option("--max-connecting", sim.max_connecting,
                 "simulate: connections being set up at once")
      ->needs(simulate)
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--step-ms", sim.step_ms, "simulate: one training step of a simulated rank")
      ->needs(simulate)
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  app.add_option("--checkpoint-every-ms", sim.checkpoint_every_ms,
                 "simulate: rank 0's node also reports a checkpoint this often (0: only when the "
                 "scheduler asks)")
      ->needs(simulate)
      ->check(CLI::Range(0, 86400000))
      ->capture_default_str();
  app.add_option("--run-ms", sim.run_ms,
                 "simulate: ranks exit 0 this long after their start (0: they run until stopped)")
      ->needs(simulate)
      ->check(CLI::Range(0, 86400000))
      ->capture_default_str();
  bool no_up_events = false;
  app.add_flag("--no-up-events", no_up_events, "simulate: no \"up\" event per registration")
      ->needs(simulate);
  app.add_option("--stats-every-s", sim.stats_every_s,
                 "simulate: a counters line on stderr this often (0: never)")
      ->needs(simulate)
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.set_version_flag("--version", std::string("topo-agent ") + topo::kVersion);
  CLI11_PARSE(app, argc, argv);

  if (!scheduler_state_dir.empty()) {
    if (o.server_url.empty()) {
      // Read again whenever a connection fails: a restarted daemon listens
      // on a new port unless agent_listen fixes one.
      o.endpoint_file = scheduler_state_dir + "/agent-endpoint";
      std::ifstream f(o.endpoint_file);
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
  if (*simulate) {
    sim.up_events = !no_up_events;
    if (!sim_nodes_file.empty()) {
      std::ifstream f(sim_nodes_file);
      if (!f) {
        std::cerr << "topo-agent: cannot read --simulate-nodes " << sim_nodes_file << "\n";
        return 2;
      }
      for (std::string line; std::getline(f, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) sim.names.push_back(line);
      }
    }
    if (sim.ca_key_file.empty() && !scheduler_state_dir.empty()) {
      sim.ca_key_file = scheduler_state_dir + "/ca-key.pem";
    }
    if (sim.ca_key_file.empty()) {
      std::cerr << "topo-agent: --simulate needs --ca-key (or --scheduler-state-dir)\n";
      return 2;
    }
    sim.server_url = o.server_url;
    sim.endpoint_file = o.endpoint_file;
    sim.ca_file = o.ca_file;
    sim.addr = o.addr;
    sim.gpus = o.gpus;
    sim.gpu_model = o.gpu_model;
    sim.heartbeat_ms = o.heartbeat_ms;
    sim.drain_checkpoint_ms = o.drain_checkpoint_ms;
    sim.seed = o.seed;
    return topo::agent::RunSimulation(sim);
  }
  for (const auto& [value, flag] :
       {std::pair{&o.node, "--node"}, std::pair{&o.cert_file, "--cert"},
        std::pair{&o.key_file, "--key"}, std::pair{&o.state_dir, "--state-dir"}}) {
    if (value->empty()) {
      std::cerr << "topo-agent: " << flag << " is required (unless --simulate)\n";
      return 2;
    }
  }
  // Checked here, beside the agent's event loop (cert_check.hpp). An
  // unreadable --cert is left for RunAgent to report and refuse.
  topo::agent::CertExpiryWatch expiry(
      {o.cert_file, o.node, cert_warn_days},
      [node = o.node](const std::string& line) { topo::agent::LogAgentLine(node, line); },
      [] { return static_cast<int64_t>(::time(nullptr)); });
  (void)expiry.Start();
  return topo::agent::RunAgent(o);
}
