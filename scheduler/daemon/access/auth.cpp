// Authenticator (auth.hpp).

#include "daemon/access/auth.hpp"

#include <algorithm>

namespace topo::daemon {

using core::ErrorCode;
using core::Result;
using core::Status;

Result<Caller> Authenticator::Authenticate(std::string_view authorization, int64_t now_ms,
                                           store::Store& tokens) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.empty()) {
    return Status::Error(
        "this route needs a token: send Authorization: Bearer TOKEN (topo --token, TOPO_TOKEN)",
        ErrorCode::kUnauthenticated);
  }
  if (authorization.substr(0, kBearer.size()) != kBearer || authorization.size() > 256) {
    return Status::Error("the Authorization header must be \"Bearer TOKEN\"",
                         ErrorCode::kUnauthenticated);
  }
  const std::string token(authorization.substr(kBearer.size()));
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
    b.tokens = std::min(2 * rate_, b.tokens + rate_ * double(now_ms - b.last_ms) / 1000.0);
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
