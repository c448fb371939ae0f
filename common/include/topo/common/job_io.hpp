#pragma once
// Job spec v1 wire format (schema/job.schema.json) <-> core::JobSpec.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topo/core/evaluator.hpp"
#include "topo/core/job.hpp"
#include "topo/core/perf_model.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/topology.hpp"

namespace topo::common {

// Strict: unknown fields, wrong types and out-of-range values are errors that
// name the JSON path and the fix. dp may be left out (derived from gpus);
// constraints not given keep JobSpec's defaults. The result passes
// core::ValidateJobSpec (whose error is returned as is).
core::Result<core::JobSpec> ParseJobSpec(std::string_view text);
core::Result<core::JobSpec> JobSpecFromJson(const nlohmann::json& j);
// Writes every field explicitly; JobSpecFromJson(JobSpecToJson(j)) == j.
nlohmann::json JobSpecToJson(const core::JobSpec& job);

// {"outcome", "reason", "ranks": [{"rank","node","gpu"}], "spares": [...]}
// with node names from the topology (docs/formats.md).
// REQUIRES: every node id in placement is a node of topology.
nlohmann::json PlacementToJson(const core::Placement& placement, const core::Topology& topology);
// The metrics of evaluator.hpp; ratios that do not apply are null;
// "tier_histogram": {kind: {tier name: count}} with non-zero counts only.
nlohmann::json MetricsToJson(const core::PlacementMetrics& metrics, const core::Topology& topology);
// {"step_s", "ideal_step_s", "slowdown", "model", "breakdown": {"compute_s", "tp_s",
// "cp_s", "ep_s", "pp_s", "dp_s", "bubble_s"}, "ideal_breakdown": {...}}: seconds per
// optimizer step (docs/perf-model.md); "model" is the preset the prediction used, or
// "custom".
nlohmann::json PredictionToJson(const core::StepPrediction& prediction, const std::string& model);

}  // namespace topo::common
