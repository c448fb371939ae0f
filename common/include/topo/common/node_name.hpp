#pragma once
// The one rule for node names (docs/formats.md, Node names): what every
// topology reader (JSON, topology.conf, topology.yaml, Crux CSV) accepts,
// what a node's agent may register as (the agent protocol's `node`, and the
// CN of its certificate), and what the API's node filters take. A name one
// of them accepted and another refused would be a node no agent can bring
// up, or one no filter can find.
//
//   1-64 bytes (an X.509 CN's bound, and a host name's) of A-Z a-z 0-9 . _ -,
//   starting with a letter or a digit.
//
// Thread safety: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::common {

inline constexpr size_t kMaxNodeNameBytes = 64;

bool ValidNodeName(std::string_view name);

// The rule in words, for error messages: "1-64 bytes of A-Z a-z 0-9 . _ -,
// starting with a letter or a digit".
std::string_view NodeNameRule();

// The name as an error message may show it: at most 80 bytes, control and
// non-ASCII bytes as \xNN, so an ESC or a newline in a file never reaches a
// terminal or a log line raw.
std::string ShownName(std::string_view name);

// Ok, or the error "node \"NAME\" is not a node name: RULE".
core::Status CheckNodeName(std::string_view name);

}  // namespace topo::common
