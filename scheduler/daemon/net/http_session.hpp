#pragma once
// One API connection: admission, TLS, reading requests under the limits,
// writing answers (server.hpp tells the whole path of a request).
//
// Deadlines (every one cuts the connection when it passes, counted in
// /metrics as topo_api_connections_closed_total{reason}):
// - first_request_timeout_s from accept: the TLS handshake and the whole
//   first request, so a silent client or one sending a byte a second holds
//   its slot that long and no longer;
// - idle_timeout_s: a kept-alive connection waiting for its next request;
// - request_timeout_s: reading a later request once its header came, and
//   writing any answer.
// Admission goes through the ConnectionTable (connection_table.hpp): the
// per-address cap on unauthenticated connections, the per-user cap once a
// request proved its token (HttpResponse::user), max_connections, and who
// is evicted when slots run out.

#include <chrono>
#include <functional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "daemon/config.hpp"
#include "daemon/metrics.hpp"
#include "daemon/net/connection_table.hpp"
#include "daemon/service.hpp"

namespace topo::daemon {

// What the sessions need from the server. Every member outlives every
// session.
struct HttpSessionContext {
  const DaemonConfig& config;
  boost::asio::ssl::context& tls;
  Metrics& metrics;
  ConnectionTable& connections;
  // Any thread: hands a /v1 or /metrics request to the service; `done` gets
  // the answer, on any thread.
  std::function<void(HttpRequest request, std::chrono::steady_clock::time_point received,
                     std::function<void(HttpResponse)> done)>
      enqueue;
};

// An accepted API connection: sets TCP_NODELAY, admits it (evicting
// unauthenticated idle connections if the limit nears) and serves it, or
// closes it at once when refused. The socket's executor should be a strand
// of its own.
void AcceptHttpConnection(boost::asio::ip::tcp::socket socket, HttpSessionContext& context);

}  // namespace topo::daemon
