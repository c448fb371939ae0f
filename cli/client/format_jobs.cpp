// Job views for people (format.hpp): `topo queue`'s table and `topo show`'s
// page, from the API's typed job view (common/user_api.hpp), read by the
// same reader the daemon's answers are checked with.

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <string_view>
#include <utility>

#include "client/format.hpp"
#include "client/format_internal.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/render.hpp"

namespace topo::cli {

using format_internal::KeyValue;
using format_internal::Plural;
using format_internal::Truncate;

namespace {

// Ranks shown by `topo show` without --ranks.
constexpr size_t kRanksShown = 16;
// Node groups listed per placement level before "... and N more".
constexpr size_t kGroupsShown = 6;
constexpr size_t kNameWidth = 32;

std::string Safe(std::string_view s) { return TerminalSafe(s); }

std::string TimeText(const std::optional<int64_t>& ms) {
  return ms ? FormatTime(nlohmann::json(*ms)) : std::string("-");
}

// "14:05", or "2026-01-28 14:05" when time_ms is on another local day than
// now_ms.
std::string ClockTime(int64_t time_ms, int64_t now_ms) {
  auto local = [](int64_t ms) {
    const std::time_t t = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
  };
  const std::tm at = local(time_ms);
  const std::tm now = local(now_ms);
  const bool today = at.tm_year == now.tm_year && at.tm_yday == now.tm_yday;
  char buf[32];
  std::strftime(buf, sizeof buf, today ? "%H:%M" : "%Y-%m-%d %H:%M", &at);
  return buf;
}

// "64 HBDs: 63 x 64 GPUs (rack[0-62]), 1 x 16 GPUs (rack63)".
std::string DescribeLevel(const std::vector<api::DomainGpus>& items, const std::string& one,
                          const std::string& many, bool all) {
  std::vector<std::pair<int, std::vector<std::string>>> groups;
  for (const api::DomainGpus& d : items) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& p) { return p.first == d.gpus; });
    if (it == groups.end()) {
      groups.push_back({d.gpus, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(Safe(d.name));
  }
  std::string out = Plural(static_cast<int64_t>(items.size()), one, many);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!all && i == kGroupsShown) {
      out += ", ... " + std::to_string(groups.size() - i) + " more sizes";
      break;
    }
    out += i == 0 ? ": " : ", ";
    const auto& [gpus, names] = groups[i];
    out += std::to_string(names.size()) + " x " + std::to_string(gpus) + " GPUs (" +
           common::CompressHostlist(names) + ")";
  }
  return out;
}

std::string Figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// An incident's cause (the event type that caused it) in words.
std::string IncidentCause(const std::string& type) {
  if (type == "node_state_requested") return "node lost";
  if (type == "gpu_event") return "GPU failed";
  if (type == "rank_exited") return "rank exited";
  if (type == "node_evacuated") return "node drained";
  if (type == "job_launch_failed") return "launch failed";
  if (type == "start_unacknowledged") return "start not acknowledged";
  if (type == "node_states_requested") return "nodes lost";
  return Safe(type);
}

// An argv as a shell would take it back: words of plain characters as they
// are, others in single quotes; cut to kCommandShown bytes (a batch script
// is one long argument), then made terminal-safe.
constexpr size_t kCommandShown = 160;

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("_./=:,@%+-").find(c) != std::string_view::npos;
    });
    if (!line.empty()) line += ' ';
    if (plain) {
      line += a;
      continue;
    }
    line += '\'';
    for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return TerminalSafe(Truncate(line, kCommandShown));
}

