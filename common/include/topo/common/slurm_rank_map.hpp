// The rank map of a job placed in Slurm mode, as it travels through Slurm:
// topo-scheduler writes it into the plugin's PLACE answer and into the job's
// AdminComment; topo-slurm-task reads it back on the nodes and lays the
// job's tasks out by it (docs/slurm.md, "Ranks in toposched's order").
//
//   ranks=gpu0006,gpu0005          the job's nodes, in rank order
//   map=0-1:0-7                    runs of consecutive ranks: NODE:GPUS, NODE an
//                                  index into ranks=, GPUS the GPU of each rank of
//                                  the run ("a-b" for a, a+1, ..., b); FIRST-LAST:GPUS
//                                  for consecutive nodes with the same GPUs in turn
//                                  (0-1:0-7 is 0:0-7/1:0-7), so a whole-node job's
//                                  map is one token at any size
//   layout=tp:8,cp:1,ep:1,pp:2,dp:1,order:tp-cp-ep-dp-pp
//
// The three are space-separated tokens; AdminComment holds
// "toposched:<id> [signal=...] ranks=... map=... layout=..." (signal=: below).

#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/job.hpp"
#include "topo/core/status.hpp"

namespace topo::common {

struct SlurmRankMap {
  std::vector<std::string> nodes;  // distinct, in rank order
  struct Rank {
    int node = 0;  // index into nodes
    int gpu = 0;
  };
  std::vector<Rank> ranks;  // index = rank
  core::Parallelism parallelism;

  // The node of each rank, by name.
  const std::string& NodeOf(int rank) const { return nodes.at(ranks.at(rank).node); }
};

// "ranks=... map=... layout=..."; REQUIRES: every rank's node is in nodes.
std::string FormatSlurmRankMap(const SlurmRankMap& m);

// Reads the tokens of FormatSlurmRankMap out of text (an AdminComment or a
// PLACE answer's tail: other tokens are skipped). Errors name the token and
// what is wrong; the layout is validated (ValidateJobSpec) and must cover
// exactly the ranks of map=.
core::Result<SlurmRankMap> ParseSlurmRankMap(std::string_view text);

// The checkpoint signal a job declared with Slurm's --signal=[B:]SIG[@TIME]
// (job_desc's warn_signal, and KILL_JOB_BATCH in warn_flags for B:), which
// job_submit/topo writes into the AdminComment after "toposched:<id>":
//   signal=10      the job's steps get it (Slurm's default for --signal)
//   signal=B:10    the batch shell only
// A job without the token declared none: toposched never signals it (a drain
// lets it run to its end; docs/slurm.md, "Checkpoint signals").
struct SlurmCheckpointSignal {
  int number = 0;  // 1..64
  bool batch_only = false;
  friend bool operator==(const SlurmCheckpointSignal&, const SlurmCheckpointSignal&) = default;
};
constexpr int kMaxSignalNumber = 64;
// "signal=10" / "signal=B:10". REQUIRES: 1 <= s.number <= kMaxSignalNumber.
std::string FormatSlurmCheckpointSignal(const SlurmCheckpointSignal& s);
// The first "signal=" token of text (an AdminComment, other tokens skipped);
// nullopt when there is none or it is not signal=[B:]N with N in 1..64, so a
// malformed token counts as no declaration.
std::optional<SlurmCheckpointSignal> ParseSlurmCheckpointSignal(std::string_view text);

}  // namespace topo::common
