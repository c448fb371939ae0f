// The API's connection slots (connection_table.hpp), without sockets: each
// "connection" records whether its close callback ran.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/net/connection_table.hpp"

using namespace topo::daemon;

namespace {

using Eviction = ConnectionTable::Eviction;

// Opens connections and runs the close callbacks the table hands back, the
// way AcceptHttpConnection and the session do.
struct Harness {
  explicit Harness(int max_connections, int max_unauthenticated_per_peer = 1000,
                   int max_per_user = 1000)
      : table(max_connections, max_unauthenticated_per_peer, max_per_user) {}

  // The connection's number (the order opened), or -1 when refused.
  int Open(const std::string& peer, ConnectionTable::Verdict* verdict = nullptr) {
    const int n = next++;
    ConnectionTable::Admission a = table.Open(peer, [this, n] { closed.push_back(n); });
    Run(a.evicted);
    if (verdict != nullptr) *verdict = a.verdict;
    if (a.verdict != ConnectionTable::Verdict::kAdmitted) return -1;
    ids[n] = a.id;
    return n;
  }

  // One request on connection n answered as `user` ("" : no valid token);
  // false when the answer must close the connection.
  bool Request(int n, const std::string& user) {
    REQUIRE(table.RequestStarted(ids.at(n)));
    bool keep = true;
    if (!user.empty()) {
      ConnectionTable::Authentication a = table.Authenticated(ids.at(n), user);
      Run(a.evicted);
      keep = a.keep_open;
    }
    table.RequestDone(ids.at(n));
    return keep;
  }

  void Run(std::vector<ConnectionTable::Evicted>& evicted) {
    for (auto& e : evicted) {
      why.push_back(e.why);
      e.close();
    }
  }

  ConnectionTable table;
  int next = 0;
  std::map<int, ConnectionTable::Id> ids;  // by the order opened
  std::vector<int> closed;                 // by the order opened, as evicted
  std::vector<Eviction> why;               // for each of closed
};

}  // namespace

TEST_CASE("connections: idle unauthenticated connections are evicted oldest first near the limit") {
  Harness h(50);
  CHECK(h.table.high_water() == 45);
  for (int i = 0; i < 45; ++i) REQUIRE(h.Open("10.0.0.1") >= 0);
  CHECK(h.closed.empty());
  CHECK(h.table.open() == 45);
  // 60 idle handshakes and 20 half-open sockets, then a real client: every
  // newcomer gets in, the oldest idle ones make room.
  for (int i = 45; i < 80; ++i) REQUIRE(h.Open("10.0.0.1") >= 0);
  REQUIRE(h.closed.size() == 35);
  for (int i = 0; i < 35; ++i) CHECK(h.closed[i] == i);
  for (Eviction w : h.why) CHECK(w == Eviction::kUnauthenticated);
  CHECK(h.table.open() == 45);
  CHECK(h.table.unauthenticated_from("10.0.0.1") == 45);
  CHECK(h.Open("10.0.0.2") >= 0);
  CHECK(h.table.open() == 45);
}

TEST_CASE(
    "connections: authenticated connections and requests in flight are not evicted "
    "while unauthenticated idle ones are left") {
  Harness h(10);  // high water 9
  const int authed = h.Open("a");
  const int busy = h.Open("a");
  const int refused_token = h.Open("a");
  h.Request(authed, "ada");
  REQUIRE(h.table.RequestStarted(h.ids[busy]));
  h.Request(refused_token, "");  // a 401: still unauthenticated, evictable again
  for (int i = 0; i < 6; ++i) REQUIRE(h.Open("b") >= 0);
  CHECK(h.closed.empty());
  // At the high-water mark: the unauthenticated connection idle longest
  // goes (the one whose request did not authenticate), never the other two.
  REQUIRE(h.Open("c") >= 0);
  CHECK(h.closed == std::vector<int>{refused_token});
  for (int i = 0; i < 20; ++i) REQUIRE(h.Open("c") >= 0);
  CHECK(h.table.open() == 9);
  for (int n : h.closed) CHECK((n != authed && n != busy));
  // A request started on an evicted connection is refused.
  CHECK_FALSE(h.table.RequestStarted(h.ids[3]));
  // The busy one finishes unauthenticated: it is evictable again, once the
  // seven idle longer than it have gone.
  h.table.RequestDone(h.ids[busy]);
  for (int i = 0; i < 7; ++i) REQUIRE(h.Open("c") >= 0);
  CHECK(h.closed.back() != busy);
  REQUIRE(h.Open("c") >= 0);
  CHECK(h.closed.back() == busy);
}

TEST_CASE("connections: at max_connections with nothing evictable a newcomer is refused") {
  Harness h(4);  // high water 4: a small limit keeps no headroom
  for (int i = 0; i < 4; ++i) {
    const int n = h.Open("a");
    REQUIRE(h.table.RequestStarted(h.ids[n]));
  }
  ConnectionTable::Verdict v{};
  CHECK(h.Open("b", &v) == -1);
  CHECK(v == ConnectionTable::Verdict::kRefusedFull);
  CHECK(h.closed.empty());
  h.table.Close(h.ids[0]);
  CHECK(h.Open("b", &v) >= 0);
  CHECK(v == ConnectionTable::Verdict::kAdmitted);
}

