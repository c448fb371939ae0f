// Event names and conversion, the injection language, the simulated config
// file, and the choice between NVML and the simulated backend.

#include "gpu/gpu_backend.hpp"

#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace topo::agent::gpu {

std::string_view HealthEventKindName(HealthEventKind k) {
  switch (k) {
    case HealthEventKind::kXid:
      return "xid";
    case HealthEventKind::kEccSingleBit:
      return "ecc-single-bit";
    case HealthEventKind::kEccDoubleBit:
      return "ecc-double-bit";
    case HealthEventKind::kThermal:
      return "thermal";
    case HealthEventKind::kOffBus:
      return "off-bus";
    case HealthEventKind::kCleared:
      return "cleared";
  }
  return "?";
}

std::string DescribeEvent(const HealthEvent& e) {
  std::string s = "gpu " + std::to_string(e.gpu) + ": ";
  switch (e.kind) {
    case HealthEventKind::kXid:
      s += "XID " + std::to_string(e.code);
      break;
    case HealthEventKind::kEccSingleBit:
      s += std::to_string(e.code) + " corrected (single-bit) ECC errors";
      break;
    case HealthEventKind::kEccDoubleBit:
      s += std::to_string(e.code) + " uncorrected (double-bit) ECC errors";
      break;
    case HealthEventKind::kThermal:
      s += e.on ? "thermal throttling on" : "thermal throttling off";
      break;
    case HealthEventKind::kOffBus:
      s += "fell off the bus";
      break;
    case HealthEventKind::kCleared:
      s += "cleared";
      break;
  }
  if (!e.detail.empty()) s += " (" + e.detail + ")";
  return s;
}

std::optional<core::GpuEvent> ToCoreEvent(const HealthEvent& e, core::NodeId node) {
  core::GpuEvent out{node, e.gpu, core::GpuEventKind::kCleared, 0};
  out.code = e.code > INT_MAX ? INT_MAX : e.code < INT_MIN ? INT_MIN : static_cast<int>(e.code);
  switch (e.kind) {
    case HealthEventKind::kXid:
      out.kind = core::GpuEventKind::kXid;
      break;
    case HealthEventKind::kEccSingleBit:
      out.kind = core::GpuEventKind::kEccSingleBit;
      break;
    case HealthEventKind::kEccDoubleBit:
      out.kind = core::GpuEventKind::kEccDoubleBit;
      break;
    case HealthEventKind::kThermal:
      if (!e.on) return std::nullopt;
      out.kind = core::GpuEventKind::kThermal;
      out.code = 0;
      break;
    case HealthEventKind::kOffBus:
      out.kind = core::GpuEventKind::kOffBus;
      break;
    case HealthEventKind::kCleared:
      out.kind = core::GpuEventKind::kCleared;
      out.code = 0;
      break;
  }
  return out;
}

// ---------------------------------------------------------------- inject language

