// bench_recovery: failure detection, MTTR and lost work per injected fault,
// and the scheduler's CPU per 1,000 agents at 1 Hz heartbeats
// (../shared/BENCHMARKS.md, "Recovery" and the goals table: detection <= 3 s,
// MTTR of the control plane <= 5 s with a spare, 20,736 agents held).
//
// Part 1, faults: a real topo-scheduler (temporary state directory, heartbeat
// 1,000 ms, down after 3 missed) with a reference topology; one
// `topo-agent --simulate` process runs the first --fault-nodes nodes (each a
// real mTLS WebSocket agent); --jobs jobs of --job-gpus GPUs (tp 8, one spare
// node each) run on them; then --faults faults, alternately a node lost
// (`kill`: the agent's connection drops and it goes silent) and an XID 79 on
// one of the job's GPUs, each on a running job's node, at a random phase of
// the heartbeat. Per fault:
//   detection  fault -> the daemon logs the node down / the GPU failed
//              (the event's time in GET /v1/events);
//   decided    fault -> the restart_job command in the log;
//   MTTR       fault -> every node of the new placement has received its
//              `start` with the new restart_count (the simulator's clock);
//   lost work  fault - max(the resumed checkpoint's report, the run's start),
//              in seconds and GPU-seconds; and whether the restart resumed
//              from the newest checkpoint reported before the fault.
// Simulated ranks checkpoint every --checkpoint-every-ms of run time (the
// lost work follows that cadence; the scheduler's part is resuming from the
// newest step).
//
// Part 2, scale: a fresh daemon with --scale-topology (cm384-166k: 20,736
// nodes); simulator processes (at most --per-process nodes each) are added
// until each --scale point is registered; then over --window-s the daemon's
// CPU (utime + stime from /proc), its RSS, the simulators' CPU, heartbeats
// sent, and whether the point held: every agent registered at the start and
// the end of the window, no connection lost and no node marked down in it, and
// every agent's node up at its end (a node lost before the window counts).
// A point above what the daemon's RLIMIT_NOFILE allows (one socket per
// agent) is capped and reported as such.
//
//   bench_recovery [--faults 24] [--scale 1000,5184,10368,20736] [--window-s 30]
//                  [--skip-faults] [--skip-scale] [--out bench/results/recovery.json]
//   bench_recovery --quick    (6 faults; 1,000 and 5,184 agents for 10 s each:
//                              about a minute and a half, for a change's before/after)

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "machine.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/core/generators.hpp"

