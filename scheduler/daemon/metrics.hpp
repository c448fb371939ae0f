#pragma once
// The daemon's own counters and latency histograms, rendered in the
// Prometheus text format (with the cluster gauges the service adds).
// Thread safe: the I/O threads and the service's strand both record.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace topo::daemon {

// Cumulative histogram with fixed buckets in seconds.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                     0.0025,  0.005,  0.01,    0.025,  0.05,
                                                     0.1,     0.25,   1.0,     5.0};
  void Observe(double seconds);
  // "name_bucket{labels,le=...} n" lines, _sum and _count.
  void Render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::array<uint64_t, kBounds.size() + 1> counts_{};
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Why the server refused an API connection at accept (the config key).
enum class RefuseReason { kMaxConnections, kMaxUnauthenticatedPerPeer, kCount };
// Why the server itself ended an API connection (docs/daemon.md,
// Connections): evicted while unauthenticated to make room near
// max_connections, past one of its deadlines, the idle one of the heaviest
// user at max_connections, or one of a user past max_connections_per_user.
enum class CloseReason {
  kEvictedUnauthenticated,
  kFirstRequestTimeout,
  kIdleTimeout,
  kRequestTimeout,
  kEvictedHeaviestUser,
  kMaxConnectionsPerUser,
  kCount
};

class Metrics {
 public:
  // An API request served: its route pattern ("/v1/jobs/{id}"), method,
  // status and the time from the request read to the answer queued.
  void ApiRequest(const std::string& route, const std::string& method, int status, double seconds);
  void Submission(const std::string& tenant);
  void Placement(double seconds);  // a core step that placed or restarted a job
  void Commit(double seconds, size_t entries);
  void ConnectionOpened();
  void ConnectionClosed();
  void ConnectionRefused(RefuseReason why);
  void ConnectionCutOff(CloseReason why);
  // An agent refused for a revoked certificate: at the TLS handshake, or
  // an already connected session closed when the revocation was loaded.
  void AgentCertificateRevoked(bool at_handshake);

  // HELP/TYPE and samples of everything above; per-tenant series only for
  // the tenants sees_tenant accepts (the caller's scope, scope.hpp).
  void Render(std::string& out,
              const std::function<bool(std::string_view tenant)>& sees_tenant) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> requests_;      // labels -> count
  std::map<std::string, Histogram> api_latency_;  // route labels -> histogram
  std::map<std::string, uint64_t> submissions_;   // tenant -> count
  Histogram placement_;
  Histogram commit_;
  uint64_t commits_ = 0;
  uint64_t committed_entries_ = 0;
  int64_t connections_ = 0;
  std::array<uint64_t, static_cast<size_t>(RefuseReason::kCount)> connections_refused_{};
  std::array<uint64_t, static_cast<size_t>(CloseReason::kCount)> connections_cut_off_{};
  uint64_t agent_revoked_handshakes_ = 0;
  uint64_t agent_revoked_sessions_ = 0;
};

// "value" with \ " and newline escaped, for a label.
std::string PromLabel(const std::string& value);

}  // namespace topo::daemon
