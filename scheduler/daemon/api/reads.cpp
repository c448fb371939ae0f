// Reads off the strand (docs/daemon.md, "What happens to a request"): the
// event log, audit log and whoami routes, each on a read-only connection.

#include <algorithm>
#include <set>

#include "daemon/api/handlers.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/node_name.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::JobId;
using core::Result;
using core::Status;

// ---------------------------------------------------------------- routes

namespace {

// A request scans at most this many pages of the log; scanned_to (and, for
// last=N, scanned_from) says how far it got.
constexpr int kScanPages = 20;
// Rows per page when most rows may not be shown (a filter, or a caller who
// sees part of the log); else a page is the `limit` asked for.
constexpr int64_t kFilteredPageRows = 1000;

// How many rows, and from which end: limit=N (the oldest after `after`,
// default 1000) or last=N (the newest), 1..10000 either, never both.
struct RowCount {
  int64_t count = 1000;
  bool newest = false;
};

Result<RowCount> CountOf(const Route& route) {
  RowCount out;
  out.newest = route.query.count("last") > 0;
  if (out.newest && route.query.count("limit")) {
    return Invalid("give last (the newest N) or limit (the oldest N after `after`), not both",
                   "last");
  }
  Result<int64_t> n = QueryInt(route, out.newest ? "last" : "limit", 1, 10000, 1000);
  if (!n.ok()) return n.status();
  out.count = n.value();
  return out;
}

Answer Audit(store::Store& store, const Caller& caller, int64_t after, RowCount rows_asked) {
  if (!caller.cluster_admin()) return Forbidden("the audit log needs a cluster-admin token");
  Result<std::vector<store::AuditRow>> rows =
      store.ListAudit(after, int(rows_asked.count), rows_asked.newest);
  if (!rows.ok()) return StoreFailed(rows.status());
  Json out = Json::array();
  for (const store::AuditRow& a : rows.value()) {
    out.push_back({{"seq", a.seq},
                   {"time_ms", a.time_ms},
                   {"actor", a.actor},
                   {"action", a.action},
                   {"detail", Json::parse(a.detail, nullptr, false)}});
  }
  return JsonAnswer(200, Json{{"audit", std::move(out)}});
}

// What GET /v1/events keeps besides the caller's scope.
struct EventFilter {
  std::optional<int64_t> job;   // job=: in the store's per-job index
  std::string node;             // node=: "" any
  std::set<std::string> types;  // type=: empty any
};

// Does the event, as the caller sees it, name the node: the event's node (or
// one of its requests'), a command's node, or a node among the ranks and
// spares of a start or restart. Reduced items (another tenant's jobs) name
// no node, so the filter reveals nothing scope hides.
bool NamesNode(const ScopedEvent& seen, const std::string& node) {
  auto names = [&](const Json& item) {
    if (!item.is_object()) return false;
    if (auto it = item.find("node"); it != item.end() && *it == node) return true;
    if (auto it = item.find("requests"); it != item.end() && it->is_array()) {
      for (const Json& r : *it) {
        if (r.is_object() && r.value("node", "") == node) return true;
      }
    }
    if (auto it = item.find("ranks"); it != item.end() && it->is_array()) {
      for (const Json& slot : *it) {
        if (slot.is_array() && !slot.empty() && slot[0] == node) return true;
      }
    }
    if (auto it = item.find("spares"); it != item.end() && it->is_array()) {
      for (const Json& n : *it) {
        if (n == node) return true;
      }
    }
    return false;
  };
  if (names(seen.event)) return true;
  for (const Json& c : seen.commands) {
    if (names(c)) return true;
  }
  return false;
}

// node=, type=: checked and bounded, or the 400 that names the fault.
Status ParseEventFilter(const Route& route, EventFilter& filter) {
  if (auto it = route.query.find("node"); it != route.query.end()) {
    const std::string& v = it->second;
    if (!common::ValidNodeName(v)) {
      return Invalid("node must be a node name: " + std::string(common::NodeNameRule()) +
                         " (`topo nodes` lists them)",
                     "node");
    }
    filter.node = v;
  }
  if (auto it = route.query.find("type"); it != route.query.end()) {
    const std::string& v = it->second;
    size_t i = 0;
    while (i <= v.size()) {
      size_t end = v.find(',', i);
      if (end == std::string::npos) end = v.size();
      const std::string name = v.substr(i, end - i);
      const auto known = common::EventTypeNames();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        return Invalid("type: unknown event type \"" + name.substr(0, 40) + "\"; use " + list +
                           " (comma-separated for several)",
                       "type");
      }
      filter.types.insert(name);
      i = end + 1;
    }
  }
  return Status::Ok();
}

// The event as the caller may see it, if it passes the filter.
std::optional<ScopedEvent> Seen(const store::RawEvent& e, const Caller& caller,
                                const EventFilter& filter, const TenantOf& tenant_of) {
  if (!filter.types.empty() && !filter.types.count(e.kind)) return std::nullopt;
  std::optional<ScopedEvent> seen =
      ScopeEvent(caller, Json::parse(e.body, nullptr, false), e.actor, tenant_of);
  if (seen && !filter.node.empty() && !NamesNode(*seen, filter.node)) return std::nullopt;
  return seen;
}

