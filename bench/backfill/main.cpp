// bench_backfill: what one scheduling step costs against the backfill depth
// (SchedulerConfig::backfill_depth, the policy key backfill_depth), with
// 1,000 and 10,000 jobs pending (issue 35; docs/benchmarks.md, "Backfill
// depth").
//
// For each --pending P and --depths D: a SchedulerCore (the toposched stack,
// preemption and placement waits off, so the step is the queue pass alone) on
// --topology (meta-24k: 24,576 GPUs) filled with 64-GPU jobs of time limits
// 2..24 h; a head job of --head-gpus that cannot start and gets the
// reservation; P - 1 jobs behind it of 8..128 GPUs and 1..24 h, seeded. Then
// --steps times: one running 64-GPU job finishes (a JobFinished event: the
// GPUs it frees make every waiting job worth trying again, so the step runs
// the full pass: the order of every waiting job, the head's reservation,
// backfill over the first D jobs behind the head); the step is timed, and the
// jobs it started are replaced by new pending ones (untimed) so P holds. One
// core, pinned to CPU 0 when the system allows.
//
//   bench_backfill [--pending 1000,10000] [--depths 64,256,500,1000,2000,10000]
//                  [--steps 30] [--topology meta-24k] [--out bench/results/backfill.json]
//   bench_backfill --quick    (1,000 pending; depths 64 and 500; 10 steps)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "machine.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/scheduler.hpp"

#ifndef TOPO_BENCH_SOURCE_DIR
#define TOPO_BENCH_SOURCE_DIR "."
#endif

namespace {

namespace core = topo::core;
using Json = nlohmann::json;
using core::kHour;
using core::kSecond;
using core::TimeMs;

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

core::JobRequest Request(int gpus, TimeMs limit) {
  core::JobRequest r;
  r.spec.gpus = gpus;
  r.spec.parallelism.dp = gpus;
  r.time_limit = limit;
  r.checkpoint_interval = -1;
  r.command = {"true"};
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

struct Cell {
  int pending = 0;
  int depth = 0;
  std::vector<double> step_ms;
  int started = 0;
};

Cell RunCell(const core::Topology& topo, int pending, int depth, int steps, int head_gpus,
             uint64_t seed) {
  core::SchedulerConfig config = core::SchedulerConfig::ForStack("toposched").value();
  config.heartbeats_required = false;
  config.preemption = false;
  config.placement_wait = 0;
  config.backfill_depth = depth;
  core::SchedulerCore sched(topo, config);
  core::Rng rng(seed);
  TimeMs now = 0;
  core::JobId next = 1;
  // Fill the cluster with 64-GPU jobs.
  std::vector<core::JobId> running;
  for (int i = 0; i < topo.total_gpus() / 64; ++i) {
    const core::JobId id = next++;
    sched.Step(core::JobSubmitted{id, Request(64, 2 * kHour + rng.Below(22 * kHour))}, now);
    if (sched.job(id)->state == core::JobState::kRunning) running.push_back(id);
  }
  const int sizes[] = {8, 16, 32, 64, 128};
  auto submit_pending = [&] {
    const core::JobId id = next++;
    sched.Step(core::JobSubmitted{id, Request(sizes[rng.Below(5)], kHour + rng.Below(23 * kHour))},
               now);
    return id;
  };
  sched.Step(core::JobSubmitted{next++, Request(head_gpus, 24 * kHour)}, now);
  for (int i = 1; i < pending; ++i) submit_pending();
  Cell cell{pending, depth, {}, 0};
  for (int s = 0; s < steps && !running.empty(); ++s) {
    now += kSecond;
    const size_t pick = rng.Below(running.size());
    const core::JobId done = running[pick];
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<core::Command> cmds = sched.Step(core::JobFinished{done, 0}, now);
    cell.step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    int started = 0;
    for (const core::Command& c : cmds) {
      if (const auto* x = std::get_if<core::StartJob>(&c)) {
        ++started;
        running.push_back(x->id);
      }
    }
    cell.started += started;
    for (int i = 0; i < started; ++i) submit_pending();
    (void)sched.TakeFinishedJobs();
  }
  return cell;
}

int Run(int argc, char** argv) {
  std::string pending_text = "1000,10000";
  std::string depths_text = "64,256,500,1000,2000,10000";
  int steps = 30;
  int head_gpus = 4096;
  std::string topology = "meta-24k";
  std::string out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/backfill.json";
  bool quick = false;
  uint64_t seed = 1;
  CLI::App app{"bench_backfill - one scheduling step's cost against the backfill depth"};
  app.add_option("--pending", pending_text, "jobs pending, comma-separated")->capture_default_str();
  app.add_option("--depths", depths_text, "backfill depths, comma-separated")
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps per cell")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--head-gpus", head_gpus, "GPUs of the blocked head job")->capture_default_str();
  app.add_option("--topology", topology, "a generated topology")->capture_default_str();
  app.add_option("--seed", seed, "the workload's seed")->capture_default_str();
  app.add_option("--out", out, "the JSON report")->capture_default_str();
  app.add_flag("--quick", quick, "1,000 pending, depths 64 and 500, 10 steps");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    pending_text = "1000";
    depths_text = "64,500";
    steps = 10;
  }
  core::Result<core::Topology> topo = core::GenerateTopology(topology);
  if (!topo.ok()) {
    std::cerr << "bench_backfill: " << topo.message() << "\n";
    return 2;
  }
  topo::bench::MachineInfo machine = topo::bench::ReadMachine(TOPO_BENCH_SOURCE_DIR);
  machine.pinned = topo::bench::PinToCpu0();
  std::printf("backfill depth: %s (%d GPUs), head %d GPUs, %d steps per cell, commit %s%s\n\n",
              topology.c_str(), topo.value().total_gpus(), head_gpus, steps,
              machine.git_commit.c_str(), machine.git_dirty ? " (dirty)" : "");
  std::printf("| pending | depth | step median | p90 | max | jobs started |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  Json rows = Json::array();
  for (int pending : ParseList(pending_text)) {
    for (int depth : ParseList(depths_text)) {
      Cell c = RunCell(topo.value(), pending, depth, steps, head_gpus, seed);
      const double med = Percentile(c.step_ms, 0.5), p90 = Percentile(c.step_ms, 0.9),
                   max = Percentile(c.step_ms, 1.0);
      std::printf("| %d | %d | %.2f ms | %.2f ms | %.2f ms | %d |\n", pending, depth, med, p90, max,
                  c.started);
      std::fflush(stdout);
      rows.push_back({{"pending", pending},
                      {"depth", depth},
                      {"step_ms_median", med},
                      {"step_ms_p90", p90},
                      {"step_ms_max", max},
                      {"steps", c.step_ms.size()},
                      {"jobs_started", c.started}});
    }
  }
  Json report = {{"benchmark", "backfill"},
                 {"topology", topology},
                 {"head_gpus", head_gpus},
                 {"steps", steps},
                 {"seed", seed},
                 {"commit", machine.git_commit},
                 {"dirty", machine.git_dirty},
                 {"host", machine.hostname},
                 {"cpu", machine.cpu_model},
                 {"pinned", machine.pinned},
                 {"started_at", machine.started_at},
                 {"rows", rows}};
  std::ofstream(out) << report.dump(2) << "\n";
  std::printf("\nwrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_backfill: " << e.what() << "\n";
    return 1;
  }
}
