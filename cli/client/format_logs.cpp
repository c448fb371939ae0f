// The event log's lines and the audit log's table (format.hpp), the
// summary of an object's fields they share, and a rank's log made safe for
// a terminal (LogEscaper).

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "client/format.hpp"
#include "client/format_internal.hpp"
#include "topo/common/hostlist.hpp"

namespace topo::cli {

using format_internal::Dump;
using format_internal::Field;
using format_internal::IsInt;
using format_internal::Str;
using format_internal::Summarize;
using format_internal::Truncate;
using nlohmann::json;

namespace {

// How many bytes at the end of `text` may start a character or a CRLF that
// the next piece completes: an unfinished UTF-8 lead sequence, or a CR.
size_t OpenTail(std::string_view text) {
  if (text.empty()) return 0;
  if (text.back() == '\r') return 1;
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = (c & 0xE0) == 0xC0   ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string LogEscaper::Escape(std::string_view piece) {
  std::string text = pending_ + std::string(piece);
  const size_t hold = OpenTail(text);
  pending_ = text.substr(text.size() - hold);
  text.resize(text.size() - hold);
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const bool keep =
        i < text.size() && (text[i] == '\n' || text[i] == '\t' ||
                            (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n'));
    if (!keep && i < text.size()) continue;
    out += TerminalSafe(std::string_view(text).substr(start, i - start));
    if (i < text.size()) out += text[i];
    start = i + 1;
  }
  return out;
}

std::string LogEscaper::Finish() {
  std::string rest = TerminalSafe(pending_);
  pending_.clear();
  return rest;
}

namespace format_internal {

std::string Summarize(const json& obj, const std::vector<std::string>& skip) {
  std::string out;
  if (!obj.is_object()) return out;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(skip.begin(), skip.end(), it.key()) != skip.end()) continue;
    std::string v;
    const json& x = it.value();
    if (it.key() == "ranks" && x.is_array()) {
      v = std::to_string(x.size()) + " GPUs";
    } else if (it.key() == "checkpoint_step" && IsInt(x) && x.get<int64_t>() < 0) {
      v = "none";  // the log's -1: no checkpoint to start from
    } else if (x.is_array() &&
               std::all_of(x.begin(), x.end(), [](const json& e) { return e.is_string(); })) {
      std::vector<std::string> names;
      for (const json& e : x) names.push_back(Cell(e));
      v = names.empty() ? "-" : common::CompressHostlist(names);
    } else if (it.key() == "request" && x.is_object()) {
      const json& spec = Field(x, "spec");
      v = "gpus " + Str(spec, "gpus");
      if (!Str(spec, "name").empty() && Str(spec, "name") != "-") v += ", " + Str(spec, "name");
      if (Field(x, "tenant").is_string()) v += ", tenant " + Str(x, "tenant");
      if (Field(x, "user").is_string()) v += ", user " + Str(x, "user");
    } else if (x.is_object() && Field(x, "name").is_string()) {
      v = Str(x, "name");  // a tenant, a node: its name says enough
    } else if (x.is_structured()) {
      v = Truncate(TerminalSafe(Dump(x)), 60);
    } else {
      v = Cell(x);
      // Quoted as JSON (from the raw string, so nothing is escaped twice).
      if (x.is_string() && (v.empty() || v.find(' ') != std::string::npos)) {
        v = TerminalSafe(Dump(x));
      }
    }
    out += (out.empty() ? "" : " ") + TerminalSafe(it.key()) + "=" + v;
  }
  return out;
}

}  // namespace format_internal

std::string EventHeader() {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%8s  %-19s  %-12s  %s\n", "SEQ", "TIME", "ACTOR", "EVENT");
  return buf;
}

std::string FormatEvent(const json& entry) {
  std::string out;
  const json& event = Field(entry, "event");
  std::string what = Str(event, "type");
  const std::string detail = Summarize(event, {"type"});
  if (!detail.empty()) what += " " + detail;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%8s  %-19s  %-12s  ", Str(entry, "seq").c_str(),
                FormatTime(Field(entry, "time_ms")).c_str(), Str(entry, "actor").c_str());
  out += buf + what + "\n";
  const json& commands = Field(entry, "commands");
  if (commands.is_array()) {
    for (const json& c : commands) {
      std::string line = "-> " + Str(c, "type");
      const std::string d = Summarize(c, {"type"});
      if (!d.empty()) line += " " + d;
      out += std::string(8 + 2 + 19 + 2 + 12 + 2, ' ') + line + "\n";
    }
  }
  return out;
}

namespace {

// What an audited action was done to (FormatAuditTable), and the detail's
// fields that said so.
std::string AuditTarget(const std::string& action, const json& detail,
                        std::vector<std::string>* used) {
  auto has = [&](const char* k) {
    const json& v = Field(detail, k);
    return v.is_string() || IsInt(v);
  };
  const std::string kind = action.substr(0, action.find('.'));
  if (has("job")) {
    used->push_back("job");
    return "job " + Str(detail, "job");
  }
  if (has("node")) {
    used->push_back("node");
    if (!has("gpu")) return Str(detail, "node");
    used->push_back("gpu");
    return Str(detail, "node") + ":" + Str(detail, "gpu");
  }
  if (kind == "token" && has("id")) {
    used->push_back("id");
    return "token " + Str(detail, "id");
  }
  for (const char* k : {"user", "tenant", "partition", "reservation"}) {
    if (has(k)) {
      used->push_back(k);
      return std::string(k) + " " + Str(detail, k);
    }
  }
  if (has("name")) {
    used->push_back("name");
    return TerminalSafe(kind) + " " + Str(detail, "name");
  }
  return "-";
}

}  // namespace

std::string FormatAuditTable(const json& rows) {
  Table t({"TIME", "ACTOR", "ACTION", "TARGET", "DETAIL"});
  if (rows.is_array()) {
    for (const json& r : rows) {
      const json& detail = Field(r, "detail");
      const std::string action =
          Field(r, "action").is_string() ? r["action"].get<std::string>() : "";
      std::vector<std::string> used;
      const std::string target = AuditTarget(action, detail, &used);
      std::string rest = Summarize(detail, used);
      t.AddRow({FormatTime(Field(r, "time_ms")), Str(r, "actor"), Str(r, "action"), target,
                rest.empty() ? "-" : rest});
    }
  }
  return t.Render();
}

}  // namespace topo::cli
