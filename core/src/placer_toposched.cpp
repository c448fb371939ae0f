// The toposched placer.
//
// Algorithm overview
//
// Phase 1, shape. The job's required constraints become nested blocks: at
// tier T the ranks that must share one tier-T domain (a TP group, an EP block
// of tp x cp x ep ranks, ...). Every domain's capacity is counted in whole
// blocks of its tier (placer_internal.hpp), from the GPUs the job may use:
// whole free nodes for jobs of a node or more (or gpus_per_node per node),
// healthy GPUs only for gangs larger than PlacerOptions::degraded_max_job_gpus.
// If the root cannot hold the job the answer is Busy, or Infeasible when even
// the empty cluster could not.
//
// Phase 2, choose domains top-down from the root. Above the leaf tier the
// objective is lexicographic: fewest leaves, then fewest children (pods,
// spines), then the fullest domains (best fit, to limit fragmentation):
//   a. L* = the fewest leaves under the domain that hold the job (largest
//      leaves first);
//   b. if one child holds the job within L* leaves, descend into the fullest
//      such child;
//   c. otherwise pool the fewest children (every set of two, then of three,
//      the tightest that works) or, failing that, the most valuable children
//      (the sum of their L* largest leaves) until the pool's L* largest
//      leaves hold the job; take the L*-1 largest fully and the best-fitting
//      leaf for the rest.
// At and below the leaf (leaf -> HBD -> node): one child if one holds the
// rest (best fit), else the largest children first and a best fit for the
// remainder, which uses the fewest HBDs and nodes.
// Where a required constraint sits above the leaf (pp required in a pod, say)
// the tiers below it use the same largest-first/best-fit rule per child.
//
// Phase 3, map ranks. Chosen GPUs are taken in node order, which is
// depth-first topology order, and filled by a rank sequence in which the
// required blocks are contiguous, then preferred groups (pipelines), then
// the heaviest remaining traffic: so blocks never straddle a domain of their
// tier and pipelines stay under as few leaves as the allocation allows.
// Spares are whole healthy free nodes nearest the job (same HBD, leaf, ...).
//
// Phase 4, choose by speed. When the fewest-leaves choice spans several
// domains of the tier above the leaf (pods, spines), a second candidate is
// built with the fewest children at every tier above the leaf (the tightest
// set of that size, so the emptiest pods stay whole for larger jobs): it
// spans the fewest pods, maybe at the price of a few more leaves. Where it
// spans fewer pods than the first, both are mapped (phase 3) and the
// step-time model (step_model.hpp, oversubscribed links saturated) predicts
// each one's step; the faster wins, and where the two are within 1 % the
// one with the lower SpanCost (domains spanned per tier, weighted 4, 16, 64
// from the leaf up as in the comm-cost metric). The model alone rarely
// separates them: a data-parallel group that spans pods runs at the pod
// fabric's bandwidth whether it spans 4 pods or 7, while every extra pod
// puts the job's traffic on one more set of uplinks its neighbours share.
// 4b: each candidate is mapped in the order that the model predicts faster
// (MapFastest: pipelines contiguous, or stages outermost).
// 4c: preferences kept (Honoured): the job is placed again with every
// preference it can keep made required, and that placement wins when the
// model predicts it more than 1 % faster.
//
// Fast path: a job that fits one node needs no capacity pass over the whole
// cluster. It descends from the root into the fullest domain first, pruning
// by the cluster state's per-domain free-GPU counters (an upper bound), and
// takes the fullest node that holds it; if none does it falls through to the
// general path, which also answers Busy or Infeasible. A job that fits one
// HBD (where the HBD is above the node) does the same down to the HBD tier,
// computing capacity only inside the HBDs it visits.

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <optional>

#include "placer_internal.hpp"
#include "topo/core/step_model.hpp"

namespace topo::core {
namespace {

using internal::JobShape;

// How the tiers above the leaf are chosen: the fewest leaves first (phase
// 2 above), or the fewest children first (ChooseFewestChildren at every
// tier above the leaf: the fewest pods, then the fewest leaves inside each).
enum class Objective : uint8_t { kFewestLeaves, kFewestChildren };

class Selector {
 public:
  Selector(const Topology& topo, const JobShape& shape, const ClusterState& state,
           const std::vector<int>& cap, Objective objective = Objective::kFewestLeaves)
      : topo_(topo), shape_(shape), state_(state), cap_(cap), objective_(objective) {}

