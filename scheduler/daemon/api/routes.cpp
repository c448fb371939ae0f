// The API's route table (docs/api.md) and the two ways a request is served
// (routes.hpp): on the strand, or off it for the routes with an off-strand
// handler. Authentication, the scoping rule (scope.hpp), the
// storage floor for writes (disk_guard.hpp) and the route names of the
// metrics are applied here once, for every route.

#include <algorithm>

#include "daemon/api/routes.hpp"

#include "daemon/api/handlers.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::Result;
using core::Status;
using core::TimeMs;

namespace {

enum RouteFlags : unsigned {
  kRead = 0,
  kWrite = 1,       // changes state: refused below the storage floor (507)
  kAuthChange = 2,  // changes users or tokens: replicated before it is answered (HA)
};

// Which handler serves a route, of the three kinds (handlers.hpp), and the
// query parameters it takes: any other is refused here, naming it, so a
// misspelt filter never silently lists everything.
struct RouteSpec {
  std::string_view method;
  std::string_view pattern;  // under /v1 unless it starts with "/metrics"
  unsigned flags = kRead;
  WriteHandler write = nullptr;
  ReadHandler read = nullptr;
  OffStrandHandler off_strand = nullptr;
  std::string_view query;  // the parameters it takes, separated by spaces
};

constexpr RouteSpec W(std::string_view method, std::string_view pattern, WriteHandler h,
                      unsigned flags = kWrite, std::string_view query = {}) {
  return {method, pattern, flags, h, nullptr, nullptr, query};
}
constexpr RouteSpec R(std::string_view method, std::string_view pattern, ReadHandler h,
                      std::string_view query = {}) {
  return {method, pattern, kRead, nullptr, h, nullptr, query};
}
constexpr RouteSpec O(std::string_view pattern, OffStrandHandler h, std::string_view query) {
  return {"GET", pattern, kRead, nullptr, nullptr, h, query};
}

// {x} matches one path segment, {x*} the rest (one or more), named x.
constexpr RouteSpec kRoutes[] = {
    R("GET", "/jobs", ListJobs, "all tenant user state after limit"),
    W("POST", "/jobs", SubmitJob),
    R("GET", "/jobs/{id}", ShowJob),
    W("POST", "/jobs/{id}/cancel", CancelJob),
    W("POST", "/jobs/{id}/hold", HoldJob),
    W("POST", "/jobs/{id}/release", ReleaseJob),
    W("POST", "/jobs/{id}/checkpoint", CheckpointJob),
    // A read, though it asks the node's agent (not logged, no storage).
    W("GET", "/jobs/{id}/logs", JobLogs, kRead, "rank offset max"),
    R("GET", "/nodes", ListNodes, "domain gpu_type partition"),
    W("POST", "/nodes/drain", DrainNodes),
    W("POST", "/nodes/resume", ResumeNodes),
    R("GET", "/nodes/{name}", ShowNode),
    W("POST", "/nodes/{name}/gpus/{gpu}/clear", ClearGpu),
    R("GET", "/tenants", ListTenants),
    R("GET", "/tenants/{name*}", ShowTenant),
    // Also the tenant's granted Unix accounts, replicated with the users.
    W("PUT", "/tenants/{name*}", PutTenant, kWrite | kAuthChange),
    R("GET", "/partitions", ListPartitions),
    W("POST", "/partitions", CreatePartition),
    R("GET", "/partitions/{name}", ShowPartition),
    W("DELETE", "/partitions/{name}", DeletePartition),
    R("GET", "/reservations", ListReservations),
    W("POST", "/reservations", CreateReservation),
    R("GET", "/reservations/{name}", ShowReservation),
    W("DELETE", "/reservations/{name}", DeleteReservation),
    R("GET", "/users", ListUsers),
    W("POST", "/users", CreateUser, kWrite | kAuthChange),
    W("PATCH", "/users/{name}", UpdateUser, kWrite | kAuthChange),
    W("DELETE", "/users/{name}", DeleteUser, kWrite | kAuthChange),
    R("GET", "/tokens", ListTokens, "user"),
    W("POST", "/tokens", CreateToken, kWrite | kAuthChange),
    W("DELETE", "/tokens/{id}", RevokeToken, kWrite | kAuthChange),
    R("GET", "/topology", GetTopology, "format"),
    W("PUT", "/topology", ImportTopology),
    R("GET", "/cluster", GetCluster, "by"),
    R("GET", "/utilization", GetUtilization),
    R("GET", "/config", GetPolicy),
    W("PUT", "/config/{key}", SetPolicy),
    O("/events", ReadEvents, "after limit last node type job"),
    O("/audit", ReadAudit, "after limit last"),
    O("/whoami", ReadWhoami, ""),
    O("/history", ReadHistory, "user tenant state since until limit after"),
    O("/reports/usage", ReadUsage, "by since until limit after"),
    R("GET", "/metrics", GetMetrics),
};

// Whether `pattern` matches `path`; fills `params` with the named segments.
bool Matches(std::string_view pattern, const std::vector<std::string>& path,
             std::map<std::string, std::string, std::less<>>* params) {
  size_t i = 0;
  size_t pos = 1;  // past the leading '/'
  std::map<std::string, std::string, std::less<>> named;
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    const std::string_view seg = pattern.substr(pos, end - pos);
    pos = end + 1;
    if (seg.size() > 3 && seg.substr(seg.size() - 2) == "*}") {
      if (i >= path.size()) return false;
      std::string rest;
      for (size_t k = i; k < path.size(); ++k) rest += (k > i ? "/" : "") + path[k];
      named.emplace(std::string(seg.substr(1, seg.size() - 3)), std::move(rest));
      i = path.size();
      break;
    }
    if (i >= path.size()) return false;
    if (seg.front() == '{') {
      named.emplace(std::string(seg.substr(1, seg.size() - 2)), path[i]);
    } else if (seg != path[i]) {
      return false;
    }
    ++i;
  }
  if (i != path.size()) return false;
  if (params != nullptr) *params = std::move(named);
  return true;
}

