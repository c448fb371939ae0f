#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "topo/common/hostlist.hpp"
#include "topo/common/trace_io.hpp"

namespace topo::bench {

namespace {

const core::SimReport* Find(const WorkloadResult& w, const std::string& stack) {
  for (const core::SimReport& r : w.reports) {
    if (r.stack == stack) return &r;
  }
  return nullptr;
}

std::string Fixed(const std::optional<double>& v, int decimals, double scale = 1) {
  if (!v || !std::isfinite(*v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, *v * scale);
  return buf;
}

std::string Count(int64_t n) { return std::to_string(n); }

bool IsMixedTwin(const std::string& name) {
  return name.rfind("M/" + std::string(kMixedTwin), 0) == 0;
}

// Jobs `stack` refused (rejected) that another stack of the same run
// started; 0 without per-job results.
int64_t RefusedButRunElsewhere(const WorkloadResult& w, const core::SimReport& stack) {
  int64_t n = 0;
  for (size_t i = 0; i < stack.job_results.size(); ++i) {
    if (stack.job_results[i].state != core::JobState::kRejected) continue;
    for (const core::SimReport& other : w.reports) {
      if (&other != &stack && i < other.job_results.size() &&
          other.job_results[i].first_start >= 0) {
        ++n;
        break;
      }
    }
  }
  return n;
}

// `twin`'s utilization without the jobs `stack` refused on the mixed
// cluster (the same workload positions): what the homogeneous run would
// have measured had it refused them too. nullopt without per-job results.
std::optional<double> TwinUtilizationWithoutRefused(const core::SimReport& stack,
                                                    const core::SimReport& twin) {
  if (!twin.utilization || twin.allocated_gpu_hours <= 0 || stack.job_results.empty() ||
      twin.job_results.size() != stack.job_results.size()) {
    return std::nullopt;
  }
  double refused_gpu_ms = 0;
  for (size_t i = 0; i < stack.job_results.size(); ++i) {
    if (stack.job_results[i].state != core::JobState::kRejected) continue;
    refused_gpu_ms += twin.job_results[i].run_ms * twin.job_results[i].gpus;
  }
  const double refused_gpu_h = refused_gpu_ms / 3.6e6;
  return *twin.utilization * (1 - refused_gpu_h / twin.allocated_gpu_hours);
}

nlohmann::ordered_json Opt(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return std::round(*v * 1e6) / 1e6;
}

// toposched's mean JCT of large jobs over slurm-tree's; nullopt when either
// is missing.
std::optional<double> LargeJctRatio(const core::SimReport& ours, const core::SimReport& slurm) {
  const std::optional<double>& a = ours.jct_by_size[2].mean_jct_s;
  const std::optional<double>& b = slurm.jct_by_size[2].mean_jct_s;
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

// The sensitivity summary: one Markdown row per workload and cross-HBD
// bandwidth (NAME, NAME@0.5, NAME@2 side by side), toposched against
// slurm-tree; empty when either stack is missing from the run.
std::string SensitivityTable(const Report& report) {
  struct Line {
    std::string base;
    double scale;
    const WorkloadResult* w;
    const core::SimReport* ts;
    const core::SimReport* st;
  };
  std::vector<Line> lines;
  for (const WorkloadResult& w : report.workloads) {
    if (w.seed != report.params.seed) continue;  // the variants run at the first seed
    const core::SimReport* ts = Find(w, "toposched");
    const core::SimReport* st = Find(w, "slurm-tree");
    if (ts == nullptr || st == nullptr) return "";
    lines.push_back({w.name.substr(0, w.name.find('@')), ts->cross_hbd_scale, &w, ts, st});
  }
  // The run lists each workload's bandwidths together: order each group by
  // bandwidth, keeping the workloads' order.
  for (auto first = lines.begin(); first != lines.end();) {
    auto last =
        std::find_if(first, lines.end(), [&](const Line& l) { return l.base != first->base; });
    std::sort(first, last, [](const Line& a, const Line& b) { return a.scale < b.scale; });
    first = last;
  }
  std::string stacks;
  for (const core::SimReport& r : report.workloads.front().reports) {
    stacks += (stacks.empty() ? "" : " / ") + r.stack;
  }
  const std::string large = std::to_string(report.params.large_gpus);
  const std::string ettr = std::to_string(report.params.ettr_gpus);
  std::string out = "| workload | cross-HBD bandwidth | goodput % (" + stacks +
                    ") | mean JCT >= " + large + " GPUs, toposched / slurm-tree | ETTR >= " + ettr +
                    " GPUs % (slurm-tree / toposched) | work / wall >= " + ettr +
                    " GPUs % (slurm-tree / toposched) | GPU-hours lost to slow placements "
                    "(slurm-tree / toposched) |\n|---|---|---|---:|---|---|---|\n";
  char buf[64];
  for (const Line& l : lines) {
    const core::SimReport& ts = *l.ts;
    const core::SimReport& st = *l.st;
    std::string goodput;
    for (const core::SimReport& r : l.w->reports) {
      goodput += (goodput.empty() ? "" : " / ") + Fixed(r.goodput, 1, 100);
    }
    std::snprintf(buf, sizeof buf, "%gx", l.scale);
    const std::optional<double> jct = LargeJctRatio(ts, st);
    const std::string ratio = jct ? Fixed(jct, 2) + "x" : "-";
    out += "| " + l.base + " | " + buf + " | " + goodput + " | " + ratio + " | " +
           Fixed(st.ettr_large, 2, 100) + " / " + Fixed(ts.ettr_large, 2, 100) + " | " +
           Fixed(st.work_ratio_large, 2, 100) + " / " + Fixed(ts.work_ratio_large, 2, 100) + " | " +
           Fixed(std::optional<double>(st.slow_gpu_hours), 0) + " / " +
           Fixed(std::optional<double>(ts.slow_gpu_hours), 0) + " |\n";
  }
  return out;
}

// Workload M against its homogeneous twin, every seed and stack: one
// Markdown row each, then the mean over the seeds per stack; empty without
// both workloads in the run.
std::string MixedTable(const Report& report) {
  struct Pair {
    const WorkloadResult* mixed = nullptr;
    const WorkloadResult* twin = nullptr;
  };
  std::vector<Pair> pairs;
  for (uint64_t seed : report.params.seeds) {
    Pair p;
    for (const WorkloadResult& w : report.workloads) {
      if (w.seed != seed) continue;
      if (w.name == "M") p.mixed = &w;
      if (w.name == "M/" + std::string(kMixedTwin)) p.twin = &w;
    }
    if (p.mixed != nullptr && p.twin != nullptr) pairs.push_back(p);
  }
  if (pairs.empty()) return "";
  std::string out = "| seed | stack | utilization %, mixed / " + std::string(kMixedTwin) +
                    " (points) | " + kMixedTwin +
                    " without the jobs refused on mixed (points) | goodput %, mixed / " +
                    kMixedTwin + " | rejected, mixed / " + kMixedTwin +
                    " | refused on mixed, run by another stack | cross-part placements |\n"
                    "|---|---|---|---|---|---|---:|---:|\n";
  struct Sum {
    double util = 0, util_twin = 0, util_without = 0, goodput = 0, goodput_twin = 0;
    int64_t rejected = 0, rejected_twin = 0, refused = 0, cross = 0;
    int n = 0;
  };
  std::vector<std::pair<std::string, Sum>> sums;
  char buf[512];
  for (const Pair& p : pairs) {
    for (const core::SimReport& r : p.mixed->reports) {
      const core::SimReport* t = Find(*p.twin, r.stack);
      if (t == nullptr) continue;
      const int64_t refused = RefusedButRunElsewhere(*p.mixed, r);
      const double delta = (r.utilization.value_or(0) - t->utilization.value_or(0)) * 100;
      const double without = TwinUtilizationWithoutRefused(r, *t).value_or(0);
      std::snprintf(buf, sizeof buf,
                    "| %llu | %s | %s / %s (%+.1f) | %.1f (%+.1f) | %s / %s | %lld / %lld | %lld | "
                    "%lld |\n",
                    static_cast<unsigned long long>(p.mixed->seed), r.stack.c_str(),
                    Fixed(r.utilization, 1, 100).c_str(), Fixed(t->utilization, 1, 100).c_str(),
                    delta, without * 100, (r.utilization.value_or(0) - without) * 100,
                    Fixed(r.goodput, 1, 100).c_str(), Fixed(t->goodput, 1, 100).c_str(),
                    static_cast<long long>(r.rejected), static_cast<long long>(t->rejected),
                    static_cast<long long>(refused),
                    static_cast<long long>(r.cross_part_placements));
      out += buf;
      auto it =
          std::find_if(sums.begin(), sums.end(), [&](const auto& s) { return s.first == r.stack; });
      if (it == sums.end()) it = sums.insert(sums.end(), {r.stack, Sum{}});
      Sum& s = it->second;
      s.util += r.utilization.value_or(0);
      s.util_twin += t->utilization.value_or(0);
      s.util_without += without;
      s.goodput += r.goodput.value_or(0);
      s.goodput_twin += t->goodput.value_or(0);
      s.rejected += r.rejected;
      s.rejected_twin += t->rejected;
      s.refused += refused;
      s.cross += r.cross_part_placements;
      ++s.n;
    }
  }
  if (pairs.size() > 1) {
    for (const auto& [stack, s] : sums) {
      const double n = s.n;
      std::snprintf(buf, sizeof buf,
                    "| mean | %s | %.1f / %.1f (%+.1f) | %.1f (%+.1f) | %.1f / %.1f | %lld / %lld "
                    "(sum) | %lld (sum) | %lld (sum) |\n",
                    stack.c_str(), s.util / n * 100, s.util_twin / n * 100,
                    (s.util - s.util_twin) / n * 100, s.util_without / n * 100,
                    (s.util - s.util_without) / n * 100, s.goodput / n * 100,
                    s.goodput_twin / n * 100, static_cast<long long>(s.rejected),
                    static_cast<long long>(s.rejected_twin), static_cast<long long>(s.refused),
                    static_cast<long long>(s.cross));
      out += buf;
    }
  }
  return out;
}

// Per workload with topology changes (first seed), stack and change: when it
// came and applied, what it changed, the jobs it moved and how they ended.
std::string ChangesTable(const Report& report) {
  std::string out;
  char buf[512];
  for (const WorkloadResult& w : report.workloads) {
    if (w.seed != report.params.seed) continue;
    for (const core::SimReport& r : w.reports) {
      for (size_t i = 0; i < r.topology_changes.size(); ++i) {
        const core::SimTopologyChangeResult& c = r.topology_changes[i];
        if (out.empty()) {
          out =
              "| workload | stack | change | at, day | applied, day | nodes +/- | GPUs before -> "
              "after | jobs moved | moved: completed / failed | fairshare kept |\n"
              "|---|---|---:|---:|---:|---|---|---:|---|---|\n";
        }
        const double day = 24.0 * core::kHour;
        std::snprintf(
            buf, sizeof buf,
            "| %s | %s | %zu | %.2f | %s | +%d / -%d | %d -> %d | %lld | %lld / %lld | "
            "%s |\n",
            w.name.c_str(), r.stack.c_str(), i + 1,
            static_cast<double>(c.at - r.first_submit) / day,
            c.applied < 0 ? "never"
                          : Fixed(static_cast<double>(c.applied - r.first_submit) / day, 2).c_str(),
            c.nodes_added, c.nodes_removed, c.capacity_before, c.capacity_after,
            static_cast<long long>(c.jobs_moved), static_cast<long long>(c.moved_completed),
            static_cast<long long>(c.moved_failed), c.fairshare_kept ? "yes" : "no");
        out += buf;
      }
    }
  }
  return out;
}

}  // namespace

namespace {

// "<what> >= slurm-tree + 5 points": toposched's fraction against slurm-tree's.
Goal PointsAhead(const std::string& what, const std::string& workload,
                 const std::optional<double>& ours, const std::optional<double>& slurm) {
  Goal g{what + " >= slurm-tree + 5 points", workload, "", "+5.0 points", std::nullopt};
  g.unit = " points";
  g.decimals = 1;
  if (ours && slurm) {
    const double delta = (*ours - *slurm) * 100;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f %% vs %.1f %% (%+.1f points)", *ours * 100, *slurm * 100,
                  delta);
    g.measured = buf;
    g.met = delta >= 5.0;
    g.value = delta;
  }
  return g;
}

// The goals of workload M (BENCHMARKS.md, "M: utilization on the mixed
// cluster"), on the mixed cluster against its homogeneous twin of the same
// seed and bandwidth (nullptr when the run left it out).
void MixedGoals(const WorkloadResult& w, const WorkloadResult* twin, std::vector<Goal>& goals) {
  const core::SimReport* ours = Find(w, "toposched");
  const core::SimReport* ours_twin = twin != nullptr ? Find(*twin, "toposched") : nullptr;
  Goal u{"utilization within 2 points of the same jobs on " + std::string(kMixedTwin), w.name, "",
         "|difference| <= 2.0 points", std::nullopt};
  u.unit = " points";
  u.decimals = 1;
  if (ours_twin != nullptr && ours->utilization && ours_twin->utilization) {
    const double delta = (*ours->utilization - *ours_twin->utilization) * 100;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f %% vs %.1f %% (%+.1f points)", *ours->utilization * 100,
                  *ours_twin->utilization * 100, delta);
    u.measured = buf;
    if (std::optional<double> without = TwinUtilizationWithoutRefused(*ours, *ours_twin);
        without && ours->rejected > 0) {
      std::snprintf(buf, sizeof buf, "; %s without the %lld jobs refused here: %.1f %% (%+.1f)",
                    kMixedTwin, static_cast<long long>(ours->rejected), *without * 100,
                    (*ours->utilization - *without) * 100);
      u.measured += buf;
    }
    u.met = std::abs(delta) <= 2.0;
    u.value = delta;
  }
  goals.push_back(u);
  Goal n{"no job refused that a baseline runs", w.name, "", "0 jobs", std::nullopt};
  n.unit = " jobs";
  n.decimals = 0;
  if (!ours->job_results.empty()) {
    const int64_t refused = RefusedButRunElsewhere(w, *ours);
    n.measured = std::to_string(refused) + " of " + std::to_string(ours->rejected) + " refused (" +
                 std::to_string(w.jobs) + " jobs)";
    n.met = refused == 0;
    n.value = static_cast<double>(refused);
  }
  goals.push_back(n);
  Goal g{"goodput >= every baseline's", w.name, "", ">= +0.0 points", std::nullopt};
  g.unit = " points";
  g.decimals = 1;
  std::optional<double> worst;
  std::string measured = ours->goodput ? Fixed(ours->goodput, 1, 100) + " % vs" : "";
  for (const core::SimReport& r : w.reports) {
    if (&r == ours || !ours->goodput || !r.goodput) continue;
    const double delta = (*ours->goodput - *r.goodput) * 100;
    worst = worst ? std::min(*worst, delta) : delta;
    measured += " " + r.stack + " " + Fixed(r.goodput, 1, 100) + " %";
  }
  if (worst) {
    char buf[48];
    std::snprintf(buf, sizeof buf, " (%+.1f points)", *worst);
    g.measured = measured + buf;
    g.met = *worst >= 0;
    g.value = worst;
  }
  goals.push_back(g);
}

// The goals of workload M+T (issue 36: a rack added and one removed during
// a 10,000-job replay; no job fails, no fairshare reset), against the same
// jobs with no change (nullptr when the run left it out).
void ChangeGoals(const WorkloadResult& w, const WorkloadResult* still, std::vector<Goal>& goals) {
  const core::SimReport* ours = Find(w, "toposched");
  const core::SimReport* ours_still = still != nullptr ? Find(*still, "toposched") : nullptr;
  int64_t applied = 0, moved = 0, moved_failed = 0, kept = 0;
  const int64_t changes = static_cast<int64_t>(ours->topology_changes.size());
  for (const core::SimTopologyChangeResult& c : ours->topology_changes) {
    applied += c.applied >= 0;
    moved += c.jobs_moved;
    moved_failed += c.moved_failed;
    kept += c.fairshare_kept;
  }
  Goal a{"every topology change applied", w.name,
         std::to_string(applied) + " of " + std::to_string(changes), "all", changes > 0};
  a.met = changes > 0 && applied == changes;
  a.value = static_cast<double>(applied);
  a.unit = " applied";
  a.decimals = 0;
  goals.push_back(a);
  Goal m{"no job moved by a topology change fails", w.name,
         std::to_string(moved_failed) + " of " + std::to_string(moved) + " moved jobs failed",
         "0 jobs", applied > 0};
  m.met = applied > 0 && moved_failed == 0;
  m.value = static_cast<double>(moved_failed);
  m.unit = " jobs";
  m.decimals = 0;
  goals.push_back(m);
  Goal f{"fairshare usage kept across every change", w.name,
         std::to_string(kept) + " of " + std::to_string(applied) + " changes", "all", applied > 0};
  f.met = applied > 0 && kept == applied;
  f.value = static_cast<double>(kept);
  f.unit = " changes";
  f.decimals = 0;
  goals.push_back(f);
  Goal n{"no more failed jobs than without the changes", w.name, "", "<= +0 jobs", std::nullopt};
  n.unit = " jobs";
  n.decimals = 0;
  if (ours_still != nullptr) {
    n.measured = std::to_string(ours->failed) + " vs " + std::to_string(ours_still->failed);
    n.met = ours->failed <= ours_still->failed;
    n.value = static_cast<double>(ours->failed - ours_still->failed);
  }
  goals.push_back(n);
}

// The goals one workload's run measures (../shared/BENCHMARKS.md, issue 13).
std::vector<Goal> GoalsOf(const WorkloadResult& w, const Report& report) {
  const Params& params = report.params;
  std::vector<Goal> goals;
  const core::SimReport* ours = Find(w, "toposched");
  const core::SimReport* slurm = Find(w, "slurm-tree");
  if (ours == nullptr) return goals;
  if (w.family == "M" && !IsMixedTwin(w.name)) {
    const std::string twin_name =
        "M/" + std::string(kMixedTwin) +
        (w.name.find('@') == std::string::npos ? "" : w.name.substr(w.name.find('@')));
    const WorkloadResult* twin = nullptr;
    for (const WorkloadResult& t : report.workloads) {
      if (t.name == twin_name && t.seed == w.seed) twin = &t;
    }
    MixedGoals(w, twin, goals);
  }
  if (w.family == "T" && w.name.rfind("M+T/static", 0) != 0) {
    const WorkloadResult* still = nullptr;
    for (const WorkloadResult& t : report.workloads) {
      if (t.name == "M+T/static" + w.name.substr(3) && t.seed == w.seed) still = &t;
    }
    ChangeGoals(w, still, goals);
  }
  if (!w.failures && slurm != nullptr && w.family != "M" && w.family != "T") {
    goals.push_back(PointsAhead("utilization", w.name, ours->utilization, slurm->utilization));
    goals.push_back(PointsAhead("goodput", w.name, ours->goodput, slurm->goodput));
    Goal jl{"mean JCT, >= " + std::to_string(params.large_gpus) + " GPUs <= 0.7 x slurm-tree",
            w.name, "", "<= 0.70 x", std::nullopt};
    jl.unit = " x";
    if (const std::optional<double> jct = LargeJctRatio(*ours, *slurm)) {
      const double base = *slurm->jct_by_size[2].mean_jct_s;
      const double ratio = *jct;
      char buf[128];
      std::snprintf(buf, sizeof buf, "%.0f s vs %.0f s (%.2f x)", *ours->jct_by_size[2].mean_jct_s,
                    base, ratio);
      jl.measured = buf;
      // No policy's mean goes below the jobs' mean duration at the ideal
      // placement: say how far down the goal can be reached at all.
      if (const std::optional<double>& bound = ours->jct_by_size[2].bound_jct_s) {
        std::snprintf(buf, sizeof buf, "; no wait at ideal speed: %.2f x", *bound / base);
        jl.measured += buf;
      }
      jl.met = ratio <= 0.7;
      jl.value = ratio;
    }
    goals.push_back(jl);
    Goal q{
        "mean queue delay, >= " + std::to_string(params.large_gpus) + " GPUs <= 0.5 x slurm-tree",
        w.name, "", "<= 0.50 x", std::nullopt};
    q.unit = " x";
    if (ours->mean_queue_delay_large_s && slurm->mean_queue_delay_large_s) {
      char buf[96];
      const double base = *slurm->mean_queue_delay_large_s;
      const double ratio = base > 0 ? *ours->mean_queue_delay_large_s / base : 0;
      std::snprintf(buf, sizeof buf, "%.0f s vs %.0f s (%.2f x)", *ours->mean_queue_delay_large_s,
                    base, ratio);
      q.measured = buf;
      q.met = base > 0 ? ratio <= 0.5 : *ours->mean_queue_delay_large_s <= 0;
      if (base > 0) q.value = ratio;
    }
    goals.push_back(q);
  }
  if (w.failures) {
    Goal e{"ETTR, >= " + std::to_string(params.ettr_gpus) + " GPUs, under F", w.name,
           Fixed(ours->ettr_large, 2, 100) + " %", ">= 97 %", std::nullopt};
    e.unit = " %";
    if (ours->ettr_large) {
      e.met = *ours->ettr_large >= 0.97;
      e.value = *ours->ettr_large * 100;
    }
    goals.push_back(e);
    if (slurm != nullptr) {
      Goal es{"ETTR, >= " + std::to_string(params.ettr_gpus) + " GPUs, under F >= slurm-tree",
              w.name, "", ">= slurm-tree", std::nullopt};
      es.unit = " points";
      if (ours->ettr_large && slurm->ettr_large) {
        es.measured =
            Fixed(ours->ettr_large, 2, 100) + " % vs " + Fixed(slurm->ettr_large, 2, 100) + " %";
        es.met = *ours->ettr_large >= *slurm->ettr_large;
        es.value = (*ours->ettr_large - *slurm->ettr_large) * 100;
      }
      goals.push_back(es);
      // Churn: restarts toposched's preemptions cause, against the restarts
      // failures alone cause under slurm-tree (which never preempts).
      Goal c{"preemption restarts <= 2 x slurm-tree's failure restarts", w.name, "", "<= 2.00 x",
             std::nullopt};
      c.unit = " x";
      const int64_t failure_restarts = slurm->restarts - slurm->preemption_restarts;
      char buf[96];
      std::snprintf(buf, sizeof buf, "%lld vs %lld",
                    static_cast<long long>(ours->preemption_restarts),
                    static_cast<long long>(failure_restarts));
      c.measured = buf;
      c.met = ours->preemption_restarts <= 2 * failure_restarts;
      if (failure_restarts > 0) {
        c.value =
            static_cast<double>(ours->preemption_restarts) / static_cast<double>(failure_restarts);
        std::snprintf(buf, sizeof buf, " (%.2f x)", *c.value);
        c.measured += buf;
      }
      goals.push_back(c);
    }
  }
  Goal r{"required constraints met", w.name, Fixed(ours->required_met, 2, 100) + " %", "100 %",
         std::nullopt};
  r.unit = " %";
  if (ours->required_met) {
    r.met = *ours->required_met >= 1.0;
    r.value = *ours->required_met * 100;
  }
  goals.push_back(r);
  if (w.family == "S" && !w.failures) {
    Goal t{"replay of S (100,000 jobs) wall time, one core", w.name, Fixed(ours->wall_s, 1) + " s",
           "<= 60 s", std::nullopt};
    t.unit = " s";
    t.decimals = 1;
    t.value = ours->wall_s;
    if (w.jobs >= 100000 && ours->wall_s) {
      t.met = *ours->wall_s <= 60.0;
    } else {
      t.measured += " (" + std::to_string(w.jobs) + " jobs: not the full size)";
    }
    goals.push_back(t);
  }
  return goals;
}

std::string SeedList(const std::vector<uint64_t>& seeds) {
  return common::FormatIndexRuns(std::vector<int64_t>(seeds.begin(), seeds.end()));
}

}  // namespace

std::vector<Goal> EvaluateGoals(const Report& report) {
  std::vector<Goal> goals;
  for (const WorkloadResult& w : report.workloads) {
    if (w.seed != report.params.seed) continue;
    for (Goal& g : GoalsOf(w, report)) goals.push_back(std::move(g));
  }
  return goals;
}

std::vector<GoalAcrossSeeds> EvaluateAcrossSeeds(const Report& report) {
  std::vector<GoalAcrossSeeds> out;
  if (report.params.seeds.size() < 2) return out;
  for (const WorkloadResult& first : report.workloads) {
    if (first.seed != report.params.seed) continue;
    std::vector<std::vector<Goal>> runs;
    for (const WorkloadResult& w : report.workloads) {
      if (w.name == first.name) runs.push_back(GoalsOf(w, report));
    }
    if (runs.size() < 2) continue;  // a sensitivity variant: the first seed only
    for (size_t i = 0; i < runs.front().size(); ++i) {
      GoalAcrossSeeds a;
      a.goal = runs.front()[i];
      a.goal.measured.clear();
      a.goal.met.reset();
      a.goal.value.reset();
      double sum = 0;
      int values = 0;
      for (const std::vector<Goal>& run : runs) {
        const Goal& g = run[i];
        ++a.seeds;
        if (g.met) {
          ++a.measured;
          if (*g.met) ++a.met;
        }
        if (g.value && std::isfinite(*g.value)) {
          sum += *g.value;
          ++values;
          a.min = a.min ? std::min(*a.min, *g.value) : *g.value;
          a.max = a.max ? std::max(*a.max, *g.value) : *g.value;
        }
      }
      if (values > 0) a.mean = sum / values;
      out.push_back(std::move(a));
    }
  }
  return out;
}

core::Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  auto number = [](const std::string& s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoull(s);
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::optional<uint64_t> lo = number(part.substr(0, dash));
    const std::optional<uint64_t> hi =
        dash == std::string::npos ? lo : number(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) {
      return core::Status::Error("--seeds: '" + part +
                                 "' is not a seed or a range like 1-8 (seeds are 0 to 999999999)");
    }
    for (uint64_t s = *lo; s <= *hi; ++s) {
      if (std::find(seeds.begin(), seeds.end(), s) != seeds.end()) {
        return core::Status::Error("--seeds: seed " + std::to_string(s) + " is given twice");
      }
      if (seeds.size() >= 64) return core::Status::Error("--seeds: at most 64 seeds");
      seeds.push_back(s);
    }
    start = comma + 1;
  }
  return seeds;
}