// How the job's processes start (docs/jobs.md): the command, the launch
// mode, the names of its own variables (never their values: they may be
// tokens, and a terminal is often shared or recorded; --json has them),
// the working directory and where the output goes.
void ProcessLines(std::ostringstream& os, const api::JobView& job) {
  if (!job.detail || !job.detail->process) return;  // the store keeps no process
  const api::JobProcessView& p = *job.detail->process;
  if (!p.command.empty()) KeyValue(os, "Command", CommandLine(p.command));
  KeyValue(os, "Launch",
           p.launch == core::LaunchMode::kNode ? "node (one process per node)"
                                               : "rank (one process per GPU)");
  if (!p.env.empty()) {
    std::string names;
    for (const auto& [name, value] : p.env) names += (names.empty() ? "" : ", ") + name;
    KeyValue(os, "Env",
             Safe(Truncate(names, kCommandShown)) +
                 " (names only: values may be secrets; --json shows them)");
  }
  const bool has_dir = p.chdir && !p.chdir->empty();
  if (has_dir) KeyValue(os, "Directory", Safe(*p.chdir));
  auto file = [&](const std::string& pattern) {
    return Safe(pattern) +
           (!pattern.empty() && pattern[0] != '/' && has_dir ? " (in " + Safe(*p.chdir) + ")" : "");
  };
  const bool has_output = p.output && !p.output->empty();
  const bool has_error = p.error && !p.error->empty();
  KeyValue(
      os, "Output",
      has_output ? file(*p.output) : "the agent's log (topo logs " + std::to_string(job.id) + ")");
  if (has_error) {
    KeyValue(os, "Error", file(*p.error));
  } else if (has_output) {
    KeyValue(os, "Error", "with the output");
  }
}

// Indents a rendered table under a heading.
void Indented(std::ostringstream& os, const std::string& text) {
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
}

void MetricsLines(std::ostringstream& os, const api::MetricsView& m) {
  os << "\nMetrics:\n";
  Table t({"METRIC", "VALUE"});
  auto ratio = [](const std::optional<double>& v) { return v ? Figure(*v) : std::string("-"); };
  t.AddRow({"tp_in_hbd", ratio(m.tp_in_hbd)});
  t.AddRow({"ep_in_hbd", ratio(m.ep_in_hbd)});
  t.AddRow({"leaf_span_ratio", ratio(m.leaf_span_ratio)});
  t.AddRow({"pod_span_ratio", ratio(m.pod_span_ratio)});
  t.AddRow({"comm_cost_ratio", ratio(m.comm_cost_ratio)});
  t.AddRow({"leaves_spanned", std::to_string(m.leaves_spanned)});
  t.AddRow({"min_leaves", std::to_string(m.min_leaves)});
  t.AddRow({"pods_spanned", std::to_string(m.pods_spanned)});
  t.AddRow({"min_pods", std::to_string(m.min_pods)});
  t.AddRow({"comm_cost", Figure(m.comm_cost)});
  t.AddRow({"comm_cost_bound", Figure(m.comm_cost_bound)});
  t.AddRow({"required_met", m.required_met ? "yes" : "no"});
  for (const auto& [kind, by_tier] : m.tier_histogram) {
    if (by_tier.empty()) continue;
    std::string v;
    for (const auto& [tier, count] : by_tier) {
      v += (v.empty() ? "" : ", ") + Safe(tier) + " " + std::to_string(count);
    }
    t.AddRow({Safe(kind) + " groups by widest tier", v});
  }
  const std::string text = t.Render();
  Indented(os, text.substr(text.find('\n') + 1));  // without the header line
}

void RunLines(std::ostringstream& os, const api::JobAccounting& a) {
  if (a.runs.empty()) return;
  char total[64];
  std::snprintf(total, sizeof total, "%.2f", a.gpu_hours);
  os << "\nRuns (" << total << " GPU-hours):\n";
  Table t({"RUN", "START", "END", "GPUS", "NODES", "GPU-H", "EXIT", "ENDED"});
  for (size_t c : {0, 3, 5, 6}) t.AlignRight(c);
  for (const api::RunView& r : a.runs) {
    std::vector<std::string> names;
    for (const std::string& n : r.node_names) names.push_back(Safe(n));
    char gpu_h[32];
    std::snprintf(gpu_h, sizeof gpu_h, "%.2f", r.gpu_hours);
    t.AddRow({std::to_string(r.run), FormatTime(nlohmann::json(r.start_ms)), TimeText(r.end_ms),
              std::to_string(r.gpus), names.empty() ? "-" : common::CompressHostlist(names), gpu_h,
              r.exit_code ? std::to_string(*r.exit_code) : "-",
              !r.end_ms ? std::string("running") : Safe(r.end_reason.value_or("-"))});
  }
  Indented(os, t.Render());
}

