// bench_placement: workload P of ../shared/BENCHMARKS.md.
//
// Places one gang job on pre-filled clusters for every topology x fill x job
// size x layout x policy, measures Placer::Place latency on one core and the
// placement quality (core::Evaluate), prints a table and a goal summary, and
// writes JSON (default bench/results/placement.json).
//
//   bench_placement                       # the full default grid
//   bench_placement --quick               # a smoke-test grid
//   bench_placement --topologies cm384-166k --fills 60 --sizes 16384

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "machine.hpp"
#include "report.hpp"
#include "topo/core/generators.hpp"
#include "topo/core/placement.hpp"
#include "workload.hpp"

#ifndef TOPO_BENCH_SOURCE_DIR
#define TOPO_BENCH_SOURCE_DIR "."
#endif

namespace topo::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Run(int argc, char** argv) {
  Params p;
  p.topologies = {"meta-24k", "nvl72-64k", "cm384-166k"};
  p.fills = {0, 30, 60, 90};
  p.sizes = {8, 64, 512, 4096, 16384};
  p.policies = core::PlacerNames();
  p.out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/placement.json";

  CLI::App app{"Workload P: place one gang job on pre-filled clusters, every policy"};
  app.add_option("--reps", p.reps, "timed placements per cell for jobs under 1,024 GPUs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reps-large", p.reps_large,
                 "timed placements per cell for jobs of 1,024 to 16,383 GPUs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reps-huge", p.reps_huge, "timed placements per cell for jobs of >= 16,384 GPUs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--topologies", p.topologies, "generated topologies (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--fills", p.fills, "fill levels in percent")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  app.add_option("--sizes", p.sizes, "job sizes in GPUs")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--policies", p.policies, "placer policies")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seed", p.seed, "seed of the fill states")->capture_default_str();
  app.add_option("--fill-states", p.fill_states, "fill states per topology x fill (one at 0 %)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quick", p.quick,
               "smoke-test grid: tiny and cm384-166k, fills 0,60, few reps and states, "
               "output placement-quick.json (explicit flags still win)");
  app.add_option("--out", p.out, "JSON output file")->capture_default_str();
  app.add_option("--markdown", p.markdown, "also write the report as Markdown to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (p.quick) {
    auto unset = [&](const char* name) { return app.get_option(name)->count() == 0; };
    if (unset("--topologies")) p.topologies = {"tiny", "cm384-166k"};
    if (unset("--fills")) p.fills = {0, 60};
    if (unset("--reps")) p.reps = 50;
    if (unset("--reps-large")) p.reps_large = 5;
    if (unset("--reps-huge")) p.reps_huge = 3;
    if (unset("--fill-states")) p.fill_states = 2;
    // Keep the real results file for real runs.
    if (unset("--out")) {
      p.out = std::string(TOPO_BENCH_SOURCE_DIR) + "/bench/results/placement-quick.json";
    }
  }

  // Validate names and output paths before any long work.
  for (const std::string& path : {p.out, p.markdown}) {
    if (path.empty()) continue;
    std::ofstream probe(path, std::ios::app);
    if (!probe) {
      std::cerr << "bench_placement: cannot write " << path << "\n";
      return 2;
    }
  }
  std::vector<std::unique_ptr<core::Placer>> placers;
  for (const std::string& name : p.policies) {
    std::unique_ptr<core::Placer> placer = core::MakePlacer(name);
    if (placer == nullptr) {
      std::cerr << "bench_placement: unknown policy '" << name << "'\n";
      return 2;
    }
    placers.push_back(std::move(placer));
  }
  std::vector<core::Topology> topologies;
  for (const std::string& name : p.topologies) {
    core::Result<core::Topology> t = core::GenerateTopology(name);
    if (!t.ok()) {
      std::cerr << "bench_placement: " << t.message() << "\n";
      return 2;
    }
    topologies.push_back(std::move(t).value());
  }

  Report report;
  report.params = p;
  report.machine = ReadMachine(TOPO_BENCH_SOURCE_DIR);
  report.machine.pinned = PinToCpu0();
  const auto start = std::chrono::steady_clock::now();

  for (const core::Topology& topo : topologies) {
    TopologyInfo info;
    info.name = topo.name();
    info.gpus = topo.total_gpus();
    info.nodes = topo.node_count();
    info.hbd_gpus = topo.max_domain_gpus(topo.hbd_tier());
    for (int t = 0; t <= topo.root_tier(); ++t) info.tiers.push_back(topo.tier(t).name);
    for (int fill : p.fills) {
      const auto fill_start = std::chrono::steady_clock::now();
      FillStates states = MakeFillStates(topo, fill, p.fill_states, p.seed);
      FillInfo fi{fill, states.seeds, states.busy_share, Seconds(fill_start)};
      info.fills.push_back(fi);
      const auto cells_start = std::chrono::steady_clock::now();
      for (int gpus : p.sizes) {
        for (const Layout& layout : LayoutsFor(gpus, topo)) {
          if (!layout.possible) {
            CellResult c;
            c.topology = topo.name();
            c.fill_pct = fill;
            c.gpus = gpus;
            c.layout = layout.name;
            c.skipped = true;
            c.skip_reason = layout.why_not;
            report.cells.push_back(std::move(c));
            continue;
          }
          for (const auto& placer : placers) {
            CellResult c = RunCell(*placer, layout.job, states, p.RepsFor(gpus));
            c.layout = layout.name;
            report.cells.push_back(std::move(c));
          }
        }
      }
      std::fprintf(stderr, "[%7.1f s] %s %d%%: fill %.1f s, cells %.1f s\n", Seconds(start),
                   topo.name().c_str(), fill, fi.fill_seconds, Seconds(cells_start));
    }
    report.topologies.push_back(std::move(info));
  }
  report.wall_seconds = Seconds(start);

  std::cout << RenderText(report);
  int rc = 0;
  {
    std::ofstream out(p.out);
    out << ToJson(report).dump(2) << "\n";
    if (!out) {
      std::cerr << "bench_placement: cannot write " << p.out << "\n";
      rc = 1;
    } else {
      std::cerr << "wrote " << p.out << "\n";
    }
  }
  if (!p.markdown.empty()) {
    std::ofstream md(p.markdown);
    md << RenderMarkdown(report);
    if (!md) {
      std::cerr << "bench_placement: cannot write " << p.markdown << "\n";
      rc = 1;
    } else {
      std::cerr << "wrote " << p.markdown << "\n";
    }
  }
  return rc;
}

}  // namespace
}  // namespace topo::bench

int main(int argc, char** argv) {
  try {
    return topo::bench::Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_placement: " << e.what() << "\n";
    return 1;
  }
}
