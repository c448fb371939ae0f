#include "topo/common/job_chain.hpp"

#include <algorithm>
#include <charconv>
#include <set>

#include "topo/common/event_json.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t from = 0;
  while (true) {
    const size_t at = text.find(sep, from);
    out.push_back(text.substr(from, at == std::string_view::npos ? at : at - from));
    if (at == std::string_view::npos) return out;
    from = at + 1;
  }
}

bool ToInt(std::string_view s, int64_t lo, int64_t hi, int64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && out >= lo && out <= hi;
}

std::string Quoted(std::string_view s) {
  return "\"" + std::string(s.substr(0, 60)) + (s.size() > 60 ? "...\"" : "\"");
}

}  // namespace

Result<std::vector<core::Dependency>> ParseDependencies(std::string_view text) {
  if (text.size() > kMaxChainText) {
    return Status::Error("dependency: longer than " + std::to_string(kMaxChainText) + " bytes");
  }
  if (text.find('?') != std::string_view::npos) {
    return Status::Error(
        "dependency: \"?\" (any of) is not supported; list conditions with \",\" (all of)");
  }
  std::vector<core::Dependency> out;
  for (std::string_view clause : Split(text, ',')) {
    std::vector<std::string_view> parts = Split(clause, ':');
    core::DependencyKind kind{};
    if (!core::ParseDependencyKind(parts[0], kind)) {
      return Status::Error("dependency: " + Quoted(parts[0]) +
                           " is not afterok, afterany or afternotok (write e.g. afterok:12:13)");
    }
    if (parts.size() < 2) {
      return Status::Error("dependency: " + Quoted(clause) + " names no job (write " +
                           std::string(parts[0]) + ":JOBID[:JOBID...])");
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      int64_t id = 0;
      if (!ToInt(parts[i], 1, INT64_MAX, id)) {
        return Status::Error("dependency: " + Quoted(parts[i]) + " in " + Quoted(clause) +
                             " is not a job id");
      }
      const core::Dependency d{kind, id};
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    }
  }
  if (out.size() > kMaxJobDependencies) {
    return Status::Error("dependency: more than " + std::to_string(kMaxJobDependencies) +
                         " jobs; chain them instead");
  }
  return out;
}

std::string FormatDependencies(const std::vector<core::Dependency>& deps) {
  std::string out;
  for (size_t i = 0; i < deps.size(); ++i) {
    if (i == 0 || deps[i].kind != deps[i - 1].kind) {
      if (i > 0) out += ",";
      out += core::DependencyKindName(deps[i].kind);
    }
    out += ":" + std::to_string(deps[i].job);
  }
  return out;
}

Result<ArraySpec> ParseArraySpec(std::string_view text) {
  if (text.size() > kMaxChainText) {
    return Status::Error("array: longer than " + std::to_string(kMaxChainText) + " bytes");
  }
  ArraySpec spec;
  std::string_view list = text;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    list = text.substr(0, pct);
    int64_t n = 0;
    if (!ToInt(text.substr(pct + 1), 1, static_cast<int64_t>(kMaxArrayTasks), n)) {
      return Status::Error("array: the throttle after % must be 1.." +
                           std::to_string(kMaxArrayTasks) + " (e.g. 0-99%8), not " +
                           Quoted(text.substr(pct + 1)));
    }
    spec.throttle = static_cast<int>(n);
  }
  std::set<int> tasks;
  for (std::string_view item : Split(list, ',')) {
    std::string_view range = item;
    int64_t step = 1;
    if (const size_t colon = item.find(':'); colon != std::string_view::npos) {
      range = item.substr(0, colon);
      if (!ToInt(item.substr(colon + 1), 1, kMaxArrayIndex, step)) {
        return Status::Error("array: the step after : in " + Quoted(item) +
                             " must be a whole number >= 1 (e.g. 0-30:10)");
      }
    }
    int64_t lo = 0;
    int64_t hi = 0;
    const size_t dash = range.find('-');
    const bool ok = dash == std::string_view::npos
                        ? ToInt(range, 0, kMaxArrayIndex, lo) && (hi = lo, true)
                        : ToInt(range.substr(0, dash), 0, kMaxArrayIndex, lo) &&
                              ToInt(range.substr(dash + 1), 0, kMaxArrayIndex, hi);
    if (!ok || hi < lo) {
      return Status::Error("array: " + Quoted(item) + " is not an index or a range A-B of 0.." +
                           std::to_string(kMaxArrayIndex) + " (write e.g. 0-99%8 or 1,3,5-7)");
    }
    for (int64_t i = lo; i <= hi; i += step) {
      tasks.insert(static_cast<int>(i));
      if (tasks.size() > kMaxArrayTasks) {
        return Status::Error("array: more than " + std::to_string(kMaxArrayTasks) +
                             " tasks; split it into several arrays");
      }
    }
  }
  spec.tasks.assign(tasks.begin(), tasks.end());
  return spec;
}

}  // namespace topo::common