TEST_CASE("connections: the per-address cap counts unauthenticated connections only") {
  Harness h(1000, 64);
  // One user holds 64 kept-alive connections from a login node ...
  for (int i = 0; i < 64; ++i) {
    const int n = h.Open("10.1.0.5");
    REQUIRE(n >= 0);
    CHECK(h.Request(n, "ada"));
  }
  CHECK(h.table.open_of("ada") == 64);
  CHECK(h.table.unauthenticated_from("10.1.0.5") == 0);
  // ... and another user of the same login node still gets in.
  const int bob = h.Open("10.1.0.5");
  REQUIRE(bob >= 0);
  CHECK(h.Request(bob, "bob"));
  CHECK(h.closed.empty());
  // 64 connections that never show a token do fill the address's slots.
  for (int i = 0; i < 64; ++i) REQUIRE(h.Open("10.1.0.5") >= 0);
  ConnectionTable::Verdict v{};
  CHECK(h.Open("10.1.0.5", &v) == -1);
  CHECK(v == ConnectionTable::Verdict::kRefusedPeer);
  CHECK(h.Open("10.1.0.6") >= 0);  // another address is not refused
  CHECK(h.closed.empty());         // a refusal evicts nobody
  h.table.Close(h.ids[70]);
  CHECK(h.table.unauthenticated_from("10.1.0.5") == 63);
  CHECK(h.Open("10.1.0.5") >= 0);
}

TEST_CASE("connections: past max_connections_per_user the user's connection idle longest goes") {
  Harness h(1000, 1000, 3);
  const int a0 = h.Open("10.0.0.1");
  const int a1 = h.Open("10.0.0.2");
  const int a2 = h.Open("10.0.0.3");
  for (int n : {a0, a1, a2}) CHECK(h.Request(n, "ada"));
  CHECK(h.Request(a0, "ada"));  // a0 used again: a1 is now idle longest
  const int a3 = h.Open("10.0.0.4");
  CHECK(h.Request(a3, "ada"));  // the fourth, from anywhere
  CHECK(h.closed == std::vector<int>{a1});
  CHECK(h.why == std::vector<Eviction>{Eviction::kUserCap});
  CHECK(h.table.open_of("ada") == 3);
  // Another user is not touched by ada's cap.
  CHECK(h.Request(h.Open("10.0.0.1"), "bob"));
  CHECK(h.closed.size() == 1);
  // With every one of ada's connections busy, the newcomer closes after its answer.
  for (int n : {a0, a2, a3}) REQUIRE(h.table.RequestStarted(h.ids[n]));
  const int a4 = h.Open("10.0.0.5");
  CHECK_FALSE(h.Request(a4, "ada"));
  CHECK(h.closed.size() == 1);
}

TEST_CASE("connections: at max_connections the heaviest user's idle connection goes first") {
  Harness h(10);  // high water 9
  std::vector<int> ada, bob;
  for (int i = 0; i < 6; ++i) {
    ada.push_back(h.Open("10.0.0.1"));
    CHECK(h.Request(ada.back(), "ada"));
  }
  for (int i = 0; i < 4; ++i) {
    bob.push_back(h.Open("10.0.0.1"));
    CHECK(h.Request(bob.back(), "bob"));
  }
  CHECK(h.closed.empty());
  CHECK(h.Request(ada[0], "ada"));  // ada[1] is ada's idle-longest now
  REQUIRE(h.table.open() == 10);
  // A newcomer (carol): ada holds the most, her connection idle longest goes.
  const int carol = h.Open("10.0.0.2");
  REQUIRE(carol >= 0);
  CHECK(h.closed == std::vector<int>{ada[1]});
  CHECK(h.why == std::vector<Eviction>{Eviction::kHeaviestUser});
  CHECK(h.Request(carol, "carol"));
  // ada 5, bob 4: ada again, while her connections are idle.
  for (int n : ada) {
    if (n != ada[1]) REQUIRE(h.table.RequestStarted(h.ids[n]));
  }
  REQUIRE(h.Open("10.0.0.3") >= 0);  // ada's are busy: bob, the heaviest idle user
  CHECK(h.closed.back() == bob[0]);
}

TEST_CASE("connections: another user's token moves the connection to that user") {
  Harness h(100);
  const int n = h.Open("a");
  CHECK(h.Request(n, "ada"));
  CHECK(h.table.open_of("ada") == 1);
  CHECK(h.Request(n, "bob"));
  CHECK(h.table.open_of("ada") == 0);
  CHECK(h.table.open_of("bob") == 1);
  CHECK(h.table.unauthenticated_from("a") == 0);
  h.table.Close(h.ids[n]);
  CHECK(h.table.open_of("bob") == 0);
  CHECK(h.table.open() == 0);
}

TEST_CASE("connections: closing is idempotent and an evicted slot is freed once") {
  Harness h(2);  // high water 2
  h.Open("a");
  h.Open("a");
  h.Open("a");  // evicts the first
  CHECK(h.closed == std::vector<int>{0});
  CHECK(h.table.open() == 2);
  h.table.Close(h.ids[0]);  // its session ends later
  h.table.Close(h.ids[0]);
  CHECK(h.table.open() == 2);
  CHECK(h.table.unauthenticated_from("a") == 2);
  h.table.RequestDone(h.ids[0]);  // late, harmless
  CHECK(h.table.Authenticated(h.ids[0], "ada").keep_open);
  CHECK(h.table.open() == 2);
  CHECK(h.table.open_of("ada") == 0);
}