namespace {

std::vector<std::string_view> SplitWords(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) words.push_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

bool ParseInt(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

core::Result<std::optional<InjectCommand>> ParseInjectLine(std::string_view line, int line_no,
                                                           int gpu_count) {
  const std::vector<std::string_view> w = SplitWords(line);
  if (w.empty() || w[0].front() == '#') return std::optional<InjectCommand>();
  const std::string where = "line " + std::to_string(line_no) + ": ";
  auto fail = [&](const std::string& why) {
    return core::Status::Error(where + why + " in '" + std::string(line) + "'");
  };
  const std::string_view verb = w[0];
  InjectCommand c;
  size_t want = 0;
  std::string usage;
  if (verb == "xid") {
    c.kind = HealthEventKind::kXid, want = 3, usage = "xid GPU CODE";
  } else if (verb == "ecc") {
    c.kind = HealthEventKind::kEccSingleBit, want = 4, usage = "ecc GPU SINGLE DOUBLE";
  } else if (verb == "thermal") {
    c.kind = HealthEventKind::kThermal, want = 3, usage = "thermal GPU on|off";
  } else if (verb == "offbus" || verb == "lost") {
    c.kind = HealthEventKind::kOffBus, want = 2, usage = "offbus GPU";
  } else if (verb == "clear") {
    c.kind = HealthEventKind::kCleared, want = 2, usage = "clear GPU";
  } else {
    return fail("unknown fault '" + std::string(verb) +
                "' (use xid, ecc, thermal, offbus or clear)");
  }
  if (w.size() != want) {
    return fail("'" + std::string(verb) + "' takes " + std::to_string(want - 1) +
                " argument(s): " + usage);
  }
  int64_t gpu = 0;
  if (!ParseInt(w[1], gpu)) return fail("GPU '" + std::string(w[1]) + "' is not a number");
  if (gpu < 0 || gpu >= gpu_count) {
    return fail("GPU " + std::to_string(gpu) + " out of range (this node has GPUs 0-" +
                std::to_string(gpu_count - 1) + ")");
  }
  c.gpu = static_cast<int>(gpu);
  if (c.kind == HealthEventKind::kXid) {
    if (!ParseInt(w[2], c.a) || c.a < 1 || c.a > 1000000) {
      return fail("XID code '" + std::string(w[2]) + "' is not a positive number");
    }
  } else if (c.kind == HealthEventKind::kEccSingleBit) {
    if (!ParseInt(w[2], c.a) || c.a < 0 || !ParseInt(w[3], c.b) || c.b < 0) {
      return fail("ECC counts must be numbers >= 0: ecc GPU SINGLE DOUBLE");
    }
    if (c.a == 0 && c.b == 0) return fail("ECC counts are both 0; nothing to inject");
  } else if (c.kind == HealthEventKind::kThermal) {
    if (w[2] == "on") {
      c.a = 1;
    } else if (w[2] == "off") {
      c.a = 0;
    } else {
      return fail("thermal takes 'on' or 'off', not '" + std::string(w[2]) + "'");
    }
  }
  return std::optional<InjectCommand>(c);
}

core::Result<std::vector<InjectCommand>> ParseInjectCommands(std::string_view text, int gpu_count) {
  std::vector<InjectCommand> out;
  std::string errors;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    ++line_no;
    auto r = ParseInjectLine(text.substr(pos, nl - pos), line_no, gpu_count);
    if (!r.ok()) {
      if (!errors.empty()) errors += '\n';
      errors += r.message();
    } else if (r.value()) {
      out.push_back(*r.value());
    }
    pos = nl + 1;
  }
  if (!errors.empty()) return core::Status::Error(errors);
  return out;
}

// ---------------------------------------------------------------- simulated config

core::Result<SimulatedOptions> ParseSimulatedConfig(std::string_view json_text,
                                                    SimulatedOptions o) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return core::Status::Error(
        "simulated GPU config is not valid JSON; expected e.g. {\"gpus\": 8, \"model\": "
        "\"H100\"}");
  }
  if (!j.is_object()) return core::Status::Error("simulated GPU config must be a JSON object");
  for (const auto& [key, v] : j.items()) {
    if (key == "gpus") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 64) {
        return core::Status::Error("\"gpus\" must be an integer from 1 to 64");
      }
      o.gpus = static_cast<int>(v.get<int64_t>());
    } else if (key == "model") {
      if (!v.is_string() || v.get<std::string>().empty()) {
        return core::Status::Error("\"model\" must be a non-empty string, e.g. \"H100\"");
      }
      o.model = v.get<std::string>();
    } else if (key == "memory_gib") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
        return core::Status::Error("\"memory_gib\" must be a positive integer");
      }
      o.memory_total = static_cast<uint64_t>(v.get<int64_t>()) << 30;
    } else {
      return core::Status::Error("unknown key \"" + key +
                                 "\" in simulated GPU config (known: gpus, model, memory_gib)");
    }
  }
  return o;
}

core::Result<SimulatedOptions> LoadSimulatedConfig(const std::string& path,
                                                   SimulatedOptions defaults) {
  std::ifstream in(path);
  if (!in) return core::Status::Error("cannot read simulated GPU config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = ParseSimulatedConfig(ss.str(), std::move(defaults));
  if (!r.ok()) return core::Status::Error(path + ": " + r.message());
  return r;
}

// ---------------------------------------------------------------- choice

std::optional<BackendChoice> ParseBackendChoice(std::string_view s) {
  if (s == "auto") return BackendChoice::kAuto;
  if (s == "nvml") return BackendChoice::kNvml;
  if (s == "simulated" || s == "sim") return BackendChoice::kSimulated;
  return std::nullopt;
}

core::Result<ChosenBackend> MakeGpuBackend(const GpuBackendOptions& options) {
  std::string nvml_failure;
  if (options.choice != BackendChoice::kSimulated) {
    auto nvml = MakeNvmlBackend(options.nvml);
    if (nvml.ok()) {
      ChosenBackend out;
      out.backend = std::move(nvml).value();
      out.reason = "nvml: loaded " + options.nvml.library + ", " +
                   std::to_string(out.backend->Inventory().count()) + " GPU(s)";
      return out;
    }
    if (options.choice == BackendChoice::kNvml) {
      return core::Status::Error("NVML backend requested but unavailable: " + nvml.message());
    }
    nvml_failure = nvml.message();
  }
  auto sim = SimulatedBackend::Create(options.simulated);
  if (!sim.ok()) return sim.status();
  ChosenBackend out;
  const SimulatedOptions& s = options.simulated;
  out.reason =
      "simulated: " + std::to_string(s.gpus) + " x " + s.model + ", " +
      (options.choice == BackendChoice::kSimulated ? std::string("requested")
                                                   : "NVML unavailable (" + nvml_failure + ")");
  out.backend = std::move(sim).value();
  return out;
}

}  // namespace topo::agent::gpu
