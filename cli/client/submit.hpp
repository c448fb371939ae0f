#pragma once
// What `topo submit` sends: the POST /v1/jobs body built from flags, a job
// spec file and the #TOPO lines of a batch script (the way sbatch reads
// #SBATCH). Pure functions; no I/O except where a path is named.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/agent_protocol.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/status.hpp"

namespace topo::cli {

// "90m", "2h", "3600s", "1d", compounds ("1h30m", "1d12h"), "H:MM:SS" and
// "D-H:MM:SS". A bare number is an error (minutes or seconds?). Result in
// seconds, > 0.
core::Result<int64_t> ParseDuration(std::string_view text);
// "512M", "64G", "1T" (binary units; a bare number is MiB) -> MiB.
core::Result<int64_t> ParseMemoryMiB(std::string_view text);

// The flags `topo submit` takes, on the command line and on #TOPO lines.
struct SubmitFlagInfo {
  std::string_view name;  // without "--"
  std::string_view value_name;
  std::string_view help;
};
const std::vector<SubmitFlagInfo>& SubmitFlagTable();

// One flag's value and where it was given ("" for the command line,
// "job.sh:3" for a #TOPO line).
struct FlagValue {
  std::string value;
  std::string origin;
};
// By flag name ("gpus", "tp", ...); constraints as "constraint:KIND" and
// variables as "env:NAME". Flags given twice keep the last value.
using SubmitFlags = std::map<std::string, FlagValue>;

// Checks one flag's value (numbers, durations, names); the error names the
// flag. `name` must be in SubmitFlagTable().
core::Status CheckSubmitFlag(std::string_view name, std::string_view value);

// Adds name=value to *flags ("constraint" values go under their kind);
// checks the value. Errors are prefixed with `origin` when it is not empty.
core::Status AddSubmitFlag(SubmitFlags* flags, std::string_view name, std::string value,
                           const std::string& origin);

// Splits text into words like a shell would, without expansions: blanks
// separate, '...' and "..." quote, backslash escapes, a word starting with
// '#' starts a comment.
core::Result<std::vector<std::string>> SplitWords(std::string_view text);

struct ScriptDirectives {
  SubmitFlags flags;
  // #TOPO lines after the leading comment block, which are ignored.
  std::vector<std::string> warnings;
};
// Reads the #TOPO lines of the script's leading block: an optional "#!" line,
// then comment and blank lines up to the first command. "#TOPO --gpus 64
// --tp 8": words are flags of SubmitFlagTable (--flag VALUE or
// --flag=VALUE). Errors name path:line.
core::Result<ScriptDirectives> ParseScriptDirectives(std::string_view script,
                                                     const std::string& path);

// What every rank of a batch-script job runs: the script's text through its
// "#!" interpreter (/bin/sh without one), `INTERPRETER... -c TEXT`, so the
// script need not be on a file system the nodes share. The text is one
// argument, hence kMaxScriptBytes.
std::vector<std::string> ScriptCommand(std::string_view text);
// The most a batch script may hold: one exec argument on Linux
// (topo::proto::kMaxArgBytes, MAX_ARG_STRLEN less its NUL).
inline constexpr size_t kMaxScriptBytes = proto::kMaxArgBytes;

// Says in the user's terms where argument `index` of a command came from:
// "job.json: command[3]", "the script train.sh".
using ArgumentOrigin = std::function<std::string(size_t index)>;
// Checks a command (argv) against what exec accepts on Linux and the API
// takes (common/include/topo/common/agent_protocol.hpp): a non-empty array
// of at most kMaxCommandArgs strings, a non-empty program, no argument over
// kMaxArgBytes or holding a NUL, kMaxCommandBytes in all with their NULs.
// The error names the argument through `origin`.
core::Status CheckCommand(const nlohmann::json& command, const ArgumentOrigin& origin);

// The flag, its value and where it was given ("--time 40d (job.sh:3)") that
// set the API field a POST /v1/jobs error names ("time_limit_s"), so the
// error speaks of what the user typed; "" when no flag set it.
std::string SubmitFieldLabel(const SubmitFlags& flags, std::string_view field);

// `over` wins over `base`.
SubmitFlags MergeSubmitFlags(const SubmitFlags& base, const SubmitFlags& over);

// Flags that may be given many times (--constraint, --env).
bool IsRepeatableSubmitFlag(std::string_view name);

// The POST /v1/jobs request (common/user_api.hpp's SubmitRequest; send
// api::WriteSubmitRequest of it). `spec_file` is the --spec JSON when
// given: a job spec v1, or a whole request {"spec": ..., ...}; flags override
// its fields. `default_name` names the job when neither names it. `command`
// is what every rank runs; empty: the whole request's own "command".
// `environment` is the submitter's, of which --export sends ALL (less the
// names the job may not set: *warnings says which were left out), NONE (the
// default) or the names listed (each must be set); --env NAME=VALUE wins
// over both. The request is checked by the API's own reader, as the daemon
// reads it, so mistakes are caught before sending; an error starts with the
// flag, its value and where it was given that set the field at fault
// (SubmitFieldLabel), or with --spec for a field of the file.
core::Result<api::SubmitRequest> BuildSubmitRequest(
    const SubmitFlags& flags, const std::optional<nlohmann::json>& spec_file,
    const std::string& default_name, const std::vector<std::string>& command,
    const std::map<std::string, std::string>& environment = {},
    std::vector<std::string>* warnings = nullptr);

}  // namespace topo::cli
