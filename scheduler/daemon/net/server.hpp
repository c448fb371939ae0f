#pragma once
// The HTTPS front of topo-scheduler: Boost.Asio + Beast over OpenSSL.
//
// I/O threads (config.io_threads) accept connections, do TLS, read and parse
// requests under limits (headers, body, connections, deadlines) and write
// answers (http_session.hpp; who gets a connection slot: connection_table.hpp).
// Every /v1 and /metrics request is handed to one strand that owns the
// Service: it drains all the requests queued meanwhile, handles them,
// commits their log entries in one transaction (group commit), then posts
// the answers back to their connections. While one group commits, the next
// one queues: the more load, the more requests share an fsync. Timers on the
// same strand step the core's wakeups (preemption deadlines) and sample
// utilization. `/` (the dashboard) and `/healthz` are answered on the I/O
// threads without touching the Service.
//
// A failed commit stops the server (answering 503): the core is ahead of the
// log, and only a restart (replay) makes them agree again.

#include <functional>
#include <memory>
#include <string>

#include "daemon/config.hpp"
#include "daemon/metrics.hpp"
#include "daemon/service.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

class Server {
 public:
  // REQUIRES: service and metrics outlive the server.
  Server(const DaemonConfig& config, Service& service, Metrics& metrics);
  ~Server();

  // Binds the listen address (an error names it and the cause).
  core::Status Listen(const std::string& cert_file, const std::string& key_file);
  // The port bound (useful with listen port 0).
  int port() const;
  // The node agents' listener (docs/agent-protocol.md): mutual TLS, client
  // certificates signed by ca.
  core::Status ListenAgents(const std::string& cert_file, const std::string& key_file,
                            const std::string& ca_file);
  int agent_port() const;
  // Serves until SIGINT/SIGTERM or a fatal store error; the latter is
  // returned as an error.
  core::Status Run();
  // Any thread: runs work on the service strand like a request (commit
  // with its group), then done(answer); a 503 answer when the commit failed
  // or the server is stopping. done may never run once Run has returned.
  void Post(std::function<HttpResponse(core::TimeMs)> work, std::function<void(HttpResponse)> done);
  // Any thread: stops the server as a failed commit does (answers 503,
  // closes the listeners); Run returns `why`. HA uses it when the
  // leadership is lost (docs/ha.md).
  void Shutdown(core::Status why);

  class Impl;  // server.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

// The dashboard page (dashboard/index.html, compiled in).
std::string_view DashboardHtml();

}  // namespace topo::daemon
