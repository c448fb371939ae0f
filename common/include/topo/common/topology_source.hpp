#pragma once
// Where a topology comes from for the tools: a file in any supported format,
// or a reference topology by name (crux-847 is real data, read from the
// shared data directory).

#include <string>
#include <vector>

#include "topo/common/topology_io.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::common {

struct TopologySource {
  std::string file;       // path; empty when generating
  std::string format;     // json | slurm | crux; empty = guess from content
  std::string generate;   // reference name (core generators or crux-847)
  int gpus_per_node = 0;  // 0 = the format's or generator's default
};

// Reads the file or runs the generator. Errors name the file, the line and
// the fix; an empty source asks for --topology or --generate.
core::Result<core::Topology> LoadTopology(const TopologySource& source);

// The reference names LoadTopology accepts for `generate`.
std::vector<std::string> ReferenceTopologyNames();

// The directory of shared reference data: $TOPO_SHARED_DIR, else the build's
// configured path, else ../shared from the working directory.
std::string SharedDataDir();

core::Result<std::string> ReadFile(const std::string& path);

}  // namespace topo::common