namespace {

using topo::bench::Daemon;
using topo::bench::Json;
using topo::bench::Percentile;
using topo::bench::SimProcess;
using topo::bench::WallMs;

struct Options {
  std::string daemon_bin = TOPO_SCHEDULER_BIN;
  std::string agent_bin = TOPO_AGENT_BIN;
  std::string out;
  // Faults.
  int faults = 24;
  std::string fault_topology = "meta-24k";
  int fault_nodes = 256;
  int jobs = 8;
  int job_gpus = 64;
  int checkpoint_every_ms = 10000;
  int gap_ms = 3000;
  uint64_t seed = 1;
  // Scale.
  std::string scale = "1000,5184,10368,20736";
  std::string scale_topology = "cm384-166k";
  int window_s = 30;
  int per_process = 10368;
  int max_connecting = 256;
  bool skip_faults = false;
  bool skip_scale = false;
};

const char* kDaemonConfig =
    "heartbeat_interval_ms = 1000\n"
    "missed_heartbeats_down = 3\n"
    "io_threads = 2\n"
    "rate_limit_per_second = 100000000\n"
    "max_connections = 100000\n"
    "max_unauthenticated_per_peer = 100000\n"
    "max_connections_per_user = 100000\n";

void Sleep(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Imports a generated topology; returns its node names in topology order.
std::vector<std::string> ImportTopology(Daemon& d, const std::string& name) {
  topo::core::Result<topo::core::Topology> t = topo::core::GenerateTopology(name);
  if (!t.ok()) throw std::runtime_error(t.message());
  d.Call("PUT", "/v1/topology",
         Json{{"format", "json"}, {"content", topo::common::TopologyToJson(t.value())}});
  std::vector<std::string> names;
  for (int n = 0; n < t.value().node_count(); ++n) names.push_back(t.value().node(n).name);
  return names;
}

std::string WriteNames(const std::string& dir, const std::vector<std::string>& names, int first,
                       int count, const std::string& file) {
  const std::string path = dir + "/" + file;
  std::ofstream out(path);
  for (int i = first; i < first + count; ++i) out << names[i] << "\n";
  return path;
}

std::unique_ptr<SimProcess> LaunchSim(const Options& o, Daemon& d, const std::string& names_file,
                                      int count, const std::vector<std::string>& extra,
                                      const std::string& log) {
  auto sim = std::make_unique<SimProcess>();
  std::vector<std::string> args = {"--simulate",
                                   std::to_string(count),
                                   "--simulate-nodes",
                                   names_file,
                                   "--scheduler-state-dir",
                                   d.dir(),
                                   "--max-connecting",
                                   std::to_string(o.max_connecting),
                                   "--no-up-events",
                                   "--stats-every-s",
                                   "30"};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!sim->Launch(o.agent_bin, args, log)) throw std::runtime_error("cannot start the simulator");
  if (!sim->WaitFor([&] { return sim->ready() || sim->exited(); }, 60000) || !sim->ready()) {
    throw std::runtime_error("the simulator did not start; see " + log);
  }
  return sim;
}

// Waits until the simulators' registered counts reach `want`; the seconds it
// took, or -1 on timeout.
double WaitRegistered(std::vector<std::unique_ptr<SimProcess>>& sims, int want, int timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int registered = 0;
    for (auto& s : sims) {
      Json st = s->Status();
      if (!st.is_null()) registered += st.value("registered", 0);
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (registered >= want) return took;
    if (took > timeout_s) {
      std::fprintf(stderr, "bench_recovery: %d of %d agents registered after %d s\n", registered,
                   want, timeout_s);
      return -1;
    }
    Sleep(500);
  }
}

// ---------------------------------------------------------------- faults

struct Fault {
  int index = 0;
  std::string kind;  // "node_lost" | "xid79"
  int64_t job = 0;
  int job_gpus = 0;
  std::string node;
  int gpu = -1;
  int64_t t_fault = 0;
  double detect_s = -1, decide_s = -1, mttr_s = -1, lost_s = -1;
  int restart_count = -1;
  int64_t resumed_step = -2;
  bool newest = false;
  bool used_spare = false;
  int placement_nodes = 0;
  // The job's incident record (GET /v1/jobs/ID "incidents"), where the
  // daemon has one for this restart: its own view of the same figures.
  double incident_detection_s = -1, incident_lost_s = -1;
  std::string note;
};

Json FaultJson(const Fault& f) {
  return {{"index", f.index},
          {"kind", f.kind},
          {"job", f.job},
          {"node", f.node},
          {"gpu", f.gpu},
          {"t_fault_ms", f.t_fault},
          {"detection_s", f.detect_s},
          {"restart_decided_s", f.decide_s},
          {"mttr_s", f.mttr_s},
          {"lost_work_s", f.lost_s},
          {"lost_work_gpu_s", f.lost_s >= 0 ? f.lost_s * f.job_gpus : -1},
          {"restart_count", f.restart_count},
          {"resumed_step", f.resumed_step},
          {"resumed_newest_checkpoint", f.newest},
          {"used_spare", f.used_spare},
          {"placement_nodes", f.placement_nodes},
          {"incident_detection_s", f.incident_detection_s},
          {"incident_lost_work_s", f.incident_lost_s},
          {"note", f.note}};
}

Fault InjectOne(Daemon& d, SimProcess& sim, int index, int64_t job, std::mt19937_64& rng) {
  Fault f;
  f.index = index;
  f.job = job;
  f.kind = index % 2 == 0 ? "node_lost" : "xid79";
  const Json info = d.Call("GET", "/v1/jobs/" + std::to_string(job));
  if (info.value("state", "") != "running") {
    f.note = "job not running: " + info.value("state", "") + " " + info.value("reason", "");
    return f;
  }
  f.job_gpus = info.value("gpus", 0);
  const int restarts = info.value("restarts", 0);
  std::vector<std::pair<std::string, int>> slots;
  for (const Json& r : info["ranks"]) slots.emplace_back(r["node"], r["gpu"]);
  std::set<std::string> spares;
  for (const Json& s : info.value("spares", Json::array())) spares.insert(s.get<std::string>());
  const auto& victim = slots[std::uniform_int_distribution<size_t>(0, slots.size() - 1)(rng)];
  f.node = victim.first;
  f.gpu = f.kind == "xid79" ? victim.second : -1;
  const int64_t seq0 = d.Call("GET", "/v1/cluster").value("last_seq", int64_t{0});
  Sleep(std::uniform_int_distribution<int>(0, 999)(rng));  // a random heartbeat phase

  const std::string cmd = f.kind == "node_lost"
                              ? "kill " + f.node
                              : "xid " + f.node + " " + std::to_string(f.gpu) + " 79";
  const Json ack = sim.Command(cmd);
  if (ack.is_null() || ack.contains("error")) {
    f.note = "the simulator refused " + cmd + ": " + (ack.is_null() ? "timeout" : ack.dump());
    return f;
  }
  f.t_fault = ack.value("t_cmd", int64_t{0});

  // The daemon's log: the detection and the restart decision.
  int64_t after = seq0, t_detect = -1, t_restart = -1;
  std::set<std::string> new_nodes;
  const int64_t deadline = WallMs() + 30000;
  while ((t_detect < 0 || t_restart < 0) && WallMs() < deadline) {
    const Json page = d.Call("GET", "/v1/events?after=" + std::to_string(after) + "&limit=1000");
    for (const Json& e : page["events"]) {
      after = std::max(after, e.value("seq", int64_t{0}));
      for (const Json& c : e.value("commands", Json::array())) {
        const std::string type = c.value("type", "");
        if (t_detect < 0 && c.value("node", "") == f.node &&
            ((type == "node_state_changed" && c.value("state", "") == "down") ||
             (type == "gpu_health_changed" && c.value("gpu", -1) == f.gpu &&
              c.value("health", "") == "failed"))) {
          t_detect = e.value("time_ms", int64_t{0});
        }
        if (t_restart < 0 && (type == "restart_job" || type == "start_job") &&
            c.value("id", int64_t{0}) == job) {
          t_restart = e.value("time_ms", int64_t{0});
          f.restart_count = type == "restart_job" ? c.value("restart_count", -1) : restarts + 1;
          f.resumed_step = c.value("checkpoint_step", int64_t{-1});
          if (type == "start_job") f.note = "requeued, then started";
          for (const Json& slot : c["ranks"]) new_nodes.insert(slot[0].get<std::string>());
        }
      }
    }
    if (t_detect < 0 || t_restart < 0) Sleep(50);
  }
  if (t_detect >= 0) f.detect_s = (t_detect - f.t_fault) / 1000.0;
  if (t_restart < 0) {
    f.note = "no restart within 30 s";
    return f;
  }
  f.decide_s = (t_restart - f.t_fault) / 1000.0;
  f.placement_nodes = static_cast<int>(new_nodes.size());
  for (const std::string& n : new_nodes) f.used_spare |= spares.count(n) > 0;

  // The simulator's clock: every node of the new placement got its start.
  const auto key = std::make_pair(job, f.restart_count);
  int64_t t_running = -1;
  sim.WaitFor(
      [&] {
        auto it = sim.starts().find(key);
        if (it == sim.starts().end()) return false;
        std::set<std::string> got;
        int64_t last = 0;
        for (const SimProcess::Start& s : it->second) {
          if (new_nodes.count(s.node) && got.insert(s.node).second) last = std::max(last, s.t);
        }
        if (got.size() != new_nodes.size()) return false;
        t_running = last;
        return true;
      },
      30000);
  if (t_running < 0) {
    f.note = "not every node got its start within 30 s";
    return f;
  }
  f.mttr_s = (t_running - f.t_fault) / 1000.0;

  const Json after_info = d.Call("GET", "/v1/jobs/" + std::to_string(job));
  for (const Json& i : after_info.value("incidents", Json::array())) {
    if (i.value("restart_count", Json()) != Json(f.restart_count)) continue;
    if (i["detection_ms"].is_number())
      f.incident_detection_s = i["detection_ms"].get<double>() / 1000;
    if (i["lost_work_s"].is_number()) f.incident_lost_s = i["lost_work_s"].get<double>();
  }

  // Lost work: since the resumed checkpoint, or since the run began.
  std::lock_guard lock(sim.mu());
  int64_t run_start = -1;
  if (auto it = sim.starts().find({job, restarts}); it != sim.starts().end()) {
    for (const SimProcess::Start& s : it->second) run_start = std::max(run_start, s.t);
  }
  int64_t t_ckpt = -1, newest_step = -1;
  for (const auto& [k, t] : sim.checkpoints()) {
    if (k.first != job || t > f.t_fault) continue;
    newest_step = std::max(newest_step, k.second);
    if (k.second == f.resumed_step) t_ckpt = t;
  }
  f.newest = f.resumed_step == newest_step;
  const int64_t since = std::max(t_ckpt, run_start);
  if (since > 0) f.lost_s = (f.t_fault - since) / 1000.0;
  return f;
}

Json RunFaults(const Options& o, const topo::bench::MachineInfo&) {
  Daemon d;
  if (!d.Start(o.daemon_bin, kDaemonConfig)) throw std::runtime_error("the daemon did not start");
  const std::vector<std::string> names = ImportTopology(d, o.fault_topology);
  const int count = std::min<int>(o.fault_nodes, static_cast<int>(names.size()));
  const std::string names_file = WriteNames(d.dir(), names, 0, count, "fault-nodes.txt");
  const std::string log = "/tmp/bench-recovery-faults-sim.log";
  std::filesystem::remove(log);
  std::vector<std::unique_ptr<SimProcess>> sims;
  sims.push_back(LaunchSim(o, d, names_file, count,
                           {"--checkpoint-every-ms", std::to_string(o.checkpoint_every_ms)}, log));
  SimProcess& sim = *sims[0];
  const double ramp = WaitRegistered(sims, count, 120);
  if (ramp < 0) throw std::runtime_error("the simulated nodes did not all register");
  std::printf("faults: %d simulated nodes of %s registered in %.1f s\n", count,
              o.fault_topology.c_str(), ramp);

  std::vector<int64_t> jobs;
  for (int j = 0; j < o.jobs; ++j) {
    const Json r = d.Call("POST", "/v1/jobs",
                          Json{{"spec",
                                {{"name", "recovery-" + std::to_string(j)},
                                 {"gpus", o.job_gpus},
                                 {"parallelism", {{"tp", 8}}},
                                 {"spares", 1}}},
                               {"checkpoint_interval_s", 60},
                               {"command", {"true"}}});
    if (r.value("state", "") != "running") {
      throw std::runtime_error("job " + std::to_string(j) + " did not start: " + r.dump());
    }
    jobs.push_back(r["id"]);
  }
  Sleep(1500);
  for (int64_t j : jobs) sim.Command("checkpoint " + std::to_string(j));
  Sleep(1000);

  std::mt19937_64 rng(o.seed);
  std::vector<Fault> faults;
  for (int i = 0; i < o.faults; ++i) {
    Fault f = InjectOne(d, sim, i, jobs[static_cast<size_t>(i) % jobs.size()], rng);
    std::printf(
        "  fault %2d %-9s job %lld node %s%s: detection %s s, restart decided %s s, MTTR %s s, "
        "lost %s s%s%s\n",
        i, f.kind.c_str(), static_cast<long long>(f.job), f.node.c_str(),
        f.gpu >= 0 ? (" gpu " + std::to_string(f.gpu)).c_str() : "", Fixed(f.detect_s).c_str(),
        Fixed(f.decide_s).c_str(), Fixed(f.mttr_s).c_str(), Fixed(f.lost_s, 1).c_str(),
        f.used_spare ? ", spare used" : "", f.note.empty() ? "" : (" (" + f.note + ")").c_str());
    std::fflush(stdout);
    // Repair: the lost agent comes back; the failed GPU is cleared and its
    // node resumed, so the cluster keeps its capacity.
    if (f.kind == "node_lost") {
      sim.Command("revive " + f.node);
    } else if (f.gpu >= 0) {
      sim.Command("gpu " + f.node + " " + std::to_string(f.gpu) + " cleared 0");
      try {
        Sleep(200);
        d.Call("POST", "/v1/nodes/resume", Json{{"nodes", f.node}});
      } catch (const std::exception& e) {
        f.note += (f.note.empty() ? "" : "; ") + std::string("resume: ") + e.what();
      }
    }
    faults.push_back(f);
    Sleep(o.gap_ms);
  }

  std::vector<double> detect, mttr, lost, decide, incident_detect, incident_lost;
  int newest = 0, spare = 0, complete = 0;
  Json rows = Json::array();
  for (const Fault& f : faults) {
    rows.push_back(FaultJson(f));
    if (f.detect_s >= 0) detect.push_back(f.detect_s);
    if (f.decide_s >= 0) decide.push_back(f.decide_s);
    if (f.mttr_s >= 0) mttr.push_back(f.mttr_s);
    if (f.lost_s >= 0) lost.push_back(f.lost_s);
    if (f.incident_detection_s >= 0) incident_detect.push_back(f.incident_detection_s);
    if (f.incident_lost_s >= 0) incident_lost.push_back(f.incident_lost_s);
    newest += f.newest;
    spare += f.used_spare;
    complete += f.mttr_s >= 0;
  }
  auto stats = [](const std::vector<double>& v) {
    return Json{{"n", v.size()},
                {"p50", Percentile(v, 0.5)},
                {"p95", Percentile(v, 0.95)},
                {"max", v.empty() ? 0 : *std::max_element(v.begin(), v.end())}};
  };
  std::vector<double> detect_lost, detect_xid;
  for (const Fault& f : faults) {
    if (f.detect_s < 0) continue;
    (f.kind == "node_lost" ? detect_lost : detect_xid).push_back(f.detect_s);
  }
  return {{"topology", o.fault_topology},
          {"simulated_nodes", count},
          {"jobs", o.jobs},
          {"job_gpus", o.job_gpus},
          {"spares_per_job", 1},
          {"heartbeat_interval_ms", 1000},
          {"missed_heartbeats_down", 3},
          {"checkpoint_every_ms", o.checkpoint_every_ms},
          {"faults", o.faults},
          {"recovered", complete},
          {"resumed_newest_checkpoint", newest},
          {"used_spare", spare},
          {"detection_s", stats(detect)},
          {"detection_node_lost_s", stats(detect_lost)},
          {"detection_xid79_s", stats(detect_xid)},
          {"restart_decided_s", stats(decide)},
          {"mttr_s", stats(mttr)},
          {"lost_work_s", stats(lost)},
          {"incident_detection_s", stats(incident_detect)},
          {"incident_lost_work_s", stats(incident_lost)},
          {"rows", rows}};
}

// ---------------------------------------------------------------- scale

Json RunScale(const Options& o) {
  std::vector<int> points;
  {
    std::stringstream in(o.scale);
    for (std::string p; std::getline(in, p, ',');) points.push_back(std::stoi(p));
  }
  Daemon d;
  if (!d.Start(o.daemon_bin, kDaemonConfig)) throw std::runtime_error("the daemon did not start");
  const std::vector<std::string> names = ImportTopology(d, o.scale_topology);
  const int64_t fd_limit = topo::bench::OpenFileLimit(d.pid());
  // One socket per agent, plus the daemon's own files, listeners and API.
  const int64_t fd_cap = fd_limit > 0 ? fd_limit - 128 : INT64_MAX;
  std::printf("scale: %s (%zu nodes); the daemon's RLIMIT_NOFILE is %lld\n",
              o.scale_topology.c_str(), names.size(), static_cast<long long>(fd_limit));
  std::vector<std::unique_ptr<SimProcess>> sims;
  int running = 0;
  Json rows = Json::array();
  for (int target_asked : points) {
    int target = std::min<int>(target_asked, static_cast<int>(names.size()));
    std::string note;
    if (target > fd_cap) {
      target = static_cast<int>(fd_cap);
      note = "capped at " + std::to_string(target) + ": the daemon's RLIMIT_NOFILE is " +
             std::to_string(fd_limit) + " (one socket per agent) and cannot be raised here";
    }
    if (target <= running) continue;
    const auto t0 = std::chrono::steady_clock::now();
    while (running < target) {
      const int count = std::min(o.per_process, target - running);
      const std::string file = WriteNames(d.dir(), names, running, count,
                                          "nodes-" + std::to_string(sims.size()) + ".txt");
      const std::string log =
          "/tmp/bench-recovery-scale-sim-" + std::to_string(sims.size()) + ".log";
      std::filesystem::remove(log);
      sims.push_back(LaunchSim(o, d, file, count, {}, log));
      running += count;
    }
    const double ramp = WaitRegistered(sims, target, 600);
    const double ramp_total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %d agents: registered in %.1f s%s\n", target, ramp_total,
                ramp < 0 ? " (NOT ALL)" : "");
    std::fflush(stdout);
    Sleep(5000);  // past the registration burst

    auto counters = [&] {
      int64_t registered = 0, heartbeats = 0, losses = 0;
      for (auto& s : sims) {
        Json st = s->Status();
        if (st.is_null()) continue;
        registered += st.value("registered", 0);
        heartbeats += st.value("heartbeats", int64_t{0});
        losses += st.value("losses", int64_t{0});
      }
      return std::array<int64_t, 3>{registered, heartbeats, losses};
    };
    auto sim_cpu = [&] {
      double cpu = 0;
      for (auto& s : sims) cpu += topo::bench::CpuSeconds(s->pid());
      return cpu;
    };
    const int64_t seq0 = d.Call("GET", "/v1/cluster").value("last_seq", int64_t{0});
    const auto c0 = counters();
    const double dcpu0 = topo::bench::CpuSeconds(d.pid()), scpu0 = sim_cpu();
    const auto w0 = std::chrono::steady_clock::now();
    Sleep(o.window_s * 1000);
    const double dcpu1 = topo::bench::CpuSeconds(d.pid()), scpu1 = sim_cpu();
    const double window =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const auto c1 = counters();
    const double rss = topo::bench::RssMiB(d.pid());
    double sim_rss = 0;
    for (auto& s : sims) sim_rss += topo::bench::RssMiB(s->pid());
    // Nodes marked down during the window.
    int downs = 0;
    for (int64_t after = seq0;;) {
      const Json page = d.Call("GET", "/v1/events?after=" + std::to_string(after) + "&limit=1000");
      if (page["events"].empty()) break;
      for (const Json& e : page["events"]) {
        after = std::max(after, e.value("seq", int64_t{0}));
        for (const Json& c : e.value("commands", Json::array())) {
          downs += c.value("type", "") == "node_state_changed" && c.value("state", "") == "down";
        }
      }
    }
    const Json cluster = d.Call("GET", "/v1/cluster");
    // Nodes up at the end, whatever happened before the window (a node lost
    // during the ramp, or one whose agent stays registered while the daemon
    // has it down): the top tier's domains hold every node once.
    int64_t up_at_end = 0;
    for (const Json& dom : d.Call("GET", "/v1/cluster?by=domain").value("domains", Json::array())) {
      if (dom.value("parent", Json()).is_null()) {
        up_at_end += dom.value("node_states", Json::object()).value("up", int64_t{0});
      }
    }
    const double daemon_core = (dcpu1 - dcpu0) / window;
    const double beats = static_cast<double>(c1[1] - c0[1]) / window;
    const bool held =
        c0[0] == target && c1[0] == target && c1[2] == c0[2] && downs == 0 && up_at_end == target;
    Json row = {{"agents_asked", target_asked},
                {"agents", target},
                {"simulator_processes", sims.size()},
                {"registration_s", ramp_total},
                {"all_registered", ramp >= 0},
                {"window_s", window},
                {"daemon_cpu_core", daemon_core},
                {"daemon_cpu_core_per_1000_agents", daemon_core / (target / 1000.0)},
                {"heartbeats_per_s", beats},
                {"heartbeats_per_daemon_cpu_s", daemon_core > 0 ? beats / daemon_core : 0},
                {"daemon_rss_mib", rss},
                {"daemon_rss_mib_per_1000_agents", rss / (target / 1000.0)},
                {"simulator_cpu_core", (scpu1 - scpu0) / window},
                {"simulator_rss_mib", sim_rss},
                {"registered_at_start", c0[0]},
                {"registered_at_end", c1[0]},
                {"connections_lost", c1[2] - c0[2]},
                {"nodes_marked_down", downs},
                {"nodes_up_at_end", up_at_end},
                {"gpus", cluster["gpus"]},
                {"held", held},
                {"note", note}};
    std::printf(
        "  %d agents: daemon %.3f cores (%.4f per 1,000), %.0f heartbeats/s, RSS %.0f MiB; "
        "simulators %.3f cores; %lld nodes up at the end; %s\n",
        target, daemon_core, daemon_core / (target / 1000.0), beats, rss, (scpu1 - scpu0) / window,
        static_cast<long long>(up_at_end), held ? "held" : "NOT held");
    std::fflush(stdout);
    rows.push_back(row);
  }
  for (auto& s : sims) s->Stop();
  return {{"topology", o.scale_topology},
          {"daemon_open_file_limit", fd_limit},
          {"heartbeat_interval_ms", 1000},
          {"points", rows}};
}

