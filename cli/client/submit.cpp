#include "client/submit.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "client/input.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"
#include "topo/common/node_name.hpp"
#include "topo/core/perf_model.hpp"

namespace topo::cli {

using core::Result;
using core::Status;

namespace {

// Longest duration accepted: 10 years, well past the daemon's 30-day limit
// (which the daemon checks).
constexpr int64_t kMaxDurationS = int64_t{10} * 366 * 86400;

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t v = 0;
  if (text.empty()) return std::nullopt;
  const char* first = text.data();
  if (*first == '+') ++first;
  const auto [end, ec] = std::from_chars(first, text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseDigits(std::string_view text) {
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  if (text.size() > 12) return std::nullopt;
  return ParseInt(text);
}

constexpr std::string_view kDurationForms = "e.g. 90m, 2h, 3600s, 1d, 1h30m or 2:00:00";

bool IsKind(std::string_view k) {
  return k == "tp" || k == "cp" || k == "ep" || k == "pp" || k == "dp";
}

}  // namespace

Result<int64_t> ParseDuration(std::string_view text) {
  const std::string given(text);
  text = TrimView(text);
  auto bad = [&](const std::string& why) {
    return Status::Error("duration '" + given + "': " + why + " (" + std::string(kDurationForms) +
                         ")");
  };
  if (text.empty()) return bad("empty");
  int64_t total = 0;
  if (text.find(':') != std::string_view::npos) {
    int64_t days = 0;
    if (const size_t dash = text.find('-'); dash != std::string_view::npos) {
      std::optional<int64_t> d = ParseDigits(text.substr(0, dash));
      if (!d) return bad("days before '-' must be a whole number");
      days = *d;
      text.remove_prefix(dash + 1);
    }
    std::vector<std::string_view> parts;
    size_t start = 0;
    while (true) {
      const size_t colon = text.find(':', start);
      parts.push_back(
          text.substr(start, colon == std::string_view::npos ? text.npos : colon - start));
      if (colon == std::string_view::npos) break;
      start = colon + 1;
    }
    if (parts.size() != 3) return bad("write hours, minutes and seconds as H:MM:SS");
    std::optional<int64_t> h = ParseDigits(parts[0]);
    std::optional<int64_t> m = ParseDigits(parts[1]);
    std::optional<int64_t> s = ParseDigits(parts[2]);
    if (!h || !m || !s) return bad("H:MM:SS takes whole numbers");
    if (*m >= 60 || *s >= 60 || parts[1].size() != 2 || parts[2].size() != 2) {
      return bad("minutes and seconds are two digits, 00..59");
    }
    if (days > kMaxDurationS / 86400 || *h > kMaxDurationS / 3600) return bad("too long");
    total = days * 86400 + *h * 3600 + *m * 60 + *s;
  } else {
    bool any = false;
    std::string seen;
    while (!text.empty()) {
      size_t n = 0;
      while (n < text.size() && std::isdigit(static_cast<unsigned char>(text[n]))) ++n;
      if (n == 0) return bad("expected a number at '" + std::string(text) + "'");
      std::optional<int64_t> v = ParseDigits(text.substr(0, n));
      if (!v) return bad("number too large");
      if (n == text.size()) {
        return bad("add a unit: " + std::string(text) + "s, " + std::string(text) + "m, " +
                   std::string(text) + "h or " + std::string(text) + "d");
      }
      const char unit = static_cast<char>(std::tolower(static_cast<unsigned char>(text[n])));
      int64_t scale = 0;
      switch (unit) {
        case 'd':
          scale = 86400;
          break;
        case 'h':
          scale = 3600;
          break;
        case 'm':
          scale = 60;
          break;
        case 's':
          scale = 1;
          break;
        default:
          return bad("unknown unit '" + std::string(1, text[n]) + "' (use d, h, m or s)");
      }
      if (seen.find(unit) != std::string::npos)
        return bad("unit '" + std::string(1, unit) + "' given twice");
      seen += unit;
      if (*v > kMaxDurationS / scale) return bad("too long");
      total += *v * scale;
      any = true;
      text.remove_prefix(n + 1);
    }
    if (!any) return bad("empty");
  }
  if (total <= 0) return bad("must be longer than 0 s");
  if (total > kMaxDurationS) return bad("too long");
  return total;
}

Result<int64_t> ParseMemoryMiB(std::string_view text) {
  const std::string t(text);
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = t.substr(used);
  int64_t scale = 0;
  if (unit.empty() || unit == "M" || unit == "MiB" || unit == "m") {
    scale = 1;
  } else if (unit == "G" || unit == "GiB" || unit == "g") {
    scale = 1024;
  } else if (unit == "T" || unit == "TiB" || unit == "t") {
    scale = 1024 * 1024;
  }
  if (used == 0 || scale == 0 || n <= 0 || n > (int64_t{1} << 30) / scale) {
    return Status::Error("'" + t + "' is not a size such as 512M, 64G or 1T (at most 1024T)");
  }
  return n * scale;
}

namespace {

// "H100,H200" -> {"H100", "H200"}: --gpu-type and --feature values.
Result<std::vector<std::string>> SplitNameList(std::string_view value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string_view n = value.substr(start, comma - start);
    if (n.empty()) return Status::Error("'" + std::string(value) + "': an empty name in the list");
    if (n.size() > core::kMaxSelectionNameBytes) {
      return Status::Error("a name is longer than " + std::to_string(core::kMaxSelectionNameBytes) +
                           " bytes");
    }
    for (unsigned char c : n) {
      if (c < 0x21 || c > 0x7e) {
        return Status::Error("'" + common::ShownName(n) +
                             "': names are printable ASCII without blanks");
      }
    }
    out.emplace_back(n);
    start = comma + 1;
  }
  return out;
}

}  // namespace

const std::vector<SubmitFlagInfo>& SubmitFlagTable() {
  static const std::vector<SubmitFlagInfo> kTable = {
      {"gpus", "N", "GPUs of the job (required unless --spec gives them)"},
      {"tp", "N", "Tensor-parallel degree"},
      {"cp", "N", "Context-parallel degree"},
      {"ep", "N", "Expert-parallel degree (divides dp)"},
      {"pp", "N", "Pipeline-parallel degree"},
      {"dp", "N", "Data-parallel degree (default gpus / (tp x cp x pp))"},
      {"order", "ORDER", "Rank order, fastest first (default tp-cp-ep-dp-pp)"},
      {"gpus-per-node", "N", "GPUs taken on each node (default 0: whole nodes)"},
      {"spares", "N", "Whole spare nodes kept for a quick restart"},
      {"constraint", "KIND=SPEC",
       "Topology constraint of a group kind (tp, cp, ep, pp, dp): none, required:TIER or "
       "preferred:TIER; repeatable"},
      {"gpu-type", "TYPE[,TYPE]",
       "GPU models the job accepts, any one of them (e.g. H100 or H100,H200; topo nodes "
       "--summary lists the cluster's); default: any, one model per job"},
      {"feature", "F[,F]", "Node features the job needs, all of them (e.g. ib,nvme)"},
      {"nodelist", "HOSTLIST", "Run on exactly these nodes, every one of them (e.g. gpu[001-004])"},
      {"exclude", "HOSTLIST", "Never run on these nodes (e.g. gpu[013,027])"},
      {"name", "NAME", "Job name (default: the script's file name)"},
      {"model", "NAME",
       "What the job trains, for its predicted step time: a model preset such as llama3-70b "
       "(docs/perf-model.md lists them)"},
      {"tenant", "TENANT", "Tenant to charge (default: your own)"},
      {"partition", "NAME",
       "The partition to run in (-p; default: the cluster's default partition; topo partition "
       "list shows them)"},
      {"reservation", "NAME",
       "Run in this reservation: on its nodes, inside its window (topo reservation list shows "
       "them)"},
      {"priority", "N", "-100..100; above 0 needs tenant-admin or cluster-admin"},
      {"time", "DURATION",
       "Time limit: 2h, 90m, 3600s, 1d, 1h30m or H:MM:SS (default: the partition's default "
       "time, else 24 h)"},
      {"checkpoint-interval", "DURATION",
       "How often the job checkpoints, or 'never' (default 30 min)"},
      {"placement-wait", "DURATION",
       "How long the job may wait for a faster placement than it would get now, or 'never' "
       "(default: the tenant's or the cluster's, 30 min)"},
      {"mem-per-node", "SIZE",
       "Memory the job's processes may use on each node: 512M, 64G, 1T (default: no limit)"},
      {"cpus-per-node", "N",
       "CPU time the job may use on each node, in CPUs: 32, 0.5 (default: "
       "no limit)"},
      {"launch", "MODE",
       "rank (default): the command runs once per GPU with the torchrun worker environment; "
       "node: once per node, for a launcher such as torchrun (docs/jobs.md)"},
      {"env", "NAME=VALUE", "A variable of the job's processes; repeatable"},
      {"export", "ALL|NONE|NAMES",
       "Which variables of your environment the job gets: NONE (default), ALL, or a "
       "comma-separated list of names"},
      {"chdir", "DIR", "The processes' working directory, an absolute path (default: your home)"},
      {"output", "PATTERN",
       "File for standard output: %j job id, %r rank (node index with --launch node), %% a %; "
       "absolute or relative to --chdir (default: the agent's log, topo logs)"},
      {"error", "PATTERN", "File for standard error, like --output (default: with the output)"},
      {"dependency", "afterok:ID[:ID],...",
       "Start only after these jobs ended: afterok (completed), afternotok (failed or "
       "cancelled), afterany; conditions joined by , must all hold"},
      {"array", "0-99%8",
       "A job array: one job per index (ranges A-B, lists, :STEP), at most N running with %N; "
       "each gets TOPO_ARRAY_JOB_ID and TOPO_ARRAY_TASK_ID"},
      {"request-id", "ID",
       "The submission's idempotency key (letters, digits, . _ : -; at most 64): a second "
       "submission of yours with the same ID is answered with the job the first one made. "
       "Default: a random one per topo submit, so its own retries (another --server) never "
       "make two jobs"},
      {"spec", "FILE", "Job spec v1 JSON (or a whole request), - for standard input"},
  };
  return kTable;
}

Status CheckSubmitFlag(std::string_view name, std::string_view value) {
  const std::string flag = "--" + std::string(name);
  // The shared checks (common/) name the API field ("env: ...", "array:
  // ..."); after the flag that set it, that name would only repeat it.
  auto err = [&](std::string why) {
    for (std::string_view field : {"env: ", "chdir: ", "dependency: ", "array: "}) {
      if (why.rfind(field, 0) == 0) {
        why.erase(0, field.size());
        break;
      }
    }
    return Status::Error(flag + ": " + why);
  };
  if (name == "gpus" || name == "tp" || name == "cp" || name == "ep" || name == "pp" ||
      name == "dp" || name == "gpus-per-node" || name == "spares" || name == "priority") {
    std::optional<int64_t> v = ParseInt(value);
    if (!v || *v > std::numeric_limits<int32_t>::max() ||
        *v < std::numeric_limits<int32_t>::min()) {
      return err("'" + std::string(value) + "' is not a whole number");
    }
    if (name != "priority" && *v < 0) return err("must be >= 0, got " + std::string(value));
    return Status::Ok();
  }
  if (name == "time") {
    Result<int64_t> d = ParseDuration(value);
    return d.ok() ? Status::Ok() : err(d.message());
  }
  if (name == "model") {
    if (core::ModelPreset(value)) return Status::Ok();
    std::string known;
    for (const std::string& n : core::ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
    return err("'" + std::string(value) + "' is not a model preset; known: " + known);
  }
  if (name == "mem-per-node") {
    Result<int64_t> m = ParseMemoryMiB(value);
    return m.ok() ? Status::Ok() : err(m.message());
  }
  if (name == "cpus-per-node") {
    char* end = nullptr;
    const std::string text(value);
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
      return err("'" + text + "' is not a number of CPUs (e.g. 32 or 0.5)");
    }
    return Status::Ok();
  }
  if (name == "checkpoint-interval" || name == "placement-wait") {
    if (value == "never") return Status::Ok();
    Result<int64_t> d = ParseDuration(value);
    return d.ok() ? Status::Ok() : err(d.message() + ", or 'never'");
  }
  if (name == "constraint") {
    const size_t eq = value.find('=');
    const std::string_view kind = value.substr(0, eq);
    if (eq == std::string_view::npos || !IsKind(kind)) {
      return err("'" + std::string(value) +
                 "': expected KIND=SPEC with KIND tp, cp, ep, pp or dp (e.g. pp=required:leaf)");
    }
    const std::string_view spec = value.substr(eq + 1);
    if (spec == "none") return Status::Ok();
    for (std::string_view prefix : {"required:", "preferred:"}) {
      if (spec.substr(0, prefix.size()) == prefix) {
        if (spec.size() == prefix.size()) return err("'" + std::string(value) + "': no tier");
        return Status::Ok();
      }
    }
    return err("'" + std::string(value) +
               "': SPEC is none, required:TIER or preferred:TIER (TIER: node, hbd, leaf, pod, "
               "cluster or a tier name)");
  }
  if (name == "gpu-type" || name == "feature") {
    Result<std::vector<std::string>> names = SplitNameList(value);
    return names.ok() ? Status::Ok() : err(names.message());
  }
  if (name == "nodelist" || name == "exclude") {
    Result<std::vector<std::string>> names =
        common::ExpandHostlist(value, core::kMaxSelectionNames);
    if (!names.ok()) return err(names.message());
    for (const std::string& n : names.value()) {
      if (Status s = common::CheckNodeName(n); !s.ok()) return err(s.message());
    }
    return Status::Ok();
  }
  if (name == "launch") {
    if (common::ParseLaunchMode(value)) return Status::Ok();
    return err("'" + std::string(value) + "' is not a launch mode: rank or node");
  }
  if (name == "env") {
    const size_t eq = value.find('=');
    if (eq == std::string_view::npos) {
      return err("'" + std::string(value.substr(0, 64)) +
                 "': give NAME=VALUE (e.g. --env NCCL_DEBUG=INFO)");
    }
    Status s = common::CheckJobEnvVar(value.substr(0, eq), value.substr(eq + 1));
    return s.ok() ? s : err(s.message());
  }
  if (name == "export") {
    if (value == "ALL" || value == "NONE") return Status::Ok();
    if (value.empty()) return err("give ALL, NONE or names such as HF_HOME,WANDB_PROJECT");
    size_t start = 0;
    while (start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string_view n = value.substr(start, comma - start);
      if (n.find('=') != std::string_view::npos) {
        return err("'" + std::string(n) + "': --export takes names; set a value with --env " +
                   std::string(n));
      }
      if (n == "ALL" || n == "NONE") {
        return err("ALL and NONE stand alone, not in a list of names");
      }
      Status s = common::CheckJobEnvVar(n, "");
      if (!s.ok()) return err(s.message());
      start = comma + 1;
    }
    return Status::Ok();
  }
  if (name == "request-id") {
    Status s = common::CheckClientRequestId(value);
    return s.ok() ? s : err(s.message());
  }
  if (name == "partition" || name == "reservation") {
    if (value.find(',') != std::string_view::npos && name == "partition") {
      return err("'" + common::ShownName(value) +
                 "': a job runs in one partition; give one name (topo partition list shows "
                 "them)");
    }
    if (!core::ValidateNodeSetName(std::string(value),
                                   name == "partition" ? "partition" : "reservation")
             .ok()) {
      return err("'" + common::ShownName(value) + "' is not a " + std::string(name) +
                 " name: 1-64 bytes of A-Z a-z 0-9 . _ -, not starting with - or .");
    }
    return Status::Ok();
  }
  if (name == "dependency") {
    Result<std::vector<core::Dependency>> d = common::ParseDependencies(value);
    return d.ok() ? Status::Ok() : err(d.message());
  }
  if (name == "array") {
    Result<common::ArraySpec> a = common::ParseArraySpec(value);
    return a.ok() ? Status::Ok() : err(a.message());
  }
  if (name == "chdir") {
    Status s = common::CheckWorkingDir(value);
    return s.ok() ? s : err(s.message());
  }
  if (name == "output" || name == "error") {
    Status s = common::CheckOutputPattern(value);
    return s.ok() ? s : err(s.message());
  }
  if (name == "order" || name == "name" || name == "tenant" || name == "spec") {
    if (value.empty() && name != "name") return err("empty value");
    return Status::Ok();
  }
  return Status::Error("unknown option --" + std::string(name));
}

Status AddSubmitFlag(SubmitFlags* flags, std::string_view name, std::string value,
                     const std::string& origin) {
  bool known = false;
  for (const SubmitFlagInfo& f : SubmitFlagTable()) known = known || f.name == name;
  Status s = known ? CheckSubmitFlag(name, value)
                   : Status::Error("unknown option --" + std::string(name) +
                                   " (see topo submit "
                                   "--help)");
  if (!s.ok()) return Status::Error(origin.empty() ? s.message() : origin + ": " + s.message());
  if (name == "constraint" || name == "env") {
    const size_t eq = value.find('=');
    (*flags)[std::string(name) + ":" + value.substr(0, eq)] = {value.substr(eq + 1), origin};
  } else {
    (*flags)[std::string(name)] = {std::move(value), origin};
  }
  return Status::Ok();
}

Result<std::vector<std::string>> SplitWords(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\'') {
      const size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) return Status::Error("unbalanced '");
      cur.append(text.substr(i + 1, close - i - 1));
      i = close;
      in_word = true;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') {
        if (text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '"' || text[j + 1] == '\\')) {
          ++j;
        }
        cur += text[j++];
      }
      if (j >= text.size()) return Status::Error("unbalanced \"");
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) return Status::Error("trailing backslash");
      cur += text[++i];
      in_word = true;
    } else if (c == '#' && !in_word) {
      break;  // a comment, as in a shell
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

namespace {

// Slurm's time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS -> s.
std::optional<int64_t> SlurmTimeSeconds(std::string_view t) {
  auto num = [](std::string_view v, int64_t& out) {
    if (v.empty() || v.size() > 9) return false;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && p == v.data() + v.size() && out >= 0;
  };
  int64_t days = 0;
  std::string_view rest = t;
  const size_t dash = t.find('-');
  if (dash != std::string_view::npos) {
    if (!num(t.substr(0, dash), days)) return std::nullopt;
    rest = t.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  size_t from = 0;
  while (true) {
    const size_t colon = rest.find(':', from);
    int64_t v = 0;
    if (!num(rest.substr(from, colon == std::string_view::npos ? colon : colon - from), v)) {
      return std::nullopt;
    }
    parts.push_back(v);
    if (colon == std::string_view::npos) break;
    from = colon + 1;
  }
  if (parts.size() > 3) return std::nullopt;
  int64_t secs = 0;
  if (dash != std::string_view::npos) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    const int64_t mult[] = {3600, 60, 1};
    for (size_t i = 0; i < parts.size(); ++i) secs += parts[i] * mult[i];
  } else if (parts.size() == 1) {
    secs = parts[0] * 60;  // MM
  } else if (parts.size() == 2) {
    secs = parts[0] * 60 + parts[1];  // MM:SS
  } else {
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  secs += days * 86400;
  if (secs <= 0) return std::nullopt;
  return secs;
}

// The #SBATCH lines of a script's leading block, as topo submit flags, with
// the directives not honoured (SbatchDirectives in docs/migrating-from-slurm.md).
struct Sbatch {
  SubmitFlags flags;
  std::vector<std::string> ignored;  // "-p gpu (s.sh:4)"
  std::optional<int64_t> nodes, per_node, tasks_per_node, total;
  std::string nodes_at, per_node_at, total_at;
  bool total_is_gpus = false;  // total came from -G/--gpus, which -n/--ntasks does not override
  bool exclusive = false;
  std::string exclusive_at;
};

// The GPU count of a --gres or --gpus-per-node value: "8", "h100:8",
// "gpu:8", "gpu:h100:8".
std::optional<int64_t> GpuCount(std::string_view v, bool gres) {
  if (gres) {
    if (v.substr(0, 4) != "gpu:") return std::nullopt;
    v.remove_prefix(4);
  }
  const size_t colon = v.rfind(':');
  if (colon != std::string_view::npos) v = v.substr(colon + 1);
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n <= 0 || n > 100000) return std::nullopt;
  return n;
}

// The GPU type of a typed --gres or --gpus(-per-node) value: "h100:8" and
// "gpu:h100:8" give "h100"; "8" and "gpu:8" none.
std::optional<std::string> GpuType(std::string_view v, bool gres) {
  if (gres) {
    if (v.substr(0, 4) != "gpu:") return std::nullopt;
    v.remove_prefix(4);
  }
  const size_t colon = v.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return std::string(v.substr(0, colon));
}

Status ReadSbatchLine(std::string_view words_text, const std::string& at, Sbatch& sb) {
  Result<std::vector<std::string>> words = SplitWords(words_text);
  if (!words.ok()) return Status::Error(at + ": " + words.message());
  static const std::map<std::string, std::string, std::less<>> kShort = {
      {"N", "nodes"},      {"n", "ntasks"},     {"G", "gpus"},          {"t", "time"},
      {"J", "job-name"},   {"o", "output"},     {"e", "error"},         {"D", "chdir"},
      {"d", "dependency"}, {"a", "array"},      {"A", "account"},       {"p", "partition"},
      {"q", "qos"},        {"C", "constraint"}, {"c", "cpus-per-task"}, {"w", "nodelist"},
      {"x", "exclude"}};
  static const std::set<std::string, std::less<>> kNoValue = {
      "exclusive", "hold", "requeue", "no-requeue", "overcommit", "contiguous", "parsable"};
  const std::vector<std::string>& w = words.value();
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& word = w[i];
    std::string name;
    std::optional<std::string> value;
    if (word.size() >= 3 && word.substr(0, 2) == "--") {
      name = word.substr(2);
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      }
    } else if (word.size() >= 2 && word[0] == '-' && word[1] != '-') {
      auto it = kShort.find(word.substr(1, 1));
      name = it != kShort.end() ? it->second : word.substr(1, 1);
      if (word.size() > 2) value = word.substr(word[2] == '=' ? 3 : 2);
    } else {
      return Status::Error(at + ": expected an sbatch option like --nodes=2, got '" + word + "'");
    }
    bool separate = false;  // the value is the next word
    if (!value && !kNoValue.count(name)) {
      if (i + 1 >= w.size()) return Status::Error(at + ": #SBATCH " + word + " needs a value");
      value = w[++i];
      separate = true;
    }
    const std::string v = value.value_or("");
    const std::string origin = at + " (#SBATCH " + word + (separate ? " " + v : "") + ")";
    auto flag = [&](const char* topo_flag, std::string val) -> Status {
      if (Status st = CheckSubmitFlag(topo_flag, val); !st.ok()) {
        return Status::Error(origin + ": " + st.message());
      }
      sb.flags[topo_flag] = {std::move(val), origin};
      return Status::Ok();
    };
    // A count: plain ("4"), or with a GPU type ("h100:8") where typed, or
    // a --gres value ("gpu:8", "gpu:h100:8").
    auto count = [&](std::optional<int64_t>& into, std::string* where, bool typed = false,
                     bool gres = false) -> Status {
      const bool plain = !typed && !gres;
      std::optional<int64_t> n =
          plain && v.find(':') != std::string::npos ? std::nullopt : GpuCount(v, gres);
      if (!n) return Status::Error(origin + ": not a count of GPUs, nodes or tasks: '" + v + "'");
      into = n;
      if (where != nullptr) *where = origin;
      return Status::Ok();
    };
    // The GPU type of a typed count ("h100:8", "gpu:h100:8") as --gpu-type.
    auto type = [&](bool gres) -> Status {
      const std::optional<std::string> t = GpuType(v, gres);
      return t ? flag("gpu-type", *t) : Status::Ok();
    };
    Status st = Status::Ok();
    if (name == "nodes") {
      st = count(sb.nodes, &sb.nodes_at);
    } else if (name == "gpus-per-node") {
      st = count(sb.per_node, &sb.per_node_at, /*typed=*/true);
      if (st.ok()) st = type(false);
    } else if (name == "gres") {
      if (GpuCount(v, true)) {
        st = count(sb.per_node, &sb.per_node_at, false, /*gres=*/true);
        if (st.ok()) st = type(true);
      } else {
        sb.ignored.push_back("--gres=" + v + " (" + at + ")");
      }
    } else if (name == "constraint") {
      // Slurm's AND of features, a&b; OR, counts and brackets have no
      // toposched meaning.
      if (v.find_first_of("|[]*:()") != std::string::npos || v.empty()) {
        return Status::Error(origin +
                             ": toposched takes only features joined by & (all of "
                             "them), e.g. -C ib&nvme; write the OR as two jobs or ask "
                             "for the common feature");
      }
      std::string features = v;
      std::replace(features.begin(), features.end(), '&', ',');
      st = flag("feature", features);
    } else if (name == "nodelist" || name == "exclude") {
      st = flag(name.c_str(), v);
    } else if (name == "ntasks-per-node") {
      st = count(sb.tasks_per_node, nullptr);
    } else if (name == "gpus" || name == "ntasks") {
      if (name == "ntasks" && sb.total_is_gpus) continue;  // -G says GPUs; -n only ranks
      st = count(sb.total, &sb.total_at, /*typed=*/name == "gpus");
      sb.total_is_gpus = sb.total_is_gpus || name == "gpus";
      if (st.ok() && name == "gpus") st = type(false);
    } else if (name == "time") {
      std::optional<int64_t> secs = SlurmTimeSeconds(v);
      if (!secs) {
        return Status::Error(origin + ": '" + v +
                             "' is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                             "D-HH:MM:SS)");
      }
      st = flag("time", std::to_string(*secs) + "s");
    } else if (name == "job-name") {
      st = flag("name", v);
    } else if (name == "output" || name == "error" || name == "chdir" || name == "dependency" ||
               name == "array" || name == "export") {
      st = flag(name.c_str(), v);
    } else if (name == "account") {
      st = flag("tenant", v);
    } else if (name == "partition" || name == "reservation") {
      st = flag(name.c_str(), v);
    } else if (name == "mem") {
      st = flag("mem-per-node", v);
    } else if (name == "exclusive") {
      sb.exclusive = true;
      sb.exclusive_at = at;
    } else {
      sb.ignored.push_back(word + (separate ? " " + v : "") + " (" + at + ")");
    }
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// The #SBATCH GPU counts as --gpus / --gpus-per-node.
Status FinishSbatch(Sbatch& sb) {
  const std::optional<int64_t> per_node = sb.per_node ? sb.per_node : sb.tasks_per_node;
  if (per_node && (sb.nodes || sb.per_node)) {
    sb.flags["gpus-per-node"] = {std::to_string(*per_node),
                                 sb.per_node ? sb.per_node_at : sb.nodes_at};
  }
  if (sb.total) {
    sb.flags["gpus"] = {std::to_string(*sb.total), sb.total_at};
  } else if (sb.nodes && per_node) {
    sb.flags["gpus"] = {std::to_string(*sb.nodes * *per_node), sb.nodes_at};
  } else if (sb.nodes) {
    sb.ignored.push_back("--nodes=" + std::to_string(*sb.nodes) + " (" + sb.nodes_at +
                         ": say the GPUs per node with --gpus-per-node, --gres=gpu:G or "
                         "--ntasks-per-node, or #TOPO --gpus N)");
  }
  if (sb.exclusive && sb.flags.count("gpus-per-node")) {
    sb.ignored.push_back("--exclusive (" + sb.exclusive_at +
                         ": only jobs of whole nodes keep their nodes to themselves)");
  }
  for (auto& [name, fv] : sb.flags) {
    if (Status st = CheckSubmitFlag(name, fv.value); !st.ok()) {
      return Status::Error(fv.origin + ": " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace

std::string SubmitFieldLabel(const SubmitFlags& flags, std::string_view field) {
  static const std::map<std::string, std::string, std::less<>> kFlagOf = {
      {"spec.gpus", "gpus"},
      {"spec.gpus_per_node", "gpus-per-node"},
      {"spec.gpu_types", "gpu-type"},
      {"spec.features", "feature"},
      {"spec.nodelist", "nodelist"},
      {"spec.exclude", "exclude"},
      {"spec.spares", "spares"},
      {"spec.name", "name"},
      {"spec.model", "model"},
      {"spec.parallelism.tp", "tp"},
      {"spec.parallelism.cp", "cp"},
      {"spec.parallelism.ep", "ep"},
      {"spec.parallelism.pp", "pp"},
      {"spec.parallelism.dp", "dp"},
      {"spec.parallelism.order", "order"},
      {"tenant", "tenant"},
      {"priority", "priority"},
      {"time_limit_s", "time"},
      {"checkpoint_interval_s", "checkpoint-interval"},
      {"placement_wait_s", "placement-wait"},
      {"memory_mb_per_node", "mem-per-node"},
      {"cpus_per_node", "cpus-per-node"},
      {"launch", "launch"},
      {"chdir", "chdir"},
      {"output", "output"},
      {"error", "error"},
      {"dependency", "dependency"},
      {"array", "array"},
      {"client_request_id", "request-id"},
      {"partition", "partition"},
      {"reservation", "reservation"}};
  auto it = kFlagOf.find(field);
  if (it == kFlagOf.end()) {
    if (field == "env" || field.substr(0, 4) == "env.") return "--env";
    return "";
  }
  auto given = flags.find(it->second);
  if (given == flags.end()) return "";  // from --spec, not a flag
  std::string label = "--" + it->second + " " + given->second.value.substr(0, 80);
  if (!given->second.origin.empty()) label += " (" + given->second.origin + ")";
  return label;
}

Result<ScriptDirectives> ParseScriptDirectives(std::string_view script, const std::string& path) {
  ScriptDirectives out;
  Sbatch sbatch;
  bool in_block = true;
  int line_no = 0;
  size_t pos = 0;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    if (nl == std::string_view::npos) nl = script.size();
    std::string_view line = script.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string at = path + ":" + std::to_string(line_no);
    if (line_no == 1 && line.substr(0, 2) == "#!") continue;
    std::string_view t = line;
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    if (t.empty()) continue;
    if (t.front() != '#') {
      in_block = false;
      continue;
    }
    if (t.substr(0, 7) == "#SBATCH" &&
        (t.size() == 7 || std::isspace(static_cast<unsigned char>(t[7])))) {
      if (!in_block) {
        out.warnings.push_back(at + ": #SBATCH after the first command is ignored");
        continue;
      }
      if (Status st = ReadSbatchLine(t.substr(7), at, sbatch); !st.ok()) return st;
      continue;
    }
    if (t.substr(0, 5) != "#TOPO" ||
        (t.size() > 5 && !std::isspace(static_cast<unsigned char>(t[5])))) {
      continue;  // an ordinary comment
    }
    if (!in_block) {
      out.warnings.push_back(at + ": #TOPO after the first command is ignored");
      continue;
    }
    Result<std::vector<std::string>> words = SplitWords(t.substr(5));
    if (!words.ok()) return Status::Error(at + ": " + words.message());
    const std::vector<std::string>& w = words.value();
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string& word = w[i];
      if (word.size() < 3 || word.substr(0, 2) != "--") {
        return Status::Error(at + ": expected an option like --gpus 64, got '" + word + "'");
      }
      std::string name = word.substr(2);
      std::string value;
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      } else {
        if (i + 1 >= w.size()) return Status::Error(at + ": " + word + " needs a value");
        value = w[++i];
      }
      if (Status s = AddSubmitFlag(&out.flags, name, value, at); !s.ok()) return s;
    }
  }
  // #TOPO wins over #SBATCH for the same setting.
  if (Status st = FinishSbatch(sbatch); !st.ok()) return st;
  out.flags = MergeSubmitFlags(sbatch.flags, out.flags);
  if (!sbatch.ignored.empty()) {
    std::string list;
    for (const std::string& i : sbatch.ignored) list += (list.empty() ? "" : ", ") + i;
    out.warnings.push_back("#SBATCH directives not honoured (docs/migrating-from-slurm.md): " +
                           list);
  }
  return out;
}

std::vector<std::string> ScriptCommand(std::string_view text) {
  std::vector<std::string> command = {"/bin/sh"};
  if (text.substr(0, 2) == "#!") {
    const std::string_view line = text.substr(2, text.find('\n') - 2);
    Result<std::vector<std::string>> words = SplitWords(line);
    if (words.ok() && !words.value().empty()) command = words.value();
  }
  command.push_back("-c");
  command.emplace_back(text);
  return command;
}

Status CheckCommand(const nlohmann::json& command, const ArgumentOrigin& origin) {
  if (!command.is_array() || command.empty()) {
    return Status::Error(origin(0) + ": the command must be a non-empty list of strings (argv)");
  }
  if (command.size() > proto::kMaxCommandArgs) {
    return Status::Error(origin(0) + ": the command has " + std::to_string(command.size()) +
                         " arguments; at most " + std::to_string(proto::kMaxCommandArgs));
  }
  size_t total = 0;
  size_t largest = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    if (!command[i].is_string()) return Status::Error(origin(i) + " must be a string");
    const std::string& arg = command[i].get_ref<const std::string&>();
    if (arg.size() > proto::kMaxArgBytes) {
      return Status::Error(
          origin(i) + " is " + FormatBytes(arg.size()) + " (" + std::to_string(arg.size()) +
          " bytes); Linux runs no argument longer than " + std::to_string(proto::kMaxArgBytes) +
          " bytes (MAX_ARG_STRLEN; exec fails with E2BIG): put the bulk in a "
          "file the job reads");
    }
    if (arg.find('\0') != std::string::npos) {
      return Status::Error(origin(i) + " holds a NUL byte, which no argument can");
    }
    if (i == 0 && arg.empty()) return Status::Error(origin(0) + ": the program must not be empty");
    total += arg.size() + 1;
    if (arg.size() > command[largest].get_ref<const std::string&>().size()) largest = i;
  }
  if (total > proto::kMaxCommandBytes) {
    return Status::Error(
        "the command's " + std::to_string(command.size()) + " arguments take " +
        FormatBytes(total) + " with their NULs; at most " + FormatBytes(proto::kMaxCommandBytes) +
        " fit beside the job's environment (the largest is " + origin(largest) + ", " +
        FormatBytes(command[largest].get_ref<const std::string&>().size()) + ")");
  }
  return Status::Ok();
}

SubmitFlags MergeSubmitFlags(const SubmitFlags& base, const SubmitFlags& over) {
  SubmitFlags out = base;
  for (const auto& [k, v] : over) out[k] = v;
  return out;
}

bool IsRepeatableSubmitFlag(std::string_view name) { return name == "constraint" || name == "env"; }

Result<api::SubmitRequest> BuildSubmitRequest(const SubmitFlags& flags,
                                              const std::optional<nlohmann::json>& spec_file,
                                              const std::string& default_name,
                                              const std::vector<std::string>& command,
                                              const std::map<std::string, std::string>& environment,
                                              std::vector<std::string>* warnings) {
  using nlohmann::json;
  // The job spec v1 as JSON, the flags merged in (dp may still be derived
  // from gpus), and what else a whole request in --spec gives.
  json body = json::object();
  if (spec_file) {
    if (!spec_file->is_object()) return Status::Error("--spec: the JSON must be an object");
    if (spec_file->contains("spec")) {
      body = *spec_file;
    } else {
      body["spec"] = *spec_file;
    }
  } else {
    body["spec"] = json::object();
  }
  json& spec = body["spec"];
  if (!spec.is_object()) return Status::Error("--spec: \"spec\" must be an object");
  auto integer = [&](const std::string& name) { return *ParseInt(flags.at(name).value); };
  auto given = [&](const std::string& name) { return flags.count(name) > 0; };
  auto where = [&](const std::string& name) {
    const std::string& o = flags.at(name).origin;
    return (o.empty() ? "" : o + ": ") + std::string("--") + name;
  };

  if (given("gpus")) spec["gpus"] = integer("gpus");
  for (const char* k : {"tp", "cp", "ep", "pp", "dp"}) {
    if (given(k)) spec["parallelism"][k] = integer(k);
  }
  if (given("order")) spec["parallelism"]["order"] = flags.at("order").value;
  if (given("gpus-per-node")) spec["gpus_per_node"] = integer("gpus-per-node");
  if (given("gpu-type")) spec["gpu_types"] = SplitNameList(flags.at("gpu-type").value).value();
  if (given("feature")) spec["features"] = SplitNameList(flags.at("feature").value).value();
  if (given("nodelist")) spec["nodelist"] = flags.at("nodelist").value;
  if (given("exclude")) spec["exclude"] = flags.at("exclude").value;
  if (given("spares")) spec["spares"] = integer("spares");
  for (const char* k : {"tp", "cp", "ep", "pp", "dp"}) {
    const std::string key = std::string("constraint:") + k;
    if (!given(key)) continue;
    const std::string& v = flags.at(key).value;
    if (v == "none") {
      spec["constraints"][k] = "none";
    } else {
      const size_t colon = v.find(':');
      spec["constraints"][k] = {{v.substr(0, colon), v.substr(colon + 1)}};
    }
  }
  if (given("name")) spec["name"] = flags.at("name").value;
  if (given("model")) spec["model"] = flags.at("model").value;
  if ((!spec.contains("name") || spec["name"] == "") && !default_name.empty()) {
    spec["name"] = default_name;
  }
  if (!spec.contains("gpus")) {
    return Status::Error("how many GPUs? give --gpus N (or a job spec with --spec FILE)");
  }
  // The command line's command wins over one in --spec.
  if (!command.empty()) body["command"] = command;

  // The spec and what --spec says, read by the API's own reader.
  std::string field;
  Result<api::SubmitRequest> read = api::ReadSubmitRequest(body, &field);
  if (!read.ok()) {
    if (field == "spec") return Status::Error("job spec: " + read.message().substr(6));
    const std::string label = SubmitFieldLabel(flags, field);
    return Status::Error((label.empty() ? std::string("--spec: ") : label + ": ") + read.message());
  }
  api::SubmitRequest req = std::move(read).value();

  // The flags, over what --spec said.
  if (given("tenant")) req.tenant = flags.at("tenant").value;
  if (given("priority")) req.priority = static_cast<int>(integer("priority"));
  if (given("time")) {
    Result<int64_t> d = ParseDuration(flags.at("time").value);
    if (!d.ok()) return Status::Error(where("time") + ": " + d.message());
    req.time_limit_s = d.value();
  }
  if (given("mem-per-node")) {
    req.memory_mb_per_node = ParseMemoryMiB(flags.at("mem-per-node").value).value();
  }
  if (given("cpus-per-node")) {
    req.cpus_per_node = std::strtod(flags.at("cpus-per-node").value.c_str(), nullptr);
  }
  if (given("dependency")) req.dependency = flags.at("dependency").value;
  if (given("array")) req.array = flags.at("array").value;
  if (given("request-id")) req.client_request_id = flags.at("request-id").value;
  if (given("partition")) req.partition = flags.at("partition").value;
  if (given("reservation")) req.reservation = flags.at("reservation").value;
  // A duration in seconds, or 'never' as -1.
  auto never_or_duration = [&](const char* flag, std::optional<int64_t>& field_s) -> Status {
    if (!given(flag)) return Status::Ok();
    const std::string& v = flags.at(flag).value;
    if (v == "never") {
      field_s = -1;
      return Status::Ok();
    }
    Result<int64_t> d = ParseDuration(v);
    if (!d.ok()) return Status::Error(where(flag) + ": " + d.message());
    if (d.value() == 0) return Status::Error(where(flag) + ": 0 is not a duration; give 'never'");
    field_s = d.value();
    return Status::Ok();
  };
  if (Status st = never_or_duration("checkpoint-interval", req.checkpoint_interval_s); !st.ok()) {
    return st;
  }
  if (Status st = never_or_duration("placement-wait", req.placement_wait_s); !st.ok()) return st;
  if (given("launch")) req.launch = common::ParseLaunchMode(flags.at("launch").value);
  if (given("chdir")) req.chdir = flags.at("chdir").value;
  if (given("output")) req.output = flags.at("output").value;
  if (given("error")) req.error = flags.at("error").value;
  // The job's variables: the spec file's, then what --export sends of the
  // submitter's environment, then --env (the last wins).
  std::map<std::string, std::string> env = req.env.value_or(std::map<std::string, std::string>{});
  if (given("export") && flags.at("export").value != "NONE") {
    const std::string& v = flags.at("export").value;
    if (v == "ALL") {
      std::vector<std::string> skipped;
      for (const auto& [k, value] : environment) {
        if (common::CheckJobEnvVar(k, value).ok()) {
          env[k] = value;
        } else {
          skipped.push_back(k);
        }
      }
      if (!skipped.empty() && warnings != nullptr) {
        std::string names;
        for (size_t i = 0; i < skipped.size() && i < 8; ++i) {
          names += (i ? ", " : "") + skipped[i].substr(0, 64);
        }
        if (skipped.size() > 8) names += ", ...";
        warnings->push_back("--export ALL: " + std::to_string(skipped.size()) +
                            " variable(s) of your environment not sent (the agent's own, such "
                            "as TOPO_*, or not a plain NAME=VALUE): " +
                            names);
      }
    } else {
      size_t start = 0;
      while (start <= v.size()) {
        const size_t comma = std::min(v.find(',', start), v.size());
        const std::string n = v.substr(start, comma - start);
        auto it = environment.find(n);
        if (it == environment.end()) {
          return Status::Error(where("export") + ": " + n +
                               " is not set in your environment: set it, or drop it from the "
                               "list");
        }
        env[n] = it->second;
        start = comma + 1;
      }
    }
  }
  for (const auto& [key, value] : flags) {
    if (key.rfind("env:", 0) == 0) env[key.substr(4)] = value.value;
  }
  if (!env.empty()) req.env = std::move(env);

  // The whole request through the API's reader, as the daemon reads it:
  // a mistake shows here, naming the flag that set the field.
  Result<api::SubmitRequest> checked =
      api::ParseSubmitRequest(api::WriteSubmitRequest(req), &field);
  if (!checked.ok()) {
    std::string label = SubmitFieldLabel(flags, field);
    if (label.empty() && field.rfind("env", 0) == 0 && given("export")) label = where("export");
    return Status::Error((label.empty() ? std::string() : label + ": ") + checked.message());
  }
  return req;
}

}  // namespace topo::cli