std::string RenderText(const Report& report) {
  std::string out;
  char buf[512];
  const MachineInfo& m = report.machine;
  std::snprintf(
      buf, sizeof buf,
      "replay benchmark (../shared/BENCHMARKS.md: K, S, F, M), seed %llu%s\n"
      "commit %s%s; machine %s, %d CPUs, %s%s; started %s\n",
      static_cast<unsigned long long>(report.params.seed),
      report.params.seeds.size() > 1
          ? (" (tables; goals also over seeds " + SeedList(report.params.seeds) + ")").c_str()
          : "",
      m.git_commit.c_str(), m.git_dirty ? " (work tree dirty)" : "", m.hostname.c_str(), m.nproc,
      m.cpu_model.c_str(), m.pinned ? ", pinned to CPU 0" : "", m.started_at.c_str());
  out += buf;
  const core::FailureModel& f = report.params.failures;
  std::snprintf(buf, sizeof buf,
                "F: one interruption per %.0f GPU-hours (%.0f %% GPU/HBM, %.0f %% network, "
                "%.0f %% host), repair lognormal median %.1f h sigma %.2f; jobs checkpoint every "
                "30 min of run time (and in %.0f s when the scheduler asks)\n",
                f.gpu_hours_per_interruption, f.share_gpu * 100, f.share_network * 100,
                (1 - f.share_gpu - f.share_network) * 100,
                static_cast<double>(f.repair_median) / core::kHour, f.repair_sigma,
                static_cast<double>(report.params.sim.checkpoint_latency) / core::kSecond);
  out += buf;

  struct Row {
    std::string label;
    std::function<std::string(const core::SimReport&)> cell;
  };
  const std::string large = std::to_string(report.params.large_gpus);
  const std::string ettr = std::to_string(report.params.ettr_gpus);
  const std::vector<Row> rows = {
      {"utilization %", [](auto& r) { return Fixed(r.utilization, 1, 100); }},
      {"utilization while jobs wait %",
       [](auto& r) { return Fixed(r.utilization_backlogged, 1, 100); }},
      {"days with jobs waiting", [](auto& r) { return Fixed(r.backlog_days, 1); }},
      {"mean JCT s", [](auto& r) { return Fixed(r.mean_jct_s, 0); }},
      {"p95 JCT s", [](auto& r) { return Fixed(r.p95_jct_s, 0); }},
      {"goodput %", [](auto& r) { return Fixed(r.goodput, 1, 100); }},
      {"mean slowdown", [](auto& r) { return Fixed(r.mean_slowdown, 3); }},
      {"GPU-hours lost to slow placements",
       [](auto& r) { return Fixed(std::optional<double>(r.slow_gpu_hours), 0); }},
      {"mean JCT < 64 GPUs s", [](auto& r) { return Fixed(r.jct_by_size[0].mean_jct_s, 0); }},
      {"mean JCT 64-" + std::to_string(report.params.large_gpus - 1) + " GPUs s",
       [](auto& r) { return Fixed(r.jct_by_size[1].mean_jct_s, 0); }},
      {"mean JCT >= " + large + " GPUs s",
       [](auto& r) { return Fixed(r.jct_by_size[2].mean_jct_s, 0); }},
      {"p95 JCT >= " + large + " GPUs s",
       [](auto& r) { return Fixed(r.jct_by_size[2].p95_jct_s, 0); }},
      {"mean JCT bound >= " + large + " GPUs s",
       [](auto& r) { return Fixed(r.jct_by_size[2].bound_jct_s, 0); }},
      {"mean queue delay s", [](auto& r) { return Fixed(r.mean_queue_delay_s, 0); }},
      {"mean queue delay >= " + large + " GPUs s",
       [](auto& r) { return Fixed(r.mean_queue_delay_large_s, 0); }},
      {"ETTR >= " + ettr + " GPUs %", [](auto& r) { return Fixed(r.ettr_large, 2, 100); }},
      {"work / wall >= " + ettr + " GPUs %",
       [](auto& r) { return Fixed(r.work_ratio_large, 2, 100); }},
      {"GPU-hours lost to failures", [](auto& r) { return Fixed(r.lost_gpu_hours, 0); }},
      {"GPU-hours lost to preemption", [](auto& r) { return Fixed(r.lost_other_gpu_hours, 0); }},
      {"required constraints met %", [](auto& r) { return Fixed(r.required_met, 2, 100); }},
      {"leaf span ratio, mean", [](auto& r) { return Fixed(r.leaf_span_ratio_mean, 3); }},
      {"comm cost ratio, mean", [](auto& r) { return Fixed(r.comm_cost_ratio_mean, 3); }},
      {"completed / rejected / failed",
       [](auto& r) {
         return Count(r.completed) + "/" + Count(r.rejected) + "/" + Count(r.failed);
       }},
      {"unfinished", [](auto& r) { return Count(r.unfinished); }},
      {"cross-part placements", [](auto& r) { return Count(r.cross_part_placements); }},
      {"restarts (failures + preemptions)", [](auto& r) { return Count(r.restarts); }},
      {"preemptions (of borrowed jobs) / restarts",
       [](auto& r) {
         return Count(r.preemptions) + " (" + Count(r.preempted_borrowed) + ")/" +
                Count(r.preemption_restarts);
       }},
      {"victims' wait to restart, GPU-h",
       [](auto& r) { return Fixed(r.preempted_wait_gpu_ms / 3.6e6, 0); }},
      {"failures injected / hitting jobs",
       [](auto& r) { return Count(r.failures_injected) + "/" + Count(r.failures_hit_jobs); }},
      {"simulated days", [](auto& r) { return Fixed(r.span_days, 1); }},
      {"scheduler CPU s / simulated day",
       [](auto& r) { return Fixed(r.CpuSecondsPerSimDay(), 2); }},
      {"replay wall s", [](auto& r) { return Fixed(r.wall_s, 1); }},
      {"peak RSS MB (process)", [](auto& r) { return Fixed(r.peak_rss_mb, 0); }},
  };
  size_t label_width = 8;
  for (const Row& row : rows) label_width = std::max(label_width, row.label.size());

  for (const WorkloadResult& w : report.workloads) {
    if (w.seed != report.params.seed) continue;
    out += "\n";
    std::snprintf(buf, sizeof buf, "%s on %s (%d GPUs, %d nodes): %zu jobs, offered load %.3f",
                  w.name.c_str(), w.topology.c_str(), w.capacity_gpus, w.nodes, w.jobs,
                  w.offered_load);
    out += buf;
    if (w.family == "K") {
      std::snprintf(buf, sizeof buf, " (arrivals compressed by %.5f)", w.load_factor);
      out += buf;
    }
    out += w.failures ? ", failures F\n" : ", no failures\n";
    std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(label_width), "metric");
    out += buf;
    for (const core::SimReport& r : w.reports) {
      std::snprintf(buf, sizeof buf, "  %14s", r.stack.c_str());
      out += buf;
    }
    out += "\n";
    for (const Row& row : rows) {
      std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(label_width), row.label.c_str());
      out += buf;
      for (const core::SimReport& r : w.reports) {
        std::snprintf(buf, sizeof buf, "  %14s", row.cell(r).c_str());
        out += buf;
      }
      out += "\n";
    }
    for (const core::SimReport& r : w.reports) {
      for (const auto& [what, n] : r.anomalies) {
        out += "  note: " + r.stack + ": " + std::to_string(n) + " x " + what + "\n";
      }
    }
  }
  if (std::string table = ChangesTable(report); !table.empty()) {
    out += "\ntopology changes during the replay (first seed)\n" + table;
  }
  if (std::string table = SensitivityTable(report); !table.empty()) out += "\n" + table;
  if (std::string table = MixedTable(report); !table.empty()) {
    out += "\nM on mixed-10k against the same jobs without GPU types on " +
           std::string(kMixedTwin) + "\n" + table;
  }
  out += "\ngoals (toposched)\n";
  for (const Goal& g : report.goals) {
    const char* verdict = !g.met ? "n/a " : *g.met ? "MET " : "MISS";
    std::snprintf(buf, sizeof buf, "  %s %-14s %-56s %s (goal %s)\n", verdict, g.workload.c_str(),
                  g.figure.c_str(), g.measured.c_str(), g.target.c_str());
    out += buf;
  }
  if (!report.across_seeds.empty()) {
    out += "\ngoals (toposched) over seeds " + SeedList(report.params.seeds) +
           ": seeds that met each goal; mean, least and greatest\n";
    for (const GoalAcrossSeeds& a : report.across_seeds) {
      const Goal& g = a.goal;
      std::string spread = "-";
      if (a.mean) {
        spread = Fixed(a.mean, g.decimals) + g.unit + " (" + Fixed(a.min, g.decimals) + " to " +
                 Fixed(a.max, g.decimals) + ")";
      }
      // None measurable (the wall-time goal below its full size): the
      // figures are printed, the count is not.
      const std::string count =
          a.measured == 0 ? "n/a" : std::to_string(a.met) + "/" + std::to_string(a.seeds);
      if (a.measured == 0 && a.mean) spread += ", not a measure of the goal";
      std::snprintf(buf, sizeof buf, "  %5s %-14s %-56s %s (goal %s)\n", count.c_str(),
                    g.workload.c_str(), g.figure.c_str(), spread.c_str(), g.target.c_str());
      out += buf;
    }
  }
  std::snprintf(buf, sizeof buf, "\ntotal wall %.1f s\n", report.wall_seconds);
  out += buf;
  return out;
}

