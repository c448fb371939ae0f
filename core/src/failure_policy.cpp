// FailurePolicy and the replacement search (failure_policy.hpp).

#include "topo/core/failure_policy.hpp"

#include <algorithm>
#include <bit>
#include <tuple>

namespace topo::core {

FailurePolicy::FailurePolicy(int max_app_failures, TimeMs backoff_initial, TimeMs backoff_max)
    : max_app_failures_(std::max(1, max_app_failures)),
      backoff_initial_(backoff_initial),
      backoff_max_(backoff_max) {}

TimeMs FailurePolicy::Backoff(int k) const {
  if (backoff_initial_ <= 0 || k < 1) return 0;
  const TimeMs cap = std::max(backoff_max_, backoff_initial_);
  TimeMs delay = backoff_initial_;
  for (int i = 1; i < k && delay < cap; ++i) delay = delay > cap / 2 ? cap : delay * 2;
  return std::min(delay, cap);
}

FailurePolicy::Decision FailurePolicy::AfterAppFailure(int failures_in_row) const {
  if (failures_in_row >= max_app_failures_) return {Decision::Action::kFail, 0};
  const TimeMs delay = Backoff(failures_in_row);
  if (delay <= 0) return {Decision::Action::kRestartNow, 0};
  return {Decision::Action::kBackoff, delay};
}

FailurePolicy::Decision FailurePolicy::AfterLaunchFailure(int failures_in_row,
                                                          bool permanent) const {
  if (permanent) return {Decision::Action::kFail, 0};
  const TimeMs delay = Backoff(failures_in_row - 1);
  if (delay <= 0) return {Decision::Action::kRestartNow, 0};
  return {Decision::Action::kBackoff, delay};
}

namespace {

// The lowest tier at which nodes a and b share a domain.
int CommonTier(const Topology& topo, NodeId a, NodeId b) {
  int t = 0;
  while (t < topo.root_tier() && topo.Ancestor(a, t) != topo.Ancestor(b, t)) ++t;
  return t;
}

uint64_t HealthyMask(const ClusterState& state, NodeId n) {
  return state.all_mask(n) & ~state.failed_mask(n) & ~state.degraded_mask(n);
}

}  // namespace

Replacement FindReplacements(const Topology& topology, const ClusterState& state,
                             std::span<const GpuSlot> ranks, const std::set<NodeId>& leave,
                             std::span<const NodeId> spares, std::span<const JobId> spare_owner,
                             std::span<const double> node_cost) {
  Replacement out;
  out.ranks.assign(ranks.begin(), ranks.end());
  out.complete = true;
  std::set<NodeId> used;
  for (const GpuSlot& s : ranks) used.insert(s.node);
  std::set<NodeId> taken;
  for (NodeId b : leave) {
    std::vector<int> moved;
    for (size_t r = 0; r < out.ranks.size(); ++r) {
      if (out.ranks[r].node == b) moved.push_back(static_cast<int>(r));
    }
    NodeId best = -1;
    std::tuple<int, int, double, NodeId> best_key{};
    auto consider = [&](NodeId r, bool spare) {
      if (used.count(r) || taken.count(r)) return;
      if (std::popcount(HealthyMask(state, r)) < static_cast<int>(moved.size())) return;
      if (!spare) {
        if (!state.NodeAcceptsWork(r) || state.busy_mask(r) != 0 ||
            state.usable_free_mask(r) != state.all_mask(r)) {
          return;
        }
      }
      const double cost = node_cost.empty() ? 0.0 : node_cost[static_cast<size_t>(r)];
      std::tuple<int, int, double, NodeId> key{CommonTier(topology, b, r), spare ? 0 : 1, cost, r};
      if (best < 0 || key < best_key) {
        best = r;
        best_key = key;
      }
    };
    for (NodeId r : spares) consider(r, true);
    for (NodeId r = 0; r < topology.node_count(); ++r) {
      if (spare_owner[r] == 0) consider(r, false);
    }
    if (best < 0) {
      out.complete = false;
      break;
    }
    taken.insert(best);
    uint64_t gpus = HealthyMask(state, best);
    for (int r : moved) {
      const int g = std::countr_zero(gpus);
      gpus &= gpus - 1;
      out.ranks[r] = GpuSlot{best, g};
    }
  }
  for (NodeId n : spares) {
    if (!taken.count(n)) out.spares_left.push_back(n);
  }
  return out;
}

}  // namespace topo::core