  // Allocates k units (of tier(d)'s block) inside d.
  void Choose(DomainId d, int k) {
    if (k <= 0) return;
    const int t = topo_.domain(d).tier;
    if (t == 0) {
      picks_.push_back({d, k * shape_.unit[0]});
      return;
    }
    const int kc = static_cast<int>(static_cast<int64_t>(k) * shape_.unit[t] / shape_.unit[t - 1]);
    const int leaf = topo_.leaf_tier();
    if (t > leaf && shape_.unit[t - 1] == shape_.unit[leaf]) {
      if (objective_ == Objective::kFewestLeaves) {
        ChooseAboveLeaf(d, kc);
      } else {
        ChooseFewestChildren(d, kc);
      }
    } else {
      ChooseByChildren(d, kc);
    }
  }

  std::vector<std::pair<NodeId, int>> TakePicks() { return std::move(picks_); }

 private:
  // Best fit: the smallest capacity that holds k, then the fewest free GPUs.
  bool BetterFit(DomainId a, DomainId b) const {
    if (cap_[a] != cap_[b]) return cap_[a] < cap_[b];
    if (state_.free_gpus(a) != state_.free_gpus(b))
      return state_.free_gpus(a) < state_.free_gpus(b);
    return a < b;
  }

  void ChooseByChildren(DomainId d, int kc) {
    auto kids = topo_.children(d);
    DomainId best = kNoDomain;
    for (DomainId c : kids) {
      if (cap_[c] >= kc && (best == kNoDomain || BetterFit(c, best))) best = c;
    }
    if (best != kNoDomain) {
      Choose(best, kc);
      return;
    }
    std::vector<DomainId> order;
    for (DomainId c : kids) {
      if (cap_[c] > 0) order.push_back(c);
    }
    std::sort(order.begin(), order.end(), [&](DomainId a, DomainId b) {
      if (cap_[a] != cap_[b]) return cap_[a] > cap_[b];
      return a < b;
    });
    int rem = kc;
    for (size_t i = 0; i < order.size() && rem > 0; ++i) {
      if (cap_[order[i]] >= rem) {
        DomainId fit = order[i];
        for (size_t j = i + 1; j < order.size() && cap_[order[j]] >= rem; ++j) {
          if (BetterFit(order[j], fit)) fit = order[j];
        }
        Choose(fit, rem);
        return;
      }
      Choose(order[i], cap_[order[i]]);
      rem -= cap_[order[i]];
    }
  }

  // The fewest children of d that hold kc, the tightest such set (the least
  // capacity in all, so the emptiest domains stay whole for larger jobs):
  // every set of that size when it is at most 3 of at most 16 children,
  // else the largest first. Filled largest first, the rest on the last.
  void ChooseFewestChildren(DomainId d, int kc) {
    std::vector<DomainId> kids;
    for (DomainId c : topo_.children(d)) {
      if (cap_[c] > 0) kids.push_back(c);
    }
    std::sort(kids.begin(), kids.end(), [&](DomainId a, DomainId b) {
      if (cap_[a] != cap_[b]) return cap_[a] > cap_[b];
      return a < b;
    });
    size_t k = 0;
    for (int64_t sum = 0; k < kids.size() && sum < kc; ++k) sum += cap_[kids[k]];
    std::vector<DomainId> set(kids.begin(), kids.begin() + static_cast<long>(k));
    constexpr size_t kMaxChildren = 16;
    if (k >= 1 && k <= 3 && kids.size() <= kMaxChildren) {
      int64_t best = -1;
      std::vector<size_t> idx(k);
      // Every k-subset in lexicographic order of indices.
      for (size_t i = 0; i < k; ++i) idx[i] = i;
      while (true) {
        int64_t sum = 0;
        for (size_t i : idx) sum += cap_[kids[i]];
        if (sum >= kc && (best < 0 || sum < best)) {
          best = sum;
          for (size_t i = 0; i < k; ++i) set[i] = kids[idx[i]];
        }
        size_t pos = k;
        while (pos > 0 && idx[pos - 1] == kids.size() - k + pos - 1) --pos;
        if (pos == 0) break;
        ++idx[pos - 1];
        for (size_t i = pos; i < k; ++i) idx[i] = idx[i - 1] + 1;
      }
    }
    if (set.size() == 1) {
      // One child holds it: the best fit among all that do.
      DomainId fit = set[0];
      for (DomainId c : kids) {
        if (cap_[c] >= kc && BetterFit(c, fit)) fit = c;
      }
      Choose(fit, kc);
      return;
    }
    int rem = kc;
    for (DomainId c : set) {
      const int take = std::min(rem, cap_[c]);
      Choose(c, take);
      rem -= take;
      if (rem == 0) break;
    }
  }

