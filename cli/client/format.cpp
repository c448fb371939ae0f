#include "client/format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <string_view>
#include <utility>

#include "client/format_internal.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/render.hpp"

namespace topo::cli {

using format_internal::Dump;
using format_internal::Field;
using format_internal::Int;
using format_internal::IsInt;
using format_internal::Str;
using format_internal::Truncate;
using nlohmann::json;

namespace {

// Ranks shown by `topo show` without --ranks.
constexpr size_t kRanksShown = 16;
// Node groups listed per placement level before "... and N more".
constexpr size_t kGroupsShown = 6;
constexpr size_t kNameWidth = 32;

// The code point of the UTF-8 sequence at text[i] and its length; length 0
// when the bytes there are not one well-formed sequence (overlong forms,
// surrogates and values past U+10FFFF included).
std::pair<uint32_t, size_t> DecodeUtf8(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  // Lead byte -> length, its payload bits, the smallest code point that
  // length may carry.
  struct Form {
    unsigned char lo, hi, mask;
    size_t len;
    uint32_t min;
  };
  static constexpr Form kForms[] = {
      {0xC2, 0xDF, 0x1F, 2, 0x80}, {0xE0, 0xEF, 0x0F, 3, 0x800}, {0xF0, 0xF4, 0x07, 4, 0x10000}};
  const Form* form = nullptr;
  for (const Form& f : kForms) {
    if (b0 >= f.lo && b0 <= f.hi) form = &f;
  }
  if (form == nullptr) return {0, 0};
  const size_t len = form->len;
  const uint32_t min = form->min;
  uint32_t cp = b0 & form->mask;
  if (i + len > text.size()) return {0, 0};
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0};
  return {cp, len};
}

bool MovesTheText(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

std::string Upper(std::string s) {
  for (char& c : s) {
    c = c == '_' ? ' ' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Limits: 0 means none; borrow -1 means none.
std::string Limit(const json& v, int64_t none) {
  if (IsInt(v) && v.get<int64_t>() == none) return "none";
  return Cell(v);
}

// "64 HBDs: 63 x 64 GPUs (rack[0-62]), 1 x 16 GPUs (rack63)".
std::string DescribeLevel(const json& items, const std::string& one, const std::string& many,
                          bool all) {
  if (!items.is_array()) return "-";
  std::vector<std::pair<int64_t, std::vector<std::string>>> groups;
  for (const json& d : items) {
    const int64_t g = Int(d, "gpus", -1);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == g; });
    if (it == groups.end()) {
      groups.push_back({g, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(Str(d, "name"));
  }
  std::string out = Plural(static_cast<int64_t>(items.size()), one, many);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!all && i == kGroupsShown) {
      out += ", ... " + std::to_string(groups.size() - i) + " more sizes";
      break;
    }
    out += i == 0 ? ": " : ", ";
    const auto& [gpus, names] = groups[i];
    out += std::to_string(names.size()) + " x " + (gpus < 0 ? "?" : std::to_string(gpus)) +
           " GPUs (" + common::CompressHostlist(names) + ")";
  }
  return out;
}

void KeyValue(std::ostringstream& os, const std::string& key, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-12s ", (key + ":").c_str());
  os << buf << value << "\n";
}

std::string FormatMetric(const json& v) {
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v.get<double>());
    return buf;
  }
  return Cell(v);
}

}  // namespace

std::string TerminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {  // C0 and DEL
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
      ++i;
      continue;
    }
    const auto [cp, len] = DecodeUtf8(text, i);
    if (len == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
    } else if (MovesTheText(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

Table::Table(std::vector<std::string> headers) : right_(headers.size(), false) {
  for (std::string& h : headers) headers_.push_back(TerminalSafe(h));
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& c : cells) c = TerminalSafe(c);
  rows_.push_back(std::move(cells));
}

void Table::AlignRight(size_t column) {
  if (column < right_.size()) right_[column] = true;
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) l += "  ";
      if (right_[c]) {
        l += pad + cells[c];
      } else {
        l += cells[c];
        if (!last) l += pad;
      }
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string Cell(const json& v) {
  if (v.is_null() || v.is_discarded()) return "-";
  if (v.is_string()) return TerminalSafe(v.get_ref<const std::string&>());
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  return TerminalSafe(Dump(v));
}

std::string FormatElapsed(int64_t ms) {
  if (ms < 0) ms = 0;
  const int64_t s = ms / 1000;
  const int64_t days = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
  char buf[48];
  if (days > 0) {
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", static_cast<long long>(days),
                  static_cast<long long>(h), static_cast<long long>(m),
                  static_cast<long long>(sec));
  } else if (h > 0) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(sec));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(sec));
  }
  return buf;
}

