// The API's route table (docs/api.md) and the two ways a request is served:
// Service::Handle on the strand, Service::HandleRead off it for the routes
// marked kOffStrand. Authentication, the scoping rule (scope.hpp), the
// storage floor for writes (disk_guard.hpp) and the route names of the
// metrics are applied here once, for every route.

#include <algorithm>

#include "daemon/reads.hpp"
#include "daemon/service_internal.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;
using core::TimeMs;

namespace {

enum RouteFlags : unsigned {
  kRead = 0,
  kWrite = 1,      // changes state: refused below the storage floor (507)
  kOffStrand = 2,  // served by ServeRead on a read-only connection
};

using Handler = HttpResponse (*)(ServiceState&, const Caller&, const Route&);

HttpResponse MetricsRoute(ServiceState& s, const Caller& caller, const Route&) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = RenderMetrics(s, caller);
  return r;
}

struct RouteSpec {
  std::string_view method;
  std::string_view pattern;  // under /v1 unless it starts with "/metrics"
  unsigned flags;
  Handler handler;  // null for kOffStrand routes
};

// {x} matches one path segment, {x*} the rest (one or more).
constexpr RouteSpec kRoutes[] = {
    {"GET", "/jobs", kRead, HandleJobs},
    {"POST", "/jobs", kWrite, HandleJobs},
    {"GET", "/jobs/{id}", kRead, HandleJobs},
    {"POST", "/jobs/{id}/cancel", kWrite, HandleJobs},
    {"POST", "/jobs/{id}/hold", kWrite, HandleJobs},
    {"POST", "/jobs/{id}/release", kWrite, HandleJobs},
    {"POST", "/jobs/{id}/checkpoint", kWrite, HandleJobs},
    {"GET", "/jobs/{id}/logs", kRead, HandleJobs},
    {"GET", "/nodes", kRead, HandleNodes},
    {"POST", "/nodes/drain", kWrite, HandleNodes},
    {"POST", "/nodes/resume", kWrite, HandleNodes},
    {"GET", "/nodes/{name}", kRead, HandleNodes},
    {"POST", "/nodes/{name}/gpus/{gpu}/clear", kWrite, HandleNodes},
    {"GET", "/tenants", kRead, HandleTenants},
    {"GET", "/tenants/{name*}", kRead, HandleTenants},
    {"PUT", "/tenants/{name*}", kWrite, HandleTenants},
    {"GET", "/users", kRead, HandleUsers},
    {"POST", "/users", kWrite, HandleUsers},
    {"PATCH", "/users/{name}", kWrite, HandleUsers},
    {"DELETE", "/users/{name}", kWrite, HandleUsers},
    {"GET", "/tokens", kRead, HandleTokens},
    {"POST", "/tokens", kWrite, HandleTokens},
    {"DELETE", "/tokens/{id}", kWrite, HandleTokens},
    {"GET", "/topology", kRead, HandleTopology},
    {"PUT", "/topology", kWrite, HandleTopology},
    {"GET", "/cluster", kRead, HandleCluster},
    {"GET", "/utilization", kRead, HandleCluster},
    {"GET", "/config", kRead, HandleConfig},
    {"PUT", "/config/{key}", kWrite, HandleConfig},
    {"GET", "/events", kOffStrand, nullptr},
    {"GET", "/audit", kOffStrand, nullptr},
    {"GET", "/whoami", kOffStrand, nullptr},
    {"GET", "/history", kOffStrand, nullptr},
    {"GET", "/reports/usage", kOffStrand, nullptr},
    {"GET", "/metrics", kRead, MetricsRoute},
};

bool Matches(std::string_view pattern, const std::vector<std::string>& path) {
  size_t i = 0;
  size_t pos = 1;  // past the leading '/'
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    const std::string_view seg = pattern.substr(pos, end - pos);
    pos = end + 1;
    if (seg.size() > 3 && seg.substr(seg.size() - 2) == "*}") return i < path.size();
    if (i >= path.size()) return false;
    if (seg.front() != '{' && seg != path[i]) return false;
    ++i;
  }
  return i == path.size();
}

struct Parsed {
  Route route;
  std::optional<HttpResponse> error;
};

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

// Splits the target: path segments after /v1 (or {"metrics"}) and the query.
Parsed ParseRoute(const HttpRequest& request) {
  Parsed out;
  Route& route = out.route;
  route.request = &request;
  std::string_view target = request.target;
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
        if (!key || !value) {
          const std::string name(kv.substr(0, std::min<size_t>(eq, 100)));
          out.error = Error(400,
                            "query parameter " + name +
                                ": a '%' must start an escape of two hex digits (%2F for '/')",
                            name);
          out.error->route = "invalid";
          return out;
        }
        route.query[std::move(*key)] = std::move(*value);
      }
      i = end + 1;
    }
  }
  // Reject traversal and encoded separators outright.
  if (path.find("..") != std::string_view::npos || path.find('%') != std::string_view::npos ||
      path.find("//") != std::string_view::npos || path.find('\\') != std::string_view::npos) {
    out.error = Error(404, "no such route: " + std::string(path.substr(0, 200)));
    out.error->route = "invalid";
    return out;
  }
  size_t i = 1;
  while (i < path.size()) {
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    if (end > i) route.path.emplace_back(path.substr(i, end - i));
    i = end + 1;
  }
  if (route.path.size() == 1 && route.path[0] == "metrics") return out;
  if (route.path.empty() || route.path[0] != "v1") {
    out.error = Error(404, "no such route: " + std::string(path.substr(0, 200)) +
                               "; the API lives under /v1 (docs/api.md)");
    out.error->route = "unknown";
    return out;
  }
  route.path.erase(route.path.begin());
  return out;
}