  // Leaves under d: a contiguous id range at the leaf tier.
  std::pair<DomainId, DomainId> LeafRange(DomainId d) const {
    const Domain& dom = topo_.domain(d);
    const int leaf = topo_.leaf_tier();
    return {topo_.Ancestor(dom.node_begin, leaf), topo_.Ancestor(dom.node_end - 1, leaf) + 1};
  }

  // Fewest leaves under d holding k leaf units (INT_MAX if they cannot).
  int MinLeaves(DomainId d, int k) {
    auto [lo, hi] = LeafRange(d);
    int best = 0;
    for (DomainId l = lo; l < hi; ++l) best = std::max(best, cap_[l]);
    if (best >= k) return 1;
    scratch_.clear();
    for (DomainId l = lo; l < hi; ++l) {
      if (cap_[l] > 0) scratch_.push_back(cap_[l]);
    }
    std::sort(scratch_.begin(), scratch_.end(), std::greater<>());
    int64_t sum = 0;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      sum += scratch_[i];
      if (sum >= k) return static_cast<int>(i + 1);
    }
    return std::numeric_limits<int>::max();
  }

  // Sum of the n largest leaf capacities under d.
  int64_t TopLeavesSum(DomainId d, int n) {
    auto [lo, hi] = LeafRange(d);
    scratch_.assign(cap_.begin() + lo, cap_.begin() + hi);
    int m = std::min<int>(n, static_cast<int>(scratch_.size()));
    std::partial_sort(scratch_.begin(), scratch_.begin() + m, scratch_.end(), std::greater<>());
    return std::accumulate(scratch_.begin(), scratch_.begin() + m, int64_t{0});
  }

  struct Child {
    DomainId id;
    int64_t value;
  };

