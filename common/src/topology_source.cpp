#include "topo/common/topology_source.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "topo/core/generators.hpp"

namespace topo::common {

namespace {

constexpr const char* kCruxName = "crux-847";
constexpr const char* kCruxPath = "data/topologies/crux-lingjun/topo.csv";

}  // namespace

core::Result<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return core::Status::Error(path + ": is a directory, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::Status::Error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return core::Status::Error(path + ": read failed");
  return buf.str();
}

std::string SharedDataDir() {
  if (const char* env = std::getenv("TOPO_SHARED_DIR"); env != nullptr && *env != '\0') return env;
#ifdef TOPO_SHARED_DIR
  if (std::filesystem::exists(TOPO_SHARED_DIR)) return TOPO_SHARED_DIR;
#endif
  return "../shared";
}

std::vector<std::string> ReferenceTopologyNames() {
  std::vector<std::string> names = core::GeneratorNames();
  names.push_back(kCruxName);
  return names;
}

core::Result<core::Topology> LoadTopology(const TopologySource& source) {
  if (!source.file.empty() && !source.generate.empty()) {
    return core::Status::Error("give either --topology FILE or --generate NAME, not both");
  }
  if (source.generate == kCruxName) {
    std::string path = SharedDataDir() + "/" + kCruxPath;
    core::Result<std::string> text = ReadFile(path);
    if (!text.ok()) {
      return core::Status::Error(text.message() +
                                 "; crux-847 is real data: set TOPO_SHARED_DIR to the shared/ "
                                 "directory, or pass --topology topo.csv --format crux");
    }
    return ParseCruxCsv(text.value(), source.gpus_per_node > 0 ? source.gpus_per_node : 8);
  }
  if (!source.generate.empty())
    return core::GenerateTopology(source.generate, source.gpus_per_node);
  if (source.file.empty()) {
    std::string names;
    for (const std::string& n : ReferenceTopologyNames()) names += (names.empty() ? "" : ", ") + n;
    return core::Status::Error(
        "no topology: pass --topology FILE (json, slurm topology.conf or "
        "crux csv) or --generate NAME (" +
        names + ")");
  }
  core::Result<std::string> text = ReadFile(source.file);
  if (!text.ok()) return text.status();
  TopologyFormat format = SniffTopologyFormat(text.value());
  if (!source.format.empty()) {
    core::Result<TopologyFormat> f = ParseTopologyFormat(source.format);
    if (!f.ok()) return f.status();
    format = f.value();
  }
  core::Result<core::Topology> topo = core::Status::Error("unreachable");
  switch (format) {
    case TopologyFormat::kJson:
      topo = ParseTopologyJson(text.value());
      break;
    case TopologyFormat::kSlurm: {
      SlurmTopologyOptions options;
      if (source.gpus_per_node > 0) options.gpus_per_node = source.gpus_per_node;
      options.name = std::filesystem::path(source.file).stem().string();
      topo = ParseSlurmTopology(text.value(), options);
      break;
    }
    case TopologyFormat::kCrux:
      topo = ParseCruxCsv(text.value(), source.gpus_per_node > 0 ? source.gpus_per_node : 8);
      break;
  }
  if (!topo.ok()) return core::Status::Error(source.file + ": " + topo.message());
  return topo;
}

}  // namespace topo::common
