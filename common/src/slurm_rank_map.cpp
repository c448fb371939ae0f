// The rank map's Slurm text form (slurm_rank_map.hpp).

#include "topo/common/slurm_rank_map.hpp"

#include <charconv>
#include <cstdint>

#include "topo/common/hostlist.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;

constexpr size_t kMaxRanks = 1 << 20;

bool ParseInt(std::string_view s, int& out) {
  if (s.empty() || s.size() > 9) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? s.npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

}  // namespace

std::string FormatSlurmRankMap(const SlurmRankMap& m) {
  std::string out = "ranks=";
  for (size_t i = 0; i < m.nodes.size(); ++i) out += (i ? "," : "") + m.nodes[i];
  out += " map=";
  // Runs of consecutive ranks on one node; consecutive runs on consecutive
  // node indices with the same GPUs fold into one "A-B:GPUS" (every node of a
  // whole-node job in one token, whatever its size).
  struct Run {
    int node;
    std::string gpus;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < m.ranks.size();) {
    size_t j = i;
    std::vector<int64_t> gpus;
    while (j < m.ranks.size() && m.ranks[j].node == m.ranks[i].node)
      gpus.push_back(m.ranks[j++].gpu);
    runs.push_back({m.ranks[i].node, FormatIndexRuns(gpus)});
    i = j;
  }
  for (size_t i = 0; i < runs.size();) {
    size_t j = i;
    while (j + 1 < runs.size() && runs[j + 1].node == runs[j].node + 1 &&
           runs[j + 1].gpus == runs[i].gpus) {
      ++j;
    }
    out += (i ? "/" : "") + std::to_string(runs[i].node);
    if (j > i) out += "-" + std::to_string(runs[j].node);
    out += ":" + runs[i].gpus;
    i = j + 1;
  }
  const core::Parallelism& p = m.parallelism;
  out += " layout=tp:" + std::to_string(p.tp) + ",cp:" + std::to_string(p.cp) +
         ",ep:" + std::to_string(p.ep) + ",pp:" + std::to_string(p.pp) +
         ",dp:" + std::to_string(p.dp) + ",order:" + core::FormatRankOrder(p.order);
  return out;
}

Result<SlurmRankMap> ParseSlurmRankMap(std::string_view text) {
  std::string_view ranks, map, layout;
  for (std::string_view tok : Split(text, ' ')) {
    if (tok.starts_with("ranks=")) ranks = tok.substr(6);
    if (tok.starts_with("map=")) map = tok.substr(4);
    if (tok.starts_with("layout=")) layout = tok.substr(7);
  }
  if (ranks.empty() || map.empty() || layout.empty()) {
    return Status::Error(
        "no rank map: ranks=, map= and layout= are all needed (a job placed by toposched "
        "carries them in its AdminComment)");
  }
  SlurmRankMap m;
  for (std::string_view n : Split(ranks, ',')) {
    if (n.empty()) return Status::Error("ranks= has an empty node name");
    m.nodes.emplace_back(n);
  }
  // "N" or "A-B" with A <= B, into first and last.
  auto range = [](std::string_view item, int& a, int& b) {
    const size_t dash = item.find('-');
    const bool ok = dash == std::string_view::npos
                        ? ParseInt(item, a) && ParseInt(item, b)
                        : ParseInt(item.substr(0, dash), a) && ParseInt(item.substr(dash + 1), b);
    return ok && a <= b;
  };
  for (std::string_view run : Split(map, '/')) {
    const size_t colon = run.find(':');
    int first = 0, last = 0;
    if (colon == std::string_view::npos || !range(run.substr(0, colon), first, last) ||
        last >= static_cast<int>(m.nodes.size())) {
      return Status::Error("map= run '" + std::string(run.substr(0, 40)) +
                           "' is not NODE:GPUS or FIRST-LAST:GPUS with NODE, FIRST and LAST "
                           "indices into ranks=");
    }
    std::vector<std::pair<int, int>> gpus;
    size_t per_node = 0;
    for (std::string_view item : Split(run.substr(colon + 1), ',')) {
      int a = 0, b = 0;
      if (!range(item, a, b)) {
        return Status::Error("map= GPUs '" + std::string(item.substr(0, 40)) +
                             "' are not N or A-B with A <= B");
      }
      gpus.emplace_back(a, b);
      per_node += static_cast<size_t>(b - a) + 1;
    }
    if (m.ranks.size() + per_node * (static_cast<size_t>(last - first) + 1) > kMaxRanks) {
      return Status::Error("map= holds more than " + std::to_string(kMaxRanks) + " ranks");
    }
    for (int node = first; node <= last; ++node) {
      for (const auto& [a, b] : gpus) {
        for (int g = a; g <= b; ++g) m.ranks.push_back({node, g});
      }
    }
  }
  core::JobSpec spec;
  for (std::string_view kv : Split(layout, ',')) {
    const size_t colon = kv.find(':');
    const std::string_view key = kv.substr(0, colon);
    const std::string_view value = colon == std::string_view::npos ? "" : kv.substr(colon + 1);
    int n = 0;
    if (key == "order") {
      auto order = core::ParseRankOrder(value);
      if (!order.ok()) return Status::Error("layout= order: " + order.message());
      spec.parallelism.order = order.value();
      continue;
    }
    int* field = key == "tp"   ? &spec.parallelism.tp
                 : key == "cp" ? &spec.parallelism.cp
                 : key == "ep" ? &spec.parallelism.ep
                 : key == "pp" ? &spec.parallelism.pp
                 : key == "dp" ? &spec.parallelism.dp
                               : nullptr;
    if (field == nullptr || !ParseInt(value, n) || n < 1) {
      return Status::Error("layout= item '" + std::string(kv.substr(0, 40)) +
                           "' is not tp|cp|ep|pp|dp:N (N >= 1) or order:...");
    }
    *field = n;
  }
  spec.gpus = static_cast<int>(m.ranks.size());
  if (Status st = core::ValidateJobSpec(spec); !st.ok()) {
    return Status::Error("layout= does not fit the " + std::to_string(m.ranks.size()) +
                         " ranks of map=: " + st.message());
  }
  m.parallelism = spec.parallelism;
  return m;
}

std::string FormatSlurmCheckpointSignal(const SlurmCheckpointSignal& s) {
  return std::string("signal=") + (s.batch_only ? "B:" : "") + std::to_string(s.number);
}

std::optional<SlurmCheckpointSignal> ParseSlurmCheckpointSignal(std::string_view text) {
  for (std::string_view tok : Split(text, ' ')) {
    if (!tok.starts_with("signal=")) continue;
    std::string_view value = tok.substr(7);
    SlurmCheckpointSignal s;
    if (value.starts_with("B:")) {
      s.batch_only = true;
      value.remove_prefix(2);
    }
    if (value.size() > 2 || !ParseInt(value, s.number) || s.number < 1 ||
        s.number > kMaxSignalNumber) {
      return std::nullopt;
    }
    return s;
  }
  return std::nullopt;
}

}  // namespace topo::common
