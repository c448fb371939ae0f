#pragma once
// The API's request and answer as the service sees them: what the network
// front (net/) read and what it writes back, with no socket in sight, so the
// routes (api/) are pure functions of a request and the service's state.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace topo::daemon {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/jobs?all=1"
  std::string authorization;
  std::string content_type;
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string route;  // the matched route pattern, for metrics
  // The user whose valid token the request carried ("" when none was
  // proven): the connection is that user's from now on (ConnectionTable).
  std::string user;
  // Non-zero: no answer yet. The request waits on a node agent (GET
  // /v1/jobs/ID/logs); its answer comes from TakeDeferredAnswers under this
  // id, or the server gives up (ForgetDeferred) and answers 504.
  int64_t deferred = 0;
};

}  // namespace topo::daemon
