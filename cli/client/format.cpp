#include "client/format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>
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
using format_internal::KeyValue;
using format_internal::Plural;
using format_internal::Str;
using format_internal::Truncate;
using nlohmann::json;

namespace {

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

// Limits: 0 means none; borrow -1 means none.
std::string Limit(const json& v, int64_t none) {
  if (IsInt(v) && v.get<int64_t>() == none) return "none";
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

// FREE of a node view: healthy GPUs without a job on a node that is up.
int64_t FreeGpus(const json& n) {
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
  return free;
}

}  // namespace

json NodeSummary(const json& nodes) {
  json out = {
      {"by_gpu_type", json::array()}, {"by_pod", json::array()}, {"by_partition", json::array()}};
  std::map<std::string, size_t> type_row, pod_row, partition_row;
  auto add = [](json& rows, std::map<std::string, size_t>& index, const std::string& name,
                const json& n) {
    auto [it, fresh] = index.emplace(name, rows.size());
    if (fresh) {
      rows.push_back({{"name", name},
                      {"nodes", 0},
                      {"up", 0},
                      {"draining", 0},
                      {"drained", 0},
                      {"down", 0},
                      {"suspect", 0},
                      {"gpus", 0},
                      {"free", 0}});
    }
    json& row = rows[it->second];
    row["nodes"] = row["nodes"].get<int64_t>() + 1;
    const std::string state = Str(n, "state");
    if (row.contains(state)) row[state] = row[state].get<int64_t>() + 1;
    const json& gpus = Field(n, "gpus");
    row["gpus"] = row["gpus"].get<int64_t>() + (IsInt(gpus) ? gpus.get<int64_t>() : 0);
    row["free"] = row["free"].get<int64_t>() + FreeGpus(n);
  };
  if (nodes.is_array()) {
    for (const json& n : nodes) {
      const json& model = Field(n, "gpu_model");
      const bool named = model.is_string() && !model.get<std::string>().empty();
      add(out["by_gpu_type"], type_row, named ? model.get<std::string>() : "(none)", n);
      add(out["by_pod"], pod_row, Str(n, "pod"), n);
      const json& partitions = Field(n, "partitions");
      if (!partitions.is_array()) continue;
      for (const json& p : partitions) {
        if (p.is_string()) add(out["by_partition"], partition_row, p.get<std::string>(), n);
      }
    }
  }
  return out;
}

std::string FormatNodeSummary(const json& summary) {
  std::string out;
  for (const char* part : {"by_gpu_type", "by_pod", "by_partition"}) {
    const std::string_view name(part);
    const json& rows = Field(summary, part);
    if (name == "by_partition" && (!rows.is_array() || rows.empty())) continue;
    Table t({name == "by_gpu_type" ? "GPU TYPE"
             : name == "by_pod"    ? "POD"
                                   : "PARTITION",
             "NODES", "UP", "DRAINING", "DRAINED", "DOWN", "SUSPECT", "GPUS", "FREE"});
    for (int c = 1; c <= 8; ++c) t.AlignRight(c);
    if (rows.is_array()) {
      for (const json& r : rows) {
        t.AddRow({Str(r, "name"), Str(r, "nodes"), Str(r, "up"), Str(r, "draining"),
                  Str(r, "drained"), Str(r, "down"), Str(r, "suspect"), Str(r, "gpus"),
                  Str(r, "free")});
      }
    }
    out += (out.empty() ? "" : "\n") + t.Render();
  }
  return out;
}

std::string FormatNodeTable(const json& nodes) {
  Table t({"NAME", "STATE", "GPUS", "TYPE", "FREE", "HBD", "LEAF", "POD", "REASON"});
  t.AlignRight(2);
  t.AlignRight(4);
  if (nodes.is_array()) {
    for (const json& n : nodes) {
      std::string reason = Str(n, "reason");
      if (reason.empty()) reason = "-";
      const json& m = Field(n, "gpu_model");
      const std::string model =
          m.is_string() && !m.get<std::string>().empty() ? m.get<std::string>() : "-";
      t.AddRow({Str(n, "name"), Str(n, "state"), Str(n, "gpus"), model, std::to_string(FreeGpus(n)),
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
  if (!Str(node, "gpu_model").empty()) KeyValue(os, "GPU type", Str(node, "gpu_model"));
  const json& features = Field(node, "features");
  if (features.is_array() && !features.empty()) {
    std::string list;
    for (const json& f : features)
      list += (list.empty() ? "" : ",") + (f.is_string() ? f.get<std::string>() : "");
    KeyValue(os, "Features", list);
  }
  KeyValue(os, "HBD", Str(node, "hbd"));
  KeyValue(os, "Leaf", Str(node, "leaf"));
  KeyValue(os, "Pod", Str(node, "pod"));
  const json& partitions = Field(node, "partitions");
  if (partitions.is_array() && !partitions.empty()) {
    std::string list;
    for (const json& p : partitions) list += (list.empty() ? "" : ",") + Cell(p);
    KeyValue(os, "Partitions", list);
  }
  if (Field(node, "reservation").is_string()) KeyValue(os, "Reservation", Str(node, "reservation"));
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

// A tenant's per-partition limits and what it uses there, by partition:
// name -> {limit fields of "partitions", usage_gpus, running_jobs of
// "partition_usage"}; partitions in either.
std::map<std::string, json> PartitionRows(const json& x) {
  std::map<std::string, json> rows;
  for (const char* key : {"partitions", "partition_usage"}) {
    if (!x.is_object() || !x.contains(key) || !x[key].is_object()) continue;
    for (const auto& [name, v] : x[key].items()) {
      if (!v.is_object()) continue;
      json& row = rows[name];
      if (!row.is_object()) row = json::object();
      row.update(v);
    }
  }
  return rows;
}

int64_t IntOr0(const json& row, const char* key) {
  return row.contains(key) && IsInt(row[key]) ? row[key].get<int64_t>() : 0;
}

// "gb200: 56/64 GPUs 2/4 jobs <=32 per job; debug: 1/1 jobs": the
// partitions with limits, what is used against each limit.
std::string PartitionLimitsCell(const json& x) {
  std::string out;
  int shown = 0, more = 0;
  for (const auto& [name, row] : PartitionRows(x)) {
    std::string text;
    auto add = [&](const std::string& piece) { text += (text.empty() ? "" : " ") + piece; };
    if (const int64_t m = IntOr0(row, "max_gpus"); m > 0) {
      add(std::to_string(IntOr0(row, "usage_gpus")) + "/" + std::to_string(m) + " GPUs");
    }
    if (const int64_t m = IntOr0(row, "max_running_jobs"); m > 0) {
      add(std::to_string(IntOr0(row, "running_jobs")) + "/" + std::to_string(m) + " jobs");
    }
    if (const int64_t m = IntOr0(row, "max_job_gpus"); m > 0) {
      add("<=" + std::to_string(m) + " per job");
    }
    if (text.empty()) continue;  // used there, no limit
    if (shown == 3) {
      ++more;
      continue;
    }
    out += (out.empty() ? "" : "; ") + TerminalSafe(name) + ": " + text;
    ++shown;
  }
  if (more > 0) out += "; +" + std::to_string(more) + " more";
  return out.empty() ? "-" : out;
}

std::string FormatTenantTable(const json& tenants) {
  Table t({"NAME", "GUARANTEED", "BORROW LIMIT", "MAX JOB GPUS", "MAX RUNNING", "SHARES", "USAGE",
           "RUNNING", "QUEUED", "PARTITION LIMITS"});
  for (size_t c = 1; c < 9; ++c) t.AlignRight(c);
  if (tenants.is_array()) {
    for (const json& x : tenants) {
      t.AddRow({Str(x, "name"), Str(x, "guaranteed_gpus"), Limit(Field(x, "borrow_limit_gpus"), -1),
                Limit(Field(x, "max_job_gpus"), 0), Limit(Field(x, "max_running_jobs"), 0),
                Str(x, "shares"), WithOwn(x, "usage_gpus", "own_usage_gpus"),
                WithOwn(x, "running_jobs", "own_running_jobs"),
                WithOwn(x, "queued_jobs", "own_queued_jobs"), PartitionLimitsCell(x)});
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
  // Per partition: its limits there and what its own jobs use there.
  for (const auto& [name, row] : PartitionRows(x)) {
    const int64_t max_gpus = IntOr0(row, "max_gpus"), max_running = IntOr0(row, "max_running_jobs"),
                  max_job = IntOr0(row, "max_job_gpus");
    std::string v = std::to_string(IntOr0(row, "usage_gpus")) +
                    (max_gpus > 0 ? " of max " + std::to_string(max_gpus) : std::string()) +
                    " GPUs, " + std::to_string(IntOr0(row, "running_jobs")) +
                    (max_running > 0 ? " of max " + std::to_string(max_running) : std::string()) +
                    " running";
    if (max_job > 0) v += ", max " + std::to_string(max_job) + " GPUs per job";
    if (max_gpus == 0 && max_running == 0 && max_job == 0) v += " (no limits)";
    kv("Partition " + TerminalSafe(name), v);
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
