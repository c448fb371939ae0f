#pragma once
// Job spec v1 as the core sees it (the wire format lives in common/), and the
// rank layout that turns a parallelism layout into communication groups.
//
// Layout: gpus == tp * cp * pp * dp; ep divides dp (experts are sharded over
// the data-parallel ranks, as Megatron-Core does). The rank order lists the
// dimensions fastest first; the default "tp-cp-ep-dp-pp" makes TP vary
// fastest. In an order, "ep" is the inner factor of DP (size ep) and "dp" the
// outer one (size dp / ep); "ep" may be left out when ep == 1.
//
// Groups of each kind (ranks that share every coordinate but the kind's):
//   tp: the tp ranks of one tensor-parallel group
//   cp: the cp ranks of one context-parallel group
//   ep: the EP block, tp x cp x ep ranks that do one expert all-to-all
//   pp: the pp stages of one pipeline
//   dp: the dp ranks that all-reduce gradients (ep inner x dp/ep outer)

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::core {

enum class GroupKind : uint8_t { kTp = 0, kCp = 1, kEp = 2, kPp = 3, kDp = 4 };
inline constexpr int kGroupKindCount = 5;
inline constexpr std::array<GroupKind, kGroupKindCount> kAllGroupKinds = {
    GroupKind::kTp, GroupKind::kCp, GroupKind::kEp, GroupKind::kPp, GroupKind::kDp};
std::string_view GroupKindName(GroupKind k);
std::optional<GroupKind> ParseGroupKind(std::string_view name);
// Weights of ../shared/BENCHMARKS.md: tp 16, ep 8, cp 4, pp 2, dp 1.
double GroupKindWeight(GroupKind k);

// Dimensions of the rank order. kDp here is the outer DP factor (dp / ep).
enum class Dim : uint8_t { kTp = 0, kCp = 1, kEp = 2, kDp = 3, kPp = 4 };
inline constexpr int kDimCount = 5;

// Megatron's default, tp-cp-ep-dp-pp.
std::vector<Dim> DefaultRankOrder();

struct Parallelism {
  int tp = 1, cp = 1, ep = 1, pp = 1, dp = 1;
  std::vector<Dim> order = DefaultRankOrder();
  bool operator==(const Parallelism&) const = default;
};
// "tp-cp-ep-dp-pp" <-> dims. Parse errors name the bad token.
Result<std::vector<Dim>> ParseRankOrder(std::string_view text);
std::string FormatRankOrder(const std::vector<Dim>& order);

// The model a job trains, for the step-time model (perf_model.hpp). A field
// left 0 is "not given": it comes from the named preset, or from the default
// model sized from the job's layout (docs/perf-model.md, ResolveModel).
struct ModelSpec {
  std::string preset;            // a name of ModelPresetNames(), or empty
  double parameters = 0;         // total parameters
  double active_parameters = 0;  // parameters a token passes through (MoE); 0: all
  int layers = 0;
  int hidden = 0;
  int heads = 0;              // attention heads
  int kv_heads = 0;           // key/value heads (GQA); 0: as many as heads
  int sequence = 0;           // tokens per sequence
  int micro_batch = 0;        // sequences per microbatch
  int global_batch = 0;       // sequences per optimizer step, over all replicas
  int experts = 0;            // routed experts per MoE layer; 0 or 1: dense
  int top_k = 0;              // experts a token is routed to
  int bytes_per_element = 0;  // of activations and gradients on the wire (2: bf16)
  int virtual_stages = 0;     // interleaved pipeline chunks per rank; 0: 1
  int recompute = -1;         // full activation recomputation: 1 yes, 0 no, -1 not given
  bool operator==(const ModelSpec&) const = default;
};

// kAuto: required where a domain of the tier can hold a group of the kind,
// preferred elsewhere, decided per part of a mixed cluster (the EP default:
// an EP block stays in an NVL72 rack, and spans HGX nodes of a leaf).
enum class Strength : uint8_t { kNone, kPreferred, kRequired, kAuto };

// Every group of a kind must (required) or should (preferred) sit inside one
// domain of the named tier. The tier is a name or role alias resolved against
// the topology (or the part's view) at placement time (Topology::FindTier).
struct TierConstraint {
  Strength strength = Strength::kNone;
  std::string tier;
  bool operator==(const TierConstraint&) const = default;
};

// Which nodes a job may run on: Slurm's --gres=gpu:TYPE, --constraint,
// --nodelist and --exclude. Names are the topology's; a placer answers
// Infeasible for a type, feature or node the topology does not have.
struct NodeSelection {
  // Accelerator models the job accepts, any of them (ASCII case-insensitive
  // match of Node::gpu_model); empty: any. On a mixed cluster toposched
  // runs a job on one part (one model, one HBD kind): naming several types
  // lets it run on any one of them, or, when no one of them can hold it,
  // split by whole data-parallel replicas over them (placer_select.cpp).
  std::vector<std::string> gpu_types;
  std::vector<std::string> features;  // every node has all of them
  // The job runs on exactly these nodes (every one of them used), as
  // Slurm's --nodelist when it names the whole allocation.
  std::vector<std::string> nodelist;
  std::vector<std::string> exclude;  // never these
  // Used only when nothing else fits (the nodes that failed this job
  // before; the scheduler fills it on a restart).
  std::vector<std::string> avoid;
  // The nodes the scheduler lets the job take work on, by node id (its
  // partition's and reservations' rules: node_sets.hpp); null: every node.
  // Set by the scheduler only, never read from the wire.
  std::shared_ptr<const std::vector<uint8_t>> fence;
  bool empty() const {
    return gpu_types.empty() && features.empty() && nodelist.empty() && exclude.empty() &&
           avoid.empty() && !fence;
  }
  bool operator==(const NodeSelection&) const = default;
};
inline constexpr size_t kMaxSelectionNames = 100000;  // per list
inline constexpr size_t kMaxSelectionNameBytes = 64;  // a type, feature or node name

// Job names are for people: a line in a table, not a payload.
inline constexpr size_t kMaxJobNameBytes = 256;
// JobSpec::pids_max at most: Linux's PID_MAX_LIMIT on 64-bit.
inline constexpr int kMaxJobPids = 4194304;

struct JobSpec {
  std::string name;  // at most kMaxJobNameBytes (the wire readers check)
  int gpus = 0;
  // GPUs the job takes on each node it uses; 0 = whole nodes for jobs of at
  // least a node, one node otherwise.
  int gpus_per_node = 0;
  Parallelism parallelism;
  // Indexed by GroupKind. Defaults: tp required in the HBD, ep auto in the
  // HBD (Strength::kAuto), pp preferred in a leaf.
  std::array<TierConstraint, kGroupKindCount> constraints = DefaultConstraints();
  // Extra whole nodes held next to the job's domains for fast recovery.
  int spares = 0;
  NodeSelection selection;
  // What the job trains (optional): the step-time model's input.
  std::optional<ModelSpec> model;
  // The most tasks (processes and threads) the job may have on each node:
  // pids.max of its cgroup there. 0: the node's limit (topo-agent
  // --job-pids-max), which also caps a larger value. Carried to the agents,
  // never interpreted by the core.
  int pids_max = 0;

  const TierConstraint& constraint(GroupKind k) const { return constraints[static_cast<int>(k)]; }
  static std::array<TierConstraint, kGroupKindCount> DefaultConstraints();
  bool operator==(const JobSpec&) const = default;
};

// Checks the layout arithmetic and ranges. Errors name the field and the fix.
Status ValidateJobSpec(const JobSpec& job);

// The strength a constraint has where the largest domain of its tier holds
// max_domain_gpus GPUs: kAuto becomes kRequired when a group of group_gpus
// fits there, else kPreferred; other strengths are themselves.
inline Strength EffectiveStrength(Strength s, int group_gpus, int max_domain_gpus) {
  if (s != Strength::kAuto) return s;
  return group_gpus <= max_domain_gpus ? Strength::kRequired : Strength::kPreferred;
}

// Rank coordinates and group membership for a validated layout.
class RankLayout {
 public:
  // REQUIRES: ValidateJobSpec(job).ok()
  explicit RankLayout(const Parallelism& p);

  int world_size() const { return world_; }
  int dim_size(Dim d) const { return size_[static_cast<int>(d)]; }
  int dim_stride(Dim d) const { return stride_[static_cast<int>(d)]; }
  // Whether dimension d varies within a group of kind k.
  static bool InGroup(GroupKind k, Dim d);
  // A kind has groups to keep together only when its own degree is > 1
  // (an ep constraint means nothing without experts).
  static bool KindActive(GroupKind k, const Parallelism& p);
  int Coord(int rank, Dim d) const {
    return (rank / stride_[static_cast<int>(d)]) % size_[static_cast<int>(d)];
  }
  int GroupSize(GroupKind k) const;
  int GroupCount(GroupKind k) const { return world_ / GroupSize(k); }
  // Dense id in [0, GroupCount(k)) of the group of kind k that holds rank.
  int GroupOf(GroupKind k, int rank) const;
  // Ranks of one group, ascending.
  std::vector<int> GroupMembers(GroupKind k, int group) const;

 private:
  int world_ = 1;
  std::array<int, kDimCount> size_{};
  std::array<int, kDimCount> stride_{};
};

}  // namespace topo::core
