// The API's connection slots (connection_table.hpp), without sockets: each
// "connection" records whether its close callback ran.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/net/connection_table.hpp"
#include "daemon/net/http_session.hpp"

using namespace topo::daemon;

namespace {

// Opens connections and runs the close callbacks the table hands back, the
// way AcceptHttpConnection does.
struct Harness {
  explicit Harness(int max_connections, int max_per_peer = 1000)
      : table(max_connections, max_per_peer) {}

  // The connection's id, or 0 when refused.
  ConnectionTable::Id Open(const std::string& peer, ConnectionTable::Verdict* verdict = nullptr) {
    const int n = next++;
    ConnectionTable::Admission a = table.Open(peer, [this, n] { closed.push_back(n); });
    for (auto& close : a.evicted) close();
    if (verdict != nullptr) *verdict = a.verdict;
    if (a.verdict != ConnectionTable::Verdict::kAdmitted) return 0;
    ids[n] = a.id;
    return a.id;
  }

  ConnectionTable table;
  int next = 0;
  std::map<int, ConnectionTable::Id> ids;  // by the order opened
  std::vector<int> closed;                 // by the order opened, as evicted
};

}  // namespace

TEST_CASE("connections: idle unauthenticated connections are evicted oldest first near the limit") {
  Harness h(50);
  CHECK(h.table.high_water() == 45);
  for (int i = 0; i < 45; ++i) REQUIRE(h.Open("10.0.0.1") != 0);
  CHECK(h.closed.empty());
  CHECK(h.table.open() == 45);
  // 60 idle handshakes and 20 half-open sockets, then a real client: every
  // newcomer gets in, the oldest idle ones make room.
  for (int i = 45; i < 80; ++i) REQUIRE(h.Open("10.0.0.1") != 0);
  REQUIRE(h.closed.size() == 35);
  for (int i = 0; i < 35; ++i) CHECK(h.closed[i] == i);
  CHECK(h.table.open() == 45);
  CHECK(h.table.open_from("10.0.0.1") == 45);
  CHECK(h.Open("10.0.0.2") != 0);
  CHECK(h.table.open() == 45);
}

TEST_CASE("connections: authenticated connections and requests in flight are never evicted") {
  Harness h(10);  // high water 9
  const ConnectionTable::Id authed = h.Open("a");
  const ConnectionTable::Id busy = h.Open("a");
  const ConnectionTable::Id proven_by_404 = h.Open("a");
  REQUIRE(h.table.RequestStarted(authed));
  h.table.RequestDone(authed, /*authenticated=*/true);
  REQUIRE(h.table.RequestStarted(busy));
  REQUIRE(h.table.RequestStarted(proven_by_404));
  h.table.RequestDone(proven_by_404, /*authenticated=*/false);  // evictable again
  for (int i = 0; i < 6; ++i) REQUIRE(h.Open("b") != 0);
  CHECK(h.closed.empty());
  // At the high-water mark: the oldest evictable goes (the one whose only
  // request did not authenticate), never the other two.
  REQUIRE(h.Open("c") != 0);
  CHECK(h.closed == std::vector<int>{2});
  // Until nothing but the two is left to evict.
  for (int i = 0; i < 20; ++i) REQUIRE(h.Open("c") != 0);
  CHECK(h.table.open() == 9);
  for (int n : h.closed) CHECK((n != 0 && n != 1));
  // A request started on an evicted connection is refused.
  CHECK_FALSE(h.table.RequestStarted(h.ids[3]));
  // The busy one finishes unauthenticated: it is evictable again.
  h.table.RequestDone(busy, false);
  REQUIRE(h.Open("c") != 0);
  CHECK(h.closed.back() == 1);
}

TEST_CASE("connections: at max_connections with nothing evictable a newcomer is refused") {
  Harness h(4);  // high water 4: a small limit keeps no headroom
  for (int i = 0; i < 4; ++i) {
    const ConnectionTable::Id id = h.Open("a");
    REQUIRE(h.table.RequestStarted(id));
  }
  ConnectionTable::Verdict v{};
  CHECK(h.Open("b", &v) == 0);
  CHECK(v == ConnectionTable::Verdict::kRefusedFull);
  CHECK(h.closed.empty());
  h.table.Close(h.ids[0]);
  CHECK(h.Open("b", &v) != 0);
  CHECK(v == ConnectionTable::Verdict::kAdmitted);
}

TEST_CASE("connections: the per-peer cap refuses one address and not another") {
  Harness h(1000, 64);
  for (int i = 0; i < 64; ++i) REQUIRE(h.Open("127.0.0.1") != 0);
  ConnectionTable::Verdict v{};
  CHECK(h.Open("127.0.0.1", &v) == 0);
  CHECK(v == ConnectionTable::Verdict::kRefusedPeer);
  CHECK(h.Open("127.0.0.2") != 0);
  CHECK(h.closed.empty());  // a refusal evicts nobody
  h.table.Close(h.ids[5]);
  CHECK(h.table.open_from("127.0.0.1") == 63);
  CHECK(h.Open("127.0.0.1") != 0);
}

TEST_CASE("connections: closing is idempotent and an evicted slot is freed once") {
  Harness h(2);  // high water 2
  const ConnectionTable::Id first = h.Open("a");
  h.Open("a");
  h.Open("a");  // evicts the first
  CHECK(h.closed == std::vector<int>{0});
  CHECK(h.table.open() == 2);
  h.table.Close(first);  // its session ends later
  h.table.Close(first);
  CHECK(h.table.open() == 2);
  CHECK(h.table.open_from("a") == 2);
  h.table.RequestDone(first, true);  // late, harmless
  CHECK(h.table.open() == 2);
}

TEST_CASE("connections: which answers prove a valid token") {
  auto answer = [](int status) {
    HttpResponse r;
    r.status = status;
    return r;
  };
  CHECK(AnsweredAsAuthenticated(answer(200)));
  CHECK(AnsweredAsAuthenticated(answer(400)));  // a bad body is read after the token
  CHECK(AnsweredAsAuthenticated(answer(403)));
  CHECK(AnsweredAsAuthenticated(answer(429)));
  CHECK_FALSE(AnsweredAsAuthenticated(answer(401)));
  CHECK_FALSE(AnsweredAsAuthenticated(answer(404)));  // no such route comes before the token
  CHECK_FALSE(AnsweredAsAuthenticated(answer(503)));
}
