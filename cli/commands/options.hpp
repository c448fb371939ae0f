#pragma once
// Flags shared by the offline commands.

#include <CLI/CLI.hpp>
#include <string>
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

// Prints "topo: <message>" to stderr and returns kExitError.
int Fail(const std::string& message);

}  // namespace topo::cli
