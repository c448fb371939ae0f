#pragma once
// What every route handler is given and returns (docs/api.md).
//
// A handler is a function of the request (its Route), the caller and the
// service's state, and answers with an HttpResponse or with the Status that
// explains why there is none:
//
//   Answer CancelJob(ServiceState& s, const Caller& caller, const Route& route) {
//     if (!caller.admin()) return Forbidden("cancelling needs ...");
//     ...
//     return JsonAnswer(200, view);
//   }
//
// A Status becomes an HTTP answer in one place (StatusResponse, answer.cpp):
// its code picks the HTTP status, and the body is
// {"error": {"code", "message", "field"}}, `field` naming the field at fault
// where the Status names one. Handlers never pick an HTTP error status.
//
// Thread safety: pure functions over their arguments.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/http.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

using Json = nlohmann::json;

// A request with its target split: the path segments after "/v1", the
// query (each key given once: the route table refuses a repeated key), and
// the segments the route's pattern named ({id}, {name*}: the rest joined
// by '/').
struct Route {
  const HttpRequest* request = nullptr;
  std::vector<std::string> path;  // "/v1/jobs/17/cancel" -> {"jobs", "17", "cancel"}
  std::map<std::string, std::string, std::less<>> query;
  std::map<std::string, std::string, std::less<>> params;  // {"id": "17"}
  const std::string& method() const { return request->method; }
  // The named segment; "" when the pattern has none of that name.
  const std::string& param(std::string_view name) const;
};

// A handler's answer: the response, or the error that explains why none.
using Answer = core::Result<HttpResponse>;

// ---- answers
Answer JsonAnswer(int status, const Json& body);
// A body the API's own writer made (common/user_api.hpp's Write*).
Answer TextAnswer(int status, std::string body);
// The error answer of a Status: its code as the HTTP status (the one place
// that maps them), {"error": {"code", "message", "field"}}.
HttpResponse StatusResponse(const core::Status& status);
int HttpStatusOf(core::ErrorCode code);

// ---- errors, named by what went wrong (the code), never by HTTP status.
core::Status Invalid(std::string message, std::string field = {});
core::Status Infeasible(std::string message, std::string field = {});
core::Status NotFound(std::string message, std::string field = {});
core::Status Forbidden(std::string message);
core::Status Conflict(std::string message, std::string field = {});
core::Status Unavailable(std::string message);
// kUnavailable naming a store failure.
core::Status StoreFailed(const core::Status& s);
// kForbidden: "WHAT needs a cluster-admin token".
core::Status AdminOnly(std::string_view what);
// kConflict for a route that needs the topology before one was imported.
core::Status NoTopology();

// ---- reading a request
// The body as one JSON object: kInvalid when it is not valid JSON, names a
// key twice, nests deeper than 32 or is another type; kUnsupportedMediaType
// when the content type is not JSON. An empty body is {} when allow_empty.
core::Result<Json> ParseBody(const HttpRequest& request, bool allow_empty);
// An error naming the first field of `body` not in `allowed` (Ok when none).
core::Status UnknownField(const Json& body, std::initializer_list<std::string_view> allowed);
// Integer field in [lo, hi] into out; absent: out unchanged. Errors name the field.
core::Status IntField(const Json& body, std::string_view field, int64_t lo, int64_t hi,
                      int64_t& out);
// An optional "reason" string of at most 1000 bytes.
core::Status ReasonField(const Json& body, std::string& out);
// An integer query parameter in [lo, hi] (absent: fallback); errors name the key.
core::Result<int64_t> QueryInt(const Route& route, std::string_view key, int64_t lo, int64_t hi,
                               int64_t fallback);
// The first query parameter not in `allowed`, as kInvalid naming it and the
// accepted ones; Ok when every key is allowed.
core::Status UnknownParameter(const Route& route, std::initializer_list<std::string_view> allowed);

bool ValidTenantName(std::string_view name);
bool ValidUserName(std::string_view name);

}  // namespace topo::daemon
