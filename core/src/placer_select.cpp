// Node selection and mixed clusters, in front of every placement policy
// (placement.hpp): which nodes a job may use (its NodeSelection) and, on a
// topology of several parts, on which part it runs.
//
// The policy places the job on a fenced copy of the state (only the nodes
// it may use take work) over the part's view, so every policy honours a
// selection and sees the part's HBD, links and aliases without knowing
// about either. Per part, kAuto constraints are resolved against the part's
// own domains (EffectiveStrength).

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "placer_internal.hpp"
#include "topo/core/perf_model.hpp"
#include "topo/core/placement.hpp"

namespace topo::core {

namespace {

std::string JoinNames(const std::vector<std::string>& names, size_t at_most = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) {
    out += (i ? ", " : "") + (names[i].empty() ? std::string("(none)") : names[i]);
  }
  if (names.size() > at_most) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

std::string PartLabel(const Topology& topo, int p) {
  const TopologyPart& part = topo.part(p);
  const std::string model = part.gpu_model.empty() ? "unnamed GPUs" : part.gpu_model;
  return model + " (HBD " + topo.tier(part.hbd_tier).name + ")";
}

Placement Refuse(std::string reason) {
  return Placement{PlaceOutcome::kInfeasible, std::move(reason), {}, {}};
}

// The nodes a selection admits (hard rules: types, features, nodelist,
// exclude), or the Infeasible answer that names what the topology lacks.
struct Admitted {
  std::vector<uint8_t> open;   // by node
  std::vector<uint8_t> avoid;  // by node: open but used only when nothing else fits
  std::vector<NodeId> listed;  // the nodelist's nodes
  bool any_avoided = false;
};

Result<Admitted> Admit(const JobSpec& job, const Topology& topo) {
  const NodeSelection& sel = job.selection;
  Admitted a;
  a.open.assign(topo.node_count(), 1);
  a.avoid.assign(topo.node_count(), 0);
  if (!sel.gpu_types.empty()) {
    std::vector<uint8_t> model_ok(topo.gpu_models().size(), 0);
    for (const std::string& want : sel.gpu_types) {
      bool known = false;
      for (size_t m = 0; m < topo.gpu_models().size(); ++m) {
        if (SameGpuModel(want, topo.gpu_models()[m])) model_ok[m] = known = true;
      }
      if (!known) {
        return Status::Error("gpu_types: this cluster has no '" + want +
                             "' GPUs; its GPU types are " + JoinNames(topo.gpu_models()));
      }
    }
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      const std::string& model = topo.node(n).gpu_model;
      const auto m = std::find(topo.gpu_models().begin(), topo.gpu_models().end(), model) -
                     topo.gpu_models().begin();
      a.open[n] = model_ok[static_cast<size_t>(m)];
    }
  }
  if (!sel.features.empty()) {
    uint64_t want = 0;
    for (const std::string& f : sel.features) {
      const int i = topo.FindFeature(f);
      if (i < 0) {
        return Status::Error("features: no node has feature '" + f + "'" +
                             (topo.features().empty()
                                  ? std::string("; this cluster's nodes have no features")
                                  : "; the features here are " + JoinNames(topo.features())));
      }
      want |= uint64_t{1} << i;
    }
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      if ((topo.feature_mask(n) & want) != want) a.open[n] = 0;
    }
  }
  auto resolve = [&](const std::vector<std::string>& names, const char* field,
                     std::vector<NodeId>& out) -> Status {
    for (const std::string& name : names) {
      const NodeId n = topo.FindNode(name);
      if (n < 0) {
        return Status::Error(std::string(field) + ": node '" + name +
                             "' is not in the topology (topo nodes lists them)");
      }
      out.push_back(n);
    }
    return Status::Ok();
  };
  std::vector<NodeId> excluded;
  if (Status s = resolve(sel.exclude, "exclude", excluded); !s.ok()) return s;
  for (NodeId n : excluded) a.open[n] = 0;
  if (!sel.nodelist.empty()) {
    if (Status s = resolve(sel.nodelist, "nodelist", a.listed); !s.ok()) return s;
    std::sort(a.listed.begin(), a.listed.end());
    a.listed.erase(std::unique(a.listed.begin(), a.listed.end()), a.listed.end());
    std::vector<uint8_t> in_list(topo.node_count(), 0);
    for (NodeId n : a.listed) {
      if (!a.open[n]) {
        return Status::Error("nodelist: node '" + topo.node(n).name +
                             "' does not have the GPU type or features the job asks for");
      }
      in_list[n] = 1;
    }
    for (NodeId n = 0; n < topo.node_count(); ++n) a.open[n] = a.open[n] && in_list[n];
    // Every listed node is used: the list is the whole allocation.
    const bool small = job.gpus_per_node == 0 && job.gpus < topo.max_node_gpus();
    long long takes = 0;
    for (NodeId n : a.listed) {
      const int g = topo.node(n).gpus;
      takes += job.gpus_per_node > 0 ? std::min(job.gpus_per_node, g) : small ? job.gpus : g;
    }
    if (takes != job.gpus) {
      return Status::Error(
          "nodelist: its " + std::to_string(a.listed.size()) + " node(s) give the job " +
          std::to_string(takes) + " GPUs, and it takes " + std::to_string(job.gpus) +
          "; a job runs on every node of its nodelist: list the nodes of the whole allocation "
          "(or use exclude to keep it off nodes)");
    }
  }
  for (const std::string& name : sel.avoid) {
    const NodeId n = topo.FindNode(name);  // a node since removed is simply gone
    if (n >= 0 && a.open[n]) {
      a.avoid[n] = 1;
      a.any_avoided = true;
    }
  }
  return a;
}

