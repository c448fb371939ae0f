#pragma once
// The two Slurm-style strings a submission may carry, parsed in one place for
// the CLI (--dependency, --array, #TOPO and #SBATCH lines) and the daemon's
// API (POST /v1/jobs "dependency" and "array"):
//
//   dependency  afterok:12:13,afterany:14    every listed condition must hold
//               (afterok: completed; afternotok: failed, cancelled or
//               rejected; afterany: ended at all). "?" (any-of) is refused.
//   array       0-99%8   1,3,5-7   0-30:10   task indexes (ranges with an
//               optional :step), optionally %N: at most N tasks at once.
//
// Errors name what is wrong and how to write it instead.

#include <string>
#include <string_view>
#include <vector>

#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"

namespace topo::common {

inline constexpr size_t kMaxArrayTasks = 1000;    // tasks per array (Slurm's MaxArraySize 1001)
inline constexpr int kMaxArrayIndex = 1'000'000;  // largest task index
inline constexpr size_t kMaxChainText = 4096;     // bytes of either string

core::Result<std::vector<core::Dependency>> ParseDependencies(std::string_view text);
// The inverse: "afterok:12:13,afterany:14" (consecutive same kinds joined).
std::string FormatDependencies(const std::vector<core::Dependency>& deps);

struct ArraySpec {
  std::vector<int> tasks;  // ascending, distinct
  int throttle = 0;        // 0: no bound
};
core::Result<ArraySpec> ParseArraySpec(std::string_view text);

}  // namespace topo::common