std::string FormatTime(const json& time_ms) {
  if (!IsInt(time_ms)) return "-";
  const std::time_t t = static_cast<std::time_t>(time_ms.get<int64_t>() / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string FormatSeconds(int64_t seconds) {
  if (seconds <= 0) return std::to_string(seconds) + "s";
  std::string out;
  const std::pair<int64_t, const char*> units[] = {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}};
  for (const auto& [scale, name] : units) {
    if (seconds >= scale) {
      out += std::to_string(seconds / scale) + name;
      seconds %= scale;
    }
  }
  return out;
}

namespace {

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

}  // namespace

std::string FormatStartTime(const json& job, int64_t now_ms) {
  // A job requeued after a failure keeps its first start_ms while it waits.
  const std::string state = Str(job, "state");
  const json& estimate = Field(job, "estimated_start_ms");
  if (state == "queued" || state == "held") {
    return IsInt(estimate) ? "~" + ClockTime(estimate.get<int64_t>(), now_ms) + " (est.)" : "-";
  }
  const json& start = Field(job, "start_ms");
  return IsInt(start) ? ClockTime(start.get<int64_t>(), now_ms) : "-";
}

std::string FormatJobTable(const json& jobs, int64_t now_ms, bool start_column) {
  std::vector<std::string> headers = {"ID",   "TENANT", "USER", "NAME",  "STATE",
                                      "GPUS", "NODES",  "TIME", "REASON"};
  if (start_column) headers.insert(headers.begin() + 7, "START");
  Table t(headers);
  for (size_t c : {0, 5, 6}) t.AlignRight(c);
  t.AlignRight(start_column ? 8 : 7);
  if (jobs.is_array()) {
    for (const json& j : jobs) {
      const json& start = Field(j, "start_ms");
      const json& end = Field(j, "end_ms");
      std::string time = "0:00";
      if (IsInt(start)) {
        const int64_t until = IsInt(end) ? end.get<int64_t>() : now_ms;
        time = FormatElapsed(until - start.get<int64_t>());
      }
      // A job that holds no node (queued, held) has no node count: "-", not 0.
      const json& nodes = Field(j, "nodes");
      const std::string nodes_cell =
          IsInt(nodes) && nodes.get<int64_t>() == 0 ? "-" : Str(j, "nodes");
      std::string reason = Str(j, "reason");
      if (IsInt(Field(j, "queue_position"))) {
        reason = "#" + Str(j, "queue_position") + " " + (reason == "-" ? "" : reason);
      }
      std::vector<std::string> row = {
          Str(j, "id"),    Str(j, "tenant"), Str(j, "user"), Truncate(Str(j, "name"), kNameWidth),
          Str(j, "state"), Str(j, "gpus"),   nodes_cell,     time,
          reason};
      if (start_column) row.insert(row.begin() + 7, FormatStartTime(j, now_ms));
      t.AddRow(std::move(row));
    }
  }
  return t.Render();
}

namespace {

// An incident's cause (the event type that caused it) in words.
std::string IncidentCause(const std::string& type) {
  if (type == "node_state_requested") return "node lost";
  if (type == "gpu_event") return "GPU failed";
  if (type == "rank_exited") return "rank exited";
  if (type == "node_evacuated") return "node drained";
  if (type == "launch_failed") return "launch failed";
  if (type == "node_states_requested") return "nodes lost";
  return type;
}

// An argv as a shell would take it back: words of plain characters as they
// are, others in single quotes; cut to kCommandShown bytes (a batch script
// is one long argument), then made terminal-safe.
constexpr size_t kCommandShown = 160;

std::string CommandLine(const json& argv) {
  std::string line;
  for (const json& arg : argv) {
    const std::string a = arg.is_string() ? arg.get<std::string>() : Dump(arg);
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
void ProcessLines(std::ostringstream& os, const json& job) {
  const json& command = Field(job, "command");
  if (command.is_array() && !command.empty()) KeyValue(os, "Command", CommandLine(command));
  const json& launch = Field(job, "launch");
  if (!launch.is_string()) return;  // a daemon from before launch modes
  const std::string mode = launch.get<std::string>();
  KeyValue(os, "Launch",
           TerminalSafe(mode) + (mode == "node"   ? " (one process per node)"
                                 : mode == "rank" ? " (one process per GPU)"
                                                  : ""));
  const json& env = Field(job, "env");
  if (env.is_object() && !env.empty()) {
    std::string names;
    for (auto it = env.begin(); it != env.end(); ++it) {
      names += (names.empty() ? "" : ", ") + it.key();
    }
    KeyValue(os, "Env",
             TerminalSafe(Truncate(names, kCommandShown)) +
                 " (names only: values may be secrets; --json shows them)");
  }
  const json& dir = Field(job, "chdir");
  const bool has_dir = dir.is_string() && !dir.get<std::string>().empty();
  if (has_dir) KeyValue(os, "Directory", Cell(dir));
  const json& output = Field(job, "output");
  const json& error = Field(job, "error");
  auto file = [&](const json& pattern) {
    const std::string p = pattern.get<std::string>();
    return Cell(pattern) + (!p.empty() && p[0] != '/' && has_dir ? " (in " + Cell(dir) + ")" : "");
  };
  const bool has_output = output.is_string() && !output.get<std::string>().empty();
  const bool has_error = error.is_string() && !error.get<std::string>().empty();
  KeyValue(os, "Output",
           has_output ? file(output)
                      : std::string("the agent's log (topo logs ") + Str(job, "id") + ")");
  if (has_error) {
    KeyValue(os, "Error", file(error));
  } else if (has_output) {
    KeyValue(os, "Error", "with the output");
  }
}

}  // namespace

std::string FormatJobDetails(const json& job, int64_t now_ms, bool all_ranks) {
  std::ostringstream os;
  const std::string name = Str(job, "name");
  os << "Job " << Str(job, "id") << (name.empty() || name == "-" ? "" : ": " + name) << "\n";
  std::string state = Str(job, "state");
  if (Field(job, "reason").is_string() && !Str(job, "reason").empty() &&
      Str(job, "reason") != Str(job, "state")) {
    state += " (" + Str(job, "reason") + ")";
  }
  KeyValue(os, "State", state);
  if (IsInt(Field(job, "queue_position"))) {
    KeyValue(os, "Queue place", Str(job, "queue_position"));
  }
  if (IsInt(Field(job, "estimated_start_ms"))) {
    KeyValue(os, "Starts",
             "~" + FormatTime(Field(job, "estimated_start_ms")) +
                 " (est.: the reservation plan, by the running jobs' time limits)");
  }
  KeyValue(
      os, "Tenant",
      Str(job, "tenant") + ", user " + Str(job, "user") + ", priority " + Str(job, "priority"));
  // A job not placed (queued, never started) has no nodes to count.
  KeyValue(os, "GPUs",
           IsInt(Field(job, "nodes")) && Int(job, "nodes") > 0
               ? Str(job, "gpus") + " on " + Plural(Int(job, "nodes"), "node", "nodes")
               : Str(job, "gpus") + " (not placed)");
  const json& spec = Field(job, "spec");
  const json& par = Field(spec, "parallelism");
  if (par.is_object()) {
    std::string layout;
    for (const char* k : {"tp", "cp", "ep", "pp", "dp"}) {
      if (IsInt(Field(par, k)))
        layout += (layout.empty() ? "" : " ") + std::string(k) + " " + Str(par, k);
    }
    if (Field(par, "order").is_string()) layout += ", order " + Str(par, "order");
    if (IsInt(Field(spec, "gpus_per_node")) && Int(spec, "gpus_per_node") > 0) {
      layout += ", " + Str(spec, "gpus_per_node") + " GPUs per node";
    }
    if (IsInt(Field(spec, "spares")) && Int(spec, "spares") > 0) {
      layout += ", " + Plural(Int(spec, "spares"), "spare node", "spare nodes");
    }
    KeyValue(os, "Layout", layout);
  }
  KeyValue(os, "Submitted", FormatTime(Field(job, "submit_ms")));
  const json& start = Field(job, "start_ms");
  const json& end = Field(job, "end_ms");
  if (IsInt(start)) {
    const int64_t until = IsInt(end) ? end.get<int64_t>() : now_ms;
    std::string s = FormatTime(start) + " (ran " + FormatElapsed(until - start.get<int64_t>());
    if (IsInt(Field(job, "time_limit_s"))) {
      s += " of " + FormatElapsed(Int(job, "time_limit_s") * 1000);
    }
    KeyValue(os, "Started", s + ")");
  } else if (IsInt(Field(job, "time_limit_s"))) {
    KeyValue(os, "Time limit", FormatElapsed(Int(job, "time_limit_s") * 1000));
  }
  if (IsInt(end)) KeyValue(os, "Ended", FormatTime(end));
  KeyValue(os, "Restarts",
           Str(job, "restarts") + ", " +
               (IsInt(Field(job, "checkpoint_step")) && Int(job, "checkpoint_step") >= 0
                    ? "checkpoint step " + Str(job, "checkpoint_step")
                    : std::string("no checkpoint yet")));
  ProcessLines(os, job);

  const json& placement = Field(job, "placement");
  if (placement.is_object()) {
    os << "\nPlacement: " << Plural(Int(placement, "nodes"), "node", "nodes") << "\n";
    KeyValue(os, "HBDs", DescribeLevel(Field(placement, "hbds"), "HBD", "HBDs", all_ranks));
    KeyValue(os, "Leaves", DescribeLevel(Field(placement, "leaves"), "leaf", "leaves", all_ranks));
    KeyValue(os, "Pods", DescribeLevel(Field(placement, "pods"), "pod", "pods", all_ranks));
  }
  const json& predicted = Field(job, "predicted");
  if (predicted.is_object() && Field(predicted, "step_s").is_number() &&
      Field(predicted, "ideal_step_s").is_number() && Field(predicted, "slowdown").is_number()) {
    KeyValue(os, "Predicted step",
             common::FormatMetric(predicted["step_s"].get<double>(), 3) + " s (" +
                 Str(predicted, "model") + "; ideal " +
                 common::FormatMetric(predicted["ideal_step_s"].get<double>(), 3) +
                 " s, slowdown " + common::FormatMetric(predicted["slowdown"].get<double>(), 3) +
                 ")");
  }
  const json& spares = Field(job, "spares");
  if (spares.is_array() && !spares.empty()) {
    std::vector<std::string> names;
    for (const json& s : spares) names.push_back(Cell(s));
    KeyValue(os, "Spares", common::CompressHostlist(names));
  }

  const json& metrics = Field(job, "metrics");
  if (metrics.is_object()) {
    os << "\nMetrics:\n";
    const std::vector<std::string> order = {"tp_in_hbd",      "ep_in_hbd",       "leaf_span_ratio",
                                            "pod_span_ratio", "comm_cost_ratio", "leaves_spanned",
                                            "min_leaves",     "pods_spanned",    "min_pods",
                                            "comm_cost",      "comm_cost_bound", "required_met"};
    std::vector<std::string> keys = order;
    for (auto it = metrics.begin(); it != metrics.end(); ++it) {
      if (std::find(order.begin(), order.end(), it.key()) == order.end() &&
          it.key() != "tier_histogram") {
        keys.push_back(it.key());
      }
    }
    Table t({"METRIC", "VALUE"});
    for (const std::string& k : keys) {
      if (metrics.contains(k)) t.AddRow({k, FormatMetric(metrics[k])});
    }
    const json& hist = Field(metrics, "tier_histogram");
    if (hist.is_object()) {
      for (auto it = hist.begin(); it != hist.end(); ++it) {
        if (!it->is_object() || it->empty()) continue;
        std::string v;
        for (auto t2 = it->begin(); t2 != it->end(); ++t2) {
          v += (v.empty() ? "" : ", ") + t2.key() + " " + Cell(*t2);
        }
        t.AddRow({it.key() + " groups by widest tier", v});
      }
    }
    std::string text = t.Render();
    // Indent under the heading, without the header line.
    std::istringstream lines(text.substr(text.find('\n') + 1));
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }

  const json& ranks = Field(job, "ranks");
  if (ranks.is_array() && !ranks.empty()) {
    const size_t shown = all_ranks ? ranks.size() : std::min(ranks.size(), kRanksShown);
    os << "\nRanks";
    if (shown < ranks.size()) {
      os << " (first " << shown << " of " << ranks.size() << "; --ranks for all)";
    }
    os << ":\n";
    Table t({"RANK", "NODE", "GPU"});
    t.AlignRight(0);
    t.AlignRight(2);
    for (size_t i = 0; i < shown; ++i) {
      t.AddRow({Str(ranks[i], "rank"), Str(ranks[i], "node"), Str(ranks[i], "gpu")});
    }
    std::istringstream lines(t.Render());
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }

  const json& runs = Field(job, "runs");
  if (runs.is_array() && !runs.empty()) {
    char total[64];
    const json& hours = Field(job, "gpu_hours");
    std::snprintf(total, sizeof total, "%.2f", hours.is_number() ? hours.get<double>() : 0.0);
    os << "\nRuns (" << total << " GPU-hours):\n";
    Table t({"RUN", "START", "END", "GPUS", "NODES", "GPU-H", "EXIT", "ENDED"});
    for (size_t c : {0, 3, 5, 6}) t.AlignRight(c);
    for (const json& r : runs) {
      std::vector<std::string> names;
      const json& nodes = Field(r, "nodes");
      if (nodes.is_array()) {
        for (const json& n : nodes) {
          if (n.is_string()) names.push_back(n.get<std::string>());
        }
      }
      char gpu_h[32];
      const json& h = Field(r, "gpu_hours");
      std::snprintf(gpu_h, sizeof gpu_h, "%.2f", h.is_number() ? h.get<double>() : 0.0);
      t.AddRow({Str(r, "run"), FormatTime(Field(r, "start_ms")), FormatTime(Field(r, "end_ms")),
                Str(r, "gpus"), names.empty() ? "-" : common::CompressHostlist(names), gpu_h,
                Str(r, "exit_code"),
                Field(r, "end_ms").is_null() ? "running" : Str(r, "end_reason")});
    }
    std::istringstream lines(t.Render());
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }

  const json& incidents = Field(job, "incidents");
  if (incidents.is_array() && !incidents.empty()) {
    os << "\nIncidents:\n";
    Table t({"TIME", "CAUSE", "DETECTED", "RESTART", "FROM STEP", "LOST WORK", "REASON"});
    // Seconds, to the hundredth under a minute.
    auto secs = [](double v) {
      if (v >= 60) return FormatSeconds(static_cast<int64_t>(v));
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fs", v);
      return std::string(buf);
    };
    auto ms = [&](const json& v) {
      return v.is_number() ? secs(v.get<double>() / 1000.0) : std::string("-");
    };
    for (const json& i : incidents) {
      const json& step = Field(i, "checkpoint_step");
      t.AddRow(
          {FormatTime(Field(i, "time_ms")), IncidentCause(Str(i, "cause")),
           ms(Field(i, "detection_ms")),
           Field(i, "requeued").is_boolean() && Field(i, "requeued").get<bool>()
               ? "requeued " + ms(Field(i, "restart_ms"))
               : ms(Field(i, "restart_ms")),
           step.is_number() && step.get<int64_t>() >= 0 ? Str(i, "checkpoint_step") : "-",
           Field(i, "lost_work_s").is_number() ? secs(Field(i, "lost_work_s").get<double>()) : "-",
           Str(i, "reason")});
    }
    std::istringstream lines(t.Render());
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }

  const json& history = Field(job, "history");
  if (history.is_array() && !history.empty()) {
    os << "\nHistory:\n";
    Table t({"SEQ", "TIME", "ACTOR", "TYPE", "STATE", "REASON"});
    t.AlignRight(0);
    for (const json& h : history) {
      t.AddRow({Str(h, "seq"), FormatTime(Field(h, "time_ms")), Str(h, "actor"), Str(h, "type"),
                Str(h, "state"), Str(h, "reason")});
    }
    std::istringstream lines(t.Render());
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }
  return os.str();
}

std::string FormatNodeTable(const json& nodes) {
  Table t({"NAME", "STATE", "GPUS", "FREE", "HBD", "LEAF", "POD", "REASON"});
  t.AlignRight(2);
  t.AlignRight(3);
  if (nodes.is_array()) {
    for (const json& n : nodes) {
      int64_t free = 0;
      const json& jobs = Field(n, "gpu_jobs");
      const json& health = Field(n, "gpu_health");
      if (Str(n, "state") == "up" && jobs.is_array()) {
        for (size_t g = 0; g < jobs.size(); ++g) {
          const bool healthy = !health.is_array() || g >= health.size() ||
                               (health[g].is_string() && health[g] == "healthy");
          if (IsInt(jobs[g]) && jobs[g].get<int64_t>() == 0 && healthy) ++free;
        }
      }
      std::string reason = Str(n, "reason");
      if (reason.empty()) reason = "-";
      t.AddRow({Str(n, "name"), Str(n, "state"), Str(n, "gpus"), std::to_string(free),
                Str(n, "hbd"), Str(n, "leaf"), Str(n, "pod"), reason});
    }
  }
  return t.Render();
}

std::string FormatNodeDetails(const json& node) {
  std::ostringstream os;
  os << "Node " << Str(node, "name") << "\n";
  std::string state = Str(node, "state");
  if (Field(node, "reason").is_string() && !Str(node, "reason").empty()) {
    state += " (" + Str(node, "reason") + ")";
  }
  KeyValue(os, "State", state);
  KeyValue(os, "GPUs", Str(node, "gpus"));
  KeyValue(os, "HBD", Str(node, "hbd"));
  KeyValue(os, "Leaf", Str(node, "leaf"));
  KeyValue(os, "Pod", Str(node, "pod"));
  const json& jobs = Field(node, "gpu_jobs");
  const json& health = Field(node, "gpu_health");
  const size_t gpus =
      std::max(jobs.is_array() ? jobs.size() : 0, health.is_array() ? health.size() : 0);
  if (gpus > 0) {
    os << "\n";
    Table t({"GPU", "HEALTH", "JOB"});
    t.AlignRight(0);
    t.AlignRight(2);
    for (size_t g = 0; g < gpus; ++g) {
      const json h = health.is_array() && g < health.size() ? health[g] : json();
      const json j = jobs.is_array() && g < jobs.size() ? jobs[g] : json();
      const bool free = IsInt(j) && j.get<int64_t>() == 0;
      // -1: a job of a tenant outside the caller's scope.
      const bool hidden = IsInt(j) && j.get<int64_t>() < 0;
      t.AddRow({std::to_string(g), Cell(h), free ? "-" : hidden ? "another tenant's" : Cell(j)});
    }
    std::istringstream lines(t.Render());
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }
  const json& history = Field(node, "gpu_history");
  if (history.is_array() && !history.empty()) {
    os << "\nGPU history:\n";
    std::istringstream lines(
        FormatObjectTable(history, {"time_ms", "gpu", "health", "kind", "reason"}));
    for (std::string l; std::getline(lines, l);) os << "  " << l << "\n";
  }
  return os.str();
}

std::string SummarizeNodesByState(const json& nodes) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_state;
  if (nodes.is_array()) {
    for (const json& n : nodes) {
      const std::string state = Str(n, "state");
      auto it = std::find_if(by_state.begin(), by_state.end(),
                             [&](const auto& p) { return p.first == state; });
      if (it == by_state.end()) {
        by_state.push_back({state, {}});
        it = by_state.end() - 1;
      }
      it->second.push_back(Str(n, "name"));
    }
  }
  std::string out;
  for (const auto& [state, names] : by_state) {
    out += Plural(static_cast<int64_t>(names.size()), "node", "nodes") + " " + state + ": " +
           common::CompressHostlist(names) + "\n";
  }
  return out;
}

// A tenant's total with its sub-tenants, and its own when that differs:
// "12 (own 8)".
std::string WithOwn(const json& x, const char* total, const char* own) {
  const std::string all = Str(x, total);
  if (!x.is_object() || !x.contains(own)) return all;
  const std::string mine = Str(x, own);
  return mine == all ? all : all + " (own " + mine + ")";
}

std::string FormatTenantTable(const json& tenants) {
  Table t({"NAME", "GUARANTEED", "BORROW LIMIT", "MAX JOB GPUS", "MAX RUNNING", "SHARES", "USAGE",
           "RUNNING", "QUEUED"});
  for (size_t c = 1; c < 9; ++c) t.AlignRight(c);
  if (tenants.is_array()) {
    for (const json& x : tenants) {
      t.AddRow({Str(x, "name"), Str(x, "guaranteed_gpus"), Limit(Field(x, "borrow_limit_gpus"), -1),
                Limit(Field(x, "max_job_gpus"), 0), Limit(Field(x, "max_running_jobs"), 0),
                Str(x, "shares"), WithOwn(x, "usage_gpus", "own_usage_gpus"),
                WithOwn(x, "running_jobs", "own_running_jobs"),
                WithOwn(x, "queued_jobs", "own_queued_jobs")});
    }
  }
  return t.Render();
}

std::string FormatQuota(const json& x) {
  std::ostringstream os;
  os << "Tenant " << Str(x, "name") << "\n";
  auto kv = [&](const std::string& k, const std::string& v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "  %-18s ", (k + ":").c_str());
    os << buf << v << "\n";
  };
  kv("Guaranteed GPUs", Str(x, "guaranteed_gpus"));
  kv("Borrow limit", Limit(Field(x, "borrow_limit_gpus"), -1));
  kv("Max GPUs per job", Limit(Field(x, "max_job_gpus"), 0));
  kv("Max running jobs", Limit(Field(x, "max_running_jobs"), 0));
  kv("Max queued jobs", Limit(Field(x, "max_queued_jobs"), 0));
  kv("Shares", Str(x, "shares"));
  kv("In use", Str(x, "usage_gpus") + " GPUs, " + Str(x, "running_jobs") + " running, " +
                   Str(x, "queued_jobs") + " queued");
  // With sub-tenants, the totals above include theirs: its own apart.
  if (x.is_object() && x.contains("own_usage_gpus") &&
      (Str(x, "own_usage_gpus") != Str(x, "usage_gpus") ||
       Str(x, "own_running_jobs") != Str(x, "running_jobs") ||
       Str(x, "own_queued_jobs") != Str(x, "queued_jobs"))) {
    kv("Its own", Str(x, "own_usage_gpus") + " GPUs, " + Str(x, "own_running_jobs") + " running, " +
                      Str(x, "own_queued_jobs") + " queued (the rest: sub-tenants)");
  }
  // The accounts granted to its tenant-admins, when there are any.
  std::string granted;
  if (x.contains("unix_accounts") && x["unix_accounts"].is_array()) {
    for (const json& a : x["unix_accounts"]) {
      if (a.is_string()) granted += (granted.empty() ? "" : ", ") + a.get<std::string>();
    }
  }
  if (x.contains("unix_group") && x["unix_group"].is_string() &&
      !x["unix_group"].get<std::string>().empty()) {
    granted +=
        (granted.empty() ? "" : "; ") + ("members of group " + x["unix_group"].get<std::string>());
  }
  if (!granted.empty()) kv("Unix accounts", granted);
  return os.str();
}

std::string FormatObjectTable(const json& items, const std::vector<std::string>& columns) {
  std::vector<std::string> keys;
  auto add_key = [&](const std::string& k) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  if (items.is_array()) {
    for (const std::string& c : columns) {
      for (const json& x : items) {
        if (x.is_object() && x.contains(c)) {
          add_key(c);
          break;
        }
      }
    }
    for (const json& x : items) {
      if (!x.is_object()) continue;
      for (auto it = x.begin(); it != x.end(); ++it) {
        if (!it->is_structured()) add_key(it.key());
      }
    }
  }
  std::vector<std::string> headers;
  for (const std::string& k : keys) {
    const bool time = k.size() > 3 && k.compare(k.size() - 3, 3, "_ms") == 0;
    headers.push_back(Upper(time ? k.substr(0, k.size() - 3) : k));
  }
  Table t(headers);
  if (items.is_array()) {
    for (const json& x : items) {
      std::vector<std::string> row;
      for (const std::string& k : keys) {
        const bool time = k.size() > 3 && k.compare(k.size() - 3, 3, "_ms") == 0;
        const json& v = Field(x, k.c_str());
        row.push_back(time ? FormatTime(v) : Cell(v));
      }
      t.AddRow(std::move(row));
    }
  }
  return t.Render();
}

}  // namespace topo::cli