// The job with every kAuto constraint decided against `view`.
JobSpec ResolveAuto(const JobSpec& job, const Topology& view) {
  JobSpec out = job;
  const RankLayout layout(job.parallelism);
  for (GroupKind k : kAllGroupKinds) {
    TierConstraint& c = out.constraints[static_cast<int>(k)];
    if (c.strength != Strength::kAuto) continue;
    Result<int> tier = view.FindTier(c.tier);
    if (!tier.ok()) continue;  // MakeJobShape reports the unknown tier
    const int group = layout.GroupSize(k);
    c.strength = EffectiveStrength(c.strength, group, view.max_domain_gpus(tier.value()));
    if (c.strength == Strength::kPreferred) {
      // Preferred where it fits: the innermost tier that holds a group.
      const int t = internal::AutoPreferredTier(view, tier.value(), group);
      c.tier = t < view.tier_count() ? view.tier(t).name : "cluster";
    }
  }
  return out;
}

bool HasAuto(const JobSpec& job) {
  return std::any_of(job.constraints.begin(), job.constraints.end(),
                     [](const TierConstraint& c) { return c.strength == Strength::kAuto; });
}

class SelectingPlacer final : public Placer {
 public:
  SelectingPlacer(std::unique_ptr<Placer> base, bool per_part, bool explain)
      : base_(std::move(base)), per_part_(per_part), explain_(explain) {}
  std::string_view name() const override { return base_->name(); }

  Placement Place(const JobSpec& job, const ClusterState& state) const override {
    const Topology& topo = state.topology();
    const bool split = per_part_ && topo.part_count() > 1;
    if (job.selection.empty() && !split) {
      return HasAuto(job) ? base_->Place(ResolveAuto(job, topo), state) : base_->Place(job, state);
    }
    Result<Admitted> admitted = Admit(job, topo);
    if (!admitted.ok()) return Refuse(admitted.message());
    const Admitted& a = admitted.value();
    if (a.any_avoided) {
      std::vector<uint8_t> fresh = a.open;
      for (NodeId n = 0; n < topo.node_count(); ++n) fresh[n] = fresh[n] && !a.avoid[n];
      Placement p = PlaceOn(job, state, fresh, a.listed, split);
      if (p.placed()) return p;
      Placement again = PlaceOn(job, state, a.open, a.listed, split);
      if (again.placed()) {
        again.reason =
            "placed on nodes that failed this job before: nothing else fits (" + p.reason + ")";
      }
      return again;
    }
    return PlaceOn(job, state, a.open, a.listed, split);
  }

