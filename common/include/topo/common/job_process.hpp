#pragma once
// How a job's processes start (core::ProcessSpec) as the API, the event log
// and the `topo` client write it, and the one set of checks that the CLI, the
// daemon and the agent's `start` reader share (docs/jobs.md, docs/api.md):
//
//   {"launch": "node", "env": {"LANG": "C.UTF-8"}, "chdir": "/srv/run",
//    "output": "/srv/run/out-%j-%r.log", "error": "err-%j-%r.log"}
//
// Every field is optional; absent means the default (launch "rank", no
// variables, the account's home, the agent's per-rank log). The fields sit
// at the top level of a POST /v1/jobs body and of a logged job request,
// beside "command".
//
// Thread safety: pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topo/common/agent_protocol.hpp"
#include "topo/core/launch.hpp"
#include "topo/core/status.hpp"

namespace topo::common {

// "rank" | "node".
std::string_view LaunchModeName(core::LaunchMode mode);
std::optional<core::LaunchMode> ParseLaunchMode(std::string_view name);

// Bounds: the agent protocol's (agent_protocol.hpp), so that a job the API
// accepts always fits in a `start`.
inline constexpr size_t kMaxJobEnvVars = proto::kMaxEnvVars;
inline constexpr size_t kMaxJobEnvBytes = proto::kMaxEnvBytes;    // "K=V" strings + NULs
inline constexpr size_t kMaxEnvValueBytes = proto::kMaxArgBytes;  // MAX_ARG_STRLEN - 1
inline constexpr size_t kMaxEnvNameBytes = 256;
inline constexpr size_t kMaxJobPathBytes = proto::kMaxPathBytes;  // PATH_MAX - 1

// Why a job may not set this variable itself ("" when it may): the agent
// sets it for every rank (RANK, WORLD_SIZE, MASTER_ADDR, LOCAL_*, GROUP_*,
// ROLE_*, TORCHELASTIC_*, CUDA_VISIBLE_DEVICES, every TOPO_*). PATH, HOME,
// OMP_NUM_THREADS and the like are the job's to change.
std::string ReservedEnvReason(std::string_view name);

// One variable of the job's own: NAME is a shell identifier
// ([A-Za-z_][A-Za-z0-9_]*, at most 256 bytes) and not reserved; VALUE has
// no NUL and at most kMaxEnvValueBytes. The error names the variable.
core::Status CheckJobEnvVar(std::string_view name, std::string_view value);
// Every variable, and at most kMaxJobEnvVars of them in kMaxJobEnvBytes.
core::Status CheckJobEnv(const std::map<std::string, std::string>& env);
// An absolute path of at most kMaxJobPathBytes without control characters.
core::Status CheckWorkingDir(std::string_view dir);
// A file name pattern: not empty, at most kMaxJobPathBytes, no control
// characters, not ending in '/', and '%' only in %j, %r or %%.
core::Status CheckOutputPattern(std::string_view pattern);
// The pattern with %j -> job, %r -> index, %% -> %.
// REQUIRES: CheckOutputPattern(pattern) is ok.
std::string ExpandOutputPattern(std::string_view pattern, std::string_view job, int index);

// Reads the fields of a ProcessSpec present in `object` (other fields are
// ignored: the caller checks the object's field list), with every check
// above. On error, *field (when given) is the field to name in the answer
// ("env", "chdir", ...) and the message starts with it.
// ProcessSpecChecks::kTypes checks types and the launch mode only: for the
// event log, whose jobs were checked when submitted, so that a daemon of a
// later release that reserves another name or narrows a bound still replays
// its log and starts, instead of refusing the whole log for one old job.
enum class ProcessSpecChecks { kAll, kTypes };
core::Result<core::ProcessSpec> ProcessSpecFromJson(
    const nlohmann::json& object, std::string* field = nullptr,
    ProcessSpecChecks checks = ProcessSpecChecks::kAll);
// Writes the fields that differ from the default into *object (the event
// log, a request). With every_field (GET /v1/jobs/ID), every field is
// written: "launch", "env" ({} when none), and "chdir", "output", "error"
// as null when not given (the defaults above apply).
void ProcessSpecToJson(const core::ProcessSpec& spec, nlohmann::json* object,
                       bool every_field = false);

}  // namespace topo::common
