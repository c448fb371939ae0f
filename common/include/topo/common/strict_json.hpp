#pragma once
// JSON text as every boundary of the project reads it: syntax errors with
// their line and column, and duplicate keys refused (most readers keep the
// last silently, so {"gpus": 8, "gpus": 16} would mean what the last says to
// one reader and the first to another). Used by the daemon's API bodies; the
// file formats of common/ use the same reader.
//
// Thread safety: pure function.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topo/core/status.hpp"

namespace topo::common {

// The value of text, or an error. A duplicate key's error names its path
// ("spec.gpus: duplicate field \"gpus\"") and `duplicate`, when given, gets
// that path.
core::Result<nlohmann::json> ParseJson(std::string_view text, std::string* duplicate = nullptr);

}  // namespace topo::common