 private:
  Placement PlaceOn(const JobSpec& job, const ClusterState& state, const std::vector<uint8_t>& open,
                    const std::vector<NodeId>& listed, bool split) const {
    const Topology& topo = state.topology();
    if (!split) {
      if (std::none_of(open.begin(), open.end(), [](uint8_t o) { return o != 0; })) {
        return Refuse("no node has every GPU type and feature the job asks for");
      }
      return PlaceFenced(ResolveAuto(job, topo), state, topo, open, listed);
    }
    // One try per part the selection admits; the placed one predicted
    // fastest wins (ties: the part listed first).
    Placement best;
    double best_step = 0;
    std::string reasons;
    bool busy = false;
    std::vector<uint8_t> mine(open.size(), 0);
    for (int p = 0; p < topo.part_count(); ++p) {
      bool any = false;
      for (NodeId n = 0; n < topo.node_count(); ++n) {
        mine[n] = open[n] && topo.part_of(n) == p;
        any = any || mine[n];
      }
      if (!any) continue;
      const Topology& view = topo.PartView(p);
      Placement got = PlaceFenced(ResolveAuto(job, view), state, view, mine, listed);
      if (!got.placed()) {
        busy = busy || got.outcome == PlaceOutcome::kBusy;
        reasons += (reasons.empty() ? "" : "; ") + PartLabel(topo, p) + ": " + got.reason;
        continue;
      }
      Result<StepPrediction> step = PredictPlacement(job, view, got.ranks);
      const double s = step.ok() ? step.value().step.total_s : 0;
      if (!best.placed() || s < best_step) {
        best = std::move(got);
        best_step = s;
      }
    }
    if (best.placed()) return best;
    if (reasons.empty()) return Refuse("no node has every GPU type and feature the job asks for");
    return Placement{busy ? PlaceOutcome::kBusy : PlaceOutcome::kInfeasible, reasons, {}, {}};
  }

  // The policy on the nodes `open` admits. The policy tells Busy from
  // Infeasible on the whole empty cluster; here the empty cluster is the
  // admitted nodes only.
  Placement PlaceFenced(const JobSpec& job, const ClusterState& state, const Topology& view,
                        const std::vector<uint8_t>& open, const std::vector<NodeId>& listed) const {
    Placement p = Checked(base_->Place(job, state.Fenced(view, open)), listed);
    if (p.outcome != PlaceOutcome::kBusy || !explain_) return p;
    const ClusterState empty = ClusterState(view).Fenced(view, open);
    Placement never = base_->Place(job, empty);
    if (never.placed()) return p;
    return Refuse("the nodes it may use can never hold it: " + never.reason);
  }

  // A nodelist is the whole allocation: a placement that leaves a listed
  // node out is not the job's.
  static Placement Checked(Placement p, const std::vector<NodeId>& listed) {
    if (!p.placed() || listed.empty()) return p;
    std::vector<uint8_t> used;
    for (const GpuSlot& s : p.ranks) {
      if (static_cast<size_t>(s.node) >= used.size()) used.resize(s.node + 1, 0);
      used[s.node] = 1;
    }
    for (NodeId n : listed) {
      if (static_cast<size_t>(n) >= used.size() || !used[n]) {
        return Placement{PlaceOutcome::kBusy,
                         "a node of the nodelist cannot take its share of the job now",
                         {},
                         {}};
      }
    }
    return p;
  }

  std::unique_ptr<Placer> base_;
  bool per_part_;
  bool explain_;  // PlacerOptions::explain_shortfall
};

}  // namespace

std::vector<uint8_t> AdmittedNodes(const JobSpec& job, const Topology& topology, int part,
                                   bool with_avoided) {
  Result<Admitted> a = Admit(job, topology);
  if (!a.ok()) return std::vector<uint8_t>(topology.node_count(), 0);
  std::vector<uint8_t> open = std::move(a.value().open);
  for (NodeId n = 0; n < topology.node_count(); ++n) {
    if (part >= 0 && topology.part_of(n) != part) open[n] = 0;
    if (!with_avoided && a.value().avoid[n]) open[n] = 0;
  }
  return open;
}

std::unique_ptr<Placer> MakeSelectingPlacer(std::unique_ptr<Placer> base, bool per_part,
                                            bool explain_shortfall) {
  return std::make_unique<SelectingPlacer>(std::move(base), per_part, explain_shortfall);
}

}  // namespace topo::core
