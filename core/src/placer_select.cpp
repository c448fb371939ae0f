// Node selection and mixed clusters, in front of every placement policy
// (placement.hpp): which nodes a job may use (its NodeSelection) and, on a
// topology of several parts, on which part it runs.
//
// The policy places the job on a fenced copy of the state (only the nodes
// it may use take work) over the part's view, so every policy honours a
// selection and sees the part's HBD, links and aliases without knowing
// about either. Per part, kAuto constraints are resolved against the part's
// own domains (EffectiveStrength). A job naming several GPU types that no
// one part holds is split by DP replica over the parts (PlaceSplit); its
// metrics (Evaluate, PredictPlacement) use the first rank's part's view,
// and PredictPlacement the slowest GPU model's rate among its ranks.

#include <algorithm>
#include <bit>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "placer_internal.hpp"
#include "topo/core/job.hpp"
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
  if (sel.fence && sel.fence->size() == a.open.size()) {
    for (NodeId n = 0; n < topo.node_count(); ++n) a.open[n] = a.open[n] && (*sel.fence)[n];
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
    for (int p = 0; p < topo.part_count(); ++p) {
      bool any = false;
      const std::vector<uint8_t> mine = PartNodes(topo, open, p, &any);
      if (!any) continue;
      const Topology& view = topo.PartView(p);
      if (view.total_gpus() < job.gpus) {
        // Never holds it: said without copying the state for a try.
        reasons += (reasons.empty() ? "" : "; ") + PartLabel(topo, p) + ": its " +
                   std::to_string(view.total_gpus()) + " GPUs are fewer than the job's " +
                   std::to_string(job.gpus);
        continue;
      }
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
    if (Splittable(job, listed) && !AnyPartHolds(job, state, open)) {
      return PlaceSplit(job, state, open, reasons);
    }
    return Placement{busy ? PlaceOutcome::kBusy : PlaceOutcome::kInfeasible, reasons, {}, {}};
  }

  // A job that names several GPU types may run over several parts when no
  // one of them can hold it (below); a nodelist names its nodes, and a
  // required DP constraint keeps the DP groups, the only ones that would
  // cross parts, inside one domain: those stay on one part.
  static bool Splittable(const JobSpec& job, const std::vector<NodeId>& listed) {
    if (job.selection.gpu_types.size() < 2 || !listed.empty()) return false;
    const Parallelism& pl = job.parallelism;
    if (pl.dp / pl.ep < 2) return false;  // one replica: nothing to split
    return !(RankLayout::KindActive(GroupKind::kDp, pl) &&
             job.constraint(GroupKind::kDp).strength == Strength::kRequired);
  }

  // The part `p`'s admitted nodes.
  static std::vector<uint8_t> PartNodes(const Topology& topo, const std::vector<uint8_t>& open,
                                        int p, bool* any = nullptr) {
    std::vector<uint8_t> mine(open.size(), 0);
    bool some = false;
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      mine[n] = open[n] && topo.part_of(n) == p;
      some = some || mine[n];
    }
    if (any) *any = some;
    return mine;
  }

  // Whether some admitted part, empty, holds the whole job.
  bool AnyPartHolds(const JobSpec& job, const ClusterState& state,
                    const std::vector<uint8_t>& open) const {
    const Topology& topo = state.topology();
    for (int p = 0; p < topo.part_count(); ++p) {
      bool any = false;
      const std::vector<uint8_t> mine = PartNodes(topo, open, p, &any);
      if (!any) continue;
      const Topology& view = topo.PartView(p);
      const ClusterState empty = ClusterState(view).Fenced(view, mine);
      if (base_->Place(ResolveAuto(job, view), empty).placed()) return true;
    }
    return false;
  }

  // The job cut down to `replicas` of its outer-DP replicas (tp x cp x ep x
  // pp ranks each: every TP, CP, EP and PP group of the job lies inside
  // one), with `spares` spare nodes. A global batch given is cut in
  // proportion, so each replica keeps its microbatches.
  static JobSpec SubJob(const JobSpec& job, int replicas, int spares) {
    JobSpec sub = job;
    const Parallelism& pl = job.parallelism;
    const int total = pl.dp / pl.ep;
    sub.parallelism.dp = replicas * pl.ep;
    sub.gpus = pl.tp * pl.cp * pl.pp * sub.parallelism.dp;
    sub.spares = spares;
    if (sub.model && sub.model->global_batch > 0) {
      const long long gb = static_cast<long long>(sub.model->global_batch) * replicas / total;
      sub.model->global_batch = static_cast<int>(std::max<long long>(1, gb));
    }
    return sub;
  }

  // One share of a split: `replicas` replicas from `first` on, on part `part`.
  struct Share {
    int part = 0;
    int first = 0;
    int replicas = 0;
    Placement placed;
  };

  // Parts that admit nodes, fastest first: the predicted ideal step of one
  // replica on the part's view (ties: the part listed first).
  std::vector<int> PartsBySpeed(const JobSpec& job, const Topology& topo,
                                const std::vector<uint8_t>& open) const {
    std::vector<std::pair<double, int>> order;
    const JobSpec one = SubJob(job, 1, 0);
    Result<ResolvedModel> model = ResolveModel(one);
    for (int p = 0; p < topo.part_count(); ++p) {
      bool any = false;
      PartNodes(topo, open, p, &any);
      if (!any) continue;
      const Topology& view = topo.PartView(p);
      double step = 0;
      if (model.ok()) {
        const JobSpec resolved = ResolveAuto(one, view);
        step = PredictStep(resolved, model.value(), LinkView{&view, {}}, IdealSpans(resolved, view),
                           SustainedFlops(topo.part(p).gpu_model))
                   .total_s;
      }
      order.emplace_back(step, p);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int> out;
    for (const auto& [step, p] : order) out.push_back(p);
    return out;
  }

  // The split on `state`: on each part in turn, fastest first, the most
  // replicas that place there (a binary search over the count, each try a
  // placement of the sub-job on the part's view, its constraints resolved
  // there), the rest on the next. Parts hold disjoint nodes, so the shares
  // never compete for a GPU. Empty when the replicas do not all place.
  std::vector<Share> SplitOn(const JobSpec& job, const ClusterState& state,
                             const std::vector<uint8_t>& open, const std::vector<int>& parts,
                             std::string* why) const {
    const Topology& topo = state.topology();
    const Parallelism& pl = job.parallelism;
    const int unit = pl.tp * pl.cp * pl.ep * pl.pp;
    const int total = pl.dp / pl.ep;
    std::vector<Share> shares;
    int left = total;
    for (int p : parts) {
      if (left == 0) break;
      const std::vector<uint8_t> mine = PartNodes(topo, open, p);
      const Topology& view = topo.PartView(p);
      const ClusterState fenced = state.Fenced(view, mine);
      long long free = 0;
      for (NodeId n = 0; n < topo.node_count(); ++n) {
        if (mine[n]) free += std::popcount(fenced.usable_free_mask(n));
      }
      auto place = [&](int k) {
        const JobSpec sub = ResolveAuto(SubJob(job, k, 0), view);
        if (!ValidateJobSpec(sub).ok()) return Placement{};
        return base_->Place(sub, fenced);
      };
      int hi = static_cast<int>(std::min<long long>(left, free / unit));
      Placement got;
      int lo = 0;
      if (hi > 0) {
        got = place(hi);
        if (got.placed()) {
          lo = hi;
        } else {
          // lo places (or is 0), hi does not.
          Placement best;
          while (hi - lo > 1) {
            const int mid = lo + (hi - lo) / 2;
            Placement m = place(mid);
            if (m.placed()) {
              lo = mid;
              best = std::move(m);
            } else {
              hi = mid;
            }
          }
          got = std::move(best);
        }
      }
      if (lo == 0) continue;
      shares.push_back(Share{p, total - left, lo, std::move(got)});
      left -= lo;
    }
    if (left > 0) {
      *why = std::to_string(total - left) + " of its " + std::to_string(total) +
             " replicas place on the parts it names (" + ShareText(topo, shares) + ")";
      return {};
    }
    return shares;
  }

  static std::string ShareText(const Topology& topo, const std::vector<Share>& shares) {
    if (shares.empty()) return "none anywhere";
    std::string out;
    for (const Share& s : shares) {
      out += (out.empty() ? "" : ", ") + PartLabel(topo, s.part) + " " +
             std::to_string(s.replicas) + (s.replicas == 1 ? " replica" : " replicas");
    }
    return out;
  }

  // A job naming several GPU types that no one admitted part can hold:
  // whole outer-DP replicas per part, only the DP groups across parts.
  // Infeasible when even the empty admitted parts cannot hold the
  // replicas, Busy when they can but not now.
  Placement PlaceSplit(const JobSpec& job, const ClusterState& state,
                       const std::vector<uint8_t>& open, const std::string& part_reasons) const {
    const Topology& topo = state.topology();
    const std::vector<int> parts = PartsBySpeed(job, topo, open);
    std::string why;
    std::vector<Share> shares = SplitOn(job, state, open, parts, &why);
    if (shares.empty()) {
      const ClusterState empty(topo);
      std::string never;
      const bool ever = !SplitOn(job, empty, open, parts, &never).empty();
      return Placement{ever ? PlaceOutcome::kBusy : PlaceOutcome::kInfeasible,
                       "no part it names holds it (" + part_reasons +
                           "); split by DP replica over them: " + (ever ? why : never) +
                           (ever ? ", on the empty cluster all would" : ""),
                       {},
                       {}};
    }
    // The spares go with the largest share (the first of equal ones).
    if (job.spares > 0) {
      size_t big = 0;
      for (size_t i = 1; i < shares.size(); ++i) {
        if (shares[i].replicas > shares[big].replicas) big = i;
      }
      Share& s = shares[big];
      const Topology& view = topo.PartView(s.part);
      Placement with = base_->Place(ResolveAuto(SubJob(job, s.replicas, job.spares), view),
                                    state.Fenced(view, PartNodes(topo, open, s.part)));
      if (!with.placed()) {
        return Placement{PlaceOutcome::kBusy,
                         "split by DP replica (" + ShareText(topo, shares) +
                             "): " + PartLabel(topo, s.part) + " cannot hold its " +
                             std::to_string(job.spares) + " spare node(s) now",
                         {},
                         {}};
      }
      s.placed = std::move(with);
    }
    // Sub-job rank -> the job's rank, through the coordinates: the same
    // tp, cp, ep and pp coordinates, the outer DP one shifted by the
    // share's first replica.
    const RankLayout whole(job.parallelism);
    Placement out{PlaceOutcome::kPlaced,
                  "split by DP replica over " + std::to_string(shares.size()) +
                      " parts, no one of which holds it: " + ShareText(topo, shares),
                  std::vector<GpuSlot>(static_cast<size_t>(job.gpus)),
                  {}};
    for (const Share& s : shares) {
      const RankLayout sub(SubJob(job, s.replicas, 0).parallelism);
      for (int r = 0; r < sub.world_size(); ++r) {
        int to = 0;
        for (int d = 0; d < kDimCount; ++d) {
          const Dim dim = static_cast<Dim>(d);
          const int c = sub.Coord(r, dim) + (dim == Dim::kDp ? s.first : 0);
          to += c * whole.dim_stride(dim);
        }
        out.ranks[static_cast<size_t>(to)] = s.placed.ranks[static_cast<size_t>(r)];
      }
      out.spares.insert(out.spares.end(), s.placed.spares.begin(), s.placed.spares.end());
    }
    return out;
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
