#pragma once
// The API's entry points (routes.cpp): a request through the route table,
// on the strand or off it. Service (service.hpp) calls these.

#include "daemon/http.hpp"
#include "daemon/service_state.hpp"
#include "topo/core/time.hpp"

namespace topo::daemon {

// Serves one request on the strand: parse, authenticate, look the route up,
// the storage floor, the handler, the answer. Stages what it steps.
HttpResponse ServeRequest(ServiceState& s, const HttpRequest& request, core::TimeMs now);
// Whether the request's route is served off the strand (a read on its own
// store connection).
bool IsOffStrand(const HttpRequest& request);
// Serves such a request with a read-only connection from s.reads; touches
// only s.reads and s.auth, which are thread safe.
HttpResponse ServeOffStrand(ServiceState& s, const HttpRequest& request, core::TimeMs now);

}  // namespace topo::daemon
