// Slurm mode: the plugin's requests, the sync with what scontrol shows, the
// topology.conf import. docs/slurm.md is the contract.

#include <algorithm>
#include <charconv>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "daemon/log.hpp"
#include "daemon/slurm/slurm_selection.hpp"
#include "daemon/slurm/slurm_service.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/slurm_rank_map.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/user_api.hpp"

namespace topo::daemon {
namespace {

using core::JobId;
using core::NodeId;
using core::NodeState;
using core::Result;
using core::Status;
using core::TimeMs;
using Json = nlohmann::json;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

// A layout ("tp=8,pp=2 order=tp-dp-pp") merged into `out`; errors name the
// key and where it came from.
Status MergeLayout(std::string_view text, std::string_view source, Json& out) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || text[i] == ' ' || text[i] == '\t')) ++i;
    size_t end = i;
    while (end < text.size() && text[end] != ',' && text[end] != ' ' && text[end] != '\t') ++end;
    if (end == i) break;
    std::string_view item = text.substr(i, end - i);
    i = end;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::Error(std::string(source) + ": \"" + std::string(item.substr(0, 40)) +
                           "\" is not key=value (e.g. tp=8,pp=2)");
    }
    std::string key(item.substr(0, eq));
    std::string_view value = item.substr(eq + 1);
    if (key == "order") {
      out["parallelism"]["order"] = std::string(value);
      continue;
    }
    static const std::set<std::string> kInts = {"tp", "cp", "ep", "pp", "dp", "spares"};
    if (kInts.count(key) == 0) {
      return Status::Error(std::string(source) + ": unknown layout key \"" + key.substr(0, 40) +
                           "\"; known: tp, cp, ep, pp, dp, order, spares");
    }
    int64_t n = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || p != value.data() + value.size() || n < 0 || n > 10000000) {
      return Status::Error(std::string(source) + ": " + key + "=" +
                           std::string(value.substr(0, 20)) + " is not a whole number");
    }
    if (key == "spares") {
      out["spares"] = n;
    } else {
      out["parallelism"][key] = n;
    }
  }
  return Status::Ok();
}

// Slurm's topology options (docs/slurm.md, "Slurm's topology options") as
// constraints on spec, or an error that says why they contradict the job:
//   --switches=1      every group kind required inside one leaf (the whole job
//                     under one leaf switch); N > 1 adds nothing (toposched
//                     spans the fewest leaves the layout allows); @time is
//                     not needed (the job waits until its constraints hold);
//   --segment=N       the first group kind (tp, cp, ep, pp, dp) whose groups
//                     each span N nodes, required inside one HBD (Slurm's
//                     block): the job's nodes in blocks N at a time;
//   --exclusive=topo  refused: toposched does not keep an HBD to one job.
// *what names the options applied, for the error of an infeasible fit.
Status ApplySlurmTopologyOptions(const api::SlurmSubmitLine& req, const core::Topology& topo,
                                 int64_t nodes, core::JobSpec& spec, std::string* what) {
  if (req.exclusive_topo.value_or(false)) {
    return Status::Error(
        "--exclusive=topo asks for blocks no other job shares, which toposched does not keep; "
        "drop it (toposched still keeps the layout's groups inside their domains), or use "
        "--segment to keep groups inside blocks");
  }
  const int64_t switches = req.req_switch.value_or(api::kSlurmNoValue);
  if (switches == 1) {
    if (!topo.FindTier("leaf").ok()) {
      return Status::Error("--switches=1: the topology has no leaf tier; drop --switches");
    }
    for (auto k : core::kAllGroupKinds) {
      spec.constraints[static_cast<int>(k)] = {core::Strength::kRequired, "leaf"};
    }
    *what = "--switches=1 (the whole job under one leaf switch)";
  }
  const int64_t segment = req.segment.value_or(api::kSlurmNoValue);
  if (segment > 0) {
    if (nodes <= 0 || nodes % segment != 0) {
      return Status::Error("--segment=" + std::to_string(segment) + " does not divide the job's " +
                           std::to_string(nodes) + " nodes: ask for a multiple of " +
                           std::to_string(segment) + " nodes or another segment");
    }
    if (topo.hbd_tier() <= 0) {  // the HBD is the node: no blocks
      return Status::Error(
          "--segment needs blocks (BlockName lines or an HBD tier in the "
          "topology); drop --segment");
    }
    // The nodes a group of kind k spans, ranks laid out node by node
    // (-1 when its groups span different counts).
    const int64_t per_node = std::max<int64_t>(1, spec.gpus / nodes);
    core::RankLayout layout(spec.parallelism);
    std::string sizes;
    for (auto k : core::kAllGroupKinds) {
      int64_t span = 0;
      for (int g = 0; g < layout.GroupCount(k) && span >= 0; ++g) {
        std::set<int64_t> on;
        for (int r : layout.GroupMembers(k, g)) on.insert(r / per_node);
        const int64_t n = static_cast<int64_t>(on.size());
        span = g == 0 || n == span ? n : -1;
      }
      sizes += std::string(sizes.empty() ? "" : ", ") + std::string(core::GroupKindName(k)) + " " +
               (span < 0 ? "uneven" : std::to_string(span));
      if (span == segment) {
        spec.constraints[static_cast<int>(k)] = {core::Strength::kRequired, "hbd"};
        *what += std::string(what->empty() ? "" : " and ") +
                 "--segment=" + std::to_string(segment) + " (each " +
                 std::string(core::GroupKindName(k)) + " group's nodes inside one block)";
        return Status::Ok();
      }
    }
    return Status::Error("--segment=" + std::to_string(segment) +
                         ": no parallel group of the layout spans exactly " +
                         std::to_string(segment) + " node(s) (nodes per group: " + sizes +
                         "); pick a segment equal to one of them, or drop --segment");
  }
  return Status::Ok();
}

