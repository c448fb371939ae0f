// A Status as an HTTP answer: the one place that maps error codes to HTTP
// statuses (route.hpp), and the named errors handlers return.

#include <string>
#include <utility>

#include "daemon/api/route.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::Status;

namespace {

// The "code" of an error body: what a client switches on.
std::string_view CodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalid:
      return "bad_request";
    case ErrorCode::kInfeasible:
      return "infeasible";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kForbidden:
      return "forbidden";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kMethodNotAllowed:
      return "method_not_allowed";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kTooLarge:
      return "too_large";
    case ErrorCode::kUnsupportedMediaType:
      return "unsupported_media_type";
    case ErrorCode::kRateLimited:
      return "rate_limited";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimedOut:
      return "timed_out";
    case ErrorCode::kInsufficientStorage:
      return "insufficient_storage";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "error";
}

}  // namespace

int HttpStatusOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return 200;
    case ErrorCode::kInvalid:
    case ErrorCode::kInfeasible:
      return 400;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kForbidden:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kMethodNotAllowed:
      return 405;
    case ErrorCode::kConflict:
      return 409;
    case ErrorCode::kTooLarge:
      return 413;
    case ErrorCode::kUnsupportedMediaType:
      return 415;
    case ErrorCode::kRateLimited:
      return 429;
    case ErrorCode::kInternal:
      return 500;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kTimedOut:
      return 504;
    case ErrorCode::kInsufficientStorage:
      return 507;
  }
  return 500;
}

Answer JsonAnswer(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  r.body += "\n";
  return r;
}

Answer TextAnswer(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.body += "\n";
  return r;
}

HttpResponse StatusResponse(const Status& status) {
  Json e = {{"code", std::string(CodeName(status.code()))}, {"message", status.message()}};
  if (!status.field().empty()) e["field"] = status.field();
  HttpResponse r = JsonAnswer(HttpStatusOf(status.code()), Json{{"error", std::move(e)}}).value();
  if (status.code() == ErrorCode::kRateLimited) r.headers.emplace_back("Retry-After", "1");
  return r;
}

Status Invalid(std::string message, std::string field) {
  return Status::Error(std::move(message), ErrorCode::kInvalid).WithField(std::move(field));
}
Status Infeasible(std::string message, std::string field) {
  return Status::Error(std::move(message), ErrorCode::kInfeasible).WithField(std::move(field));
}
Status NotFound(std::string message, std::string field) {
  return Status::Error(std::move(message), ErrorCode::kNotFound).WithField(std::move(field));
}
Status Forbidden(std::string message) {
  return Status::Error(std::move(message), ErrorCode::kForbidden);
}
Status Conflict(std::string message, std::string field) {
  return Status::Error(std::move(message), ErrorCode::kConflict).WithField(std::move(field));
}
Status Unavailable(std::string message) {
  return Status::Error(std::move(message), ErrorCode::kUnavailable);
}
Status StoreFailed(const Status& s) {
  return Status::Error(
      "the store failed: " + s.message(),
      s.code() == ErrorCode::kInsufficientStorage ? s.code() : ErrorCode::kUnavailable);
}
Status AdminOnly(std::string_view what) {
  return Forbidden(std::string(what) + " needs a cluster-admin token");
}
Status NoTopology() {
  return Conflict(
      "the cluster has no topology yet: a cluster-admin imports one with `topo topology import "
      "FILE` (PUT /v1/topology)");
}

}  // namespace topo::daemon