// ---------------------------------------------------------------- report

void PrintReport(const Json& result) {
  if (result.contains("faults")) {
    const Json& f = result["faults"];
    std::printf(
        "\n### Faults: %d injected on %d simulated nodes of %s (%d jobs x %d GPUs, tp 8, "
        "1 spare each); heartbeat 1 s, down after 3 missed\n\n",
        f["faults"].get<int>(), f["simulated_nodes"].get<int>(),
        f["topology"].get<std::string>().c_str(), f["jobs"].get<int>(), f["job_gpus"].get<int>());
    std::printf("| figure | n | p50 | p95 | max | goal | published reference (not measured) |\n");
    std::printf("|---|---:|---:|---:|---:|---|---|\n");
    auto row = [&](const char* name, const Json& s, const char* goal, const char* ref) {
      std::printf("| %s | %d | %.2f s | %.2f s | %.2f s | %s | %s |\n", name, s["n"].get<int>(),
                  s["p50"].get<double>(), s["p95"].get<double>(), s["max"].get<double>(), goal,
                  ref);
    };
    row("detection, all faults", f["detection_s"], "<= 3 s",
        "Slurm SlurmdTimeout 300 s; Kueue 30 s");
    row("detection, node lost", f["detection_node_lost_s"], "<= 3 s", "");
    row("detection, XID 79", f["detection_xid79_s"], "<= 3 s", "");
    row("restart decided", f["restart_decided_s"], "", "");
    row("MTTR (every rank started again)", f["mttr_s"], "<= 5 s",
        "FlashRecovery 150 s at 4,800 devices");
    row("lost work per failure", f["lost_work_s"], "", "");
    row("incident record: detection_ms", f["incident_detection_s"], "", "");
    row("incident record: lost_work_s", f["incident_lost_work_s"], "", "");
    std::printf(
        "\nrecovered %d of %d; resumed from the newest checkpoint %d of %d; spare used %d\n",
        f["recovered"].get<int>(), f["faults"].get<int>(),
        f["resumed_newest_checkpoint"].get<int>(), f["faults"].get<int>(),
        f["used_spare"].get<int>());
  }
  if (result.contains("scale")) {
    std::printf("\n### Agents at 1 Hz heartbeats (%s)\n\n",
                result["scale"]["topology"].get<std::string>().c_str());
    std::printf(
        "| agents | registration | daemon CPU (cores) | per 1,000 agents | heartbeats/s | "
        "heartbeats per daemon CPU-s | daemon RSS | RSS per 1,000 | simulator CPU | nodes up at "
        "the end | held |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (const Json& p : result["scale"]["points"]) {
      std::printf(
          "| %d | %.1f s | %.3f | %.4f | %.0f | %.0f | %.0f MiB | %.1f MiB | %.3f | %lld | %s |\n",
          p["agents"].get<int>(), p["registration_s"].get<double>(),
          p["daemon_cpu_core"].get<double>(), p["daemon_cpu_core_per_1000_agents"].get<double>(),
          p["heartbeats_per_s"].get<double>(), p["heartbeats_per_daemon_cpu_s"].get<double>(),
          p["daemon_rss_mib"].get<double>(), p["daemon_rss_mib_per_1000_agents"].get<double>(),
          p["simulator_cpu_core"].get<double>(),
          static_cast<long long>(p["nodes_up_at_end"].get<int64_t>()),
          p["held"].get<bool>() ? "yes" : "NO");
      if (!p["note"].get<std::string>().empty()) {
        std::printf("  note: %s\n", p["note"].get<std::string>().c_str());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_recovery - detection, MTTR and lost work per fault; agents held at 1 Hz"};
  app.add_option("--daemon", o.daemon_bin, "topo-scheduler binary");
  app.add_option("--agent", o.agent_bin, "topo-agent binary (run with --simulate)");
  app.add_option("--out", o.out, "JSON results (default bench/results/recovery.json)");
  app.add_option("--faults", o.faults, "faults to inject")->check(CLI::Range(1, 10000));
  app.add_option("--fault-topology", o.fault_topology, "topology of the fault part");
  app.add_option("--fault-nodes", o.fault_nodes, "simulated nodes in the fault part")
      ->check(CLI::Range(2, 100000));
  app.add_option("--jobs", o.jobs, "running jobs in the fault part")->check(CLI::Range(1, 1000));
  app.add_option("--job-gpus", o.job_gpus, "GPUs per job")->check(CLI::Range(8, 100000));
  app.add_option("--checkpoint-every-ms", o.checkpoint_every_ms,
                 "simulated ranks checkpoint this often")
      ->check(CLI::Range(0, 3600000));
  app.add_option("--gap-ms", o.gap_ms, "pause after each recovery")->check(CLI::Range(0, 600000));
  app.add_option("--seed", o.seed, "fault choice and timing");
  app.add_option("--scale", o.scale, "agent counts, comma-separated");
  app.add_option("--scale-topology", o.scale_topology, "topology of the scale part");
  app.add_option("--window-s", o.window_s, "measurement window per point")
      ->check(CLI::Range(1, 3600));
  app.add_option("--per-process", o.per_process, "simulated nodes per simulator process")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-connecting", o.max_connecting, "connections set up at once per simulator")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--skip-faults", o.skip_faults, "only the scale part");
  app.add_flag("--skip-scale", o.skip_scale, "only the fault part");
  bool quick = false;
  app.add_flag("--quick", quick,
               "a short run: --faults 6 --gap-ms 1500 --scale 1000,5184 --window-s 10 (options "
               "given as well win)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--faults") == 0) o.faults = 6;
    if (app.count("--gap-ms") == 0) o.gap_ms = 1500;
    if (app.count("--scale") == 0) o.scale = "1000,5184";
    if (app.count("--window-s") == 0) o.window_s = 10;
  }
  if (o.out.empty()) o.out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/recovery.json";
  ::signal(SIGPIPE, SIG_IGN);

  const topo::bench::MachineInfo machine = topo::bench::ReadMachine(TOPO_BENCH_SOURCE_DIR);
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  Json result = {{"benchmark", "recovery"},
                 {"commit", machine.git_commit},
                 {"dirty", machine.git_dirty},
                 {"host", machine.hostname},
                 {"nproc", machine.nproc},
                 {"cpu", machine.cpu_model},
                 {"started_at", machine.started_at},
                 {"command", command},
                 {"seed", o.seed}};
  int rc = 0;
  try {
    if (!o.skip_faults) result["faults"] = RunFaults(o, machine);
    if (!o.skip_scale) result["scale"] = RunScale(o);
  } catch (const std::exception& e) {
    std::cerr << "bench_recovery: " << e.what() << "\n";
    rc = 1;
  }
  std::printf("\nbench_recovery: commit %s%s, %s, %d CPUs (%s)\n", machine.git_commit.c_str(),
              machine.git_dirty ? " (dirty)" : "", machine.hostname.c_str(), machine.nproc,
              machine.cpu_model.c_str());
  PrintReport(result);
  std::filesystem::create_directories(std::filesystem::path(o.out).parent_path());
  std::ofstream(o.out) << result.dump(2) << "\n";
  std::printf("\nresults: %s\n", o.out.c_str());
  return rc;
}
