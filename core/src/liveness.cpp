// LivenessTracker (liveness.hpp).

#include "topo/core/liveness.hpp"

#include <algorithm>

namespace topo::core {

LivenessTracker::Node& LivenessTracker::At(int node) {
  if (static_cast<size_t>(node) >= nodes_.size()) nodes_.resize(static_cast<size_t>(node) + 1);
  return nodes_[static_cast<size_t>(node)];
}

void LivenessTracker::Heard(int node, TimeMs now) { At(node).last_heard = now; }

TimeMs LivenessTracker::last_heard(int node) const {
  return node >= 0 && static_cast<size_t>(node) < nodes_.size()
             ? nodes_[static_cast<size_t>(node)].last_heard
             : -1;
}

LivenessTracker::Deadlines LivenessTracker::deadlines(int node) const {
  return node >= 0 && static_cast<size_t>(node) < nodes_.size()
             ? nodes_[static_cast<size_t>(node)].deadlines
             : Deadlines{};
}

void LivenessTracker::Unqueue(int node, const Deadlines& d) {
  if (d.suspect_at != kNever) queue_.erase({d.suspect_at, node, Liveness::kSuspect});
  if (d.down_at != kNever) queue_.erase({d.down_at, node, Liveness::kDown});
}

void LivenessTracker::Watch(int node, Deadlines d) {
  Node& n = At(node);
  if (n.deadlines == d) return;
  Unqueue(node, n.deadlines);
  n.deadlines = d;
  if (d.suspect_at != kNever) queue_.insert({d.suspect_at, node, Liveness::kSuspect});
  if (d.down_at != kNever) queue_.insert({d.down_at, node, Liveness::kDown});
}

std::vector<LivenessTracker::Expiry> LivenessTracker::Expire(TimeMs now) {
  std::vector<Expiry> out;
  while (!queue_.empty() && std::get<0>(*queue_.begin()) <= now) {
    const auto [at, node, verdict] = *queue_.begin();
    Node& n = nodes_[static_cast<size_t>(node)];
    if (verdict == Liveness::kSuspect && n.deadlines.down_at <= now) {
      // Down is due as well: that is the news, reported at its own entry.
      queue_.erase(queue_.begin());
      n.deadlines.suspect_at = kNever;
      continue;
    }
    queue_.erase(queue_.begin());
    if (verdict == Liveness::kDown) {
      n.deadlines = Deadlines{};
    } else {
      n.deadlines.suspect_at = kNever;
    }
    out.push_back(Expiry{node, verdict, n.last_heard});
  }
  std::sort(out.begin(), out.end(),
            [](const Expiry& a, const Expiry& b) { return a.node < b.node; });
  return out;
}

TimeMs LivenessTracker::NextDeadline() const {
  return queue_.empty() ? kNever : std::get<0>(*queue_.begin());
}

}  // namespace topo::core
