#pragma once
// Flags shared by the offline commands.

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "topo/common/topology_source.hpp"

namespace topo::cli {

// --topology FILE, --format (or another name for the input format, where
// --format means something else), --generate NAME, --gpus-per-node N.
void AddTopologyFlags(CLI::App& cmd, common::TopologySource* source,
                      const std::string& format_flag = "--format");

// A CLI11 check for a comma-separated list whose every item is one of
// `allowed`: "--state: 'bogus' is not a state; use up, draining, ...".
CLI::Validator OneOfList(std::vector<std::string> allowed, std::string what);
// Every node and job state by the core's own names, for OneOfList.
std::vector<std::string> NodeStateNames();
std::vector<std::string> JobStateNames();

// The name among `names` closest to `typed` (edit distance at most a third
// of its length, at least 2, or a prefix), or "" when none is near: for
// "did you mean ...?" on a mistyped verb or flag.
std::string NearestName(std::string_view typed, const std::vector<std::string>& names);

// What to tell a user whose command line CLI11 refused: for an unknown verb
// or flag, "'sumbit' is not a topo command; did you mean 'submit'?" (the
// verbs and flags of the deepest subcommand that parsed); "" when the
// command line holds no unknown name.
std::string SuggestForUnknown(CLI::App& app, const std::vector<std::string>& args);

// What to print (after "topo: ") for any other command line CLI11 refused
// with `what` (a bad flag value, a missing argument): `what` and where the
// help is, "--state: 'x' is not a job state; ... (topo queue --help)", naming
// the deepest subcommand that parsed, on one line.
std::string UsageError(CLI::App& app, const std::string& what);

// Prints "topo: <message>" to stderr and returns kExitError.
int Fail(const std::string& message);

}  // namespace topo::cli
