#pragma once
// Who holds the API's connection slots, and whom to let go when they run out.
//
// Every accepted API connection is admitted here first and released when it
// ends. The table knows nothing of sockets: each admitted connection leaves
// a callback that closes it, and the table only decides.
//
// The rules (docs/daemon.md, "Connections"):
// - A peer address holds at most `max_per_peer` connections; one more is
//   refused. Loopback is an address like any other.
// - A connection is *unproven* until one of its requests was answered as
//   coming from a valid token (MarkAuthenticated). While it is unproven and
//   has no request in flight it may be evicted: when an admission finds
//   `open() >= high_water()` (90 % of max_connections), the oldest such
//   connections are closed until there is room below the high-water mark, so
//   that idle handshakes and half-open sockets never keep a real client out.
// - Authenticated connections, and any connection with a complete request
//   being answered, are never evicted; at max_connections a newcomer is
//   refused instead.
//
// Thread safety: every method may be called from any thread (one mutex,
// mu_); the close callbacks of evicted connections are returned, never run
// under the lock.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace topo::daemon {

class ConnectionTable {
 public:
  using Id = uint64_t;

  // REQUIRES: max_connections >= 1, max_per_peer >= 1.
  ConnectionTable(int max_connections, int max_per_peer);

  enum class Verdict { kAdmitted, kRefusedFull, kRefusedPeer };
  struct Admission {
    Verdict verdict = Verdict::kRefusedFull;
    Id id = 0;  // valid when admitted
    // Close callbacks of the connections evicted to make room, oldest first;
    // the caller runs them (outside the table's lock). Empty unless the
    // newcomer was admitted: eviction frees a slot, so it never precedes a
    // refusal.
    std::vector<std::function<void()>> evicted;
  };
  // A new connection from `peer` (an address as text). `close` ends it; it
  // is called at most once, and only through Admission::evicted.
  Admission Open(const std::string& peer, std::function<void()> close);

  // A complete request was read and is being answered: the connection may
  // not be evicted until RequestDone. False when it was already evicted
  // (its close callback is on its way): drop the request.
  bool RequestStarted(Id id);
  // Its answer was written. `authenticated`: the service accepted the
  // request's token, so the connection is never evicted from now on.
  void RequestDone(Id id, bool authenticated);
  // The connection ended (evicted or not); frees its slot. Idempotent.
  void Close(Id id);

  int open() const;
  int open_from(const std::string& peer) const;
  // The number of open connections at which unproven idle ones are evicted.
  int high_water() const { return high_water_; }

 private:
  struct Entry {
    std::string peer;
    std::function<void()> close;
    bool authenticated = false;
    bool in_flight = false;
    bool evicted = false;  // slot already freed; awaiting Close
  };
  void Release(Id id, Entry& e);  // REQUIRES: mu_ held; e is entries_[id], not yet released

  const int max_connections_;
  const int max_per_peer_;
  const int high_water_;

  mutable std::mutex mu_;  // guards everything below
  Id next_id_ = 1;         // ids grow with time: a smaller id is older
  int open_ = 0;           // admitted and not evicted
  std::map<Id, Entry> entries_;
  std::set<Id> evictable_;  // unproven, no request in flight
  std::unordered_map<std::string, int> per_peer_;
};

}  // namespace topo::daemon
