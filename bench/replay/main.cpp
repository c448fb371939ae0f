// bench_replay: workloads K, S, F and M of ../shared/BENCHMARKS.md.
//
// Replays each workload through SchedulerCore (core::RunSimulation) for the
// policy stacks fifo-firstfit, slurm-tree and toposched side by side on the
// same input, prints a table per workload and the goal summary, and writes
// JSON (default bench/results/replay.json).
//
//   K        ../shared/data/traces/kalos-llm/jobs.csv on crux-847, arrivals
//            compressed to an offered load of 0.9 (the factor is printed),
//            layouts and tenants by core::BuildKalosWorkload's rule
//   S/TOPO   core::GenerateSynthetic, 100,000 jobs at an offered load of 0.9,
//            on meta-24k and nvl72-64k
//   ...+F    the same with failures from the llama3 model
//   M        core::GenerateMixed, 2,000 jobs naming GPU types at an offered
//            load of 0.9, on mixed-10k; not in the default list
//   M/h100-10k  the same jobs without their types on h100-10k, mixed-10k's
//            homogeneous twin of equal capacity (M's utilization goal)
//   M+T      10,000 jobs of M (--change-jobs) on mixed-10k with two topology
//            changes while they run: a fifth NVL72 rack added at a third of
//            the arrival span, nvl72-r1 removed at two thirds (both built as
//            an admin would, by editing the topology's JSON)
//   M+T/static  the same jobs with no change (M+T's "no more failures" goal)
//
//   bench_replay                          # everything, S at 100,000 jobs
//   bench_replay --quick                  # S at 10,000 jobs
//   bench_replay --workloads K,K+F --policies toposched,slurm-tree
//   bench_replay --threads 6              # cells in parallel (timings noisier)
//   bench_replay --quick --seeds 1-8      # goals also as met-on-k-of-8 and means
//   bench_replay --workloads M,M/h100-10k --seeds 1-8   # the mixed cluster
//   bench_replay --workloads M+T,M+T/static --seeds 1-4  # changes under jobs

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "machine.hpp"
#include "report.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/topology_source.hpp"
#include "topo/common/trace_io.hpp"
#include "topo/core/generators.hpp"

#ifndef TOPO_BENCH_SOURCE_DIR
#define TOPO_BENCH_SOURCE_DIR "."
#endif