// A query key or value as sent: "%2F" is '/', and so on (RFC 3986; a '+' is
// a plus sign). nullopt for a '%' without two hex digits after it.
std::optional<std::string> PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (text.size() - i < 3) return std::nullopt;
    const int hi = hex(text[i + 1]);
    const int lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// An answer given before any route runs, with its metric name.
HttpResponse Refused(const Status& why, std::string_view route) {
  HttpResponse r = StatusResponse(why);
  r.route = std::string(route);
  return r;
}

// Splits the target into route: path segments after /v1 (or {"metrics"})
// and the query, each key once. An error answer when it cannot be read.
std::optional<HttpResponse> ParseRoute(const HttpRequest& request, Route& route) {
  route.request = &request;
  std::string_view target = request.target;
  if (target.find('#') != std::string_view::npos) {
    return Refused(Invalid("the request target has a fragment ('#'): a fragment stays in the "
                           "client; send the path and query alone",
                           "target"),
                   "invalid");
  }
  std::string_view path = target.substr(0, target.find('?'));
  if (target.size() > path.size()) {
    std::string_view q = target.substr(path.size() + 1);
    size_t i = 0;
    while (i <= q.size()) {
      size_t end = q.find('&', i);
      if (end == std::string_view::npos) end = q.size();
      std::string_view kv = q.substr(i, end - i);
      const size_t eq = kv.find('=');
      if (!kv.empty()) {
        std::optional<std::string> key = PercentDecode(kv.substr(0, eq));
        std::optional<std::string> value =
            PercentDecode(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
        const std::string name(kv.substr(0, std::min<size_t>(eq, 100)));
        if (!key || !value) {
          return Refused(Invalid("query parameter " + name +
                                     ": a '%' must start an escape of two hex digits (%2F for '/')",
                                 name),
                         "invalid");
        }
        if (route.query.count(*key)) {
          // Which one a reader takes differs between readers: refuse, as a
          // body with a key twice is refused.
          const std::string shown = key->substr(0, 100);
          return Refused(
              Invalid("query parameter " + shown + " is given twice; give each parameter once",
                      shown),
              "invalid");
        }
        route.query.emplace(std::move(*key), std::move(*value));
      }
      i = end + 1;
    }
  }
  if (!PercentDecode(path)) {
    return Refused(Invalid("the request path " + std::string(path.substr(0, 200)) +
                               ": a '%' must start an escape of two hex digits",
                           "target"),
                   "invalid");
  }
  // Reject traversal and encoded separators outright.
  if (path.find("..") != std::string_view::npos || path.find('%') != std::string_view::npos ||
      path.find("//") != std::string_view::npos || path.find('\\') != std::string_view::npos) {
    return Refused(NotFound("no such route: " + std::string(path.substr(0, 200))), "invalid");
  }
  size_t i = 1;
  while (i < path.size()) {
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    if (end > i) route.path.emplace_back(path.substr(i, end - i));
    i = end + 1;
  }
  if (route.path.size() == 1 && route.path[0] == "metrics") return std::nullopt;
  if (route.path.empty() || route.path[0] != "v1") {
    return Refused(NotFound("no such route: " + std::string(path.substr(0, 200)) +
                            "; the API lives under /v1 (docs/api.md)"),
                   "unknown");
  }
  route.path.erase(route.path.begin());
  return std::nullopt;
}

bool IsMetrics(const Route& route) {
  return route.path.size() == 1 && route.path[0] == "metrics" &&
         route.request->target.rfind("/metrics", 0) == 0;
}

// The route's table entry (with route.params filled), or the 404/405 answer.
std::variant<const RouteSpec*, HttpResponse> Lookup(Route& route) {
  if (route.path.empty()) return Refused(NotFound("no such route: /v1 (docs/api.md)"), "unknown");
  const bool metrics = IsMetrics(route);
  std::string allowed;
  for (const RouteSpec& spec : kRoutes) {
    const bool spec_metrics = spec.pattern == "/metrics";
    if (spec_metrics != metrics) continue;
    std::map<std::string, std::string, std::less<>> params;
    if (!Matches(spec.pattern, route.path, &params)) continue;
    if (spec.method == route.method()) {
      route.params = std::move(params);
      return &spec;
    }
    if (allowed.find(spec.method) == std::string::npos) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(spec.method);
    }
  }
  if (!allowed.empty()) {
    HttpResponse r = StatusResponse(Status::Error(
        "use " + allowed + " for this route (docs/api.md)", ErrorCode::kMethodNotAllowed));
    r.headers.emplace_back("Allow", allowed);
    return r;
  }
  return Refused(NotFound("no such route: /v1/" + route.path[0].substr(0, 100) + " (docs/api.md)"),
                 "unknown");
}

