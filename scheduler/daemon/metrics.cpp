// Prometheus text rendering of the daemon's metrics.

#include "daemon/metrics.hpp"

#include <cstdio>

namespace topo::daemon {

std::string PromLabel(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

namespace {
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

void Histogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  counts_[i] += 1;
  sum_ += seconds;
  count_ += 1;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string& out) const {
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{" + sep + "le=\"" + Num(kBounds[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  cumulative += counts_[kBounds.size()];
  out += name + "_bucket{" + sep + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + Num(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

void Metrics::ApiRequest(const std::string& route, const std::string& method, int status,
                         double seconds) {
  std::lock_guard lock(mu_);
  requests_["route=" + PromLabel(route) + ",method=" + PromLabel(method) + ",code=\"" +
            std::to_string(status) + "\""] += 1;
  api_latency_["route=" + PromLabel(route)].Observe(seconds);
}

void Metrics::Submission(const std::string& tenant) {
  std::lock_guard lock(mu_);
  submissions_[tenant] += 1;
}

void Metrics::Placement(double seconds) {
  std::lock_guard lock(mu_);
  placement_.Observe(seconds);
}

void Metrics::Commit(double seconds, size_t entries) {
  std::lock_guard lock(mu_);
  commit_.Observe(seconds);
  commits_ += 1;
  committed_entries_ += entries;
}

void Metrics::ConnectionOpened() {
  std::lock_guard lock(mu_);
  connections_ += 1;
}
void Metrics::ConnectionClosed() {
  std::lock_guard lock(mu_);
  connections_ -= 1;
}
void Metrics::ConnectionRefused(RefuseReason why) {
  std::lock_guard lock(mu_);
  connections_refused_.at(static_cast<size_t>(why)) += 1;
}
void Metrics::ConnectionCutOff(CloseReason why) {
  std::lock_guard lock(mu_);
  connections_cut_off_.at(static_cast<size_t>(why)) += 1;
}

void Metrics::AgentCertificateRevoked(bool at_handshake) {
  std::lock_guard lock(mu_);
  (at_handshake ? agent_revoked_handshakes_ : agent_revoked_sessions_) += 1;
}

void Metrics::Render(std::string& out,
                     const std::function<bool(std::string_view tenant)>& sees_tenant) const {
  std::lock_guard lock(mu_);
  out += "# HELP topo_api_requests_total API requests answered, by route, method and status.\n";
  out += "# TYPE topo_api_requests_total counter\n";
  for (const auto& [labels, n] : requests_) {
    out += "topo_api_requests_total{" + labels + "} " + std::to_string(n) + "\n";
  }
  out += "# HELP topo_api_request_seconds Time from a request read to its answer queued.\n";
  out += "# TYPE topo_api_request_seconds histogram\n";
  for (const auto& [labels, h] : api_latency_) h.Render("topo_api_request_seconds", labels, out);
  out += "# HELP topo_submissions_total Jobs accepted, by tenant.\n";
  out += "# TYPE topo_submissions_total counter\n";
  for (const auto& [tenant, n] : submissions_) {
    if (!sees_tenant(tenant)) continue;
    out += "topo_submissions_total{tenant=" + PromLabel(tenant) + "} " + std::to_string(n) + "\n";
  }
  out += "# HELP topo_placement_seconds Scheduler steps that placed or restarted a job.\n";
  out += "# TYPE topo_placement_seconds histogram\n";
  placement_.Render("topo_placement_seconds", "", out);
  out += "# HELP topo_store_commit_seconds One group commit (transaction + fsync).\n";
  out += "# TYPE topo_store_commit_seconds histogram\n";
  commit_.Render("topo_store_commit_seconds", "", out);
  out += "# HELP topo_store_committed_events_total Events written by group commits.\n";
  out += "# TYPE topo_store_committed_events_total counter\n";
  out += "topo_store_committed_events_total " + std::to_string(committed_entries_) + "\n";
  out += "# HELP topo_api_connections Open API connections.\n";
  out += "# TYPE topo_api_connections gauge\n";
  out += "topo_api_connections " + std::to_string(connections_) + "\n";
  out +=
      "# HELP topo_api_connections_refused_total Connections closed at accept, by the limit "
      "that was reached.\n";
  out += "# TYPE topo_api_connections_refused_total counter\n";
  static constexpr std::array<const char*, static_cast<size_t>(RefuseReason::kCount)> kRefuseNames =
      {"max_connections", "max_unauthenticated_per_peer"};
  for (size_t i = 0; i < kRefuseNames.size(); ++i) {
    out += std::string("topo_api_connections_refused_total{reason=\"") + kRefuseNames[i] + "\"} " +
           std::to_string(connections_refused_[i]) + "\n";
  }
  out +=
      "# HELP topo_api_connections_closed_total Connections the server ended itself: "
      "unauthenticated ones evicted near max_connections, those past a deadline, the heaviest "
      "user's idle ones at max_connections, and a user's past max_connections_per_user.\n";
  out += "# TYPE topo_api_connections_closed_total counter\n";
  static constexpr std::array<const char*, static_cast<size_t>(CloseReason::kCount)> kCloseNames = {
      "evicted_unauthenticated", "first_request_timeout", "idle_timeout",
      "request_timeout",         "evicted_heaviest_user", "max_connections_per_user"};
  for (size_t i = 0; i < kCloseNames.size(); ++i) {
    out += std::string("topo_api_connections_closed_total{reason=\"") + kCloseNames[i] + "\"} " +
           std::to_string(connections_cut_off_[i]) + "\n";
  }
  out +=
      "# HELP topo_agent_certificates_revoked_total Agent connections refused for a revoked "
      "certificate: at the TLS handshake, or closed while connected.\n";
  out += "# TYPE topo_agent_certificates_revoked_total counter\n";
  out += "topo_agent_certificates_revoked_total{stage=\"handshake\"} " +
         std::to_string(agent_revoked_handshakes_) + "\n";
  out += "topo_agent_certificates_revoked_total{stage=\"connected\"} " +
         std::to_string(agent_revoked_sessions_) + "\n";
}

}  // namespace topo::daemon