namespace topo::bench {
namespace {

double ThreadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `topology` as an admin edits its JSON: a copy of domain `clone` (its
// domains and nodes renamed NAME + suffix) added beside it, and domain
// `remove` left out (either may be empty).
core::Result<std::shared_ptr<const core::Topology>> EditTopology(const core::Topology& topology,
                                                                 const std::string& clone,
                                                                 const std::string& suffix,
                                                                 const std::string& remove,
                                                                 const std::string& name) {
  using nlohmann::json;
  json doc = json::parse(common::TopologyToJson(topology));
  doc["name"] = name;
  bool cloned = clone.empty(), removed = remove.empty();
  std::function<void(json&)> rename = [&](json& d) {
    d["name"] = d["name"].get<std::string>() + suffix;
    for (const char* key : {"children", "nodes"}) {
      if (!d.contains(key)) continue;
      for (json& c : d[key]) rename(c);
    }
  };
  std::function<void(json&)> walk = [&](json& list) {
    json out = json::array();
    for (json& d : list) {
      const std::string n = d.value("name", "");
      if (n == remove) {
        removed = true;
        continue;
      }
      if (d.contains("children")) walk(d["children"]);
      out.push_back(d);
      if (n == clone) {
        json copy = d;
        rename(copy);
        out.push_back(std::move(copy));
        cloned = true;
      }
    }
    list = std::move(out);
  };
  walk(doc["domains"]);
  if (!cloned || !removed) {
    return core::Status::Error("topology " + topology.name() + " has no domain '" +
                               (cloned ? remove : clone) + "'");
  }
  core::Result<core::Topology> t = common::ParseTopologyJson(doc.dump());
  if (!t.ok()) return t.status();
  return std::make_shared<const core::Topology>(std::move(t).value());
}

// A workload with its topology, ready to replay.
struct Prepared {
  WorkloadResult result;
  std::unique_ptr<core::Topology> topology;
  core::SimWorkload workload;
  core::SimOptions options;
};

core::Result<Prepared> Prepare(const std::string& name, const Params& p, uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  Prepared out;
  WorkloadResult& r = out.result;
  r.name = name;
  r.seed = seed;
  // NAME[@SCALE]: SCALE multiplies the cross-HBD bandwidth (sensitivity).
  const size_t at = name.find('@');
  const std::string plain = name.substr(0, at);
  out.options = p.sim;
  if (at != std::string::npos) {
    try {
      out.options.cross_hbd_scale = std::stod(name.substr(at + 1));
    } catch (const std::exception&) {
      return core::Status::Error("bad bandwidth scale in workload '" + name + "'");
    }
  }
  r.failures = plain.size() > 2 && plain.substr(plain.size() - 2) == "+F";
  const std::string base = r.failures ? plain.substr(0, plain.size() - 2) : plain;
  out.options.seed = seed;
  // Workload M's generator at this seed and load.
  auto mixed_jobs = [&](const core::Topology& topology, int jobs) {
    core::MixedOptions m = p.mixed;
    m.seed = seed;
    m.load = p.load;
    m.jobs = jobs;
    return core::GenerateMixed(topology, m);
  };
  out.options.large_gpus = p.large_gpus;
  out.options.ettr_gpus = p.ettr_gpus;
  out.options.keep_job_results = false;
  if (r.failures) out.options.failures = p.failures;
  if (base == "K") {
    r.family = "K";
    common::TopologySource source;
    source.generate = "crux-847";
    core::Result<core::Topology> topo = common::LoadTopology(source);
    if (!topo.ok()) return topo.status();
    out.topology = std::make_unique<core::Topology>(std::move(topo).value());
    const std::string path = common::SharedDataDir() + "/data/traces/kalos-llm/jobs.csv";
    core::Result<std::string> text = common::ReadFile(path);
    if (!text.ok()) return core::Status::Error(text.message() + " (set TOPO_SHARED_DIR)");
    core::Result<std::vector<core::KalosRow>> rows = common::ParseKalosCsv(text.value());
    if (!rows.ok()) return core::Status::Error(path + ": " + rows.message());
    core::KalosOptions k = p.kalos;
    k.seed = seed;
    out.workload = core::BuildKalosWorkload(rows.value(), *out.topology, k);
    core::LoadScaling s = core::ScaleToLoad(out.workload.jobs, out.topology->total_gpus(), p.load);
    r.load_factor = s.factor;
  } else if (base.rfind("S/", 0) == 0) {
    r.family = "S";
    core::Result<core::Topology> topo = core::GenerateTopology(base.substr(2));
    if (!topo.ok()) return topo.status();
    out.topology = std::make_unique<core::Topology>(std::move(topo).value());
    core::SyntheticOptions s = p.synthetic;
    s.seed = seed;
    s.jobs = p.jobs;
    s.load = p.load;
    out.workload = core::GenerateSynthetic(*out.topology, s);
  } else if (base == "M" || base == "M/" + std::string(kMixedTwin)) {
    // The mixed workload on mixed-10k, or the same jobs without their GPU
    // types on its homogeneous twin of equal capacity.
    r.family = "M";
    core::Result<core::Topology> mixed = core::GenerateTopology("mixed-10k");
    if (!mixed.ok()) return mixed.status();
    out.workload = mixed_jobs(mixed.value(), p.mixed.jobs);
    if (base == "M") {
      out.topology = std::make_unique<core::Topology>(std::move(mixed).value());
    } else {
      core::Result<core::Topology> twin = core::GenerateTopology(kMixedTwin);
      if (!twin.ok()) return twin.status();
      out.topology = std::make_unique<core::Topology>(std::move(twin).value());
      out.workload = core::WithoutGpuTypes(out.workload, *out.topology, base);
    }
    // Per job: which stacks refused it (the "no job refused that a baseline
    // runs" goal).
    out.options.keep_job_results = true;
  } else if (base == "M+T" || base == "M+T/static") {
    // M's jobs, more of them, with a rack added and another removed while
    // they run (or, /static, without).
    r.family = "T";
    core::Result<core::Topology> mixed = core::GenerateTopology("mixed-10k");
    if (!mixed.ok()) return mixed.status();
    out.workload = mixed_jobs(mixed.value(), p.change_jobs);
    out.workload.name = base;
    out.topology = std::make_unique<core::Topology>(std::move(mixed).value());
    if (base == "M+T") {
      auto added = EditTopology(*out.topology, "nvl72-r0", "-added", "", "mixed-10k-v2");
      if (!added.ok()) return added.status();
      auto removed = EditTopology(*added.value(), "", "", "nvl72-r1", "mixed-10k-v3");
      if (!removed.ok()) return removed.status();
      core::TimeMs first = core::kNever, last = 0;
      for (const core::SimJob& j : out.workload.jobs) {
        first = std::min(first, j.submit);
        last = std::max(last, j.submit);
      }
      out.options.topology_changes = {{first + (last - first) / 3, added.value()},
                                      {first + 2 * (last - first) / 3, removed.value()}};
    }
  } else {
    return core::Status::Error("unknown workload '" + name +
                               "'; known: K, S/meta-24k, S/nvl72-64k, each optionally +F; M, M/" +
                               kMixedTwin + "; M+T, M+T/static");
  }
  r.topology = out.topology->name();
  r.capacity_gpus = out.topology->total_gpus();
  r.nodes = out.topology->node_count();
  r.jobs = out.workload.jobs.size();
  r.offered_load = core::OfferedLoad(out.workload.jobs, r.capacity_gpus);
  r.build_seconds = Since(t0);
  return out;
}

int Run(int argc, char** argv) {
  Params p;
  p.workloads = {"K", "K+F", "S/meta-24k", "S/meta-24k+F", "S/nvl72-64k", "S/nvl72-64k+F"};
  p.policies = {"fifo-firstfit", "slurm-tree", "toposched"};
  p.failures = *core::FailureModel::ByName("llama3");
  std::string out_path;

  CLI::App app{"Workloads K, S and F: trace replay through SchedulerCore, every policy stack"};
  app.add_option("--workloads", p.workloads,
                 "K, K+F, S/meta-24k, S/meta-24k+F, S/nvl72-64k, ..., M, M/h100-10k")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--policies", p.policies, "policy stacks")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(core::SchedulerConfig::StackNames()));
  app.add_option("--jobs", p.jobs, "jobs of workload S")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--mixed-jobs", p.mixed.jobs, "jobs of workload M")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--change-jobs", p.change_jobs, "jobs of workload M+T (and M+T/static)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  std::string speed_model = "on";
  bool sensitivity = true;
  app.add_option("--speed-model", speed_model,
                 "on (default): jobs run at their placement's speed; off: trace durations")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--sensitivity", sensitivity,
                 "also run every workload at 0.5x and 2x the cross-HBD bandwidth (NAME@0.5, "
                 "NAME@2; default true with the speed model)");
  app.add_flag("--quick", p.quick, "S at 10,000 jobs (unless --jobs), output replay-quick.json");
  app.add_option("--load", p.load, "target offered load")->capture_default_str();
  std::string seeds;
  CLI::Option* seed_opt =
      app.add_option("--seed", p.seed, "seed of the workloads and failures")->capture_default_str();
  app.add_option("--seeds", seeds,
                 "several seeds, e.g. 1-8 or 1,4,9: the tables and the bandwidth variants use "
                 "the first; every seed replays the base workloads, and the goals are also "
                 "printed as the seeds that met each and the mean over them")
      ->excludes(seed_opt);
  app.add_option("--large-gpus", p.large_gpus, "large jobs for the queue-delay figure")
      ->capture_default_str();
  app.add_option("--threads", p.threads, "replays run in parallel (1: pinned to CPU 0)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--out", out_path, "JSON output (default bench/results/replay[-quick].json)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (p.quick && app.count("--jobs") == 0) p.jobs = 10000;
  p.seeds = {p.seed};
  if (!seeds.empty()) {
    core::Result<std::vector<uint64_t>> parsed = ParseSeeds(seeds);
    if (!parsed.ok()) {
      std::cerr << "bench_replay: " << parsed.message() << "\n";
      return 2;
    }
    p.seeds = std::move(parsed).value();
    p.seed = p.seeds.front();
  }
  p.sim.speed_model = speed_model == "on";
  if (p.sim.speed_model && sensitivity) {
    std::vector<std::string> all;
    for (const std::string& w : p.workloads) {
      all.push_back(w);
      if (w.find('@') != std::string::npos) continue;
      all.push_back(w + "@0.5");
      all.push_back(w + "@2");
    }
    p.workloads = std::move(all);
  }
  p.synthetic.jobs = p.jobs;
  p.synthetic.load = p.load;
  p.out = !out_path.empty() ? out_path
                            : std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/replay" +
                                  (p.quick ? "-quick" : "") + ".json";

  Report report;
  report.machine = ReadMachine(TOPO_BENCH_SOURCE_DIR);
  if (p.threads == 1) report.machine.pinned = PinToCpu0();
  report.params = p;
  const auto t0 = std::chrono::steady_clock::now();

  // Every workload at the first seed; the base workloads (no @SCALE) again
  // at each further seed.
  std::vector<Prepared> prepared;
  for (uint64_t seed : p.seeds) {
    for (const std::string& name : p.workloads) {
      if (seed != p.seed && name.find('@') != std::string::npos) continue;
      core::Result<Prepared> w = Prepare(name, p, seed);
      if (!w.ok()) {
        std::cerr << "bench_replay: " << w.message() << "\n";
        return 1;
      }
      prepared.push_back(std::move(w).value());
      prepared.back().result.reports.resize(p.policies.size());
    }
  }

  // Cells (workload x policy), run in order or by a small pool of threads.
  struct Cell {
    size_t workload;
    size_t policy;
  };
  std::vector<Cell> cells;
  for (size_t w = 0; w < prepared.size(); ++w) {
    for (size_t s = 0; s < p.policies.size(); ++s) cells.push_back({w, s});
  }
  std::atomic<size_t> next{0};
  std::mutex io;
  auto worker = [&] {
    for (size_t i = next++; i < cells.size(); i = next++) {
      Prepared& w = prepared[cells[i].workload];
      const std::string& stack = p.policies[cells[i].policy];
      const double cpu0 = ThreadCpuSeconds();
      const auto wall0 = std::chrono::steady_clock::now();
      core::Result<core::SimReport> r =
          core::RunSimulation(*w.topology, stack, w.workload, w.options);
      core::SimReport rep;
      if (r.ok()) rep = std::move(r).value();
      rep.stack = stack;
      rep.cpu_s = ThreadCpuSeconds() - cpu0;
      rep.wall_s = Since(wall0);
      rep.peak_rss_mb = PeakRssMb();
      std::lock_guard<std::mutex> lock(io);
      std::fprintf(stderr, "  %-14s seed %-4llu %-14s %7.1f s wall%s\n", w.result.name.c_str(),
                   static_cast<unsigned long long>(w.result.seed), stack.c_str(), *rep.wall_s,
                   r.ok() ? "" : (" ERROR: " + r.message()).c_str());
      w.result.reports[cells[i].policy] = std::move(rep);
    }
  };
  if (p.threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < p.threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  for (Prepared& w : prepared) report.workloads.push_back(std::move(w.result));
  report.wall_seconds = Since(t0);
  report.goals = EvaluateGoals(report);
  report.across_seeds = EvaluateAcrossSeeds(report);

  std::cout << RenderText(report);
  std::ofstream out(p.out);
  if (!out) {
    std::cerr << "bench_replay: cannot write " << p.out << "\n";
    return 1;
  }
  out << ToJson(report).dump(2) << "\n";
  std::cout << "wrote " << p.out << "\n";
  return 0;
}

}  // namespace
}  // namespace topo::bench

int main(int argc, char** argv) {
  try {
    return topo::bench::Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_replay: " << e.what() << "\n";
    return 1;
  }
}