// "toposched:17" -> 17; 0 when absent.
JobId ParseTag(std::string_view comment) {
  const size_t at = comment.find("toposched:");
  if (at == std::string_view::npos) return 0;
  std::string_view digits = comment.substr(at + 10);
  JobId id = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  (void)p;
  return ec == std::errc() && id > 0 ? id : 0;
}

std::vector<std::string> RankNodes(const core::Topology& topo, const core::JobRecord& j) {
  std::vector<std::string> nodes;
  std::unordered_set<NodeId> seen;
  for (const core::GpuSlot& slot : j.ranks) {
    if (seen.insert(slot.node).second) nodes.push_back(topo.node(slot.node).name);
  }
  return nodes;
}

// "ranks=... map=... layout=..." (common/slurm_rank_map.hpp): what the
// plugin puts into AdminComment and topo-slurm-task lays the tasks out by.
std::string RankMapText(const core::Topology& topo, const core::JobRecord& j) {
  common::SlurmRankMap m;
  std::unordered_map<NodeId, int> index;
  for (const core::GpuSlot& slot : j.ranks) {
    auto [it, fresh] = index.emplace(slot.node, static_cast<int>(m.nodes.size()));
    if (fresh) m.nodes.push_back(topo.node(slot.node).name);
    m.ranks.push_back({it->second, slot.gpu});
  }
  m.parallelism = j.request.spec.parallelism;
  return common::FormatSlurmRankMap(m);
}

SlurmAction Action(SlurmAction::Kind kind, int64_t slurm_job, std::vector<std::string> nodes,
                   std::string reason) {
  SlurmAction a;
  a.kind = kind;
  a.slurm_job = slurm_job;
  a.nodes = std::move(nodes);
  a.reason = std::move(reason);
  return a;
}

// "toposched:<id>" and the job's checkpoint signal token, if it declared
// one: the head of every AdminComment topo-scheduler writes.
std::string CommentPrefix(JobId id, const SlurmJobView& sj) {
  std::string out = "toposched:" + std::to_string(id);
  if (sj.checkpoint_signal) out += " " + common::FormatSlurmCheckpointSignal(*sj.checkpoint_signal);
  return out;
}

