// The launch mode, environment, working directory and output patterns of a
// job (job_process.hpp).

#include "topo/common/job_process.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "json_util.hpp"

namespace topo::common {

using core::Result;
using core::Status;
using Json = nlohmann::json;

namespace {

bool HasControl(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

std::string Quoted(std::string_view s) {
  return "'" + std::string(s.substr(0, 64)) + (s.size() > 64 ? "...'" : "'");
}

}  // namespace

std::string_view LaunchModeName(core::LaunchMode mode) {
  return mode == core::LaunchMode::kNode ? "node" : "rank";
}

std::optional<core::LaunchMode> ParseLaunchMode(std::string_view name) {
  if (name == "rank") return core::LaunchMode::kRank;
  if (name == "node") return core::LaunchMode::kNode;
  return std::nullopt;
}

std::string ReservedEnvReason(std::string_view name) {
  static constexpr std::array<std::string_view, 13> kExact = {
      "RANK",       "WORLD_SIZE",       "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
      "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",   "ROLE_WORLD_SIZE",
      "ROLE_NAME",  "MASTER_ADDR",      "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
      "TOPO_JOB_ID"};
  for (std::string_view e : kExact) {
    if (name == e) {
      return name == "CUDA_VISIBLE_DEVICES"
                 ? "the agent sets it to the job's GPUs on the node"
                 : "the agent sets it for every rank from the job's placement";
    }
  }
  if (name.substr(0, 5) == "TOPO_") return "TOPO_* variables are the agent's (docs/jobs.md)";
  if (name.substr(0, 13) == "TORCHELASTIC_") {
    return "TORCHELASTIC_* variables are the agent's (the scheduler restarts jobs)";
  }
  return "";
}

Status CheckJobEnvVar(std::string_view name, std::string_view value) {
  const bool identifier = !name.empty() && name.size() <= kMaxEnvNameBytes &&
                          !(name[0] >= '0' && name[0] <= '9') &&
                          std::all_of(name.begin(), name.end(), [](char c) {
                            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                   (c >= '0' && c <= '9') || c == '_';
                          });
  if (!identifier) {
    return Status::Error("env: " + Quoted(name) +
                         " is not a variable name: use letters, digits and _, not starting with "
                         "a digit, at most 256 bytes (e.g. NCCL_DEBUG=INFO)");
  }
  const std::string n(name);
  if (std::string why = ReservedEnvReason(name); !why.empty()) {
    return Status::Error("env." + n + ": reserved, " + why + "; drop it from the job's variables");
  }
  // Many job scripts set it already; only another order would renumber the
  // GPUs under CUDA_VISIBLE_DEVICES.
  if (name == "CUDA_DEVICE_ORDER" && !value.empty() && value != "PCI_BUS_ID") {
    return Status::Error("env.CUDA_DEVICE_ORDER: " + Quoted(value) +
                         " would renumber the GPUs: the agent sets PCI_BUS_ID, the order of the "
                         "node's GPU numbers in CUDA_VISIBLE_DEVICES; drop it or give PCI_BUS_ID");
  }
  if (value.size() > kMaxEnvValueBytes) {
    return Status::Error("env." + n + ": the value is " + std::to_string(value.size()) +
                         " bytes; at most " + std::to_string(kMaxEnvValueBytes) +
                         " (Linux's limit on one environment string): put it in a file");
  }
  if (value.find('\0') != std::string_view::npos) {
    return Status::Error("env." + n + ": the value holds a NUL byte, which no variable can");
  }
  return Status::Ok();
}

Status CheckJobEnv(const std::map<std::string, std::string>& env) {
  if (env.size() > kMaxJobEnvVars) {
    return Status::Error("env: " + std::to_string(env.size()) + " variables; at most " +
                         std::to_string(kMaxJobEnvVars));
  }
  size_t total = 0;
  for (const auto& [k, v] : env) {
    if (Status s = CheckJobEnvVar(k, v); !s.ok()) return s;
    total += k.size() + v.size() + 2;
  }
  if (total > kMaxJobEnvBytes) {
    return Status::Error("env: the variables take " + std::to_string(total) +
                         " bytes as K=V strings; at most " + std::to_string(kMaxJobEnvBytes) +
                         ": put large settings in a file the job reads");
  }
  return Status::Ok();
}

Status CheckWorkingDir(std::string_view dir) {
  if (dir.empty() || dir[0] != '/') {
    return Status::Error("chdir: " + Quoted(dir) +
                         " is not an absolute path: give the directory from /, e.g. "
                         "/home/ada/run");
  }
  if (dir.size() > kMaxJobPathBytes) {
    return Status::Error("chdir: " + std::to_string(dir.size()) + " bytes; at most " +
                         std::to_string(kMaxJobPathBytes));
  }
  if (HasControl(dir)) return Status::Error("chdir: the path holds a control character");
  return Status::Ok();
}

Status CheckOutputPattern(std::string_view pattern) {
  if (pattern.empty()) {
    return Status::Error("must be a file name pattern such as out-%j-%r.log, not empty");
  }
  if (pattern.size() > kMaxJobPathBytes) {
    return Status::Error("the pattern is " + std::to_string(pattern.size()) + " bytes; at most " +
                         std::to_string(kMaxJobPathBytes));
  }
  if (HasControl(pattern)) return Status::Error("the pattern holds a control character");
  if (pattern.back() == '/') {
    return Status::Error(Quoted(pattern) + " names a directory: add a file name, e.g. " +
                         std::string(pattern) + "out-%j-%r.log");
  }
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (next != 'j' && next != 'r' && next != '%') {
      return Status::Error(Quoted(pattern) + ": '%" + (next ? std::string(1, next) : "") +
                           "' is not a pattern: use %j (job id), %r (rank, or node index with "
                           "launch node) or %% (a %)");
    }
    ++i;
  }
  return Status::Ok();
}

std::string ExpandOutputPattern(std::string_view pattern, std::string_view job, int index) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 'j') {
      out += job;
    } else if (next == 'r') {
      out += std::to_string(index);
    } else {
      out += next;
    }
  }
  return out;
}

