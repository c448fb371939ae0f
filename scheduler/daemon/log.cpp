// The daemon's log (log.hpp) over spdlog.

#include "daemon/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

#include "topo/core/cluster_state.hpp"

namespace topo::daemon::log {
namespace {

using Json = nlohmann::json;

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<bool> g_json{false};

std::shared_ptr<spdlog::logger> Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("topo-scheduler",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    // The line is formatted here (time, level, text or JSON): spdlog only
    // writes it, one write per record, so lines from threads never mix.
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return logger;
}

std::string_view LevelName(Level l) {
  switch (l) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::string Now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

std::string NodeName(const core::Topology& topo, core::NodeId n) {
  return n >= 0 && n < topo.node_count() ? topo.node(n).name : "node#" + std::to_string(n);
}

std::string NodeList(const core::Topology& topo, const std::vector<core::NodeLaunch>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size() && i < 8; ++i) {
    out += (i ? ", " : "") + NodeName(topo, nodes[i].node);
  }
  if (nodes.size() > 8) out += " and " + std::to_string(nodes.size() - 8) + " more";
  return out;
}

}  // namespace

core::Status Init(std::string_view level, std::string_view format) {
  Level l;
  if (level == "debug") {
    l = Level::kDebug;
  } else if (level == "info") {
    l = Level::kInfo;
  } else if (level == "warn") {
    l = Level::kWarn;
  } else if (level == "error") {
    l = Level::kError;
  } else {
    return core::Status::Error("log_level \"" + std::string(level) +
                               "\": use debug, info, warn or error");
  }
  if (format != "text" && format != "json") {
    return core::Status::Error("log_format \"" + std::string(format) + "\": use text or json");
  }
  g_level = static_cast<int>(l);
  g_json = format == "json";
  return core::Status::Ok();
}

bool Enabled(Level level) { return static_cast<int>(level) >= g_level.load(); }

void Write(Level level, std::string_view message, const Json& fields) {
  if (!Enabled(level)) return;
  std::string line;
  if (g_json) {
    Json j = {{"time", Now()}, {"level", LevelName(level)}, {"msg", message}};
    if (fields.is_object()) {
      for (const auto& [k, v] : fields.items()) j[k] = v;
    }
    line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  } else {
    std::string name(LevelName(level));
    name.resize(5, ' ');
    line = Now() + " " + name + " " + std::string(message);
  }
  Logger()->info(line);
}

std::vector<Record> Describe(const core::Command& command, const core::Topology& topo) {
  std::vector<Record> out;
  std::visit(
      [&](const auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, core::StartJob> || std::is_same_v<T, core::RestartJob>) {
          const bool restart = std::is_same_v<T, core::RestartJob> || c.launch.restart_count > 0;
          std::string m = "job " + std::to_string(c.id) + (restart ? " restarted" : " started");
          if (restart) m += " (run " + std::to_string(c.launch.restart_count) + ")";
          if (c.launch.checkpoint_step >= 0) {
            m += " from checkpoint step " + std::to_string(c.launch.checkpoint_step);
          }
          m += " on " + std::to_string(c.launch.nodes.size()) + " node" +
               (c.launch.nodes.size() == 1 ? "" : "s") + " (" + NodeList(topo, c.launch.nodes) +
               ")";
          out.push_back({Level::kInfo,
                         m,
                         {{"job", c.id},
                          {"nodes", c.launch.nodes.size()},
                          {"restart_count", c.launch.restart_count},
                          {"checkpoint_step", c.launch.checkpoint_step}}});
        } else if constexpr (std::is_same_v<T, core::StopJob>) {
          out.push_back({Level::kInfo,
                         "job " + std::to_string(c.id) + " stopped: " + c.reason,
                         {{"job", c.id}, {"reason", c.reason}}});
        } else if constexpr (std::is_same_v<T, core::JobStateChanged>) {
          const Level level =
              c.state == core::JobState::kFailed ? Level::kWarn
              : c.state == core::JobState::kQueued || c.state == core::JobState::kRunning
                  ? Level::kDebug
                  : Level::kInfo;
          out.push_back(
              {level,
               "job " + std::to_string(c.id) + " " + std::string(core::JobStateName(c.state)) +
                   (c.reason.empty() ? "" : ": " + c.reason),
               {{"job", c.id}, {"state", core::JobStateName(c.state)}, {"reason", c.reason}}});
        } else if constexpr (std::is_same_v<T, core::NodeStateChanged>) {
          const bool bad =
              c.state == core::NodeState::kDown || c.state == core::NodeState::kSuspect;
          out.push_back({bad ? Level::kWarn : Level::kInfo,
                         "node " + NodeName(topo, c.node) + " " +
                             std::string(core::NodeStateName(c.state)) +
                             (c.reason.empty() ? "" : ": " + c.reason),
                         {{"node", NodeName(topo, c.node)},
                          {"state", core::NodeStateName(c.state)},
                          {"reason", c.reason}}});
        } else if constexpr (std::is_same_v<T, core::GpuHealthChanged>) {
          out.push_back({c.health == core::GpuHealth::kHealthy ? Level::kInfo : Level::kWarn,
                         "node " + NodeName(topo, c.node) + " GPU " + std::to_string(c.gpu) + " " +
                             std::string(core::GpuHealthName(c.health)) +
                             (c.reason.empty() ? "" : ": " + c.reason),
                         {{"node", NodeName(topo, c.node)},
                          {"gpu", c.gpu},
                          {"health", core::GpuHealthName(c.health)},
                          {"reason", c.reason}}});
        } else if constexpr (std::is_same_v<T, core::DrainNode>) {
          out.push_back({Level::kInfo,
                         "node " + NodeName(topo, c.node) + " drain: " + c.reason,
                         {{"node", NodeName(topo, c.node)}, {"reason", c.reason}}});
        } else if constexpr (std::is_same_v<T, core::RequestCheckpoint>) {
          out.push_back({Level::kDebug,
                         "job " + std::to_string(c.id) + " asked to checkpoint: " + c.reason,
                         {{"job", c.id}, {"reason", c.reason}}});
        }
      },
      command);
  return out;
}

}  // namespace topo::daemon::log
