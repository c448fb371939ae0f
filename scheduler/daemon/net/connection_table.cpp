// ConnectionTable: admission, the per-address cap on unauthenticated
// connections, the per-user cap, and who is evicted when slots run out.

#include "daemon/net/connection_table.hpp"

#include <algorithm>
#include <utility>

namespace topo::daemon {

ConnectionTable::ConnectionTable(int max_connections, int max_unauthenticated_per_peer,
                                 int max_per_user)
    : max_connections_(std::max(1, max_connections)),
      max_unauthenticated_per_peer_(std::max(1, max_unauthenticated_per_peer)),
      max_per_user_(std::max(1, max_per_user)),
      // Evict above 90 %: the last tenth stays free for whoever comes next.
      high_water_(std::max(1, max_connections_ - max_connections_ / 10)) {}

void ConnectionTable::MarkBusy(Id id, Entry& e) {
  if (e.user.empty()) {
    idle_unauthenticated_.erase({e.idle_since, id});
  } else if (auto it = idle_of_user_.find(e.user); it != idle_of_user_.end()) {
    it->second.erase({e.idle_since, id});
    if (it->second.empty()) idle_of_user_.erase(it);
  }
}

void ConnectionTable::MarkIdle(Id id, Entry& e) {
  e.idle_since = ++clock_;
  if (e.user.empty()) {
    idle_unauthenticated_.insert({e.idle_since, id});
  } else {
    idle_of_user_[e.user].insert({e.idle_since, id});
  }
}

void ConnectionTable::Release(Id id, Entry& e) {
  if (!e.in_flight) MarkBusy(id, e);  // out of the idle sets
  e.evicted = true;
  open_ -= 1;
  auto& counts = e.user.empty() ? unauthenticated_per_peer_ : per_user_;
  auto it = counts.find(e.user.empty() ? e.peer : e.user);
  if (it != counts.end() && --it->second <= 0) counts.erase(it);
  // The entry stays until Close: a request read meanwhile must learn that
  // its connection is going (RequestStarted).
}

ConnectionTable::Evicted ConnectionTable::Evict(Id id, Eviction why) {
  Entry& e = entries_.at(id);
  Evicted out{why, std::move(e.close)};
  Release(id, e);
  return out;
}

std::string ConnectionTable::HeaviestIdleUser() const {
  std::string best;
  int most = 0;
  for (const auto& [user, idle] : idle_of_user_) {
    const auto it = per_user_.find(user);
    const int n = it == per_user_.end() ? 0 : it->second;
    // Ties go to the smaller name, so the choice does not depend on the
    // hash map's order.
    if (n > most || (n == most && user < best)) {
      best = user;
      most = n;
    }
  }
  return best;
}

ConnectionTable::Admission ConnectionTable::Open(const std::string& peer, CloseFn close) {
  Admission a;
  std::lock_guard lock(mu_);
  auto peer_it = unauthenticated_per_peer_.find(peer);
  if (peer_it != unauthenticated_per_peer_.end() &&
      peer_it->second >= max_unauthenticated_per_peer_) {
    a.verdict = Verdict::kRefusedPeer;
    return a;
  }
  while (open_ >= high_water_ && !idle_unauthenticated_.empty()) {
    a.evicted.push_back(Evict(idle_unauthenticated_.begin()->second, Eviction::kUnauthenticated));
  }
  if (open_ >= max_connections_) {
    const std::string heaviest = HeaviestIdleUser();
    if (heaviest.empty()) {
      a.verdict = Verdict::kRefusedFull;
      return a;
    }
    a.evicted.push_back(Evict(idle_of_user_.at(heaviest).begin()->second, Eviction::kHeaviestUser));
  }
  a.verdict = Verdict::kAdmitted;
  a.id = next_id_++;
  Entry& e = entries_.emplace(a.id, Entry{peer, {}, std::move(close)}).first->second;
  MarkIdle(a.id, e);
  unauthenticated_per_peer_[peer] += 1;
  open_ += 1;
  return a;
}

bool ConnectionTable::RequestStarted(Id id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evicted) return false;
  if (!it->second.in_flight) MarkBusy(id, it->second);
  it->second.in_flight = true;
  return true;
}

ConnectionTable::Authentication ConnectionTable::Authenticated(Id id, const std::string& user) {
  Authentication out;
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evicted || user.empty()) return out;
  Entry& e = it->second;
  if (e.user != user) {
    auto& counts = e.user.empty() ? unauthenticated_per_peer_ : per_user_;
    auto c = counts.find(e.user.empty() ? e.peer : e.user);
    if (c != counts.end() && --c->second <= 0) counts.erase(c);
    e.user = user;
    per_user_[user] += 1;
  }
  // Over the user's cap: its connections idle longest make room.
  while (per_user_[user] > max_per_user_) {
    auto idle = idle_of_user_.find(user);
    if (idle == idle_of_user_.end() || idle->second.empty()) {
      out.keep_open = false;
      break;
    }
    out.evicted.push_back(Evict(idle->second.begin()->second, Eviction::kUserCap));
  }
  return out;
}

void ConnectionTable::RequestDone(Id id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evicted || !it->second.in_flight) return;
  it->second.in_flight = false;
  MarkIdle(id, it->second);
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

int ConnectionTable::unauthenticated_from(const std::string& peer) const {
  std::lock_guard lock(mu_);
  auto it = unauthenticated_per_peer_.find(peer);
  return it == unauthenticated_per_peer_.end() ? 0 : it->second;
}

int ConnectionTable::open_of(const std::string& user) const {
  std::lock_guard lock(mu_);
  auto it = per_user_.find(user);
  return it == per_user_.end() ? 0 : it->second;
}

}  // namespace topo::daemon
