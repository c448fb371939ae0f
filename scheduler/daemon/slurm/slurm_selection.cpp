// Slurm's node selection on the plugin's line (slurm_selection.hpp).

#include "daemon/slurm/slurm_selection.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <tuple>
#include <unordered_set>

#include "topo/common/hostlist.hpp"
#include "topo/common/node_name.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

// At most this many GPU types or features per job (the job spec's JSON
// reader takes as many).
constexpr size_t kMaxNames = 64;

bool AlNum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool Digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Quoted(std::string_view s) { return "\"" + common::ShownName(s) + "\""; }

// Adds name unless it is there already (ASCII case-insensitive).
void AddName(std::vector<std::string>& names, std::string_view name) {
  for (const std::string& n : names) {
    if (core::SameGpuModel(n, name)) return;
  }
  names.emplace_back(name);
}

// A GPU type (Slurm's Type= in gres.conf, e.g. h100, a100_80gb, h100-sxm).
Status CheckGpuType(std::string_view type, std::string_view item, const std::string& label) {
  if (type.empty()) {
    return Status::Error(label + ": " + Quoted(item) +
                         " names an empty GPU type; write gpu:TYPE:N or gpu:N");
  }
  if (type.size() > core::kMaxSelectionNameBytes) {
    return Status::Error(label + ": the GPU type " + Quoted(type) + " is " +
                         std::to_string(type.size()) + " bytes; at most " +
                         std::to_string(core::kMaxSelectionNameBytes) +
                         " (topo nodes --summary lists the cluster's types)");
  }
  if (!std::all_of(type.begin(), type.end(),
                   [](char c) { return AlNum(c) || c == '.' || c == '_' || c == '-'; })) {
    return Status::Error(label + ": the GPU type " + Quoted(type) +
                         " is not a type name: letters, digits, . _ - (e.g. gpu:h100:8)");
  }
  return Status::Ok();
}

// Bytes of a plain feature name; the rest are Slurm's operators (refused
// for what they mean) or not names at all.
bool FeatureByte(char c) {
  return AlNum(c) || c == '.' || c == '_' || c == '-' || c == '+' || c == '=' || c == '/' ||
         c == '@';
}

}  // namespace

std::string SlurmFieldLabel(std::string_view field) {
  if (field == "tres_per_node") return "tres_per_node (--gres, --gpus-per-node)";
  if (field == "tres_per_job") return "tres_per_job (--gpus)";
  if (field == "tres_per_socket") return "tres_per_socket (--gpus-per-socket)";
  if (field == "tres_per_task") return "tres_per_task (--gpus-per-task)";
  if (field == "features") return "features (-C/--constraint)";
  if (field == "req_nodes") return "req_nodes (-w/--nodelist)";
  if (field == "exc_nodes") return "exc_nodes (-x/--exclude)";
  return std::string(field);
}

Result<SlurmGpus> ParseSlurmTresGpus(std::string_view tres, std::string_view field) {
  const std::string label = SlurmFieldLabel(field);
  SlurmGpus out;
  bool any = false;
  size_t i = 0;
  while (i <= tres.size()) {
    size_t end = tres.find_first_of(",;", i);
    if (end == std::string_view::npos) end = tres.size();
    const std::string_view whole = tres.substr(i, end - i);
    i = end + 1;
    std::string_view item = whole;
    if (item.substr(0, 5) == "gres:" || item.substr(0, 5) == "gres/") item.remove_prefix(5);
    const size_t name_end = std::min(item.find_first_of(":="), item.size());
    if (item.substr(0, name_end) != "gpu") continue;  // another resource, or empty
    std::string_view rest = item.substr(name_end);
    std::string_view type, count = "1";
    if (!rest.empty() && rest[0] == '=') {
      count = rest.substr(1);
    } else if (!rest.empty()) {  // ':'
      rest.remove_prefix(1);
      if (Digits(rest)) {
        count = rest;
      } else {
        const size_t sep = rest.find_first_of(":=");
        type = rest.substr(0, sep);
        if (sep != std::string_view::npos) count = rest.substr(sep + 1);
        if (Status s = CheckGpuType(type, whole, label); !s.ok()) return s;
      }
    }
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
    if (!Digits(count) || ec != std::errc() || p != count.data() + count.size()) {
      return Status::Error(label + ": the GPU count of " + Quoted(whole) +
                           " is not a whole number (write gpu:N or gpu:TYPE:N)");
    }
    if (n == 0) continue;  // gpu:0 asks for none
    if (any && n != out.count) {
      return Status::Error(
          label + ": " + Quoted(tres) + " asks for " + std::to_string(out.count) + " and " +
          std::to_string(n) +
          " GPUs of different types; toposched runs a job on one GPU type, any of those "
          "named: give every type the same count (e.g. gpu:h100:8,gpu:h200:8)");
    }
    any = true;
    out.count = n;
    if (!type.empty()) {
      AddName(out.types, type);
      if (out.types.size() > kMaxNames) {
        return Status::Error(label + ": more than " + std::to_string(kMaxNames) + " GPU types");
      }
    }
  }
  return out;
}

