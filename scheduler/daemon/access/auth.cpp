// Authenticator (auth.hpp).

#include "daemon/access/auth.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace topo::daemon {

using core::ErrorCode;
using core::Result;
using core::Status;

Result<std::string_view> BearerToken(std::string_view authorization) {
  // RFC 9110 11.6.2 and RFC 6750 2.1: a scheme (case-insensitive), one
  // space, one token68. Another scheme is not malformed, only a credential
  // this API does not take (401); nothing of it is repeated back.
  const size_t end = authorization.find_first_of(" \t");
  std::string scheme(authorization.substr(0, std::min(end, authorization.size())));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (scheme != "bearer") {
    return Status::Error(
        "the Authorization header must be \"Bearer TOKEN\": this API takes bearer tokens only "
        "(topo token create)",
        ErrorCode::kUnauthenticated);
  }
  const bool one_space = end != std::string_view::npos && authorization[end] == ' ';
  const std::string_view token = one_space ? authorization.substr(end + 1) : std::string_view();
  const bool token68 = !token.empty() && token.size() <= 256 &&
                       std::all_of(token.begin(), token.end(), [](unsigned char c) {
                         return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
                                c == '+' || c == '/' || c == '=';
                       });
  if (!token68) {
    return Status::Error(
               "the Authorization header is malformed: it must be \"Bearer TOKEN\" with one "
               "space and a token of 1-256 of A-Z a-z 0-9 - . _ ~ + / = (topo token create)",
               ErrorCode::kInvalid)
        .WithField("Authorization");
  }
  return token;
}

Result<Caller> Authenticator::Authenticate(std::string_view authorization, int64_t now_ms,
                                           store::Store& tokens) {
  if (authorization.empty()) {
    return Status::Error(
        "this route needs a token: send Authorization: Bearer TOKEN (topo --token, TOPO_TOKEN)",
        ErrorCode::kUnauthenticated);
  }
  Result<std::string_view> parsed = BearerToken(authorization);
  if (!parsed.ok()) return parsed.status();
  const std::string token(parsed.value());
  const std::string hash = store::Sha256Hex(token);
  std::optional<store::User> user;
  bool cached = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(hash); it != cache_.end()) {
      user = it->second;
      cached = true;
    }
  }
  if (!cached) {
    Result<std::optional<store::User>> found = tokens.Authenticate(token);
    if (!found.ok()) {
      return Status::Error("the store failed: " + found.message(), ErrorCode::kUnavailable);
    }
    user = found.value();
    std::lock_guard lock(mu_);
    if (cache_.size() > 100000) cache_.clear();
    cache_.emplace(hash, user);
  }
  if (!user) {
    return Status::Error("unknown or revoked token; ask an admin for a new one (topo token create)",
                         ErrorCode::kUnauthenticated);
  }
  std::lock_guard lock(mu_);
  Bucket& b = buckets_[user->name];
  if (b.last_ms < 0) {
    b.tokens = 2 * rate_;
  } else {
    // Reads off the strand take their time when they start, so a request
    // can carry a time a little before the bucket's last: no refill then,
    // and no negative one (at a high rate a few milliseconds backwards
    // emptied the bucket, and a user far below the limit got 429).
    const double elapsed_ms = double(std::max<int64_t>(0, now_ms - b.last_ms));
    b.tokens = std::min(2 * rate_, b.tokens + rate_ * elapsed_ms / 1000.0);
  }
  b.last_ms = std::max(b.last_ms, now_ms);
  if (b.tokens < 1) {
    return Status::Error("too many requests for user " + user->name + "; the limit is " +
                             std::to_string(int64_t(rate_)) + " per second",
                         ErrorCode::kRateLimited);
  }
  b.tokens -= 1;
  return Caller{*user};
}

void Authenticator::Forget() {
  std::lock_guard lock(mu_);
  cache_.clear();
}

}  // namespace topo::daemon
