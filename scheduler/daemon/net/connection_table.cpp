// ConnectionTable: admission, per-peer caps and eviction of unproven idle
// connections.

#include "daemon/net/connection_table.hpp"

#include <algorithm>
#include <utility>

namespace topo::daemon {

ConnectionTable::ConnectionTable(int max_connections, int max_per_peer)
    : max_connections_(std::max(1, max_connections)),
      max_per_peer_(std::max(1, max_per_peer)),
      // Evict above 90 %: the last tenth stays free for whoever comes next.
      high_water_(std::max(1, max_connections_ - max_connections_ / 10)) {}

ConnectionTable::Admission ConnectionTable::Open(const std::string& peer,
                                                 std::function<void()> close) {
  Admission a;
  std::lock_guard lock(mu_);
  auto peer_it = per_peer_.find(peer);
  if (peer_it != per_peer_.end() && peer_it->second >= max_per_peer_) {
    a.verdict = Verdict::kRefusedPeer;
    return a;
  }
  // Oldest first: ids grow with admission time.
  while (open_ >= high_water_ && !evictable_.empty()) {
    const Id victim = *evictable_.begin();
    Entry& e = entries_.at(victim);
    a.evicted.push_back(std::move(e.close));
    Release(victim, e);
  }
  if (open_ >= max_connections_) {
    a.verdict = Verdict::kRefusedFull;
    return a;
  }
  a.verdict = Verdict::kAdmitted;
  a.id = next_id_++;
  entries_.emplace(a.id, Entry{peer, std::move(close)});
  evictable_.insert(a.id);
  per_peer_[peer] += 1;
  open_ += 1;
  return a;
}

void ConnectionTable::Release(Id id, Entry& e) {
  e.evicted = true;
  open_ -= 1;
  auto it = per_peer_.find(e.peer);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  // The entry stays until Close: a request read meanwhile must learn that
  // its connection is going (RequestStarted).
  evictable_.erase(id);
}

bool ConnectionTable::RequestStarted(Id id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evicted) return false;
  it->second.in_flight = true;
  evictable_.erase(id);
  return true;
}

void ConnectionTable::RequestDone(Id id, bool authenticated) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evicted) return;
  Entry& e = it->second;
  e.in_flight = false;
  e.authenticated = e.authenticated || authenticated;
  if (!e.authenticated) evictable_.insert(id);
}

void ConnectionTable::Close(Id id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (!it->second.evicted) Release(id, it->second);
  entries_.erase(it);
}

int ConnectionTable::open() const {
  std::lock_guard lock(mu_);
  return open_;
}

int ConnectionTable::open_from(const std::string& peer) const {
  std::lock_guard lock(mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

}  // namespace topo::daemon