void IncidentLines(std::ostringstream& os, const std::vector<api::IncidentView>& incidents) {
  if (incidents.empty()) return;
  os << "\nIncidents:\n";
  Table t({"TIME", "CAUSE", "DETECTED", "RESTART", "FROM STEP", "LOST WORK", "REASON"});
  // Seconds, to the hundredth under a minute.
  auto secs = [](double v) {
    if (v >= 60) return FormatSeconds(static_cast<int64_t>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fs", v);
    return std::string(buf);
  };
  auto ms = [&](const std::optional<int64_t>& v) {
    return v ? secs(static_cast<double>(*v) / 1000.0) : std::string("-");
  };
  for (const api::IncidentView& i : incidents) {
    t.AddRow({FormatTime(nlohmann::json(i.time_ms)), IncidentCause(i.cause), ms(i.detection_ms),
              i.requeued ? "requeued " + ms(i.restart_ms) : ms(i.restart_ms),
              i.checkpoint_step >= 0 ? std::to_string(i.checkpoint_step) : "-", secs(i.lost_work_s),
              Safe(i.reason)});
  }
  Indented(os, t.Render());
}

void HistoryLines(std::ostringstream& os, const std::vector<api::JobEventView>& history) {
  if (history.empty()) return;
  os << "\nHistory:\n";
  Table t({"SEQ", "TIME", "ACTOR", "TYPE", "STATE", "REASON"});
  t.AlignRight(0);
  for (const api::JobEventView& h : history) {
    t.AddRow({std::to_string(h.seq), FormatTime(nlohmann::json(h.time_ms)), Safe(h.actor),
              Safe(h.type), h.state ? std::string(core::JobStateName(*h.state)) : "-",
              h.reason ? Safe(*h.reason) : "-"});
  }
  Indented(os, t.Render());
}

}  // namespace

std::string FormatStartTime(const api::JobView& job, int64_t now_ms) {
  // A job requeued after a failure keeps its first start_ms while it waits.
  if (job.state == core::JobState::kQueued || job.state == core::JobState::kHeld) {
    return job.estimated_start_ms ? "~" + ClockTime(*job.estimated_start_ms, now_ms) + " (est.)"
                                  : "-";
  }
  return job.start_ms ? ClockTime(*job.start_ms, now_ms) : "-";
}

std::string FormatJobTable(const std::vector<api::JobView>& jobs, int64_t now_ms,
                           bool start_column) {
  std::vector<std::string> headers = {"ID",   "TENANT", "USER", "NAME",  "STATE",
                                      "GPUS", "NODES",  "TIME", "REASON"};
  if (start_column) headers.insert(headers.begin() + 7, "START");
  Table t(headers);
  for (size_t c : {0, 5, 6}) t.AlignRight(c);
  t.AlignRight(start_column ? 8 : 7);
  for (const api::JobView& j : jobs) {
    std::string time = "0:00";
    if (j.start_ms) time = FormatElapsed(j.end_ms.value_or(now_ms) - *j.start_ms);
    // A job that holds no node (queued, held) has no node count: "-", not 0.
    std::string reason = Safe(j.reason);
    if (j.queue_position) reason = "#" + std::to_string(*j.queue_position) + " " + reason;
    std::vector<std::string> row = {std::to_string(j.id),
                                    Safe(j.tenant),
                                    Safe(j.user),
                                    Truncate(Safe(j.name), kNameWidth),
                                    std::string(core::JobStateName(j.state)),
                                    std::to_string(j.gpus),
                                    j.nodes == 0 ? "-" : std::to_string(j.nodes),
                                    time,
                                    reason};
    if (start_column) row.insert(row.begin() + 7, FormatStartTime(j, now_ms));
    t.AddRow(std::move(row));
  }
  return t.Render();
}