Json EventJson(const store::RawEvent& e, ScopedEvent seen) {
  return Json{{"seq", e.seq},
              {"time_ms", e.time_ms},
              {"actor", std::move(seen.actor)},
              {"event", std::move(seen.event)},
              {"commands", std::move(seen.commands)}};
}

// after=, limit= or last=, job=, node=, type=. Callers who see part of the
// log, and filters, page through it until `limit` (or `last`) events match,
// at most kScanPages pages per request; scanned_to (scanned_from for last)
// says how far the scan got.
Answer Events(store::Store& store, const Caller& caller, const Route& route, int64_t after,
              RowCount rows) {
  const TenantOf tenant_of = [&](int64_t id) -> std::optional<std::string> {
    Result<std::optional<store::JobRow>> row = store.GetJob(id);
    if (!row.ok() || !row.value()) return std::nullopt;
    return row.value()->tenant;
  };
  const bool newest = rows.newest;
  const int64_t limit = rows.count;
  EventFilter filter;
  if (route.query.count("job")) {
    Result<int64_t> job = QueryInt(route, "job", 1, INT64_MAX, 0);
    if (!job.ok()) return job.status();
    std::optional<std::string> tenant = tenant_of(job.value());
    if (!tenant || !caller.InScope(*tenant)) {
      return NotFound("no job " + std::to_string(job.value()) + " that you can see", "job");
    }
    filter.job = job.value();
  }
  if (Status bad = ParseEventFilter(route, filter); !bad.ok()) return bad;
  const bool sparse = !caller.cluster_admin() || !filter.node.empty() || !filter.types.empty();
  store::EventQuery q;
  q.job = filter.job;
  q.limit = static_cast<int>(sparse ? std::max(limit, kFilteredPageRows) : limit);
  q.after_seq = after;
  q.newest_first = newest;
  // The end of the log as the scan starts: what a short page reached.
  const int64_t top = store.LastSeq();
  Json out = Json::array();
  int64_t scanned = newest ? top + 1 : after;  // the last seq looked at
  bool reached_end = false;
  for (int page = 0; page < kScanPages && static_cast<int64_t>(out.size()) < limit; ++page) {
    if (newest) {
      q.before_seq = scanned;
    } else {
      q.after_seq = scanned;
    }
    Result<std::vector<store::RawEvent>> events = store.ListEvents(q);
    if (!events.ok()) return StoreFailed(events.status());
    for (const store::RawEvent& e : events.value()) {
      scanned = e.seq;
      std::optional<ScopedEvent> seen = Seen(e, caller, filter, tenant_of);
      if (!seen) continue;
      out.push_back(EventJson(e, std::move(*seen)));
      if (static_cast<int64_t>(out.size()) == limit) break;
    }
    if (static_cast<int64_t>(events.value().size()) < q.limit &&
        static_cast<int64_t>(out.size()) < limit) {
      reached_end = true;
      break;
    }
  }
  if (newest) {
    std::reverse(out.begin(), out.end());
    return JsonAnswer(200, Json{{"events", std::move(out)},
                                {"scanned_from", reached_end ? after + 1 : scanned},
                                {"scanned_to", top},
                                {"last_seq", top}});
  }
  if (reached_end) scanned = std::max(scanned, top);
  return JsonAnswer(
      200,
      Json{{"events", std::move(out)}, {"scanned_to", scanned}, {"last_seq", store.LastSeq()}});
}

// The position to read after, and how many rows from which end.
Result<std::pair<int64_t, RowCount>> Page(const Route& route) {
  Result<int64_t> after = QueryInt(route, "after", 0, INT64_MAX, 0);
  if (!after.ok()) return after.status();
  Result<RowCount> rows = CountOf(route);
  if (!rows.ok()) return rows.status();
  return std::pair{after.value(), rows.value()};
}

}  // namespace

Answer ReadWhoami(store::Store&, const Caller& caller, const Route&, const ReadContext&) {
  return JsonAnswer(200, Json{{"user", caller.user.name},
                              {"tenant", caller.user.tenant},
                              {"role", store::RoleName(caller.user.role)},
                              {"unix_user", caller.user.unix_user}});
}

Answer ReadAudit(store::Store& store, const Caller& caller, const Route& route,
                 const ReadContext&) {
  Result<std::pair<int64_t, RowCount>> page = Page(route);
  if (!page.ok()) return page.status();
  return Audit(store, caller, page.value().first, page.value().second);
}

Answer ReadEvents(store::Store& store, const Caller& caller, const Route& route,
                  const ReadContext&) {
  Result<std::pair<int64_t, RowCount>> page = Page(route);
  if (!page.ok()) return page.status();
  return Events(store, caller, route, page.value().first, page.value().second);
}

}  // namespace topo::daemon