  // The fewest children (2 or 3; one was tried before) whose leaves_needed
  // largest leaves hold kc, the tightest such set first; empty when none or
  // when there are too many children to try every set. Keeps the leaf count
  // optimal while spanning fewer pods than a greedy pool.
  std::vector<size_t> FewestChildren(const std::vector<Child>& kids, int leaves_needed, int kc) {
    constexpr size_t kMaxChildren = 16;
    if (kids.size() < 2 || kids.size() > kMaxChildren) return {};
    std::vector<std::vector<int>> sorted(kids.size());
    for (size_t i = 0; i < kids.size(); ++i) {
      auto [lo, hi] = LeafRange(kids[i].id);
      for (DomainId l = lo; l < hi; ++l) {
        if (cap_[l] > 0) sorted[i].push_back(cap_[l]);
      }
      std::sort(sorted[i].begin(), sorted[i].end(), std::greater<>());
    }
    // prefix[i][m]: the sum of child i's m largest leaf capacities.
    std::vector<std::vector<int64_t>> prefix(kids.size());
    for (size_t i = 0; i < kids.size(); ++i) {
      prefix[i].assign(sorted[i].size() + 1, 0);
      for (size_t m = 0; m < sorted[i].size(); ++m) {
        prefix[i][m + 1] = prefix[i][m] + sorted[i][m];
      }
    }
    const size_t want = static_cast<size_t>(std::max(leaves_needed, 0));
    // Whether the leaves_needed largest caps over the union of the given
    // children (2 or 3) hold kc. Each child's own best leaves bound the sum
    // from above, and give it exactly when the children have no more leaves
    // than that; only the rest need the merge.
    auto reaches = [&](std::initializer_list<size_t> set) {
      std::array<size_t, 3> ids{};
      std::array<size_t, 3> at{};
      size_t count = 0;
      int64_t bound = 0;
      size_t leaves = 0;
      for (size_t i : set) {
        ids[count++] = i;
        bound += prefix[i][std::min(want, sorted[i].size())];
        leaves += sorted[i].size();
      }
      if (bound < kc) return false;
      if (leaves <= want) return true;
      int64_t sum = 0;
      for (size_t n = 0; n < want; ++n) {
        int best = -1;
        for (size_t k = 0; k < count; ++k) {
          if (at[k] < sorted[ids[k]].size() &&
              (best < 0 || sorted[ids[k]][at[k]] > sorted[ids[best]][at[best]])) {
            best = static_cast<int>(k);
          }
        }
        if (best < 0) break;
        sum += sorted[ids[best]][at[best]++];
      }
      return sum >= kc;
    };
    auto total = [&](std::initializer_list<size_t> set) {
      int64_t t = 0;
      for (size_t i : set) t += cap_[kids[i].id];
      return t;
    };
    // The tightest set (least total capacity) that holds kc; the cheap total
    // is compared before the merge.
    std::vector<size_t> best;
    int64_t best_total = 0;
    const size_t n = kids.size();
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        const int64_t t = total({a, b});
        if (!best.empty() && t >= best_total) continue;
        if (reaches({a, b})) {
          best = {a, b};
          best_total = t;
        }
      }
    }
    if (!best.empty()) return best;
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        for (size_t c = b + 1; c < n; ++c) {
          const int64_t t = total({a, b, c});
          if (!best.empty() && t >= best_total) continue;
          if (reaches({a, b, c})) {
            best = {a, b, c};
            best_total = t;
          }
        }
      }
    }
    return best;
  }

  void ChooseAboveLeaf(DomainId d, int kc) {
    const int leaves_needed = MinLeaves(d, kc);
    DomainId best = kNoDomain;
    for (DomainId c : topo_.children(d)) {
      if (cap_[c] < kc) continue;
      if (MinLeaves(c, kc) != leaves_needed) continue;
      if (best == kNoDomain || BetterFit(c, best)) best = c;
    }
    if (best != kNoDomain) {
      Choose(best, kc);
      return;
    }
    // Pool the most valuable children until their best leaves hold the job.
    std::vector<Child> kids;
    for (DomainId c : topo_.children(d)) {
      if (cap_[c] > 0) kids.push_back({c, TopLeavesSum(c, leaves_needed)});
    }
    std::sort(kids.begin(), kids.end(), [&](const Child& a, const Child& b) {
      if (a.value != b.value) return a.value > b.value;
      if (cap_[a.id] != cap_[b.id]) return cap_[a.id] > cap_[b.id];
      return a.id < b.id;
    });
    struct Leaf {
      DomainId id;
      int pool_order;
    };
    std::vector<Leaf> pool;
    std::vector<int> caps;
    if (std::vector<size_t> few = FewestChildren(kids, leaves_needed, kc); !few.empty()) {
      // Reorder so the chosen children come first, in value order; the loop
      // below then stops once exactly they are pooled.
      std::vector<Child> front;
      for (size_t i : few) front.push_back(kids[i]);
      for (size_t i = 0; i < kids.size(); ++i) {
        if (std::find(few.begin(), few.end(), i) == few.end()) front.push_back(kids[i]);
      }
      kids = std::move(front);
    }
    for (size_t i = 0; i < kids.size(); ++i) {
      auto [lo, hi] = LeafRange(kids[i].id);
      for (DomainId l = lo; l < hi; ++l) {
        if (cap_[l] > 0) pool.push_back({l, static_cast<int>(i)});
      }
      caps.clear();
      for (const Leaf& l : pool) caps.push_back(cap_[l.id]);
      int m = std::min<int>(leaves_needed, static_cast<int>(caps.size()));
      std::partial_sort(caps.begin(), caps.begin() + m, caps.end(), std::greater<>());
      if (std::accumulate(caps.begin(), caps.begin() + m, int64_t{0}) >= kc) break;
    }
    std::sort(pool.begin(), pool.end(), [&](const Leaf& a, const Leaf& b) {
      if (cap_[a.id] != cap_[b.id]) return cap_[a.id] > cap_[b.id];
      if (a.pool_order != b.pool_order) return a.pool_order < b.pool_order;
      return a.id < b.id;
    });
    int rem = kc;
    const size_t full = static_cast<size_t>(leaves_needed) - 1;
    for (size_t i = 0; i < full && i < pool.size(); ++i) {
      Choose(pool[i].id, cap_[pool[i].id]);
      rem -= cap_[pool[i].id];
    }
    if (rem <= 0) return;
    size_t fit = pool.size();
    for (size_t j = full; j < pool.size(); ++j) {
      if (cap_[pool[j].id] < rem) continue;
      if (fit == pool.size()) {
        fit = j;
        continue;
      }
      const Leaf& a = pool[j];
      const Leaf& b = pool[fit];
      bool better = cap_[a.id] != cap_[b.id]       ? cap_[a.id] < cap_[b.id]
                    : a.pool_order != b.pool_order ? a.pool_order < b.pool_order
                                                   : BetterFit(a.id, b.id);
      if (better) fit = j;
    }
    if (fit < pool.size()) Choose(pool[fit].id, rem);
  }

  const Topology& topo_;
  const JobShape& shape_;
  const ClusterState& state_;
  const std::vector<int>& cap_;
  const Objective objective_;
  std::vector<std::pair<NodeId, int>> picks_;
  std::vector<int> scratch_;
};

