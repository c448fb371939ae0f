#pragma once
// Who holds the API's connection slots, and whom to let go when they run out.
//
// Every accepted API connection is admitted here first and released when it
// ends. The table knows nothing of sockets: each admitted connection leaves
// a callback that closes it, and the table only decides.
//
// The rules (docs/daemon.md, "Connections"):
// - A connection is *unauthenticated* until one of its requests was answered
//   as coming from a valid token (Authenticated); from then on it belongs to
//   that token's user (the user of its latest authenticated request). An
//   address holds at most `max_unauthenticated_per_peer` unauthenticated
//   connections; one more is refused. Authenticated connections do not
//   count against their address, so the users of one login node never lock
//   each other out.
// - A user holds at most `max_per_user` connections, from any addresses.
//   When one more authenticates as that user, the user's connections idle
//   longest are closed to make room; when none of them is idle, the
//   connection that just authenticated is closed after its answer.
// - Near the limit (an admission finds `open() >= high_water()`, 90 % of
//   max_connections), unauthenticated connections with no request in flight
//   are evicted, idle longest first, until there is room below the
//   high-water mark: idle handshakes and half-open sockets never keep a real
//   client out.
// - At max_connections, with nothing unauthenticated to evict, the idle
//   connection of the heaviest user (the user holding the most
//   connections) that has been idle longest is closed for the newcomer.
//   A connection with a request being answered is never evicted; when every
//   connection is busy, the newcomer is refused.
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
#include <utility>
#include <vector>

namespace topo::daemon {

class ConnectionTable {
 public:
  using Id = uint64_t;
  using CloseFn = std::function<void()>;

  // REQUIRES: each limit >= 1.
  ConnectionTable(int max_connections, int max_unauthenticated_per_peer, int max_per_user);

  enum class Verdict { kAdmitted, kRefusedFull, kRefusedPeer };
  // Why a connection was chosen to be closed, for the metrics.
  enum class Eviction { kUnauthenticated, kHeaviestUser, kUserCap };
  struct Evicted {
    Eviction why = Eviction::kUnauthenticated;
    CloseFn close;
  };
  struct Admission {
    Verdict verdict = Verdict::kRefusedFull;
    Id id = 0;  // valid when admitted
    // The connections evicted to make room, in the order chosen; the caller
    // runs their close callbacks (outside the table's lock). Empty unless
    // the newcomer was admitted: eviction frees a slot, so it never
    // precedes a refusal.
    std::vector<Evicted> evicted;
  };
  // A new, unauthenticated connection from `peer` (an address as text).
  // `close` ends it; it is called at most once, and only through an
  // Evicted.
  Admission Open(const std::string& peer, CloseFn close);

  // A complete request was read and is being answered: the connection may
  // not be evicted until RequestDone. False when it was already evicted
  // (its close callback is on its way): drop the request.
  bool RequestStarted(Id id);

  struct Authentication {
    // False: the user already holds max_per_user connections, none of them
    // idle; close this one once its answer is written.
    bool keep_open = true;
    std::vector<Evicted> evicted;  // the user's connections closed for this one
  };
  // The request being answered presented a valid token of `user`: the
  // connection is the user's from now on (another user's token moves it).
  // REQUIRES: between RequestStarted and RequestDone of this connection.
  Authentication Authenticated(Id id, const std::string& user);

  // Its answer was written: the connection is idle (and evictable by the
  // rules above) until its next request.
  void RequestDone(Id id);
  // The connection ended (evicted or not); frees its slot. Idempotent.
  void Close(Id id);

  int open() const;
  // Unauthenticated connections from the address.
  int unauthenticated_from(const std::string& peer) const;
  // Connections of the user.
  int open_of(const std::string& user) const;
  // The number of open connections at which unauthenticated idle ones are
  // evicted.
  int high_water() const { return high_water_; }

 private:
  // Idle order: (when it became idle, id); smaller is idle longer.
  using IdleKey = std::pair<uint64_t, Id>;
  struct Entry {
    std::string peer;
    std::string user;  // "" while unauthenticated
    CloseFn close;
    bool in_flight = false;
    bool evicted = false;  // slot already freed; awaiting Close
    uint64_t idle_since = 0;
  };
  // REQUIRES: mu_ held.
  void MarkBusy(Id id, Entry& e);
  void MarkIdle(Id id, Entry& e);
  void Release(Id id, Entry& e);  // e is entries_[id], not yet released
  Evicted Evict(Id id, Eviction why);
  // The heaviest user with an idle connection; "" when none.
  std::string HeaviestIdleUser() const;

  const int max_connections_;
  const int max_unauthenticated_per_peer_;
  const int max_per_user_;
  const int high_water_;

  mutable std::mutex mu_;  // guards everything below
  Id next_id_ = 1;
  uint64_t clock_ = 0;  // counts idle transitions
  int open_ = 0;        // admitted and not evicted
  std::map<Id, Entry> entries_;
  std::set<IdleKey> idle_unauthenticated_;
  std::unordered_map<std::string, std::set<IdleKey>> idle_of_user_;
  std::unordered_map<std::string, int> unauthenticated_per_peer_;
  std::unordered_map<std::string, int> per_user_;
};

}  // namespace topo::daemon