Result<std::vector<std::string>> ParseSlurmFeatures(std::string_view constraint) {
  const std::string label = SlurmFieldLabel("features");
  if (constraint.find_first_of("|[]()*:!") != std::string_view::npos) {
    return Status::Error(
        label + ": " + Quoted(constraint) +
        " is more than an AND of features; toposched takes only features every node of the "
        "job has, joined by & (e.g. -C ib&nvme): OR (|), brackets, counts (*N, :N), "
        "parentheses and NOT (!) are not supported. Ask for the feature the nodes share, or "
        "submit one job per alternative");
  }
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= constraint.size()) {
    size_t end = constraint.find_first_of("&,", i);
    if (end == std::string_view::npos) end = constraint.size();
    const std::string_view f = constraint.substr(i, end - i);
    i = end + 1;
    if (f.empty()) {
      return Status::Error(label + ": " + Quoted(constraint) +
                           " has an empty feature; join features with one & (e.g. -C ib&nvme)");
    }
    if (f.size() > core::kMaxSelectionNameBytes) {
      return Status::Error(label + ": the feature " + Quoted(f) + " is " +
                           std::to_string(f.size()) + " bytes; at most " +
                           std::to_string(core::kMaxSelectionNameBytes));
    }
    if (!std::all_of(f.begin(), f.end(), FeatureByte)) {
      return Status::Error(label + ": " + Quoted(f) +
                           " is not a feature name: letters, digits and . _ - + = / @, joined "
                           "by & (e.g. -C ib&nvme)");
    }
    if (std::find(out.begin(), out.end(), f) == out.end()) out.emplace_back(f);
    if (out.size() > kMaxNames) {
      return Status::Error(label + ": more than " + std::to_string(kMaxNames) +
                           " features; ask for fewer");
    }
  }
  return out;
}

Result<std::vector<std::string>> ParseSlurmNodeList(std::string_view hostlist,
                                                    std::string_view field) {
  const std::string label = SlurmFieldLabel(field);
  Result<std::vector<std::string>> names =
      common::ExpandHostlist(hostlist, core::kMaxSelectionNames);
  if (!names.ok()) {
    return Status::Error(label + ": " + Quoted(hostlist) +
                         " is not a hostlist (e.g. gpu[0001-0004,0007]): " + names.message());
  }
  for (const std::string& n : names.value()) {
    if (Status s = common::CheckNodeName(n); !s.ok()) {
      return Status::Error(label + ": " + s.message());
    }
  }
  return names;
}

Result<SlurmSelection> ReadSlurmSelection(const api::SlurmSubmitLine& line) {
  SlurmSelection out;
  core::NodeSelection& sel = out.selection;
  struct Tres {
    const char* field;
    const std::optional<std::string>* text;
    int64_t* count;  // null: types only
  };
  for (const Tres& t : {Tres{"tres_per_node", &line.tres_per_node, &out.gpus_per_node},
                        Tres{"tres_per_job", &line.tres_per_job, &out.gpus_per_job},
                        Tres{"tres_per_socket", &line.tres_per_socket, nullptr},
                        Tres{"tres_per_task", &line.tres_per_task, nullptr}}) {
    if (!t.text->has_value()) continue;
    Result<SlurmGpus> gpus = ParseSlurmTresGpus(**t.text, t.field);
    if (!gpus.ok()) return gpus.status();
    if (t.count != nullptr) *t.count = gpus.value().count;
    for (const std::string& type : gpus.value().types) AddName(sel.gpu_types, type);
  }
  if (sel.gpu_types.size() > kMaxNames) {
    return Status::Error("the TRES fields name more than " + std::to_string(kMaxNames) +
                         " GPU types");
  }
  if (const std::string f = line.features.value_or(""); !f.empty()) {
    Result<std::vector<std::string>> features = ParseSlurmFeatures(f);
    if (!features.ok()) return features.status();
    sel.features = std::move(features).value();
  }
  for (auto [field, text, names] : {std::tuple{"req_nodes", &line.req_nodes, &sel.nodelist},
                                    std::tuple{"exc_nodes", &line.exc_nodes, &sel.exclude}}) {
    if (text->value_or("").empty()) continue;
    Result<std::vector<std::string>> parsed = ParseSlurmNodeList(**text, field);
    if (!parsed.ok()) return parsed.status();
    std::unordered_set<std::string> seen;
    for (std::string& n : parsed.value()) {
      if (seen.insert(n).second) names->push_back(std::move(n));
    }
  }
  if (!sel.nodelist.empty() && !sel.exclude.empty()) {
    std::vector<std::string> listed = sel.nodelist;
    std::sort(listed.begin(), listed.end());
    for (const std::string& n : sel.exclude) {
      if (std::binary_search(listed.begin(), listed.end(), n)) {
        return Status::Error("req_nodes (-w) and exc_nodes (-x) both name node " + Quoted(n) +
                             "; leave it out of one of them");
      }
    }
  }
  return out;
}

std::string SlurmPartition(const std::optional<std::string>& partition,
                           const core::NodeSets& sets) {
  const std::string_view list = partition ? std::string_view(*partition) : std::string_view();
  size_t start = 0;
  while (start < list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name(list.substr(start, comma - start));
    if (!name.empty() && sets.partition(name) != nullptr) return name;
    start = comma + 1;
  }
  return "";
}

}  // namespace topo::daemon