nlohmann::ordered_json ToJson(const Report& report) {
  using J = nlohmann::ordered_json;
  const Params& p = report.params;
  const MachineInfo& m = report.machine;
  J j;
  j["benchmark"] = "replay";
  j["git"] = {{"commit", m.git_commit}, {"dirty", m.git_dirty}};
  j["machine"] = {{"hostname", m.hostname},
                  {"nproc", m.nproc},
                  {"cpu_model", m.cpu_model},
                  {"pinned_cpu0", m.pinned}};
  j["started_at"] = m.started_at;
  j["seed"] = p.seed;
  j["seeds"] = p.seeds;
  const core::SyntheticOptions& s = p.synthetic;
  const core::FailureModel& f = p.failures;
  j["parameters"] = {
      {"workloads", p.workloads},
      {"policies", p.policies},
      {"quick", p.quick},
      {"threads", p.threads},
      {"large_gpus", p.large_gpus},
      {"ettr_gpus", p.ettr_gpus},
      {"target_load", p.load},
      {"tick_interval_s", static_cast<double>(p.sim.tick_interval) / core::kSecond},
      {"checkpoint_latency_s", static_cast<double>(p.sim.checkpoint_latency) / core::kSecond},
      {"checkpoints",
       p.sim.checkpoints == core::CheckpointMode::kPeriodic ? "periodic" : "on request"},
      {"K",
       {{"trace", "../shared/data/traces/kalos-llm/jobs.csv"},
        {"topology", "crux-847"},
        {"tenants", p.kalos.tenants},
        {"pp_from_gpus", p.kalos.pp_from_gpus},
        {"pp", p.kalos.pp},
        {"moe_every", p.kalos.moe_every},
        {"ep", p.kalos.ep}}},
      {"S",
       {{"jobs", s.jobs},
        {"topologies", {"meta-24k", "nvl72-64k"}},
        {"sizes_gpus", {s.min_gpus, s.max_gpus}},
        {"size_exponent", s.size_exponent},
        {"median_duration_small_s", static_cast<double>(s.median_duration_small) / 1000},
        {"duration_size_exponent", s.duration_size_exponent},
        {"duration_sigma", s.duration_sigma},
        {"moe_share", s.moe_share},
        {"moe_from_gpus", s.moe_from_gpus},
        {"tenant_shares", {0.25, 0.20, 0.15, 0.10, 0.10, 0.08, 0.07, 0.05}}}},
      {"M",
       {{"jobs", p.mixed.jobs},
        {"topologies", {"mixed-10k", kMixedTwin}},
        {"one_type_share", p.mixed.one_type_share},
        {"several_types_share", p.mixed.several_types_share},
        {"tenants", p.mixed.tenants},
        {"pp_from_gpus", p.mixed.pp_from_gpus},
        {"pp", p.mixed.pp},
        {"moe_share", p.mixed.moe_share},
        {"ep", p.mixed.ep},
        {"median_duration_small_s", static_cast<double>(p.mixed.median_duration_small) / 1000},
        {"duration_size_exponent", p.mixed.duration_size_exponent},
        {"duration_sigma", p.mixed.duration_sigma}}},
      {"F",
       {{"model", "llama3"},
        {"gpu_hours_per_interruption", f.gpu_hours_per_interruption},
        {"share_gpu", f.share_gpu},
        {"share_network", f.share_network},
        {"repair_median_s", static_cast<double>(f.repair_median) / 1000},
        {"repair_sigma", f.repair_sigma}}},
  };
  J workloads = J::array();
  for (const WorkloadResult& w : report.workloads) {
    J wj;
    wj["name"] = w.name;
    wj["family"] = w.family;
    wj["failures"] = w.failures;
    wj["topology"] = w.topology;
    wj["capacity_gpus"] = w.capacity_gpus;
    wj["jobs"] = w.jobs;
    wj["offered_load"] = Opt(w.offered_load);
    wj["load_factor"] = w.load_factor;
    wj["seed"] = w.seed;
    J policies = J::object();
    for (const core::SimReport& r : w.reports) {
      J pj;
      pj["utilization"] = Opt(r.utilization);
      pj["utilization_backlogged"] = Opt(r.utilization_backlogged);
      pj["backlog_days"] = Opt(r.backlog_days);
      pj["goodput"] = Opt(r.goodput);
      pj["mean_jct_s"] = Opt(r.mean_jct_s);
      pj["p95_jct_s"] = Opt(r.p95_jct_s);
      pj["speed_model"] = r.speed_model;
      pj["cross_hbd_scale"] = r.cross_hbd_scale;
      pj["mean_slowdown"] = Opt(r.mean_slowdown);
      pj["slow_placement_gpu_hours"] = r.slow_gpu_hours;
      pj["jct_by_size"] = common::JctBySizeToJson(r);
      pj["mean_queue_delay_s"] = Opt(r.mean_queue_delay_s);
      pj["mean_queue_delay_large_s"] = Opt(r.mean_queue_delay_large_s);
      pj["ettr_large"] = Opt(r.ettr_large);
      pj["work_ratio_large"] = Opt(r.work_ratio_large);
      pj["required_met"] = Opt(r.required_met);
      pj["lost_gpu_hours"] = Opt(r.lost_gpu_hours);
      pj["lost_preemption_gpu_hours"] = Opt(r.lost_other_gpu_hours);
      pj["leaf_span_ratio_mean"] = Opt(r.leaf_span_ratio_mean);
      pj["comm_cost_ratio_mean"] = Opt(r.comm_cost_ratio_mean);
      pj["cpu_s"] = Opt(r.cpu_s);
      pj["cpu_s_per_sim_day"] = Opt(r.CpuSecondsPerSimDay());
      pj["wall_s"] = Opt(r.wall_s);
      pj["peak_rss_mb"] = Opt(r.peak_rss_mb);
      pj["allocated_gpu_hours"] = Opt(r.allocated_gpu_hours);
      pj["span_days"] = Opt(r.span_days);
      pj["preempted_wait_gpu_hours"] = r.preempted_wait_gpu_ms / 3.6e6;
      pj["counts"] = {{"completed", r.completed},
                      {"rejected", r.rejected},
                      {"failed", r.failed},
                      {"cancelled", r.cancelled},
                      {"unfinished", r.unfinished},
                      {"large_jobs", r.large_jobs},
                      {"ettr_jobs", r.ettr_jobs},
                      {"placements", r.placements},
                      {"restarts", r.restarts},
                      {"stops", r.stops},
                      {"checkpoints", r.checkpoints},
                      {"failures_injected", r.failures_injected},
                      {"failures_absorbed", r.failures_absorbed},
                      {"failures_hit_jobs", r.failures_hit_jobs},
                      {"preemptions", r.preemptions},
                      {"preempted_borrowed", r.preempted_borrowed},
                      {"preempted_gpus", r.preempted_gpus},
                      {"preemption_restarts", r.preemption_restarts},
                      {"rank_exit_fallbacks", r.rank_exit_fallbacks},
                      {"cross_part_placements", r.cross_part_placements},
                      {"events", r.events}};
      if (!r.job_results.empty()) {
        pj["counts"]["refused_run_by_another_stack"] = RefusedButRunElsewhere(w, r);
      }
      if (!r.topology_changes.empty()) {
        J changes = J::array();
        for (const core::SimTopologyChangeResult& c : r.topology_changes) {
          changes.push_back(
              {{"at_s", static_cast<double>(c.at) / core::kSecond},
               {"applied_s",
                c.applied < 0 ? J(nullptr) : J(static_cast<double>(c.applied) / core::kSecond)},
               {"nodes_added", c.nodes_added},
               {"nodes_removed", c.nodes_removed},
               {"capacity_before", c.capacity_before},
               {"capacity_after", c.capacity_after},
               {"jobs_moved", c.jobs_moved},
               {"moved_completed", c.moved_completed},
               {"moved_failed", c.moved_failed},
               {"fairshare_kept", c.fairshare_kept}});
        }
        pj["topology_changes"] = std::move(changes);
      }
      J anomalies = J::object();
      for (const auto& [what, n] : r.anomalies) anomalies[what] = n;
      pj["anomalies"] = std::move(anomalies);
      policies[r.stack] = std::move(pj);
    }
    wj["policies"] = std::move(policies);
    workloads.push_back(std::move(wj));
  }
  j["workloads"] = std::move(workloads);
  J goals = J::array();
  for (const Goal& g : report.goals) {
    goals.push_back({{"figure", g.figure},
                     {"workload", g.workload},
                     {"measured", g.measured},
                     {"target", g.target},
                     {"met", g.met ? J(*g.met) : J(nullptr)},
                     {"value", Opt(g.value)}});
  }
  j["goals"] = std::move(goals);
  J across = J::array();
  for (const GoalAcrossSeeds& a : report.across_seeds) {
    across.push_back({{"figure", a.goal.figure},
                      {"workload", a.goal.workload},
                      {"target", a.goal.target},
                      {"seeds", a.seeds},
                      {"measured", a.measured},
                      {"met", a.met},
                      {"unit", a.goal.unit.empty() ? "" : a.goal.unit.substr(1)},
                      {"mean", Opt(a.mean)},
                      {"min", Opt(a.min)},
                      {"max", Opt(a.max)}});
  }
  j["goals_across_seeds"] = std::move(across);
  j["wall_seconds"] = report.wall_seconds;
  return j;
}

}  // namespace topo::bench
