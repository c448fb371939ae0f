// Trace CSVs in, per-job CSV and JSON out (trace_io.hpp).

#include "topo/common/trace_io.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace topo::common {

namespace {

using core::Result;
using core::Status;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    fields.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

// Lines with their 1-based numbers, skipping blank and '#' lines.
struct Line {
  int number;
  std::string_view text;
};
std::vector<Line> ContentLines(std::string_view text) {
  std::vector<Line> lines;
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    std::string_view line = Trim(text.substr(pos, end - pos));
    if (!line.empty() && line.front() != '#') lines.push_back({number, line});
    pos = end + 1;
  }
  return lines;
}

std::string At(int line, std::string_view column) {
  return "line " + std::to_string(line) + ", column " + std::string(column) + ": ";
}

std::optional<double> ParseNumber(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInteger(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The header's column positions by name.
struct Header {
  std::map<std::string, size_t, std::less<>> index;
  size_t count = 0;
  std::optional<size_t> Find(std::string_view name) const {
    auto it = index.find(name);
    if (it == index.end()) return std::nullopt;
    return it->second;
  }
};

Result<Header> ReadHeader(const Line& line, std::span<const std::string_view> known,
                          std::span<const std::string_view> required, bool allow_unknown) {
  Header h;
  std::vector<std::string_view> names = SplitFields(line.text);
  h.count = names.size();
  for (size_t i = 0; i < names.size(); ++i) {
    std::string_view name = names[i];
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || k == name;
    if (!is_known && !allow_unknown) {
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Status::Error(At(line.number, name.empty() ? "(empty)" : name) +
                           "unknown column; the columns are " + list);
    }
    if (!h.index.emplace(std::string(name), i).second) {
      return Status::Error(At(line.number, name) + "named twice in the header");
    }
  }
  for (std::string_view r : required) {
    if (!h.Find(r)) {
      return Status::Error("line " + std::to_string(line.number) + ": the header has no \"" +
                           std::string(r) + "\" column (required)");
    }
  }
  return h;
}

// Reads the cells of one row by column name.
class Row {
 public:
  Row(const Header& header, const Line& line)
      : header_(header), line_(line), fields_(SplitFields(line.text)) {}

  Status CheckWidth() const {
    if (fields_.size() != header_.count) {
      return Status::Error("line " + std::to_string(line_.number) + ": " +
                           std::to_string(fields_.size()) + " fields, the header has " +
                           std::to_string(header_.count));
    }
    return Status::Ok();
  }
  std::string_view Cell(std::string_view column) const {
    std::optional<size_t> i = header_.Find(column);
    return i ? fields_[*i] : std::string_view();
  }
  // nullopt when empty; an error when not a number in [lo, hi].
  Result<std::optional<double>> Number(std::string_view column, double lo, double hi,
                                       bool lo_open = false) const {
    std::string_view cell = Cell(column);
    if (cell.empty()) return std::optional<double>();
    std::optional<double> v = ParseNumber(cell);
    if (!v || *v < lo || (lo_open && *v == lo) || *v > hi) {
      return Status::Error(At(line_.number, column) + "\"" + std::string(cell) +
                           "\" is not a number " + (lo_open ? "> " : ">= ") + Fmt(lo) +
                           (hi < 1e300 ? " and <= " + Fmt(hi) : ""));
    }
    return std::optional<double>(*v);
  }
  Result<std::optional<int64_t>> Integer(std::string_view column, int64_t lo, int64_t hi) const {
    std::string_view cell = Cell(column);
    if (cell.empty()) return std::optional<int64_t>();
    std::optional<int64_t> v = ParseInteger(cell);
    if (!v || *v < lo || *v > hi) {
      return Status::Error(At(line_.number, column) + "\"" + std::string(cell) +
                           "\" is not an integer " + std::to_string(lo) + ".." +
                           std::to_string(hi));
    }
    return std::optional<int64_t>(*v);
  }
  int line() const { return line_.number; }

 private:
  static std::string Fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  const Header& header_;
  Line line_;
  std::vector<std::string_view> fields_;
};

#define TOPO_TRY_ASSIGN(var, expr)              \
  auto var##_or = (expr);                       \
  if (!var##_or.ok()) return var##_or.status(); \
  auto var = std::move(var##_or).value()

constexpr std::string_view kTraceColumns[] = {"submit_s",
                                              "duration_s",
                                              "gpus",
                                              "tenant",
                                              "tp",
                                              "cp",
                                              "ep",
                                              "pp",
                                              "dp",
                                              "gpus_per_node",
                                              "priority",
                                              "time_limit_s",
                                              "checkpoint_interval_s"};
constexpr std::string_view kTraceRequired[] = {"submit_s", "duration_s", "gpus"};
constexpr double kMaxSeconds = 1e10;
constexpr int64_t kMaxGpus = 1 << 24;

core::TimeMs Ms(double seconds) { return std::llround(seconds * 1000.0); }

Result<core::SimJob> ParseTraceRow(const Row& row, int64_t index) {
  if (Status s = row.CheckWidth(); !s.ok()) return s;
  TOPO_TRY_ASSIGN(submit, row.Number("submit_s", 0, kMaxSeconds));
  TOPO_TRY_ASSIGN(duration, row.Number("duration_s", 0, kMaxSeconds, /*lo_open=*/true));
  TOPO_TRY_ASSIGN(gpus, row.Integer("gpus", 1, kMaxGpus));
  if (!submit) return Status::Error(At(row.line(), "submit_s") + "empty (required)");
  if (!duration) return Status::Error(At(row.line(), "duration_s") + "empty (required)");
  if (!gpus) return Status::Error(At(row.line(), "gpus") + "empty (required)");
  core::SimJob job;
  job.index = index;
  job.submit = Ms(*submit);
  job.duration = std::max<core::TimeMs>(1, Ms(*duration));
  core::JobSpec& spec = job.request.spec;
  spec.gpus = static_cast<int>(*gpus);
  spec.name = "job-" + std::to_string(index);
  core::Parallelism& p = spec.parallelism;
  int* dims[] = {&p.tp, &p.cp, &p.ep, &p.pp};
  const char* dim_names[] = {"tp", "cp", "ep", "pp"};
  for (int d = 0; d < 4; ++d) {
    TOPO_TRY_ASSIGN(v, row.Integer(dim_names[d], 1, kMaxGpus));
    *dims[d] = v ? static_cast<int>(*v) : 1;
  }
  TOPO_TRY_ASSIGN(dp, row.Integer("dp", 1, kMaxGpus));
  if (dp) {
    p.dp = static_cast<int>(*dp);
  } else {
    const int64_t inner = static_cast<int64_t>(p.tp) * p.cp * p.pp;
    if (spec.gpus % inner != 0) {
      return Status::Error(At(row.line(), "dp") + "gpus " + std::to_string(spec.gpus) +
                           " is not a multiple of tp x cp x pp = " + std::to_string(inner) +
                           "; fix the layout or give dp");
    }
    p.dp = static_cast<int>(spec.gpus / inner);
  }
  TOPO_TRY_ASSIGN(gpn, row.Integer("gpus_per_node", 0, core::kMaxGpusPerNode));
  spec.gpus_per_node = gpn ? static_cast<int>(*gpn) : 0;
  if (Status s = core::ValidateJobSpec(spec); !s.ok()) {
    return Status::Error("line " + std::to_string(row.line()) + ": " + s.message());
  }
  std::string_view tenant = row.Cell("tenant");
  job.request.tenant = tenant.empty() ? "default" : std::string(tenant);
  TOPO_TRY_ASSIGN(priority, row.Integer("priority", -1000000, 1000000));
  job.request.priority = priority ? static_cast<int>(*priority) : 0;
  TOPO_TRY_ASSIGN(limit, row.Number("time_limit_s", 0, kMaxSeconds, /*lo_open=*/true));
  job.request.time_limit = limit ? Ms(*limit) : core::DefaultTimeLimit(job.duration);
  TOPO_TRY_ASSIGN(ckpt, row.Number("checkpoint_interval_s", -kMaxSeconds, kMaxSeconds));
  if (ckpt) job.request.checkpoint_interval = *ckpt < 0 ? -1 : Ms(*ckpt);
  return job;
}

constexpr std::string_view kKalosRequired[] = {"job_idx", "submit_offset_s", "duration_s",
                                               "gpu_num", "gpus_per_node",   "job_class"};

Result<core::KalosRow> ParseKalosRow(const Row& row) {
  if (Status s = row.CheckWidth(); !s.ok()) return s;
  core::KalosRow k;
  TOPO_TRY_ASSIGN(index, row.Integer("job_idx", 0, INT64_MAX));
  TOPO_TRY_ASSIGN(submit, row.Integer("submit_offset_s", 0, INT64_MAX / 1000));
  TOPO_TRY_ASSIGN(duration, row.Number("duration_s", 0, kMaxSeconds, /*lo_open=*/true));
  TOPO_TRY_ASSIGN(gpus, row.Integer("gpu_num", 1, kMaxGpus));
  TOPO_TRY_ASSIGN(gpn, row.Number("gpus_per_node", 0, core::kMaxGpusPerNode));
  for (std::string_view c : kKalosRequired) {
    if (row.Cell(c).empty()) return Status::Error(At(row.line(), c) + "empty (required)");
  }
  k.index = *index;
  k.submit_s = *submit;
  k.duration_s = *duration;
  k.gpus = static_cast<int>(*gpus);
  k.gpus_per_node = static_cast<int>(std::lround(*gpn));
  std::string_view cls = row.Cell("job_class");
  k.pretrain = cls == "Pretrain";
  return k;
}

double Round6(double v) { return std::round(v * 1e6) / 1e6; }

nlohmann::ordered_json Opt(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return Round6(*v);
}

// Seconds from ms, exact to the ms ("12.5", "3", "0.001").
std::string Seconds(core::TimeMs ms) {
  const bool negative = ms < 0;
  const uint64_t a = negative ? static_cast<uint64_t>(-ms) : static_cast<uint64_t>(ms);
  std::string s = (negative ? "-" : "") + std::to_string(a / 1000);
  uint64_t frac = a % 1000;
  if (frac != 0) {
    char buf[8];
    std::snprintf(buf, sizeof buf, ".%03llu", static_cast<unsigned long long>(frac));
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    s += f;
  }
  return s;
}

std::string Decimal(double v, int digits) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Result<std::vector<core::SimJob>> ParseTraceCsv(std::string_view text) {
  std::vector<Line> lines = ContentLines(text);
  if (lines.empty()) {
    return Status::Error(
        "the trace is empty; it needs a header line such as "
        "\"submit_s,duration_s,gpus\"");
  }
  TOPO_TRY_ASSIGN(header, ReadHeader(lines.front(), kTraceColumns, kTraceRequired, false));
  std::vector<core::SimJob> jobs;
  jobs.reserve(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    Result<core::SimJob> job = ParseTraceRow(Row(header, lines[i]), static_cast<int64_t>(i - 1));
    if (!job.ok()) return job.status();
    jobs.push_back(std::move(job).value());
  }
  return jobs;
}

Result<std::vector<core::KalosRow>> ParseKalosCsv(std::string_view text) {
  std::vector<Line> lines = ContentLines(text);
  if (lines.empty()) return Status::Error("the Kalos trace is empty; it needs its header line");
  TOPO_TRY_ASSIGN(header, ReadHeader(lines.front(), kKalosRequired, kKalosRequired, true));
  std::vector<core::KalosRow> rows;
  rows.reserve(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    Result<core::KalosRow> row = ParseKalosRow(Row(header, lines[i]));
    if (!row.ok()) return row.status();
    rows.push_back(std::move(row).value());
  }
  return rows;
}

void WritePerJobCsv(std::ostream& out, std::span<const core::SimReport> reports) {
  out << "policy,index,id,tenant,gpus,submit_s,first_start_s,end_s,state,queue_delay_s,jct_s,"
         "placements,restarts,interruptions,productive_s,lost_failure_gpu_h,lost_other_gpu_h,"
         "leaf_span_ratio,comm_cost_ratio,required_met,run_s,work_s\n";
  constexpr double kMsPerHour = 3600.0 * 1000.0;
  for (const core::SimReport& r : reports) {
    for (const core::SimJobResult& j : r.job_results) {
      const bool started = j.first_start >= 0;
      const bool ended = j.end >= 0;
      out << r.stack << ',' << j.index << ',' << j.id << ','
          << (j.tenant >= 0 && j.tenant < static_cast<int>(r.tenants.size()) ? r.tenants[j.tenant]
                                                                             : "")
          << ',' << j.gpus << ',' << Seconds(j.submit) << ','
          << (started ? Seconds(j.first_start) : "") << ',' << (ended ? Seconds(j.end) : "") << ','
          << (ended ? core::JobStateName(j.state) : "unfinished") << ','
          << (started ? Seconds(j.first_start - j.submit) : "") << ','
          << (j.state == core::JobState::kCompleted ? Seconds(j.end - j.submit) : "") << ','
          << j.placements << ',' << j.restarts << ',' << j.interruptions << ','
          << Seconds(j.productive_ms) << ',' << Decimal(j.lost_failure_gpu_ms / kMsPerHour, 3)
          << ',' << Decimal(j.lost_other_gpu_ms / kMsPerHour, 3) << ','
          << (started ? Decimal(j.leaf_span_ratio, 4) : "") << ','
          << (started ? Decimal(j.comm_cost_ratio, 4) : "") << ','
          << (started ? (j.required_met ? "1" : "0") : "") << ','
          << (started ? Decimal(j.run_ms / 1000.0, 3) : "") << ','
          << (started ? Decimal(j.work_ms / 1000.0, 3) : "") << '\n';
    }
  }
}

nlohmann::ordered_json JctBySizeToJson(const core::SimReport& r) {
  nlohmann::ordered_json sizes = nlohmann::ordered_json::object();
  const char* const names[] = {"small", "medium", "large"};
  for (size_t c = 0; c < r.jct_by_size.size(); ++c) {
    sizes[names[c]] = {{"jobs", r.jct_by_size[c].jobs},
                       {"mean_jct_s", Opt(r.jct_by_size[c].mean_jct_s)},
                       {"p95_jct_s", Opt(r.jct_by_size[c].p95_jct_s)},
                       {"bound_jct_s", Opt(r.jct_by_size[c].bound_jct_s)}};
  }
  return sizes;
}

nlohmann::ordered_json SimMetricsToJson(const core::SimReport& r) {
  nlohmann::ordered_json j;
  j["utilization"] = Opt(r.utilization);
  if (r.speed_model) j["goodput"] = Opt(r.goodput);
  j["mean_jct_s"] = Opt(r.mean_jct_s);
  j["p95_jct_s"] = Opt(r.p95_jct_s);
  if (r.speed_model) {
    // The speed model's metrics (docs/sim.md); absent with --speed-model off,
    // whose output stays as it was.
    j["mean_slowdown"] = Opt(r.mean_slowdown);
    j["slow_placement_gpu_hours"] = Round6(r.slow_gpu_hours);
    j["jct_by_size"] = JctBySizeToJson(r);
    j["cross_hbd_scale"] = Round6(r.cross_hbd_scale);
  }
  j["mean_queue_delay_s"] = Opt(r.mean_queue_delay_s);
  j["mean_queue_delay_large_s"] = Opt(r.mean_queue_delay_large_s);
  j["ettr_large"] = Opt(r.ettr_large);
  j["work_ratio_large"] = Opt(r.work_ratio_large);
  j["required_met"] = Opt(r.required_met);
  j["lost_gpu_hours"] = r.placements > 0 ? nlohmann::ordered_json(Round6(r.lost_gpu_hours))
                                         : nlohmann::ordered_json(nullptr);
  // Restarts of every kind, and what preemption did (docs/sim.md, Metrics).
  j["restarts"] = r.restarts;
  j["preemption"] = {{"victims", r.preemptions},
                     {"borrowed_victims", r.preempted_borrowed},
                     {"victim_gpus", r.preempted_gpus},
                     {"restarts", r.preemption_restarts},
                     {"victims_wait_gpu_hours", Round6(r.preempted_wait_gpu_ms / 3.6e6)}};
  j["failures"] = {{"injected", r.failures_injected}, {"hit_jobs", r.failures_hit_jobs}};
  j["leaf_span_ratio_mean"] = Opt(r.leaf_span_ratio_mean);
  j["comm_cost_ratio_mean"] = Opt(r.comm_cost_ratio_mean);
  j["cpu_s"] = Opt(r.cpu_s);
  j["wall_s"] = Opt(r.wall_s);
  j["peak_rss_mb"] = Opt(r.peak_rss_mb);
  return j;
}

nlohmann::ordered_json SimReportsToJson(std::span<const core::SimReport> reports) {
  nlohmann::ordered_json policies = nlohmann::ordered_json::object();
  for (const core::SimReport& r : reports) policies[r.stack] = SimMetricsToJson(r);
  nlohmann::ordered_json j;
  j["policies"] = std::move(policies);
  return j;
}

}  // namespace topo::common