std::string RouteName(const RouteSpec& spec) {
  return spec.pattern == "/metrics" ? std::string("/metrics") : "/v1" + std::string(spec.pattern);
}

// kInvalid naming the first query parameter the route does not take.
Status CheckQueryKeys(const RouteSpec& spec, const Route& route) {
  for (const auto& [key, value] : route.query) {
    bool known = false;
    std::string list;
    size_t i = 0;
    while (i < spec.query.size()) {
      size_t end = spec.query.find(' ', i);
      if (end == std::string_view::npos) end = spec.query.size();
      const std::string_view name = spec.query.substr(i, end - i);
      known = known || name == key;
      list += (list.empty() ? "" : ", ") + std::string(name);
      i = end + 1;
    }
    if (known) continue;
    const std::string shown = key.substr(0, 40);
    const std::string route_name = std::string(spec.method) + " " + RouteName(spec);
    if (key.empty()) {
      return Invalid("a query parameter has no name (\"?=...\"); " + route_name +
                         (list.empty() ? " takes none" : " takes " + list),
                     "query");
    }
    return Invalid("unknown parameter \"" + shown + "\" for " + route_name +
                       (list.empty() ? ", which takes none" : "; use " + list),
                   shown);
  }
  return Status::Ok();
}

HttpResponse Unauthenticated(const Status& who) {
  HttpResponse r = StatusResponse(who);
  if (who.code() == ErrorCode::kUnauthenticated) {
    r.route = "unauthenticated";
    r.headers.emplace_back("WWW-Authenticate", "Bearer");  // RFC 9110 11.6.1
  }
  return r;
}