// The AdminComment of a job toposched holds in Slurm until it starts it:
// what happened, for its user (`scontrol show job`). No '=' in the words:
// the rank map's readers split tokens at it.
std::string WaitingComment(JobId id, const SlurmJobView& sj, std::string_view what) {
  return CommentPrefix(id, sj) + " waits for capacity: " + std::string(what) +
         ", which releases it onto the nodes it picks";
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// GPUs per node of the nodes a selection admits: the first listed node
// (-w), else the first node of the GPU type and features asked for, else
// the first node. What "whole nodes" means for a job of -N nodes.
int SelectedNodeGpus(const core::Topology& topo, const core::NodeSelection& sel) {
  for (const std::string& n : sel.nodelist) {
    if (const NodeId id = topo.FindNode(n); id >= 0) return topo.node(id).gpus;
  }
  uint64_t features = 0;
  for (const std::string& f : sel.features) {
    const int i = topo.FindFeature(f);
    if (i < 0) return topo.node(0).gpus;  // refused as infeasible later
    features |= uint64_t{1} << i;
  }
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    const bool typed =
        sel.gpu_types.empty() ||
        std::any_of(sel.gpu_types.begin(), sel.gpu_types.end(), [&](const std::string& t) {
          return core::SameGpuModel(t, topo.node(n).gpu_model);
        });
    if (typed && (topo.feature_mask(n) & features) == features) return topo.node(n).gpus;
  }
  return topo.node(0).gpus;
}

// The selection in Slurm's words, for the answer to a job that can never
// be placed ("... with GPU type a100 (--gres): ...").
void AppendSelectionOptions(const core::NodeSelection& sel, std::string& what) {
  auto add = [&](const std::string& part) { what += (what.empty() ? "" : " and ") + part; };
  if (!sel.gpu_types.empty()) {
    add(std::string(sel.gpu_types.size() == 1 ? "GPU type " : "GPU types ") + Join(sel.gpu_types) +
        " (--gres/--gpus)");
  }
  if (!sel.features.empty()) add("features " + Join(sel.features) + " (-C)");
  if (!sel.nodelist.empty()) add("nodes " + common::CompressHostlist(sel.nodelist) + " (-w)");
  if (!sel.exclude.empty()) add("without " + common::CompressHostlist(sel.exclude) + " (-x)");
}

bool Running(core::JobState s) {
  return s == core::JobState::kRunning || s == core::JobState::kPreempting;
}

bool SlurmTerminal(std::string_view s) {
  static const std::set<std::string, std::less<>> kDone = {
      "COMPLETED", "CANCELLED", "FAILED",   "TIMEOUT",       "NODE_FAIL",
      "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"};
  return kDone.count(s) > 0;
}

bool SlurmActive(std::string_view s) {
  static const std::set<std::string, std::less<>> kActive = {
      "RUNNING",   "COMPLETING", "CONFIGURING", "SUSPENDED",
      "STAGE_OUT", "SIGNALING",  "RESIZING",    "STOPPED"};
  return kActive.count(s) > 0;
}

enum class Want { kUp, kDrain, kDown, kKeep };

// What a Slurm node state means for the core. "IDLE+DRAIN", "DOWN*",
// "ALLOCATED+DRAIN+NOT_RESPONDING", "FUTURE", ...
Want NodeWant(const SlurmNodeView& v, std::string& reason) {
  std::string_view st = v.state;
  const bool not_responding =
      st.find('*') != std::string_view::npos || st.find("NOT_RESPONDING") != std::string_view::npos;
  std::string_view base = st.substr(0, st.find_first_of("+*"));
  const bool drain = st.find("DRAIN") != std::string_view::npos;
  if (base == "DOWN" || base == "FUTURE" || base == "UNKNOWN" || not_responding ||
      st.find("POWERED_DOWN") != std::string_view::npos ||
      st.find("POWERING_DOWN") != std::string_view::npos) {
    reason = "slurm: node is " + v.state + (v.reason.empty() ? "" : " (" + v.reason + ")");
    return Want::kDown;
  }
  if (drain) {
    if (StartsWith(v.reason, "toposched:")) return Want::kKeep;  // ours: the core decides
    reason = "slurm: drained in Slurm" + (v.reason.empty() ? "" : ": " + v.reason);
    return Want::kDrain;
  }
  return Want::kUp;
}

Want CoreWant(NodeState s) {
  switch (s) {
    case NodeState::kUp:
    case NodeState::kSuspect:
      return Want::kUp;
    case NodeState::kDraining:
    case NodeState::kDrained:
      return Want::kDrain;
    case NodeState::kDown:
      return Want::kDown;
  }
  return Want::kUp;
}

}  // namespace