bool IsMetrics(const Route& route) {
  return route.path.size() == 1 && route.path[0] == "metrics" &&
         route.request->target.rfind("/metrics", 0) == 0;
}

// The route's table entry, or the 404/405 answer.
std::variant<const RouteSpec*, HttpResponse> Lookup(const Route& route) {
  if (route.path.empty()) {
    HttpResponse r = Error(404, "no such route: /v1 (docs/api.md)");
    r.route = "unknown";
    return r;
  }
  const bool metrics = IsMetrics(route);
  std::string allowed;
  for (const RouteSpec& spec : kRoutes) {
    const bool spec_metrics = spec.pattern == "/metrics";
    if (spec_metrics != metrics || !Matches(spec.pattern, route.path)) continue;
    if (spec.method == route.method()) return &spec;
    allowed += (allowed.empty() ? "" : ", ") + std::string(spec.method);
  }
  if (!allowed.empty()) {
    HttpResponse r = Error(405, "use " + allowed + " for this route (docs/api.md)");
    r.headers.emplace_back("Allow", allowed);
    return r;
  }
  HttpResponse r =
      Error(404, "no such route: /v1/" + route.path[0].substr(0, 100) + " (docs/api.md)");
  r.route = "unknown";
  return r;
}

std::string RouteName(const RouteSpec& spec) {
  return spec.pattern == "/metrics" ? std::string("/metrics") : "/v1" + std::string(spec.pattern);
}

}  // namespace

HttpResponse Service::Handle(const HttpRequest& request, TimeMs now) {
  ServiceState& s = *s_;
  s.driver.now = std::max(s.driver.now, now);
  Parsed parsed = ParseRoute(request);
  if (parsed.error) return *parsed.error;
  const Route& route = parsed.route;
  Result<Caller> who = s.auth.Authenticate(request.authorization, s.driver.now, *s.driver.store);
  if (!who.ok()) {
    HttpResponse r = StatusResponse(who.status());
    if (who.status().code() == core::ErrorCode::kUnauthenticated) r.route = "unauthenticated";
    return r;
  }
  auto found = Lookup(route);
  if (auto* error = std::get_if<HttpResponse>(&found)) return *error;
  const RouteSpec& spec = *std::get<const RouteSpec*>(found);
  HttpResponse r;
  Status room = Status::Ok();
  if (spec.flags & kWrite) room = s.disk.CheckWrite();
  if (!room.ok()) {
    r = StatusResponse(room);
  } else if (spec.flags & kOffStrand) {
    r = ServeRead(*s.driver.store, who.value(), route, s.driver.now);
  } else {
    r = spec.handler(s, who.value(), route);
  }
  if (r.route.empty()) r.route = RouteName(spec);
  return r;
}

bool Service::ServedOffStrand(const HttpRequest& request) const {
  Parsed parsed = ParseRoute(request);
  if (parsed.error) return false;
  auto found = Lookup(parsed.route);
  const auto* spec = std::get_if<const RouteSpec*>(&found);
  return spec != nullptr && ((*spec)->flags & kOffStrand);
}

HttpResponse Service::HandleRead(const HttpRequest& request, TimeMs now) {
  ServiceState& s = *s_;
  Parsed parsed = ParseRoute(request);
  if (parsed.error) return *parsed.error;
  const Route& route = parsed.route;
  Result<ReadPool::Lease> lease = s.reads->Acquire();
  if (!lease.ok()) return StatusResponse(lease.status());
  Result<Caller> who = s.auth.Authenticate(request.authorization, now, lease.value().store());
  if (!who.ok()) {
    HttpResponse r = StatusResponse(who.status());
    if (who.status().code() == core::ErrorCode::kUnauthenticated) r.route = "unauthenticated";
    return r;
  }
  auto found = Lookup(route);
  if (auto* error = std::get_if<HttpResponse>(&found)) return *error;
  const RouteSpec& spec = *std::get<const RouteSpec*>(found);
  if (!(spec.flags & kOffStrand)) return Error(500, "internal: not a read route");
  HttpResponse r = ServeRead(lease.value().store(), who.value(), route, now);
  if (r.route.empty()) r.route = RouteName(spec);
  return r;
}

}  // namespace topo::daemon
