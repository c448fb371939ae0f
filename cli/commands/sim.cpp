// topo sim: replay a workload through SchedulerCore with a virtual clock, for
// several policy stacks on the same input, and compare the replay metrics of
// ../shared/BENCHMARKS.md.

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>

#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/trace_io.hpp"
#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"

namespace topo::cli {

namespace {

struct SimArgs {
  common::TopologySource source;
  std::string trace;
  std::string kalos;
  bool synthetic = false;
  bool mixed = false;
  bool no_gpu_types = false;
  int jobs = 0;  // 0: the workload's default (S 100,000, M 2,000)
  double target_load = 0;
  int large_gpus = 512;
  std::string failures = "none";
  double failure_gpu_hours = 50700;
  double repair_median_s = 7200;
  std::string policies = "fifo-firstfit,slurm-tree,toposched";
  uint64_t seed = 1;
  bool json = false;
  std::string per_job_csv;
  bool no_timing = false;
  std::string speed_model = "on";
  double cross_hbd_scale = 1.0;
};

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The workload named by the flags, or why not.
core::Result<core::SimWorkload> LoadWorkload(const SimArgs& args, const core::Topology& topo) {
  const int sources = !args.trace.empty() + !args.kalos.empty() + args.synthetic + args.mixed;
  if (sources != 1) {
    return core::Status::Error(
        "give exactly one workload: --trace CSV (generic), --kalos CSV (the Kalos trace, "
        "layouts by the K rule), --synthetic (workload S) or --mixed (workload M)");
  }
  if (args.mixed) {
    core::MixedOptions m;
    m.seed = args.seed;
    if (args.jobs > 0) m.jobs = args.jobs;
    m.load = args.target_load > 0 ? args.target_load : 0.9;
    return core::GenerateMixed(topo, m);
  }
  if (args.synthetic) {
    core::SyntheticOptions s;
    s.seed = args.seed;
    if (args.jobs > 0) s.jobs = args.jobs;
    s.load = args.target_load > 0 ? args.target_load : 0.9;
    if (topo.total_gpus() < s.min_gpus) {
      return core::Status::Error("workload S needs a cluster of at least " +
                                 std::to_string(s.min_gpus) + " GPUs");
    }
    return core::GenerateSynthetic(topo, s);
  }
  const std::string& path = args.trace.empty() ? args.kalos : args.trace;
  core::Result<std::string> text = common::ReadFile(path);
  if (!text.ok()) return text.status();
  if (!args.kalos.empty()) {
    core::Result<std::vector<core::KalosRow>> rows = common::ParseKalosCsv(text.value());
    if (!rows.ok()) return core::Status::Error(path + ": " + rows.message());
    core::KalosOptions k;
    k.seed = args.seed;
    core::SimWorkload w = core::BuildKalosWorkload(rows.value(), topo, k);
    w.name = "kalos " + Basename(path);
    return w;
  }
  core::Result<std::vector<core::SimJob>> jobs = common::ParseTraceCsv(text.value());
  if (!jobs.ok()) return core::Status::Error(path + ": " + jobs.message());
  core::SimWorkload w;
  w.name = "trace " + Basename(path);
  w.jobs = std::move(jobs).value();
  for (core::SimJob& j : w.jobs) core::FitEpConstraint(j.request.spec, topo);
  w.tenants = core::EqualTenantsFromJobs(w.jobs, topo.total_gpus());
  return w;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::string Fixed(const std::optional<double>& v, int decimals, double scale = 1) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, *v * scale);
  return buf;
}

void PrintTable(const std::vector<core::SimReport>& reports, const SimArgs& args) {
  struct RowSpec {
    std::string label;
    std::function<std::string(const core::SimReport&)> cell;
  };
  auto count = [](int64_t n) { return std::to_string(n); };
  const std::string large = std::to_string(args.large_gpus);
  std::vector<RowSpec> rows = {
      {"utilization %", [](auto& r) { return Fixed(r.utilization, 1, 100); }},
      {"utilization while jobs wait %",
       [](auto& r) { return Fixed(r.utilization_backlogged, 1, 100); }},
      {"mean JCT s", [](auto& r) { return Fixed(r.mean_jct_s, 0); }},
      {"p95 JCT s", [](auto& r) { return Fixed(r.p95_jct_s, 0); }},
      {"mean queue delay s", [](auto& r) { return Fixed(r.mean_queue_delay_s, 0); }},
      {"mean queue delay, >= " + large + " GPUs, s",
       [](auto& r) { return Fixed(r.mean_queue_delay_large_s, 0); }},
      {"ETTR, >= 1024 GPUs, %", [](auto& r) { return Fixed(r.ettr_large, 2, 100); }},
      {"work / wall time, >= 1024 GPUs, %",
       [](auto& r) { return Fixed(r.work_ratio_large, 2, 100); }},
      {"required constraints met %", [](auto& r) { return Fixed(r.required_met, 1, 100); }},
      {"GPU-hours lost to failures", [](auto& r) { return Fixed(r.lost_gpu_hours, 1); }},
      {"GPU-hours lost to preemption", [](auto& r) { return Fixed(r.lost_other_gpu_hours, 1); }},
      {"leaf span ratio, mean", [](auto& r) { return Fixed(r.leaf_span_ratio_mean, 3); }},
      {"comm cost ratio, mean", [](auto& r) { return Fixed(r.comm_cost_ratio_mean, 3); }},
      {"jobs completed", [&](auto& r) { return count(r.completed); }},
      {"jobs rejected", [&](auto& r) { return count(r.rejected); }},
      {"jobs failed", [&](auto& r) { return count(r.failed); }},
      {"jobs unfinished", [&](auto& r) { return count(r.unfinished); }},
      {"placements", [&](auto& r) { return count(r.placements); }},
      {"restarts", [&](auto& r) { return count(r.restarts); }},
      {"failures injected", [&](auto& r) { return count(r.failures_injected); }},
      {"jobs hit by failures", [&](auto& r) { return count(r.failures_hit_jobs); }},
      {"simulated days", [](auto& r) { return Fixed(r.span_days, 2); }},
      {"scheduler CPU s per simulated day",
       [](auto& r) { return Fixed(r.CpuSecondsPerSimDay(), 3); }},
      {"wall s", [](auto& r) { return Fixed(r.wall_s, 2); }},
      {"peak RSS MB", [](auto& r) { return Fixed(r.peak_rss_mb, 0); }},
  };
  if (!reports.empty() && reports.front().speed_model) {
    // The speed model's rows, after the JCT rows (absent with it off, whose
    // table stays as it was).
    const std::string mid = "64-" + std::to_string(args.large_gpus - 1);
    auto cls = [](size_t c, bool p95) {
      return [c, p95](const core::SimReport& r) {
        return Fixed(p95 ? r.jct_by_size[c].p95_jct_s : r.jct_by_size[c].mean_jct_s, 0);
      };
    };
    std::vector<RowSpec> speed = {
        {"goodput %", [](auto& r) { return Fixed(r.goodput, 1, 100); }},
        {"mean slowdown", [](auto& r) { return Fixed(r.mean_slowdown, 3); }},
        {"GPU-hours lost to slow placements",
         [](auto& r) { return Fixed(std::optional<double>(r.slow_gpu_hours), 1); }},
        {"mean JCT, < 64 GPUs, s", cls(0, false)},
        {"p95 JCT, < 64 GPUs, s", cls(0, true)},
        {"mean JCT, " + mid + " GPUs, s", cls(1, false)},
        {"p95 JCT, " + mid + " GPUs, s", cls(1, true)},
        {"mean JCT, >= " + large + " GPUs, s", cls(2, false)},
        {"p95 JCT, >= " + large + " GPUs, s", cls(2, true)},
        {"mean JCT bound, >= " + large + " GPUs, s",
         [](auto& r) { return Fixed(r.jct_by_size[2].bound_jct_s, 0); }},
    };
    rows.insert(rows.begin() + 4, speed.begin(), speed.end());
  }
  size_t label_width = 6;
  for (const RowSpec& row : rows) label_width = std::max(label_width, row.label.size());
  std::vector<size_t> widths;
  for (const core::SimReport& r : reports) widths.push_back(std::max<size_t>(10, r.stack.size()));
  std::printf("%-*s", static_cast<int>(label_width), "metric");
  for (size_t i = 0; i < reports.size(); ++i) {
    std::printf("  %*s", static_cast<int>(widths[i]), reports[i].stack.c_str());
  }
  std::printf("\n");
  for (const RowSpec& row : rows) {
    std::printf("%-*s", static_cast<int>(label_width), row.label.c_str());
    for (size_t i = 0; i < reports.size(); ++i) {
      std::printf("  %*s", static_cast<int>(widths[i]), row.cell(reports[i]).c_str());
    }
    std::printf("\n");
  }
}

int RunSim(const SimArgs& args) {
  core::Result<core::Topology> topo_or = common::LoadTopology(args.source);
  if (!topo_or.ok()) return Fail(topo_or.message());
  const core::Topology& topo = topo_or.value();

  std::vector<std::string> stacks = SplitList(args.policies);
  if (stacks.empty()) return Fail("--policies is empty; name one or more stacks");
  std::set<std::string> seen;
  for (const std::string& s : stacks) {
    if (!core::SchedulerConfig::ForStack(s)) {
      std::string known;
      for (const std::string& n : core::SchedulerConfig::StackNames()) {
        known += (known.empty() ? "" : ", ") + n;
      }
      return Fail("unknown policy stack '" + s + "' in --policies; known: " + known);
    }
    if (!seen.insert(s).second) return Fail("--policies names '" + s + "' twice");
  }
  std::optional<core::FailureModel> model = core::FailureModel::ByName(args.failures);
  if (!model) return Fail("unknown failure model '" + args.failures + "'; known: none, llama3");
  model->gpu_hours_per_interruption = args.failure_gpu_hours;
  model->repair_median = static_cast<core::TimeMs>(args.repair_median_s * 1000);

  core::Result<core::SimWorkload> workload_or = LoadWorkload(args, topo);
  if (!workload_or.ok()) return Fail(workload_or.message());
  core::SimWorkload& workload = workload_or.value();

  const bool csv_to_stdout = args.per_job_csv == "-";
  if (csv_to_stdout && args.json) {
    return Fail("--per-job-csv - and --json both want standard output; write the CSV to a file");
  }
  // Notes for people go to stdout with the table, to stderr when standard
  // output carries JSON or CSV.
  std::ostream& notes = args.json || csv_to_stdout ? std::cerr : std::cout;
  notes << "topology " << topo.name() << ": " << topo.total_gpus() << " GPUs, " << topo.node_count()
        << " nodes\n";
  char buf[256];
  if (args.no_gpu_types) {
    workload = core::WithoutGpuTypes(workload, topo, workload.name + " without GPU types");
  }
  if (args.target_load > 0 && !args.synthetic && !args.mixed) {
    core::LoadScaling s = core::ScaleToLoad(workload.jobs, topo.total_gpus(), args.target_load);
    if (s.offered_before > 0) {
      std::snprintf(buf, sizeof buf,
                    "arrivals scaled by %.6g: offered load %.4g -> %.4g (target %.4g)\n", s.factor,
                    s.offered_before, s.offered_after, args.target_load);
    } else {
      std::snprintf(buf, sizeof buf,
                    "arrivals not scaled: the offered load is undefined (one arrival time)\n");
    }
    notes << buf;
  }
  std::snprintf(buf, sizeof buf, "workload %s: %zu jobs, %zu tenants, offered load %.4g\n",
                workload.name.c_str(), workload.jobs.size(), workload.tenants.size(),
                core::OfferedLoad(workload.jobs, topo.total_gpus()));
  notes << buf;
  if (model->kind == core::FailureKind::kNone) {
    notes << "failures: none; seed " << args.seed << "\n";
  } else {
    std::snprintf(buf, sizeof buf,
                  "failures: %s, one per %.6g GPU-hours (%.0f %% GPU, %.0f %% network, the rest "
                  "host), repair lognormal median %.6g s; seed %llu\n",
                  args.failures.c_str(), model->gpu_hours_per_interruption, model->share_gpu * 100,
                  model->share_network * 100, args.repair_median_s,
                  static_cast<unsigned long long>(args.seed));
    notes << buf;
  }

  core::SimOptions options;
  options.seed = args.seed;
  options.failures = *model;
  options.large_gpus = args.large_gpus;
  options.keep_job_results = !args.per_job_csv.empty();
  options.speed_model = args.speed_model == "on";
  options.cross_hbd_scale = args.cross_hbd_scale;
  if (options.speed_model) {
    std::snprintf(buf, sizeof buf,
                  "speed model: on (durations at the ideal placement), cross-HBD bandwidth x%g\n",
                  args.cross_hbd_scale);
    notes << buf;
  } else if (args.cross_hbd_scale != 1.0) {
    return Fail("--cross-hbd-scale needs the speed model (--speed-model on)");
  }
  std::vector<core::SimReport> reports;
  for (const std::string& stack : stacks) {
    const double cpu0 = CpuSeconds();
    const auto wall0 = std::chrono::steady_clock::now();
    core::Result<core::SimReport> r = core::RunSimulation(topo, stack, workload, options);
    if (!r.ok()) return Fail(r.message());
    core::SimReport report = std::move(r).value();
    if (!args.no_timing) {
      report.cpu_s = CpuSeconds() - cpu0;
      report.wall_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      report.peak_rss_mb = PeakRssMb();
    }
    reports.push_back(std::move(report));
  }

  if (csv_to_stdout) {
    common::WritePerJobCsv(std::cout, reports);
  } else if (!args.per_job_csv.empty()) {
    std::ofstream out(args.per_job_csv);
    if (!out) return Fail(args.per_job_csv + ": cannot open for writing");
    common::WritePerJobCsv(out, reports);
    if (!out) return Fail(args.per_job_csv + ": write failed");
  }
  if (csv_to_stdout) {
    // The CSV is the output.
  } else if (args.json) {
    std::cout << common::SimReportsToJson(reports).dump(2) << "\n";
  } else {
    std::cout << "\n";
    PrintTable(reports, args);
  }
  for (const core::SimReport& r : reports) {
    for (const auto& [what, n] : r.anomalies) {
      notes << "note: " << r.stack << ": " << n << " x " << what << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void RegisterSim(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Replay a workload with a virtual clock, several policy stacks side by side.\n\n"
      "Every stack runs the same input through the scheduler's core (../shared/BENCHMARKS.md,\n"
      "replay metrics).\n\n"
      "Workloads (exactly one):\n"
      "  --trace CSV     generic trace: header with submit_s,duration_s,gpus and optional\n"
      "                  tenant,tp,cp,ep,pp,dp,gpus_per_node,priority,time_limit_s,\n"
      "                  checkpoint_interval_s (docs/sim.md)\n"
      "  --kalos CSV     the Kalos trace (jobs.csv), layouts and tenants by the K rule\n"
      "  --synthetic     workload S, --jobs N jobs (default 100000), offered load 0.9 or\n"
      "                  --target-load\n"
      "  --mixed         workload M for mixed clusters (jobs naming GPU types), --jobs N\n"
      "                  (default 2000), offered load 0.9 or --target-load\n\n"
      "Examples:\n"
      "  topo sim --generate tiny --trace jobs.csv --policies toposched,slurm-tree\n"
      "  topo sim --generate crux-847 --kalos ../shared/data/traces/kalos-llm/jobs.csv "
      "--target-load 0.9 --failures llama3\n"
      "  topo sim --generate meta-24k --synthetic --jobs 10000 --json\n"
      "  topo sim --generate mixed-10k --mixed\n"
      "  topo sim --generate h100-10k --mixed --no-gpu-types   # the same jobs, homogeneous");
  AddTopologyFlags(*cmd, &args->source);
  auto* trace = cmd->add_option("--trace", args->trace, "Generic job trace CSV");
  auto* kalos = cmd->add_option("--kalos", args->kalos, "Kalos trace CSV (workload K)");
  auto* synthetic = cmd->add_flag("--synthetic", args->synthetic, "Synthetic workload S");
  auto* mixed = cmd->add_flag("--mixed", args->mixed, "Mixed-cluster workload M");
  trace->excludes(kalos)->excludes(synthetic)->excludes(mixed);
  kalos->excludes(synthetic)->excludes(mixed);
  synthetic->excludes(mixed);
  cmd->add_option("--jobs", args->jobs, "Jobs of workload S (default 100000) or M (default 2000)")
      ->check(CLI::Range(1, 10000000));
  cmd->add_flag("--no-gpu-types", args->no_gpu_types,
                "Drop every job's GPU types (the same jobs on a homogeneous cluster)");
  cmd->add_option("--target-load", args->target_load,
                  "Rescale arrival times so the offered load is L (prints the factor)")
      ->check(CLI::Range(0.001, 100.0));
  cmd->add_option("--large-gpus", args->large_gpus,
                  "Jobs of at least N GPUs count as large for the queue delay (default 512)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--failures", args->failures, "Failure model: none (default) or llama3")
      ->check(CLI::IsMember(core::FailureModel::Names()));
  cmd->add_option("--failure-gpu-hours", args->failure_gpu_hours,
                  "GPU-hours per interruption of the failure model (default 50700)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--repair-median-s", args->repair_median_s,
                  "Median repair time of the failure model, seconds (default 7200)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--policies", args->policies,
                  "Policy stacks, comma-separated (default fifo-firstfit,slurm-tree,toposched)");
  cmd->add_option("--seed", args->seed, "Seed of workloads K and S and of failures (default 1)");
  cmd->add_flag("--json", args->json, "Print the metrics per policy as JSON");
  cmd->add_option("--per-job-csv", args->per_job_csv,
                  "Write one row per job and policy to FILE (- : to standard output, instead "
                  "of the table)");
  cmd->add_option("--speed-model", args->speed_model,
                  "on (default): jobs run at the speed their placement and neighbours allow, "
                  "trace durations being at the ideal placement; off: every job runs its trace "
                  "duration wherever it lands")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--cross-hbd-scale", args->cross_hbd_scale,
                  "Multiply the bandwidth of every tier above the HBD (sensitivity: 0.5, 2)")
      ->check(CLI::Range(0.001, 1000.0));
  cmd->add_flag("--no-timing", args->no_timing,
                "Leave out CPU time, wall time and memory (reproducible output)");
  cmd->callback([args, exit_code] { *exit_code = RunSim(*args); });
}

}  // namespace topo::cli