std::string SlurmRequest(ServiceState& s, std::string_view text, const std::string& user,
                         TimeMs now) {
  std::string field;
  Result<api::SlurmSubmitLine> line = api::ParseSlurmSubmitLine(text, &field);
  // A line this daemon does not read (a plugin of another release, or not
  // the plugin at all) is not toposched's to decide: Slurm places the job.
  if (!line.ok()) return "PASS the request line does not read: " + OneLine(line.message());
  return SlurmRequest(s, line.value(), user, now);
}

std::string SlurmRequest(ServiceState& s, const api::SlurmSubmitLine& req, const std::string& user,
                         TimeMs now) {
  s.driver.Advance(now);
  if (req.op == api::SlurmOp::kRefresh) return "PASS unknown op \"refresh\" here";
  if (s.driver.core() == nullptr) return "PASS topo-scheduler has no topology yet";

  const std::string comment = req.comment.value_or("");
  const std::map<std::string, std::string> env =
      req.env.value_or(std::map<std::string, std::string>{});
  // The layout: TOPO_LAYOUT, then TOPO_TP..., then "topo:" in --comment (the
  // most specific wins).
  Json spec = Json::object();
  bool has_layout = false;
  if (auto it = env.find("TOPO_LAYOUT"); it != env.end()) {
    if (Status st = MergeLayout(it->second, "TOPO_LAYOUT", spec); !st.ok()) {
      return "REJECT " + OneLine(st.message());
    }
    has_layout = true;
  }
  for (const char* key : {"tp", "cp", "ep", "pp", "dp", "order", "spares"}) {
    std::string var = "TOPO_" + std::string(key);
    for (char& c : var) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (auto it = env.find(var); it != env.end()) {
      if (Status st = MergeLayout(std::string(key) + "=" + it->second, var, spec); !st.ok()) {
        return "REJECT " + OneLine(st.message());
      }
      has_layout = true;
    }
  }
  if (size_t at = comment.find("topo:"); at != std::string::npos) {
    std::string text = comment.substr(at + 5);
    text = text.substr(0, text.find(';'));
    if (Status st = MergeLayout(text, "--comment topo:", spec); !st.ok()) {
      return "REJECT " + OneLine(st.message());
    }
    has_layout = true;
  }

  if (req.array.value_or(false)) return "PASS job arrays are Slurm's to place";

  // Node selection (slurm_selection.hpp): read now, refused below only once
  // the job is toposched's.
  const core::Topology& topo = *s.driver.topology();
  Result<SlurmSelection> selected = ReadSlurmSelection(req);
  static const SlurmSelection kNone;
  const SlurmSelection& sel = selected.ok() ? selected.value() : kNone;
  const core::NodeSelection& want = sel.selection;

  // The shape: nodes and GPUs. -w names the whole allocation.
  const int node_gpus = SelectedNodeGpus(topo, want);
  const int64_t min_nodes = req.min_nodes.value_or(api::kSlurmNoValue);
  const auto listed = static_cast<int64_t>(want.nodelist.size());
  int64_t nodes = listed > 0 ? listed : min_nodes;
  const int64_t per_node = sel.gpus_per_node;
  const int64_t per_job = sel.gpus_per_job;
  int64_t gpus = 0;
  if (per_job > 0) {
    gpus = per_job;
    if (nodes < 1) nodes = (per_job + node_gpus - 1) / node_gpus;
  } else if (listed > 0 && per_node <= 0) {
    for (const std::string& n : want.nodelist) {
      const NodeId id = topo.FindNode(n);
      gpus += id >= 0 ? topo.node(id).gpus : node_gpus;
    }
  } else {
    if (nodes < 1) nodes = 1;
    gpus = nodes * (per_node > 0 ? per_node : node_gpus);
  }
  if (!has_layout && nodes < s.config.slurm_min_nodes) {
    return "PASS " + std::to_string(nodes) +
           " node(s) without a TOPO layout is below slurm_min_nodes";
  }
  if (!selected.ok()) return "REJECT " + OneLine(selected.message());
  if (listed > 0 && min_nodes > listed) {
    return "REJECT req_nodes (-w) names " + std::to_string(listed) +
           " node(s) and the job asks for " + std::to_string(min_nodes) +
           " (-N): toposched runs a job on exactly the nodes -w names; name all " +
           std::to_string(min_nodes) + " in -w, or drop -w (and keep the job off nodes with -x)";
  }
  // What toposched's topology cannot tell (topology.conf names no GPU
  // models or features unless its #toposched: header or a JSON topology
  // does): Slurm, which knows its nodes' GRES and features, places the job.
  if (!want.gpu_types.empty() && std::all_of(topo.gpu_models().begin(), topo.gpu_models().end(),
                                             [](const std::string& m) { return m.empty(); })) {
    return "PASS the job asks for GPU type " + Join(want.gpu_types) +
           " and toposched's topology names no GPU models (#toposched: model= in "
           "slurm_topology, or a JSON topology)";
  }
  if (!want.features.empty() && topo.features().empty()) {
    return "PASS the job asks for features (-C " + Join(want.features) +
           ") and toposched's topology has none (a JSON topology names them)";
  }
  for (const std::string& n : want.nodelist) {
    if (topo.FindNode(n) < 0) {
      return "PASS the job names node " + n + " (-w), which is not in toposched's topology";
    }
  }
  spec["gpus"] = gpus;
  if (per_node > 0) spec["gpus_per_node"] = per_node;
  const std::string name = req.name.value_or("");
  spec["name"] = name.empty() ? "slurm" : name.substr(0, 200);
  Result<core::JobSpec> parsed = common::JobSpecFromJson(spec);
  if (!parsed.ok()) {
    return "REJECT the layout does not fit the job's " + std::to_string(gpus) + " GPUs (" +
           std::to_string(nodes) + " nodes): " + OneLine(parsed.message());
  }
  core::JobRequest request;
  request.spec = std::move(parsed).value();
  std::string options;
  if (Status st =
          ApplySlurmTopologyOptions(req, *s.driver.topology(), nodes, request.spec, &options);
      !st.ok()) {
    return "REJECT " + OneLine(st.message());
  }
  request.spec.selection = want;
  // Excluding a node toposched does not know changes nothing (Slurm checks
  // the names itself).
  std::erase_if(request.spec.selection.exclude,
                [&](const std::string& n) { return topo.FindNode(n) < 0; });
  if (Status st = core::ValidateJobSpec(request.spec); !st.ok()) {
    return "REJECT " + OneLine(st.message());
  }
  AppendSelectionOptions(request.spec.selection, options);
  request.user =
      user.empty() ? "uid:" + std::to_string(req.uid.value_or(api::kSlurmNoValue)) : user;
  const std::string account = req.account.value_or("");
  request.tenant =
      !account.empty() && s.driver.core()->tenant(account) != nullptr ? account : "default";
  const int64_t minutes = req.time_limit_min.value_or(api::kSlurmNoValue);
  if (minutes > 0) request.time_limit = std::min<int64_t>(minutes, 365ll * 24 * 60) * core::kMinute;
  request.checkpoint_interval = -1;  // Slurm jobs checkpoint on their own
  // -p: placed in the toposched partition of that name, if there is one
  // (docs/slurm.md, Partitions), within its bounds.
  const core::NodeSets& sets = s.driver.core()->node_sets();
  request.partition = SlurmPartition(req.partition, sets);
  if (request.partition.empty() && !sets.partitions().empty() &&
      sets.default_partition() == nullptr) {
    // No partition of toposched's holds it: Slurm's partitions place it.
    return "PASS the job's partition (" + OneLine(req.partition.value_or("none")) +
           ") is none of toposched's and toposched has no default partition";
  }
  if (Status admit = sets.Admit(request, s.driver.now()); !admit.ok()) {
    return "REJECT " + OneLine(admit.message());
  }

  if (request.spec.gpus > s.driver.topology()->total_gpus()) {
    return "REJECT " + std::to_string(request.spec.gpus) + " GPUs is more than the cluster has (" +
           std::to_string(s.driver.topology()->total_gpus()) + "): ask for fewer nodes";
  }
  // The core's own verdict on the empty cluster, as for POST /v1/jobs.
  if (Status fit = s.driver.CheckFeasible(request.spec); !fit.ok()) {
    const std::string_view prefix = "spec: the job can never be placed on this cluster: ";
    std::string why = fit.message();
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    return "REJECT the job can never be placed on this cluster" +
           (options.empty() ? std::string() : " with " + options) + ": " + OneLine(why);
  }
  if (req.op == api::SlurmOp::kTest) {
    core::Placement p = s.driver.core()->TryPlace(request.spec);
    if (!p.placed()) return "BUSY " + OneLine(p.reason);
    core::JobRecord tmp;
    tmp.ranks = p.ranks;
    return "PLACE 0 " + Join(RankNodes(*s.driver.topology(), tmp));
  }

  const JobId id = s.driver.NewJobId();
  s.driver.Step(core::JobSubmitted{id, std::move(request)}, "slurm:" + (user.empty() ? "?" : user));
  const core::JobRecord* j = s.driver.core()->job(id);
  if (j == nullptr) return "PASS the job ended at once";
  if (s.metrics != nullptr) s.metrics->Submission(j->request.tenant);
  if (Running(j->state))
    return "PLACE " + std::to_string(id) + " " + Join(RankNodes(*s.driver.topology(), *j)) + " " +
           RankMapText(*s.driver.topology(), *j);
  if (j->state == core::JobState::kQueued || j->state == core::JobState::kHeld) {
    return "HOLD " + std::to_string(id) + " " + OneLine(j->reason.empty() ? "queued" : j->reason);
  }
  return "REJECT " +
         OneLine(j->reason.empty() ? std::string(core::JobStateName(j->state)) : j->reason);
}