std::string FormatJobDetails(const api::JobView& job, int64_t now_ms, bool all_ranks) {
  std::ostringstream os;
  os << "Job " << job.id << (job.name.empty() ? "" : ": " + Safe(job.name)) << "\n";
  const std::string state(core::JobStateName(job.state));
  KeyValue(
      os, "State",
      job.reason.empty() || job.reason == state ? state : state + " (" + Safe(job.reason) + ")");
  if (job.queue_position) KeyValue(os, "Queue place", std::to_string(*job.queue_position));
  if (job.estimated_start_ms) {
    KeyValue(os, "Starts",
             "~" + TimeText(job.estimated_start_ms) +
                 " (est.: the reservation plan, by the running jobs' time limits)");
  }
  KeyValue(
      os, "Tenant",
      Safe(job.tenant) + ", user " + Safe(job.user) + ", priority " + std::to_string(job.priority));
  if (job.partition) KeyValue(os, "Partition", Safe(*job.partition));
  if (job.reservation) KeyValue(os, "Reservation", Safe(*job.reservation));
  // A job not placed (queued, never started) has no nodes to count.
  KeyValue(os, "GPUs",
           job.nodes > 0 ? std::to_string(job.gpus) + " on " + Plural(job.nodes, "node", "nodes")
                         : std::to_string(job.gpus) + " (not placed)");
  const api::JobDetail* detail = job.detail ? &*job.detail : nullptr;
  if (detail != nullptr && detail->spec) {
    const core::JobSpec& spec = *detail->spec;
    const core::Parallelism& p = spec.parallelism;
    std::string layout = "tp " + std::to_string(p.tp) + " cp " + std::to_string(p.cp) + " ep " +
                         std::to_string(p.ep) + " pp " + std::to_string(p.pp) + " dp " +
                         std::to_string(p.dp) + ", order " + core::FormatRankOrder(p.order);
    if (spec.gpus_per_node > 0) {
      layout += ", " + std::to_string(spec.gpus_per_node) + " GPUs per node";
    }
    if (spec.spares > 0) layout += ", " + Plural(spec.spares, "spare node", "spare nodes");
    KeyValue(os, "Layout", layout);
  }
  KeyValue(os, "Submitted", FormatTime(nlohmann::json(job.submit_ms)));
  if (job.start_ms) {
    KeyValue(os, "Started",
             TimeText(job.start_ms) + " (ran " +
                 FormatElapsed(job.end_ms.value_or(now_ms) - *job.start_ms) + " of " +
                 FormatElapsed(job.time_limit_s * 1000) + ")");
  } else {
    KeyValue(os, "Time limit", FormatElapsed(job.time_limit_s * 1000));
  }
  if (job.end_ms) KeyValue(os, "Ended", TimeText(job.end_ms));
  KeyValue(os, "Restarts",
           std::to_string(job.restarts) + ", " +
               (job.checkpoint_step >= 0 ? "checkpoint step " + std::to_string(job.checkpoint_step)
                                         : std::string("no checkpoint yet")));
  ProcessLines(os, job);
  if (detail == nullptr) return os.str();

  if (detail->placement) {
    const api::PlacementView& p = *detail->placement;
    os << "\nPlacement: " << Plural(p.nodes, "node", "nodes") << "\n";
    KeyValue(os, "HBDs", DescribeLevel(p.hbds, "HBD", "HBDs", all_ranks));
    KeyValue(os, "Leaves", DescribeLevel(p.leaves, "leaf", "leaves", all_ranks));
    KeyValue(os, "Pods", DescribeLevel(p.pods, "pod", "pods", all_ranks));
  }
  if (detail->predicted) {
    const api::PredictionView& p = *detail->predicted;
    KeyValue(os, "Predicted step",
             common::FormatMetric(p.step_s, 3) + " s (" + Safe(p.model) + "; ideal " +
                 common::FormatMetric(p.ideal_step_s, 3) + " s, slowdown " +
                 common::FormatMetric(p.slowdown, 3) + ")");
  }
  if (!detail->spares.empty()) {
    std::vector<std::string> names;
    for (const std::string& s : detail->spares) names.push_back(Safe(s));
    KeyValue(os, "Spares", common::CompressHostlist(names));
  }
  if (detail->metrics) MetricsLines(os, *detail->metrics);
  if (!detail->ranks.empty()) {
    const size_t shown =
        all_ranks ? detail->ranks.size() : std::min(detail->ranks.size(), kRanksShown);
    os << "\nRanks";
    if (shown < detail->ranks.size()) {
      os << " (first " << shown << " of " << detail->ranks.size() << "; --ranks for all)";
    }
    os << ":\n";
    Table t({"RANK", "NODE", "GPU"});
    t.AlignRight(0);
    t.AlignRight(2);
    for (size_t i = 0; i < shown; ++i) {
      const api::RankView& r = detail->ranks[i];
      t.AddRow({std::to_string(r.rank), Safe(r.node), std::to_string(r.gpu)});
    }
    Indented(os, t.Render());
  }
  if (job.accounting) RunLines(os, *job.accounting);
  IncidentLines(os, detail->incidents);
  HistoryLines(os, detail->history);
  return os.str();
}

}  // namespace topo::cli
