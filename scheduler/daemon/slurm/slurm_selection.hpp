#pragma once
// Slurm's node selection on the plugin's line (docs/slurm.md, "Node
// selection"): the GPU types of the TRES strings (--gres=gpu:TYPE:N,
// --gpus, --gpus-per-node, --gpus-per-socket, --gpus-per-task), the
// constraint string (-C) and the node lists (-w, -x), read into the job
// spec's NodeSelection. Every error names the line's field, the sbatch
// option it comes from, and what to write instead; the plugin shows it to
// the user ("sbatch: error: toposched: ...").
//
// Thread safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/common/user_api.hpp"
#include "topo/core/job.hpp"
#include "topo/core/node_sets.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// The GPUs of one TRES string.
struct SlurmGpus {
  int64_t count = -1;  // -1: no GPU item, or a count of 0
  // The types named, first spelling of each (ASCII case-insensitive, as
  // core::SameGpuModel compares them); empty: untyped.
  std::vector<std::string> types;
};

// One TRES string of the line, items split at ',' or ';':
// "gres:gpu:h100:8" (22.05), "gres/gpu:h100:8" (23.02 on), "gres/gpu:h100=8"
// and "gres/gpu=8" (the TRES form), "gres:gpu:8", "gres:gpu:h100" (one GPU),
// "gpu:8". Items of other resources ("gres:nvme:1", "cpu=4") are skipped.
// Several GPU items (gpu:h100:8,gpu:h200:8) give every type, read as any of
// them (toposched runs a job on one type), and must ask for the same count.
// field is the line's field ("tres_per_node"), for errors.
core::Result<SlurmGpus> ParseSlurmTresGpus(std::string_view tres, std::string_view field);

// -C/--constraint: an AND of plain features ("ib", "ib&nvme", and 22.05's
// "ib,nvme", which Slurm also reads as AND). OR (|), brackets, counts (*N,
// :N), parentheses and NOT (!) are refused: toposched has no meaning for
// them. A feature is 1-64 bytes of A-Z a-z 0-9 . _ - + = / @; at most 64.
core::Result<std::vector<std::string>> ParseSlurmFeatures(std::string_view constraint);

// -w/-x: a Slurm hostlist whose names follow the node-name rule
// (common/node_name.hpp). field is the line's field ("req_nodes").
core::Result<std::vector<std::string>> ParseSlurmNodeList(std::string_view hostlist,
                                                          std::string_view field);

// Everything above, from one line: the GPU counts of tres_per_node and
// tres_per_job (as before: --gpus-per-node / --gres and --gpus), the types
// of all four TRES fields, the features, the node list (req_nodes) and the
// exclusions (exc_nodes). avoid stays empty.
struct SlurmSelection {
  int64_t gpus_per_node = -1;  // -1: none given
  int64_t gpus_per_job = -1;
  core::NodeSelection selection;
};
core::Result<SlurmSelection> ReadSlurmSelection(const api::SlurmSubmitLine& line);

// The toposched partition (core/node_sets.hpp) a Slurm job runs in: the
// first partition of its -p/--partition ("gpu", or Slurm's list
// "debug,gpu") that toposched has one of the same name; "" when it names
// none that toposched has (the Slurm partition is then ignored, and the job
// runs in toposched's default partition, or on any node without one).
std::string SlurmPartition(const std::optional<std::string>& partition, const core::NodeSets& sets);

// How an error shows the line's field: "tres_per_node (--gres,
// --gpus-per-node)", "req_nodes (-w)", ...
std::string SlurmFieldLabel(std::string_view field);

}  // namespace topo::daemon
