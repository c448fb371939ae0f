#pragma once
// Slurm hostlist expressions: "gpu[0001-0016,0020]", "a[1-2]b[3-4]", "n1,n2".

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::common {

// Expands an expression into names, in order. Errors (unbalanced brackets,
// empty ranges, a range that runs backwards, non-digits inside brackets, more
// than `limit` names) name the offending part.
core::Result<std::vector<std::string>> ExpandHostlist(std::string_view expr,
                                                      size_t limit = 1'000'000);

// Compresses names into a hostlist expression, keeping the given order where
// consecutive names share a prefix and numeric width: {"gpu01","gpu02",
// "gpu03","x"} -> "gpu[01-03],x". Only names that end in their digits are
// grouped, and only with names of the same digit width ("n9,n10" stays two
// items). ExpandHostlist(CompressHostlist(v)) == v for non-empty names
// without ',', '[', ']' or whitespace.
std::string CompressHostlist(const std::vector<std::string>& names);

// Numbers as runs, in the given order: {0, 1, 2, 3, 5} -> "0-3,5" (GPU
// indices in a Slurm rank map, seeds in bench_replay's header).
std::string FormatIndexRuns(const std::vector<int64_t>& values);

}  // namespace topo::common