Result<core::ProcessSpec> ProcessSpecFromJson(const Json& object, std::string* field,
                                              ProcessSpecChecks checks) {
  core::ProcessSpec spec;
  const bool values = checks == ProcessSpecChecks::kAll;
  auto fail = [&](const char* name, const std::string& message) {
    if (field) *field = name;
    return Status::Error(message);
  };
  if (!object.is_object()) return fail("", "must be an object");
  if (auto it = object.find("launch"); it != object.end()) {
    std::optional<core::LaunchMode> mode;
    if (it->is_string()) mode = ParseLaunchMode(it->get_ref<const std::string&>());
    if (!mode) {
      return fail("launch", "launch: " + internal::Shown(*it) +
                                " is not a launch mode: \"rank\" (one process per GPU, the "
                                "default) or \"node\" (one per node, e.g. for torchrun)");
    }
    spec.launch = *mode;
  }
  if (auto it = object.find("env"); it != object.end()) {
    if (!it->is_object()) {
      return fail("env", "env must be an object of strings, e.g. {\"NCCL_DEBUG\": \"INFO\"}");
    }
    if (values && it->size() > kMaxJobEnvVars) {
      return fail("env", "env: " + std::to_string(it->size()) + " variables; at most " +
                             std::to_string(kMaxJobEnvVars));
    }
    for (const auto& item : it->items()) {
      if (!item.value().is_string()) {
        return fail("env", "env." + item.key().substr(0, 64) + " must be a string (got " +
                               std::string(internal::TypeName(item.value())) + ")");
      }
      spec.env.emplace(item.key(), item.value().get<std::string>());
    }
    if (Status s = values ? CheckJobEnv(spec.env) : Status::Ok(); !s.ok()) {
      return fail("env", s.message());
    }
  }
  if (auto it = object.find("chdir"); it != object.end()) {
    if (!it->is_string()) return fail("chdir", "chdir must be a string (an absolute path)");
    spec.working_dir = it->get<std::string>();
    if (Status s = values ? CheckWorkingDir(spec.working_dir) : Status::Ok(); !s.ok()) {
      return fail("chdir", s.message());
    }
  }
  for (const char* name : {"output", "error"}) {
    auto it = object.find(name);
    if (it == object.end()) continue;
    if (!it->is_string()) {
      return fail(name, std::string(name) + " must be a string (a file name pattern)");
    }
    std::string& target = std::string_view(name) == "output" ? spec.output : spec.error;
    target = it->get<std::string>();
    if (Status s = values ? CheckOutputPattern(target) : Status::Ok(); !s.ok()) {
      return fail(name, std::string(name) + ": " + s.message());
    }
  }
  return spec;
}

void ProcessSpecToJson(const core::ProcessSpec& spec, Json* object, bool every_field) {
  Json& o = *object;
  if (every_field || spec.launch != core::LaunchMode::kRank)
    o["launch"] = LaunchModeName(spec.launch);
  if (every_field || !spec.env.empty()) {
    Json env = Json::object();
    for (const auto& [k, v] : spec.env) env[k] = v;
    o["env"] = std::move(env);
  }
  const std::pair<const char*, const std::string*> paths[] = {
      {"chdir", &spec.working_dir}, {"output", &spec.output}, {"error", &spec.error}};
  for (const auto& [name, value] : paths) {
    if (!value->empty()) {
      o[name] = *value;
    } else if (every_field) {
      o[name] = nullptr;
    }
  }
}

}  // namespace topo::common
