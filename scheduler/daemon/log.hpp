#pragma once
// The daemon's log (spdlog, to stderr: journald or the caller's redirect keeps
// it): one line per record, with a level, as text or JSON (`log_format`), from
// `log_level` up. Every state change the core commits is one record
// (Describe, below): agents connected and lost, nodes' states, GPUs' health,
// drains, and jobs started, restarted, stopped and ended with their reasons.
//
//   text: 2026-11-23T21:04:05.123Z info  node n3 down: agent silent for 3021 ms
//   json: {"time":"2026-11-23T21:04:05.123Z","level":"info","msg":"node n3 down: ...",
//          "node":"n3","state":"down"}
//
// Thread safety: every function may be called from any thread.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon::log {

enum class Level { kDebug, kInfo, kWarn, kError };

// level: debug, info, warn, error; format: text, json. Errors name the value.
core::Status Init(std::string_view level, std::string_view format);
bool Enabled(Level level);
void Write(Level level, std::string_view message, const nlohmann::json& fields = nullptr);
inline void Debug(std::string_view m, const nlohmann::json& f = nullptr) {
  Write(Level::kDebug, m, f);
}
inline void Info(std::string_view m, const nlohmann::json& f = nullptr) {
  Write(Level::kInfo, m, f);
}
inline void Warn(std::string_view m, const nlohmann::json& f = nullptr) {
  Write(Level::kWarn, m, f);
}
inline void Error(std::string_view m, const nlohmann::json& f = nullptr) {
  Write(Level::kError, m, f);
}

// One record a committed command deserves (pure: for tests): its level, a
// sentence, and the fields a JSON log carries. Nothing for commands that are
// only mechanics (checkpoint requests are debug).
struct Record {
  Level level = Level::kInfo;
  std::string message;
  nlohmann::json fields;
};
std::vector<Record> Describe(const core::Command& command, const core::Topology& topology);

}  // namespace topo::daemon::log