std::vector<SlurmAction> SlurmSync(ServiceState& s, const SlurmSnapshot& snap, TimeMs now) {
  s.driver.Advance(now);
  std::vector<SlurmAction> actions;
  if (s.driver.core() == nullptr) return actions;
  const core::Topology& topo = *s.driver.topology();

  // Jobs: which Slurm job carries which toposched job; nodes busy with jobs
  // toposched did not place.
  std::unordered_map<JobId, const SlurmJobView*> tagged;
  std::unordered_map<NodeId, int64_t> foreign;
  for (const SlurmJobView& job : snap.jobs) {
    const JobId t = ParseTag(job.admin_comment);
    if (t > 0) {
      auto [it, fresh] = tagged.emplace(t, &job);
      if (!fresh && SlurmTerminal(it->second->state)) it->second = &job;
    } else if (SlurmActive(job.state)) {
      for (const std::string& n : job.nodes) {
        const NodeId id = topo.FindNode(n);
        if (id >= 0) foreign.emplace(id, job.id);
      }
    }
  }
  std::vector<std::pair<JobId, core::JobState>> live;
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (!core::IsTerminal(j.state)) live.emplace_back(id, j.state);
  }
  for (const auto& [id, state] : live) {
    auto it = tagged.find(id);
    const core::JobRecord* j = s.driver.core()->job(id);
    if (j == nullptr || core::IsTerminal(j->state)) continue;
    if (it == tagged.end()) {
      if (s.driver.now() - j->submit_time > int64_t(s.config.slurm_job_grace_s) * core::kSecond) {
        s.driver.Step(
            core::JobCancelled{id,
                               "no Slurm job carries it (ended and purged while unobserved, "
                               "or the plugin gave up before the answer)"},
            "slurm");
      }
      continue;
    }
    const SlurmJobView& sj = *it->second;
    if (SlurmTerminal(sj.state)) {
      if (Running(j->state)) {
        s.driver.Step(core::JobFinished{id, sj.state == "COMPLETED" ? 0 : 1}, "slurm");
      } else {
        s.driver.Step(
            core::JobCancelled{id, "Slurm job " + std::to_string(sj.id) + " is " + sj.state},
            "slurm");
      }
    }
  }

  // Nodes.
  std::unordered_map<std::string, const SlurmNodeView*> by_name;
  for (const SlurmNodeView& v : snap.nodes) by_name.emplace(v.name, &v);
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    const std::string& name = topo.node(n).name;
    auto vit = by_name.find(name);
    std::string reason;
    Want want = Want::kDown;
    if (vit == by_name.end()) {
      reason = "slurm: not among scontrol's nodes (FUTURE or unknown)";
    } else {
      want = NodeWant(*vit->second, reason);
    }
    if (want == Want::kUp) {
      if (auto f = foreign.find(n); f != foreign.end()) {
        want = Want::kDrain;
        reason = "slurm: in use by Slurm job " + std::to_string(f->second);
      }
    }
    const NodeState cs = s.driver.core()->cluster().node_state(n);
    const std::string& core_reason = s.driver.NodeReason(name);
    // Taken out by toposched itself (agent health, an admin): Slurm follows.
    const bool ours =
        CoreWant(cs) != Want::kUp && !core_reason.empty() && !StartsWith(core_reason, "slurm:");
    if (ours) {
      const bool slurm_out = vit != by_name.end() && NodeWant(*vit->second, reason) != Want::kUp;
      if (vit != by_name.end() && !slurm_out) {
        actions.push_back(
            Action(SlurmAction::Kind::kDrain, 0, {name}, "toposched: " + core_reason));
      }
      continue;
    }
    if (want == Want::kKeep) {
      // Drained by toposched in Slurm, but the core has it up again: resume.
      if (CoreWant(cs) == Want::kUp)
        actions.push_back(Action(SlurmAction::Kind::kResume, 0, {name}, ""));
      continue;
    }
    if (want == CoreWant(cs) && (want != Want::kDrain || core_reason == reason)) continue;
    const NodeState target = want == Want::kUp      ? NodeState::kUp
                             : want == Want::kDrain ? NodeState::kDrained
                                                    : NodeState::kDown;
    s.driver.Step(core::NodeStateRequested{n, target, want == Want::kUp ? "slurm: up" : reason},
                  "slurm");
  }

  // Graceful drains under Slurm-run jobs. No agent can ask the ranks for a
  // checkpoint and report the node evacuated, so a node whose jobs all
  // declared a checkpoint signal (--signal) sends them that signal and gives
  // them preempt_grace_s to write one; then the node counts as evacuated and
  // the jobs move (requeued onto their new nodes below), each from its newest
  // checkpoint. A job that declared none is never signalled (a signal it does
  // not handle kills it): the node drains as in `wait` mode, its jobs running
  // to their end, and the grace starts only once every job left on the node
  // declared one. A node whose jobs ended is drained by the core as usual.
  for (auto it = s.slurm_drains.begin(); it != s.slurm_drains.end();) {
    const NodeId n = topo.FindNode(it->first);
    if (n < 0 || s.driver.core()->cluster().node_state(n) != NodeState::kDraining) {
      it = s.slurm_drains.erase(it);
      continue;
    }
    ServiceState::SlurmDrain& drain = it->second;
    std::vector<std::pair<const SlurmJobView*, JobId>> on_node;
    const SlurmJobView* undeclared = nullptr;
    JobId undeclared_id = 0;
    for (const auto& [id, j] : s.driver.core()->jobs()) {
      if (!Running(j.state)) continue;
      if (std::none_of(j.ranks.begin(), j.ranks.end(),
                       [&](const core::GpuSlot& g) { return g.node == n; })) {
        continue;
      }
      auto t = tagged.find(id);
      const SlurmJobView* sj = t == tagged.end() ? nullptr : t->second;
      if (sj == nullptr || !sj->checkpoint_signal) {
        undeclared = sj;
        undeclared_id = id;
        break;
      }
      on_node.emplace_back(sj, id);
    }
    if (undeclared_id != 0) {
      drain.deadline =
          std::max(drain.deadline, s.driver.now() + s.config.preempt_grace_s * core::kSecond);
      if (drain.announced.insert(undeclared_id).second) {
        log::Info("node " + it->first + ": the graceful drain lets job " +
                  std::to_string(undeclared_id) +
                  (undeclared != nullptr ? " (Slurm job " + std::to_string(undeclared->id) + ")"
                                         : std::string()) +
                  " run to its end: it declared no checkpoint signal (sbatch --signal)");
      }
      ++it;
      continue;
    }
    if (s.driver.now() >= drain.deadline) {
      s.driver.Step(core::NodeEvacuated{n, drain.reason + " (graceful: grace ended)"}, "slurm");
      it = s.slurm_drains.erase(it);
      continue;
    }
    for (const auto& [sj, id] : on_node) {
      if (sj->state != "RUNNING") continue;
      SlurmAction a = Action(SlurmAction::Kind::kSignal, sj->id, {},
                             "toposched: draining " + it->first + ": checkpoint now");
      a.signal = *sj->checkpoint_signal;
      actions.push_back(std::move(a));
    }
    ++it;
  }

  // Jobs Slurm runs where the core no longer does: the core restarted them
  // elsewhere (a failed GPU or node, onto a spare) or put them back in its
  // queue (preempted, or no replacement), or Slurm started a job the core
  // still has waiting (its hold was released by hand): Slurm requeues them
  // held, and the release below starts them on the core's nodes. A job the
  // core is preempting gets its checkpoint signal first, if it declared one.
  for (const auto& [id, sj] : tagged) {
    if (sj->state != "RUNNING") continue;
    const core::JobRecord* j = s.driver.core()->job(id);
    if (j == nullptr || core::IsTerminal(j->state)) continue;
    if (j->state == core::JobState::kPreempting) {
      if (sj->checkpoint_signal) {
        SlurmAction a = Action(SlurmAction::Kind::kSignal, sj->id, {}, "toposched: " + j->reason);
        a.signal = *sj->checkpoint_signal;
        actions.push_back(std::move(a));
      }
      continue;
    }
    const std::vector<std::string> want = RankNodes(topo, *j);
    const std::set<std::string> want_set(want.begin(), want.end());
    const std::set<std::string> have(sj->nodes.begin(), sj->nodes.end());
    if (!Running(j->state)) {
      SlurmAction a =
          Action(SlurmAction::Kind::kRequeue, sj->id, {}, "toposched: the job waits again");
      a.admin_comment = WaitingComment(id, *sj, "requeued and held by toposched");
      actions.push_back(std::move(a));
    } else if (want_set != have) {
      actions.push_back(Action(SlurmAction::Kind::kRequeue, sj->id, want,
                               "toposched: the job moves to " + Join(want)));
    }
  }

  // Jobs the core has waiting that Slurm could start on nodes of its own
  // choosing: a hold by the user (job_submit's priority 0 is one) becomes an
  // operator's hold, which the user cannot release; a job whose hold was
  // released anyway (before that, or by an operator) is held again, and its
  // AdminComment says why.
  for (const auto& [id, sj] : tagged) {
    if (sj->state != "PENDING") continue;
    const core::JobRecord* j = s.driver.core()->job(id);
    if (j == nullptr || core::IsTerminal(j->state) || Running(j->state)) continue;
    if (sj->priority == 0 && sj->state_reason != "JobHeldUser") continue;
    SlurmAction a = Action(SlurmAction::Kind::kHold, sj->id, {},
                           sj->priority == 0 ? "toposched holds it until capacity frees"
                                             : "released while toposched has it waiting");
    if (sj->priority != 0) {
      a.admin_comment = WaitingComment(id, *sj, "released by hand, held again by toposched");
    }
    actions.push_back(std::move(a));
  }

  // Held jobs the core has started: Slurm runs them there.
  for (const auto& [id, sj] : tagged) {
    if (sj->state != "PENDING" || sj->priority != 0) continue;
    const core::JobRecord* j = s.driver.core()->job(id);
    if (j == nullptr || !Running(j->state)) continue;
    SlurmAction a =
        Action(SlurmAction::Kind::kRelease, sj->id, RankNodes(topo, *j), "toposched: started");
    a.admin_comment = CommentPrefix(id, *sj) + " " + RankMapText(topo, *j);
    actions.push_back(std::move(a));
  }
  return actions;
}

Status SlurmImportTopology(ServiceState& s, const std::string& text, int gpus_per_node,
                           TimeMs now) {
  s.driver.Advance(now);
  common::SlurmTopologyOptions options;
  options.gpus_per_node = gpus_per_node;
  Result<core::Topology> parsed = common::ParseSlurmTopology(text, options);
  if (!parsed.ok()) return Status::Error("slurm_topology: " + parsed.message());
  if (s.driver.topology() != nullptr &&
      common::TopologyToJson(*s.driver.topology()) == common::TopologyToJson(parsed.value())) {
    return Status::Ok();
  }
  // The same import as PUT /v1/topology's, as the scheduler itself.
  if (Status st = s.ImportTopology(std::make_unique<core::Topology>(std::move(parsed).value()),
                                   "scheduler");
      !st.ok()) {
    return Status::Error("importing slurm_topology: " + st.message(), st.code());
  }
  return s.Commit();
}

}  // namespace topo::daemon