// HA (docs/ha.md, Users and tokens): after a change to the users or tokens
// the leader writes all of them to etcd before it answers. When etcd does
// not take them, the change stays in this store only: the answer says so
// and the daemon stops (every later commit fails), to come back as a
// standby that takes etcd's users and tokens, so no replica serves a change
// the others would not know.
Answer Replicated(ServiceState& s, Answer answer) {
  if (!answer.ok()) return answer;
  Status st = s.driver.ReplicateAuth();
  if (st.ok()) return answer;
  return Status::Error(
      "the change was not replicated and is undone when this scheduler restarts as a standby: " +
          st.message(),
      st.code() == ErrorCode::kInsufficientStorage ? st.code() : ErrorCode::kUnavailable);
}

}  // namespace

HttpResponse ServeRequest(ServiceState& s, const HttpRequest& request, TimeMs now) {
  s.driver.Advance(now);
  Route route;
  if (std::optional<HttpResponse> bad = ParseRoute(request, route)) return *bad;
  Result<Caller> who = s.auth.Authenticate(request.authorization, s.driver.now(), s.driver.store());
  if (!who.ok()) return Unauthenticated(who.status());
  auto found = Lookup(route);
  if (auto* error = std::get_if<HttpResponse>(&found)) {
    error->user = who.value().user.name;
    return *error;
  }
  const RouteSpec& spec = *std::get<const RouteSpec*>(found);
  Answer answer = Status::Ok();
  if (Status keys = CheckQueryKeys(spec, route); !keys.ok()) {
    answer = keys;
  } else if (Status room = (spec.flags & kWrite) ? s.disk.CheckWrite() : Status::Ok(); !room.ok()) {
    answer = room;
  } else if (spec.off_strand != nullptr) {
    answer = spec.off_strand(s.driver.store(), who.value(), route,
                             ReadContext{s.driver.now(), s.driver.default_time_limit()});
  } else if (spec.read != nullptr) {
    answer = spec.read(s, who.value(), route);
  } else {
    answer = spec.write(s, who.value(), route);
    if (spec.flags & kAuthChange) answer = Replicated(s, std::move(answer));
  }
  HttpResponse r = answer.ok() ? std::move(answer).value() : StatusResponse(answer.status());
  if (r.route.empty()) r.route = RouteName(spec);
  r.user = who.value().user.name;
  return r;
}

bool IsOffStrand(const HttpRequest& request) {
  Route route;
  if (ParseRoute(request, route)) return false;
  auto found = Lookup(route);
  const auto* spec = std::get_if<const RouteSpec*>(&found);
  return spec != nullptr && (*spec)->off_strand != nullptr;
}

HttpResponse ServeOffStrand(ServiceState& s, const HttpRequest& request, TimeMs now) {
  Route route;
  if (std::optional<HttpResponse> bad = ParseRoute(request, route)) return *bad;
  Result<ReadPool::Lease> lease = s.reads->Acquire();
  if (!lease.ok()) return StatusResponse(lease.status());
  Result<Caller> who = s.auth.Authenticate(request.authorization, now, lease.value().store());
  if (!who.ok()) return Unauthenticated(who.status());
  auto found = Lookup(route);
  if (auto* error = std::get_if<HttpResponse>(&found)) {
    error->user = who.value().user.name;
    return *error;
  }
  const RouteSpec& spec = *std::get<const RouteSpec*>(found);
  if (spec.off_strand == nullptr) {
    return StatusResponse(Status::Error("internal: not a read route", ErrorCode::kInternal));
  }
  Status keys = CheckQueryKeys(spec, route);
  const ReadContext context{now, s.driver.default_time_limit()};
  Answer answer = keys.ok() ? spec.off_strand(lease.value().store(), who.value(), route, context)
                            : Answer(keys);
  HttpResponse r = answer.ok() ? std::move(answer).value() : StatusResponse(answer.status());
  if (r.route.empty()) r.route = RouteName(spec);
  r.user = who.value().user.name;
  return r;
}

}  // namespace topo::daemon