// Domains a placement spans at each tier from the leaf up, weighted by the
// tier costs of the comm-cost metric (../shared/BENCHMARKS.md: leaf 4, the
// tier above 16, above that 64): the tie-break between candidates whose
// predicted steps are equal, since every domain spanned above the leaf puts
// the job's traffic on one more uplink its neighbours share.
int64_t SpanCost(const Topology& topo, const std::vector<GpuSlot>& ranks) {
  std::vector<NodeId> nodes;
  for (const GpuSlot& g : ranks) {
    if (nodes.empty() || nodes.back() != g.node) nodes.push_back(g.node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  int64_t cost = 0;
  int64_t weight = 4;
  std::vector<DomainId> seen;
  for (int t = topo.leaf_tier(); t < topo.root_tier(); ++t, weight *= 4) {
    seen.clear();
    for (NodeId n : nodes) seen.push_back(topo.Ancestor(n, t));
    std::sort(seen.begin(), seen.end());
    cost += weight * (std::unique(seen.begin(), seen.end()) - seen.begin());
  }
  return cost;
}

// Domains of the tier above the leaf that the picks span.
int ChildrenAboveLeaf(const Topology& topo, const std::vector<std::pair<NodeId, int>>& picks) {
  const int t = topo.leaf_tier() + 1;
  if (t > topo.root_tier()) return 1;
  std::vector<DomainId> seen;
  for (const auto& [node, n] : picks) seen.push_back(topo.Ancestor(node, t));
  std::sort(seen.begin(), seen.end());
  return static_cast<int>(std::unique(seen.begin(), seen.end()) - seen.begin());
}

// Walks from d down to domains of `tier`, fullest first (fewest free GPUs),
// skipping domains with fewer than `gpus` free GPUs (the state's counters are
// an upper bound on what a job can use) and, when one_node, domains without
// a node that has `gpus` free, and returns the first answer of
// at_tier(domain) that is not -1.
template <typename AtTier>
int32_t DescendFullestFirst(const Topology& topo, const ClusterState& state, int gpus, int tier,
                            bool one_node, DomainId d, const AtTier& at_tier) {
  if (topo.domain(d).tier <= tier) return at_tier(d);
  std::vector<DomainId> kids;
  for (DomainId c : topo.children(d)) {
    if (state.free_gpus(c) >= gpus && (!one_node || state.HasNodeWithFree(c, gpus))) {
      kids.push_back(c);
    }
  }
  std::sort(kids.begin(), kids.end(), [&](DomainId a, DomainId b) {
    if (state.free_gpus(a) != state.free_gpus(b)) return state.free_gpus(a) < state.free_gpus(b);
    return a < b;
  });
  for (DomainId c : kids) {
    const int32_t found = DescendFullestFirst(topo, state, gpus, tier, one_node, c, at_tier);
    if (found >= 0) return found;
  }
  return -1;
}

// The fullest node, in the fullest domains, that holds the whole job.
NodeId FindOneNode(const Topology& topo, const JobShape& shape, const ClusterState& state) {
  const int unit = shape.unit[0];
  auto usable = [&](NodeId n) { return internal::NodeSlots(shape, state, n) / unit * unit; };
  return DescendFullestFirst(topo, state, shape.world, 1, true, topo.root(), [&](DomainId d) {
    const Domain& dom = topo.domain(d);
    if (dom.tier == 0) return usable(d) >= shape.world ? d : NodeId{-1};
    NodeId best = -1;
    int best_slots = 0;
    for (NodeId n = dom.node_begin; n < dom.node_end; ++n) {
      const int slots = usable(n);
      if (slots >= shape.world && (best < 0 || slots < best_slots)) {
        best = n;
        best_slots = slots;
      }
    }
    return best;
  });
}

// The fullest HBD whose own capacity holds the whole job, computing capacity
// (into cap) only for the HBDs it visits.
DomainId FindOneHbd(const Topology& topo, const JobShape& shape, const ClusterState& state,
                    std::vector<int>& cap) {
  return DescendFullestFirst(
      topo, state, shape.world, topo.hbd_tier(), false, topo.root(), [&](DomainId h) {
        internal::ComputeSubtreeCapacity(shape, state, h, cap);
        return cap[h] >= internal::NeedAt(shape, topo.domain(h).tier) ? h : kNoDomain;
      });
}

// A candidate and its predicted step (oversubscribed links saturated), each
// predicted at most once per Place.
struct Mapped {
  Mapped(Placement p) : placement(std::move(p)) {}  // NOLINT: every placer answer is one
  Placement placement;
  double step = -1;  // < 0: not predicted yet
};

double StepOf(Mapped& m, const JobSpec& job, StepTimeModel& steps) {
  if (m.step < 0) m.step = steps.StepSeconds(job, m.placement.ranks, LinkLoad::kSaturated);
  return m.step;
}

// Whether the items (picks or ranks) sit in more than one HBD; node_of gives
// an item's node.
template <typename Items, typename NodeOf>
bool SpansHbds(const Topology& topo, const Items& items, NodeOf node_of) {
  if (items.empty()) return false;
  const DomainId first = topo.Ancestor(node_of(items.front()), topo.hbd_tier());
  return std::any_of(items.begin(), items.end(), [&](const auto& item) {
    return topo.Ancestor(node_of(item), topo.hbd_tier()) != first;
  });
}

// Phase 4b, the order across the spread. The rank sequence keeps pipelines
// contiguous (pp is preferred in a leaf) and puts data parallelism
// outermost, so where the picks span several domains the DP groups are the
// ones that cross them. Where a stage's GPUs fill a domain, the other order
// (stages outermost, Megatron-LM's default: every DP group inside as few
// domains as a stage needs, only the pipeline's point-to-point traffic
// across) can be much faster, above all over an oversubscribed tier. When
// both pp and dp are free to move (neither is in a required block) and the
// picks span more than one HBD, both orders are mapped and the stage-major
// one is kept only when the step-time model (oversubscribed links
// saturated) predicts a step more than 1 % shorter: a preference yields to
// a predicted speed-up, never to a tie.
Mapped MapFastest(const JobSpec& job, const JobShape& shape, const ClusterState& state,
                  std::vector<std::pair<NodeId, int>> picks, StepTimeModel& steps) {
  const Topology& topo = state.topology();
  const auto pp = static_cast<int>(Dim::kPp);
  const auto dp = static_cast<int>(Dim::kDp);
  const auto& required = shape.unit_dims[topo.root_tier()];
  const bool movable =
      job.parallelism.pp > 1 && job.parallelism.dp > 1 && !required[pp] && !required[dp] &&
      SpansHbds(topo, picks, [](const std::pair<NodeId, int>& pick) { return pick.first; });
  if (!movable) return internal::BuildPlacement(job, shape, state, std::move(picks));
  JobShape stage_major = shape;
  auto& order = stage_major.sequence_order;
  auto at_pp = std::find(order.begin(), order.end(), Dim::kPp);
  auto at_dp = std::find(order.begin(), order.end(), Dim::kDp);
  std::iter_swap(at_pp, at_dp);
  Mapped a{internal::BuildPlacement(job, shape, state, picks)};
  if (!a.placement.placed()) return a;
  Mapped b{internal::BuildPlacement(job, stage_major, state, std::move(picks))};
  if (!b.placement.placed()) return a;
  return StepOf(b, job, steps) < 0.99 * StepOf(a, job, steps) ? std::move(b) : std::move(a);
}

class TopoSchedPlacer final : public Placer {
 public:
  explicit TopoSchedPlacer(PlacerOptions options) : options_(options) {}
  std::string_view name() const override { return "toposched"; }

  Placement Place(const JobSpec& job, const ClusterState& state) const override {
    const Topology& topo = state.topology();
    StepTimeModel steps(topo);
    Mapped asked = PlaceAsAsked(job, state, options_, steps);
    const std::vector<GpuSlot>& ranks = asked.placement.ranks;
    if (!options_.choose_by_speed || !asked.placement.placed() ||
        !SpansHbds(topo, ranks, [](const GpuSlot& g) { return g.node; })) {
      return std::move(asked.placement);
    }
    std::optional<JobSpec> strict = Honoured(job, topo);
    if (!strict || AlreadyKept(job, *strict, topo, AnalyzePlacement(job, topo, ranks))) {
      return std::move(asked.placement);
    }
    PlacerOptions quiet = options_;
    quiet.explain_shortfall = false;
    Mapped kept = PlaceAsAsked(*strict, state, quiet, steps);
    if (!kept.placement.placed()) return std::move(asked.placement);
    return StepOf(kept, job, steps) < 0.99 * StepOf(asked, job, steps) ? std::move(kept.placement)
                                                                       : std::move(asked.placement);
  }

 private:
  // Phase 4c, preferences kept. A preferred constraint shapes only the rank
  // sequence (phase 3), so the domains chosen need not hold whole groups of
  // it: an EP block preferred in a pod can straddle two pods when a pod's
  // share of the job is not a whole number of blocks, and that one group's
  // all-to-all then crosses the spine and slows every step. The job with
  // each preference it can keep made required (a block no larger than the
  // largest domain of its tier) is placed too, and kept when the step-time
  // model predicts it more than 1 % faster; when it cannot be placed now, or
  // is not faster, the placement as asked stands. nullopt: nothing to keep.
  static std::optional<JobSpec> Honoured(const JobSpec& job, const Topology& topo) {
    std::optional<JobSpec> strict;
    for (GroupKind k : kAllGroupKinds) {
      const TierConstraint& c = job.constraint(k);
      if (c.strength != Strength::kPreferred || !RankLayout::KindActive(k, job.parallelism)) {
        continue;
      }
      JobSpec trial = strict ? *strict : job;
      trial.constraints[static_cast<int>(k)].strength = Strength::kRequired;
      Result<JobShape> shape = internal::MakeJobShape(trial, topo, {});
      Result<int> tier = topo.FindTier(c.tier);
      if (!shape.ok() || !tier.ok()) continue;
      if (shape.value().unit[tier.value()] > topo.max_domain_gpus(tier.value())) continue;
      strict = std::move(trial);
    }
    return strict;
  }

  // Whether every preference `strict` makes required already holds: no group
  // of that kind spans a tier above the preferred one (for pp the spans are of
  // consecutive stages, which share a domain only if the whole pipeline does).
  static bool AlreadyKept(const JobSpec& job, const JobSpec& strict, const Topology& topo,
                          const CommSpans& spans) {
    for (GroupKind k : kAllGroupKinds) {
      const auto i = static_cast<size_t>(k);
      if (job.constraints[i].strength == strict.constraints[i].strength) continue;
      const std::vector<double>& members = spans.kind[i].min_members_per_child;
      const Result<int> tier = topo.FindTier(strict.constraints[i].tier);
      if (!tier.ok()) return false;
      if (std::any_of(members.begin() + tier.value() + 1, members.end(),
                      [](double m) { return m > 0; })) {
        return false;
      }
    }
    return true;
  }

  Mapped PlaceAsAsked(const JobSpec& job, const ClusterState& state, const PlacerOptions& options,
                      StepTimeModel& steps) const {
    const Topology& topo = state.topology();
    Result<JobShape> shape_or = internal::MakeJobShape(job, topo, options);
    if (!shape_or.ok()) return Placement{PlaceOutcome::kInfeasible, shape_or.message(), {}, {}};
    const JobShape& shape = shape_or.value();
    if (shape.gpus_per_node == 0 && shape.world <= topo.max_node_gpus()) {
      NodeId n = FindOneNode(topo, shape, state);
      if (n >= 0) return internal::BuildPlacement(job, shape, state, {{n, shape.world}});
    }
    if (topo.hbd_tier() > 0 && shape.world <= topo.max_domain_gpus(topo.hbd_tier())) {
      std::vector<int> cap(topo.domain_count(), 0);
      DomainId h = FindOneHbd(topo, shape, state, cap);
      if (h != kNoDomain) {
        Selector selector(topo, shape, state, cap);
        selector.Choose(h, internal::NeedAt(shape, topo.hbd_tier()));
        return internal::BuildPlacement(job, shape, state, selector.TakePicks());
      }
    }
    std::vector<int> cap = internal::ComputeCapacity(shape, state);
    const int need = internal::NeedAt(shape, topo.root_tier());
    if (cap[topo.root()] < need) return internal::ExplainShortfall(job, shape, state, cap);
    Selector selector(topo, shape, state, cap);
    selector.Choose(topo.root(), need);
    std::vector<std::pair<NodeId, int>> picks = selector.TakePicks();
    if (!options.choose_by_speed) {
      return internal::BuildPlacement(job, shape, state, std::move(picks));
    }
    // Phase 4, choose by speed. When the fewest-leaves choice spans several
    // domains above the leaf (pods, spines), the fewest-children choice is
    // the other candidate; the one with the shorter predicted step (the
    // step-time model, with oversubscribed links saturated) wins, and where
    // the steps are within 1 % the one spanning less (SpanCost).
    const int spread = ChildrenAboveLeaf(topo, picks);
    if (spread <= 1) return MapFastest(job, shape, state, std::move(picks), steps);
    Selector compact(topo, shape, state, cap, Objective::kFewestChildren);
    compact.Choose(topo.root(), need);
    std::vector<std::pair<NodeId, int>> other = compact.TakePicks();
    // A candidate that spans as many pods buys nothing for its extra leaves.
    const bool fewer = ChildrenAboveLeaf(topo, other) < spread;
    Mapped a = MapFastest(job, shape, state, std::move(picks), steps);
    if (!fewer || !a.placement.placed()) return a;
    Mapped b = MapFastest(job, shape, state, std::move(other), steps);
    if (!b.placement.placed()) return a;
    const double step_a = StepOf(a, job, steps);
    const double step_b = StepOf(b, job, steps);
    if (std::abs(step_a - step_b) > 0.01 * std::min(step_a, step_b)) {
      return step_b < step_a ? std::move(b) : std::move(a);
    }
    return SpanCost(topo, b.placement.ranks) < SpanCost(topo, a.placement.ranks) ? std::move(b)
                                                                                 : std::move(a);
  }

  PlacerOptions options_;
};

}  // namespace

std::unique_ptr<Placer> MakeTopoSchedPlacer(const PlacerOptions& options) {
  return std::make_unique<TopoSchedPlacer>(options);
}

}  // namespace topo::core
