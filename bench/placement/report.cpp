#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

namespace topo::bench {

namespace {

// --- goals of ../shared/BENCHMARKS.md ---
constexpr int kSpanFillPct = 60;
constexpr double kSpanGoal = 1.1;
constexpr double kSpanVsSlurmGoal = 0.8;
constexpr const char* kSpanBaseline = "slurm-tree";
constexpr const char* kOurs = "toposched";
constexpr const char* kGangTopology = "cm384-166k";
constexpr int kGangGpus = 16384;
constexpr int kGangFillPct = 60;
constexpr double kGangP99GoalUs = 20000;
constexpr int kSmallGpus = 8;
constexpr double kSmallP99GoalUs = 50;

std::string Printf(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string FmtUs(double us) {
  if (us < 10) return Printf("%.2f", us);
  if (us < 1000) return Printf("%.1f", us);
  return Printf("%.0f", us);
}

std::string FmtRatio(const std::optional<double>& v) { return v ? Printf("%.3f", *v) : "-"; }

std::string FmtCount(double v) {
  if (std::abs(v - std::round(v)) < 1e-9) return Printf("%.0f", v);
  return Printf("%.1f", v);
}

std::string Truncate(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

std::string Outcomes(const CellResult& c) {
  return std::to_string(c.placed) + "/" + std::to_string(c.busy) + "/" +
         std::to_string(c.infeasible);
}

std::string CellName(const CellResult& c) {
  return c.topology + " " + std::to_string(c.fill_pct) + "% " + std::to_string(c.gpus) + " " +
         c.layout;
}

struct Table {
  std::vector<std::string> header;
  std::vector<bool> right;  // right-align the column in text output
  std::vector<std::vector<std::string>> rows;
};

struct Block {
  std::string heading;
  std::vector<std::string> lines;  // before the table
  std::optional<Table> table;
  std::vector<std::string> notes;  // after the table
};

const CellResult* Find(const std::vector<CellResult>& cells, const std::string& topology,
                       int fill_pct, int gpus, const std::string& layout,
                       const std::string& policy) {
  for (const CellResult& c : cells) {
    if (c.topology == topology && c.fill_pct == fill_pct && c.gpus == gpus && c.layout == layout &&
        c.policy == policy && !c.skipped) {
      return &c;
    }
  }
  return nullptr;
}

// Consecutive cells of one topology x fill x size x layout (all policies).
std::vector<std::vector<const CellResult*>> GroupByLayout(const std::vector<CellResult>& cells) {
  std::vector<std::vector<const CellResult*>> groups;
  for (const CellResult& c : cells) {
    if (!groups.empty()) {
      const CellResult& g = *groups.back().front();
      if (g.topology == c.topology && g.fill_pct == c.fill_pct && g.gpus == c.gpus &&
          g.layout == c.layout) {
        groups.back().push_back(&c);
        continue;
      }
    }
    groups.push_back({&c});
  }
  return groups;
}

// --- the goal summary, computed once for text, Markdown and JSON ---

struct SpanRow {
  std::string topology;
  int gpus = 0;
  std::string layout;
  double ours = 0;
  double baseline = 0;
  double ratio = 0;
  std::optional<double> bound;  // FilledLeafBound
};

struct Summary {
  bool span_measured = false;
  std::vector<SpanRow> span;
  std::vector<std::string> span_not_compared;
  int span_within_goal = 0;
  double span_worst = 0;
  std::string span_worst_where;
  double ratio_geomean = 0;
  int ratio_within_goal = 0;
  int baseline_suboptimal = 0;  // cells where the baseline is above 1.0
  double ratio_geomean_suboptimal = 0;
  int ratio_within_goal_suboptimal = 0;
  bool span_goal_met = false;
  bool ratio_goal_met = false;
  int at_bound = 0;  // cells where ours equals the filled-state bound
  int with_bound = 0;
  double worst_vs_bound = 0;

  std::vector<const CellResult*> gang;  // ours, cm384-166k 60 % 16384
  bool gang_goal_met = false;
  std::vector<std::vector<const CellResult*>> small;  // all policies, 8 GPUs
  double small_worst = 0;
  std::string small_worst_where;
  bool small_measured = false;
  bool small_goal_met = false;

  std::vector<std::string> violations;
  std::vector<std::string> nondeterminism;
  std::vector<std::string> disagreements;
};

Summary Summarize(const Report& report) {
  Summary s;
  const std::vector<CellResult>& cells = report.cells;

  // Leaf span at 60 % fill, ours vs the baseline.
  double log_sum = 0, log_sum_sub = 0;
  for (const CellResult& c : cells) {
    if (c.skipped || c.policy != kOurs || c.fill_pct != kSpanFillPct) continue;
    s.span_measured = true;
    const CellResult* b = Find(cells, c.topology, c.fill_pct, c.gpus, c.layout, kSpanBaseline);
    if (b == nullptr) continue;
    if (!c.leaf_span_ratio || !b->leaf_span_ratio) {
      s.span_not_compared.push_back(CellName(c) + ": " + kOurs + " " + Outcomes(c) + ", " +
                                    kSpanBaseline + " " + Outcomes(*b) + " (placed/busy/infeas)");
      continue;
    }
    SpanRow row{c.topology,          c.gpus, c.layout,        *c.leaf_span_ratio,
                *b->leaf_span_ratio, 0,      c.leaf_bound_now};
    row.ratio = row.ours / row.baseline;
    if (row.ours <= kSpanGoal + 1e-9) ++s.span_within_goal;
    if (row.ours > s.span_worst) {
      s.span_worst = row.ours;
      s.span_worst_where = CellName(c);
    }
    log_sum += std::log(row.ratio);
    if (row.ratio <= kSpanVsSlurmGoal + 1e-9) ++s.ratio_within_goal;
    if (row.baseline > 1.0 + 1e-9) {
      ++s.baseline_suboptimal;
      log_sum_sub += std::log(row.ratio);
      if (row.ratio <= kSpanVsSlurmGoal + 1e-9) ++s.ratio_within_goal_suboptimal;
    }
    if (row.bound) {
      ++s.with_bound;
      const double vs = row.ours / *row.bound;
      s.worst_vs_bound = std::max(s.worst_vs_bound, vs);
      if (vs <= 1.0 + 1e-9) ++s.at_bound;
    }
    s.span.push_back(row);
  }
  if (!s.span.empty()) {
    s.ratio_geomean = std::exp(log_sum / static_cast<double>(s.span.size()));
    s.span_goal_met = s.span_within_goal == static_cast<int>(s.span.size());
    s.ratio_goal_met = s.ratio_geomean <= kSpanVsSlurmGoal + 1e-9;
  }
  if (s.baseline_suboptimal > 0)
    s.ratio_geomean_suboptimal = std::exp(log_sum_sub / s.baseline_suboptimal);

  // Latency goals.
  s.gang_goal_met = true;
  for (const CellResult& c : cells) {
    if (c.skipped || c.policy != kOurs || c.topology != kGangTopology || c.gpus != kGangGpus ||
        c.fill_pct != kGangFillPct) {
      continue;
    }
    s.gang.push_back(&c);
    if (c.placed == 0 || c.latency.p99_us > kGangP99GoalUs) s.gang_goal_met = false;
  }
  if (s.gang.empty()) s.gang_goal_met = false;
  s.small_goal_met = true;
  for (const auto& group : GroupByLayout(cells)) {
    const CellResult& g = *group.front();
    if (g.skipped || g.gpus != kSmallGpus) continue;
    s.small.push_back(group);
    for (const CellResult* c : group) {
      if (c->policy != kOurs) continue;
      s.small_measured = true;
      if (c->latency.p99_us > s.small_worst) {
        s.small_worst = c->latency.p99_us;
        s.small_worst_where = CellName(*c);
      }
      if (c->latency.p99_us > kSmallP99GoalUs) s.small_goal_met = false;
    }
  }
  if (!s.small_measured) s.small_goal_met = false;

  // Checks that would be bugs, and outcome disagreements.
  for (const CellResult& c : cells) {
    if (c.skipped) continue;
    if (c.nondeterministic > 0) {
      s.nondeterminism.push_back(CellName(c) + " " + c.policy + ": " +
                                 std::to_string(c.nondeterministic) + " of " +
                                 std::to_string(c.reps) + " reps differed");
    }
    if (c.policy != kOurs || c.placed == 0) continue;
    std::string what;
    if (c.required_met && *c.required_met < 1.0)
      what += " required_met " + FmtRatio(c.required_met);
    if (c.tp_in_hbd && *c.tp_in_hbd < 1.0) what += " tp_in_hbd " + FmtRatio(c.tp_in_hbd);
    if (c.layout == "moe" && c.ep_in_hbd && *c.ep_in_hbd < 1.0) {
      what += " ep_in_hbd " + FmtRatio(c.ep_in_hbd);
    }
    if (!what.empty()) s.violations.push_back(CellName(c) + ":" + what);
  }
  for (const auto& group : GroupByLayout(cells)) {
    if (group.front()->skipped) continue;
    bool differ = false;
    for (const CellResult* c : group) differ = differ || c->placed != group.front()->placed;
    if (!differ) continue;
    std::string line = CellName(*group.front()) + ":";
    for (const CellResult* c : group) {
      line += " " + c->policy + " " + Outcomes(*c);
      const std::string& why = c->infeasible > 0 ? c->infeasible_reason : c->busy_reason;
      if (!why.empty()) line += " (" + Truncate(why, 140) + ")";
      line += ";";
    }
    line.pop_back();
    s.disagreements.push_back(line);
  }
  return s;
}

const char* MetText(bool met) { return met ? "MET" : "NOT MET"; }

std::vector<Block> MakeBlocks(const Report& report) {
  const Params& p = report.params;
  const MachineInfo& m = report.machine;
  std::vector<Block> blocks;

  Block head;
  head.heading = "Workload P: placement benchmark";
  head.lines.push_back("commit " + m.git_commit + (m.git_dirty ? " (work tree dirty)" : "") +
                       ", started " + m.started_at + ", wall " +
                       Printf("%.1f", report.wall_seconds) + " s");
  head.lines.push_back("machine " + m.hostname + ", " + std::to_string(m.nproc) + " CPUs, " +
                       m.cpu_model + (m.pinned ? ", pinned to CPU 0" : ", not pinned"));
  head.lines.push_back(
      "seed " + std::to_string(p.seed) + ", " + std::to_string(p.fill_states) +
      " fill states per topology x fill (one at 0 %); reps per cell: " + std::to_string(p.reps) +
      " (< " + std::to_string(Params::kLargeFromGpus) + " GPUs), " + std::to_string(p.reps_large) +
      " (" + std::to_string(Params::kLargeFromGpus) + " to " +
      std::to_string(Params::kHugeFromGpus - 1) + "), " + std::to_string(p.reps_huge) +
      " (>= " + std::to_string(Params::kHugeFromGpus) + ")" + (p.quick ? "; QUICK grid" : ""));
  head.lines.push_back(
      "layouts: dense = TP 8, PP min(16, gpus/64) from 128 GPUs (else 1), DP the rest; moe = TP 8 "
      "x EP 8 (64-GPU EP block required in one HBD), PP 4 from 2048 GPUs, DP the rest; "
      "moe-ep-pref = moe with EP preferred, only where the HBD is smaller than the EP block");
  head.lines.push_back(
      "latency: steady_clock around Placer::Place only, nearest-rank p50/p99, microseconds; reps "
      "cycle over the fill states after one untimed placement per state; metrics are means over "
      "placed reps (core::Evaluate); outcomes are placed/busy/infeasible reps");
  for (const TopologyInfo& t : report.topologies) {
    std::string line = t.name + ": " + std::to_string(t.gpus) + " GPUs, " +
                       std::to_string(t.nodes) + " nodes, HBD " + std::to_string(t.hbd_gpus) +
                       " GPUs; achieved fill";
    for (const FillInfo& f : t.fills) {
      double mean = 0;
      for (double b : f.busy_share) mean += b;
      mean /= static_cast<double>(f.busy_share.size());
      line += " " + std::to_string(f.fill_pct) + "%->" + Printf("%.1f", 100 * mean) + "%";
    }
    head.lines.push_back(line);
  }
  blocks.push_back(std::move(head));

  Block main;
  main.heading = "Cells";
  Table t;
  t.header = {"topology",  "fill",      "gpus",     "layout",    "parallelism", "policy",
              "reps",      "P/B/I",     "p50 us",   "p99 us",    "max us",      "tp_in_hbd",
              "ep_in_hbd", "leaf_span", "pod_span", "comm_cost", "req_met"};
  t.right = {false, true, true, false, false, false, true, true, true,
             true,  true, true, true,  true,  true,  true, true};
  for (const CellResult& c : report.cells) {
    if (c.skipped) {
      t.rows.push_back({c.topology, std::to_string(c.fill_pct) + "%", std::to_string(c.gpus),
                        c.layout, "-", "-", "-", "skipped: " + c.skip_reason, "", "", "", "", "",
                        "", "", "", ""});
      continue;
    }
    t.rows.push_back({c.topology, std::to_string(c.fill_pct) + "%", std::to_string(c.gpus),
                      c.layout, c.parallelism, c.policy, std::to_string(c.reps), Outcomes(c),
                      FmtUs(c.latency.p50_us), FmtUs(c.latency.p99_us), FmtUs(c.latency.max_us),
                      FmtRatio(c.tp_in_hbd), FmtRatio(c.ep_in_hbd), FmtRatio(c.leaf_span_ratio),
                      FmtRatio(c.pod_span_ratio), FmtRatio(c.comm_cost_ratio),
                      FmtRatio(c.required_met)});
  }
  main.table = std::move(t);
  blocks.push_back(std::move(main));

  const Summary s = Summarize(report);
  Block span;
  span.heading = "Summary: leaf_span_ratio at 60 % fill, toposched vs slurm-tree";
  if (!s.span_measured) {
    span.lines.push_back("not measured (60 % fill or toposched not in the grid)");
  } else {
    Table st;
    st.header = {"topology",   "gpus",  "layout",    "toposched",
                 "slurm-tree", "ratio", "bound now", "toposched/bound"};
    st.right = {false, true, false, true, true, true, true, true};
    for (const SpanRow& r : s.span) {
      st.rows.push_back({r.topology, std::to_string(r.gpus), r.layout, Printf("%.3f", r.ours),
                         Printf("%.3f", r.baseline), Printf("%.3f", r.ratio), FmtRatio(r.bound),
                         r.bound ? Printf("%.3f", r.ours / *r.bound) : "-"});
    }
    span.lines.push_back(
        "bound now: the fewest leaves of the filled states (whole free nodes, counted in the "
        "job's required HBD blocks) that could hold the job, over the empty-cluster minimum of "
        "the metric; a constraint-honouring placement cannot go below it, the baselines (which "
        "ignore TP/EP constraints) can");
    span.table = std::move(st);
    const int n = static_cast<int>(s.span.size());
    span.notes.push_back(
        "goal toposched leaf_span_ratio <= 1.1: " + std::string(MetText(s.span_goal_met)) + " (" +
        std::to_string(s.span_within_goal) + " of " + std::to_string(n) + " cells; worst " +
        Printf("%.3f", s.span_worst) + " at " + s.span_worst_where + ")");
    span.notes.push_back(
        "goal toposched <= 0.8 x slurm-tree (geometric mean of the ratio over the cells): " +
        std::string(MetText(s.ratio_goal_met)) + " (geomean " + Printf("%.3f", s.ratio_geomean) +
        "; " + std::to_string(s.ratio_within_goal) + " of " + std::to_string(n) +
        " cells <= 0.8; where slurm-tree is above 1.0: " + std::to_string(s.baseline_suboptimal) +
        " cells, geomean " + Printf("%.3f", s.ratio_geomean_suboptimal) + ", " +
        std::to_string(s.ratio_within_goal_suboptimal) + " <= 0.8)");
    span.notes.push_back("toposched at the filled-state bound in " + std::to_string(s.at_bound) +
                         " of " + std::to_string(s.with_bound) + " cells (worst toposched/bound " +
                         Printf("%.3f", s.worst_vs_bound) +
                         "); the empty-cluster minimum of the metric is out of reach at 60 % "
                         "fill wherever the bound is above 1");
    for (const std::string& l : s.span_not_compared) span.notes.push_back("not compared: " + l);
  }
  blocks.push_back(std::move(span));

  Block lat;
  lat.heading = "Summary: latency goals (toposched, one core)";
  if (s.gang.empty()) {
    lat.lines.push_back("16,384-GPU gang on cm384-166k at 60 %: not measured in this grid");
  }
  for (const CellResult* c : s.gang) {
    lat.lines.push_back("16,384-GPU gang on cm384-166k at 60 % (" + c->layout + ", " +
                        c->parallelism + "): p99 " + FmtUs(c->latency.p99_us) +
                        " us vs goal 20,000 us over " + std::to_string(c->reps) + " reps, " +
                        std::to_string(c->placed) + " placed -> " +
                        MetText(c->placed > 0 && c->latency.p99_us <= kGangP99GoalUs));
  }
  if (!s.gang.empty()) {
    lat.lines.push_back(std::string("goal 16,384-GPU gang p99 <= 20 ms: ") +
                        MetText(s.gang_goal_met));
  }
  if (s.small_measured) {
    lat.lines.push_back(std::string("goal 8-GPU job p99 <= 50 us: ") + MetText(s.small_goal_met) +
                        " (worst toposched p99 " + FmtUs(s.small_worst) + " us at " +
                        s.small_worst_where + ")");
    Table lt;
    lt.header = {"topology", "fill", "layout"};
    lt.right = {false, true, false};
    for (const CellResult* c : s.small.front()) {
      lt.header.push_back(c->policy + " p99 us");
      lt.right.push_back(true);
    }
    for (const auto& group : s.small) {
      std::vector<std::string> row = {group.front()->topology,
                                      std::to_string(group.front()->fill_pct) + "%",
                                      group.front()->layout};
      for (const CellResult* c : group) row.push_back(FmtUs(c->latency.p99_us));
      lt.rows.push_back(std::move(row));
    }
    lat.table = std::move(lt);
  } else {
    lat.lines.push_back("8-GPU job: not measured in this grid");
  }
  blocks.push_back(std::move(lat));

  Block checks;
  checks.heading = "Summary: checks";
  if (s.violations.empty()) {
    checks.lines.push_back("toposched required-constraint violations: none");
  }
  for (const std::string& v : s.violations) {
    checks.lines.push_back("BUG? toposched violated a required constraint: " + v);
  }
  if (s.nondeterminism.empty()) checks.lines.push_back("nondeterministic answers: none");
  for (const std::string& v : s.nondeterminism)
    checks.lines.push_back("BUG? nondeterministic: " + v);
  checks.lines.push_back("cells where the policies' placed counts differ (P/B/I, first reason): " +
                         std::to_string(s.disagreements.size()));
  for (const std::string& d : s.disagreements) checks.lines.push_back(d);
  blocks.push_back(std::move(checks));

  Block hist;
  hist.heading = "Tier histograms";
  hist.lines.push_back(
      "mean groups per widest tier spanned, placed reps only; each column lists tiers innermost "
      "first as in the tiers column; '-' where the kind has no groups");
  Table ht;
  ht.header = {"topology", "fill", "gpus", "layout", "policy", "tiers", "tp", "ep", "pp", "dp"};
  ht.right = {false, true, true, false, false, false, false, false, false, false};
  std::map<std::string, std::string> tier_names;
  for (const TopologyInfo& ti : report.topologies) {
    std::string names;
    for (const std::string& n : ti.tiers) names += (names.empty() ? "" : "/") + n;
    tier_names[ti.name] = names;
  }
  for (const CellResult& c : report.cells) {
    if (c.skipped || c.placed == 0) continue;
    std::vector<std::string> row = {c.topology,
                                    std::to_string(c.fill_pct) + "%",
                                    std::to_string(c.gpus),
                                    c.layout,
                                    c.policy,
                                    tier_names[c.topology]};
    for (core::GroupKind k :
         {core::GroupKind::kTp, core::GroupKind::kEp, core::GroupKind::kPp, core::GroupKind::kDp}) {
      const std::vector<double>& h = c.tier_histogram[static_cast<int>(k)];
      double total = 0;
      std::string cell;
      for (double v : h) {
        total += v;
        cell += (cell.empty() ? "" : "/") + FmtCount(v);
      }
      row.push_back(total > 0 ? cell : "-");
    }
    ht.rows.push_back(std::move(row));
  }
  hist.table = std::move(ht);
  blocks.push_back(std::move(hist));
  return blocks;
}

std::string RenderTable(const Table& t, bool markdown) {
  std::ostringstream out;
  if (markdown) {
    auto row = [&](const std::vector<std::string>& cells) {
      out << "|";
      for (const std::string& c : cells) {
        std::string escaped;
        for (char ch : c) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
        out << " " << escaped << " |";
      }
      out << "\n";
    };
    row(t.header);
    out << "|";
    for (size_t i = 0; i < t.header.size(); ++i) out << (t.right[i] ? "---:|" : "---|");
    out << "\n";
    for (const auto& r : t.rows) row(r);
    return out.str();
  }
  std::vector<size_t> width(t.header.size(), 0);
  for (size_t i = 0; i < t.header.size(); ++i) width[i] = t.header[i].size();
  // Skipped rows carry their reason in one long cell; leave it out of the
  // widths so that it does not stretch its column.
  for (const auto& r : t.rows) {
    if (r.size() > 7 && r[7].rfind("skipped", 0) == 0) continue;
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  }
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string& c = cells[i];
      const size_t pad = width[i] > c.size() ? width[i] - c.size() : 0;
      if (i > 0) line += "  ";
      line += t.right[i] ? std::string(pad, ' ') + c : c + std::string(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  row(t.header);
  for (const auto& r : t.rows) row(r);
  return out.str();
}

std::string Render(const Report& report, bool markdown) {
  std::ostringstream out;
  bool first = true;
  for (const Block& b : MakeBlocks(report)) {
    if (!first) out << "\n";
    if (markdown) {
      out << (first ? "# " : "## ") << b.heading << "\n\n";
      for (const std::string& l : b.lines) out << "- " << l << "\n";
      if (!b.lines.empty()) out << "\n";
      if (b.table) out << RenderTable(*b.table, true) << "\n";
      for (const std::string& l : b.notes) out << "- " << l << "\n";
    } else {
      out << "== " << b.heading << " ==\n";
      for (const std::string& l : b.lines) out << l << "\n";
      if (b.table) out << RenderTable(*b.table, false);
      for (const std::string& l : b.notes) out << l << "\n";
    }
    first = false;
  }
  return out.str();
}

nlohmann::json OptJson(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string RenderText(const Report& report) { return Render(report, false); }
std::string RenderMarkdown(const Report& report) { return Render(report, true); }

nlohmann::json ToJson(const Report& report) {
  using nlohmann::json;
  const Params& p = report.params;
  const MachineInfo& m = report.machine;
  json j;
  j["benchmark"] = "placement";
  j["workload"] = "P";
  j["git"] = {{"commit", m.git_commit}, {"dirty", m.git_dirty}};
  j["machine"] = {{"hostname", m.hostname},
                  {"nproc", m.nproc},
                  {"cpu_model", m.cpu_model},
                  {"pinned_to_cpu0", m.pinned}};
  j["started_at"] = m.started_at;
  j["wall_seconds"] = report.wall_seconds;
  j["seed"] = p.seed;
  j["parameters"] = {{"topologies", p.topologies},
                     {"fills_pct", p.fills},
                     {"sizes_gpus", p.sizes},
                     {"policies", p.policies},
                     {"reps", p.reps},
                     {"reps_large", p.reps_large},
                     {"reps_huge", p.reps_huge},
                     {"reps_large_from_gpus", Params::kLargeFromGpus},
                     {"reps_huge_from_gpus", Params::kHugeFromGpus},
                     {"fill_states", p.fill_states},
                     {"quick", p.quick}};
  j["method"] = {
      {"latency",
       "steady_clock around Placer::Place only; nearest-rank percentiles in microseconds; one "
       "untimed placement per fill state first, then reps cycling over the states"},
      {"metrics", "core::Evaluate, means over placed reps"},
      {"layouts",
       {{"dense", "TP 8; PP = min(16, gpus/64) for gpus >= 128, else 1; DP the rest"},
        {"moe", "TP 8 x EP 8 (EP block required in one HBD); PP 4 for gpus >= 2048; DP the rest"},
        {"moe-ep-pref",
         "moe with the EP constraint preferred; only where the HBD is smaller than the EP "
         "block"}}}};
  json topos = json::array();
  for (const TopologyInfo& t : report.topologies) {
    json fills = json::array();
    for (const FillInfo& f : t.fills) {
      fills.push_back({{"fill_pct", f.fill_pct},
                       {"seeds", f.seeds},
                       {"busy_share", f.busy_share},
                       {"build_seconds", f.fill_seconds}});
    }
    topos.push_back({{"name", t.name},
                     {"gpus", t.gpus},
                     {"nodes", t.nodes},
                     {"hbd_gpus", t.hbd_gpus},
                     {"tiers", t.tiers},
                     {"fills", fills}});
  }
  j["topologies"] = topos;
  json cells = json::array();
  for (const CellResult& c : report.cells) {
    json cell = {
        {"topology", c.topology}, {"fill_pct", c.fill_pct}, {"gpus", c.gpus}, {"layout", c.layout}};
    if (c.skipped) {
      cell["skipped"] = true;
      cell["skip_reason"] = c.skip_reason;
      cells.push_back(cell);
      continue;
    }
    cell["parallelism"] = c.parallelism;
    cell["policy"] = c.policy;
    cell["reps"] = c.reps;
    cell["outcomes"] = {{"placed", c.placed}, {"busy", c.busy}, {"infeasible", c.infeasible}};
    if (!c.busy_reason.empty()) cell["busy_reason"] = c.busy_reason;
    if (!c.infeasible_reason.empty()) cell["infeasible_reason"] = c.infeasible_reason;
    cell["latency_us"] = {{"p50", c.latency.p50_us},
                          {"p99", c.latency.p99_us},
                          {"max", c.latency.max_us},
                          {"mean", c.latency.mean_us}};
    cell["metrics"] = {{"tp_in_hbd", OptJson(c.tp_in_hbd)},
                       {"ep_in_hbd", OptJson(c.ep_in_hbd)},
                       {"leaf_span_ratio", OptJson(c.leaf_span_ratio)},
                       {"pod_span_ratio", OptJson(c.pod_span_ratio)},
                       {"comm_cost_ratio", OptJson(c.comm_cost_ratio)},
                       {"required_met", OptJson(c.required_met)}};
    json hist = json::object();
    for (core::GroupKind k : core::kAllGroupKinds) {
      const std::vector<double>& h = c.tier_histogram[static_cast<int>(k)];
      if (!h.empty()) hist[std::string(core::GroupKindName(k))] = h;
    }
    cell["tier_histogram"] = hist;
    cell["nondeterministic"] = c.nondeterministic;
    cell["leaf_bound_now"] = OptJson(c.leaf_bound_now);
    cells.push_back(cell);
  }
  j["cells"] = cells;

  const Summary s = Summarize(report);
  json span = json::array();
  for (const SpanRow& r : s.span) {
    span.push_back({{"topology", r.topology},
                    {"gpus", r.gpus},
                    {"layout", r.layout},
                    {"toposched", r.ours},
                    {"slurm_tree", r.baseline},
                    {"ratio", r.ratio},
                    {"bound_now", OptJson(r.bound)}});
  }
  json gang = json::array();
  for (const CellResult* c : s.gang) {
    gang.push_back({{"layout", c->layout},
                    {"p99_us", c->latency.p99_us},
                    {"placed", c->placed},
                    {"reps", c->reps}});
  }
  j["summary"] = {
      {"leaf_span_60pct",
       {{"measured", s.span_measured},
        {"cells", span},
        {"not_compared", s.span_not_compared},
        {"goal_toposched_le_1_1", s.span_goal_met},
        {"worst_toposched", s.span_worst},
        {"ratio_geomean", s.ratio_geomean},
        {"goal_ratio_le_0_8", s.ratio_goal_met},
        {"ratio_geomean_where_slurm_above_1", s.ratio_geomean_suboptimal},
        {"toposched_at_filled_bound", s.at_bound},
        {"cells_with_filled_bound", s.with_bound},
        {"worst_toposched_over_filled_bound", s.worst_vs_bound}}},
      {"gang_16384_cm384_60pct", {{"cells", gang}, {"goal_p99_le_20ms", s.gang_goal_met}}},
      {"small_8gpu",
       {{"measured", s.small_measured},
        {"worst_toposched_p99_us", s.small_worst},
        {"worst_where", s.small_worst_where},
        {"goal_p99_le_50us", s.small_goal_met}}},
      {"toposched_violations", s.violations},
      {"nondeterminism", s.nondeterminism},
      {"outcome_disagreements", s.disagreements}};
  return j;
}

}  // namespace topo::bench
