#pragma once
// Who is calling: bearer tokens (stored hashed), cached per token hash, and
// the per-user rate limit (a token bucket of rate_limit_per_second, bursts of
// twice that). Used by the strand and by the I/O threads that serve reads
// off the strand, each with its own store connection.
//
// Thread safety: every method may be called from any thread.

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/access/scope.hpp"
#include "store/store.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// The token of an Authorization header "Bearer TOKEN" (the scheme in any
// case). Errors: kUnauthenticated for another scheme ("Basic ..."),
// kInvalid naming the field Authorization for a malformed header (no token,
// two spaces, a second word, bytes outside token68, more than 256).
core::Result<std::string_view> BearerToken(std::string_view authorization);

class Authenticator {
 public:
  explicit Authenticator(double rate_per_second) : rate_(rate_per_second) {}

  // The caller of a request with this Authorization header, looked up in
  // `tokens` on a cache miss. Errors: kUnauthenticated (no token, another
  // scheme, an unknown or revoked token), kInvalid (a malformed header:
  // BearerToken), kRateLimited, kUnavailable (the store).
  core::Result<Caller> Authenticate(std::string_view authorization, int64_t now_ms,
                                    store::Store& tokens);
  // Users or tokens changed: later requests look their token up again.
  void Forget();

 private:
  struct Bucket {
    double tokens = 0;
    int64_t last_ms = -1;
  };
  const double rate_;
  std::mutex mu_;
  // SHA-256 of a token -> its user (nullopt: refused).
  std::unordered_map<std::string, std::optional<store::User>> cache_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace topo::daemon
