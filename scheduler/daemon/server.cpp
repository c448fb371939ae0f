// Server: Beast HTTPS sessions, the service strand, group commit, timers.

#include "daemon/server.hpp"

#include "daemon/service_internal.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace topo::daemon {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using core::Status;
using Clock = std::chrono::steady_clock;

namespace {

core::TimeMs WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Pending {
  HttpRequest request;
  Clock::time_point received;
  std::function<void(HttpResponse)> done;
};

void LogLine(const std::string& line) {
  // One write per line, so lines from threads do not interleave.
  std::string out = line + "\n";
  std::cerr << out << std::flush;
}

}  // namespace

class Server::Impl {
 public:
  Impl(const DaemonConfig& config, Service& service, Metrics& metrics)
      : config_(config),
        service_(service),
        metrics_(metrics),
        ioc_(config.io_threads),
        strand_(net::make_strand(ioc_)),
        acceptor_(ioc_),
        tls_(ssl::context::tls_server),
        wakeup_(strand_),
        sampler_(strand_),
        signals_(ioc_, SIGINT, SIGTERM) {}

  Status Listen(const std::string& cert, const std::string& key);
  Status Run();
  int port() const { return port_; }

  // Called by sessions (any thread): queue for the strand.
  void Enqueue(Pending p) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(p));
    if (!drain_posted_) {
      drain_posted_ = true;
      net::post(strand_, [this] { Drain(); });
    }
  }
  void Accept();

  const DaemonConfig config_;
  Service& service_;
  Metrics& metrics_;
  net::io_context ioc_;
  net::strand<net::io_context::executor_type> strand_;
  tcp::acceptor acceptor_;
  ssl::context tls_;
  net::steady_timer wakeup_;
  net::steady_timer sampler_;
  net::signal_set signals_;
  std::atomic<int> connections_{0};
  int port_ = 0;
  std::mutex mu_;
  std::vector<Pending> queue_;
  bool drain_posted_ = false;
  bool stopping_ = false;  // strand only
  Status fatal_;           // strand only

 private:
  void Drain();
  void ScheduleWakeup();
  void Sample();
  void Stop(Status why);
};

// ---------------------------------------------------------------- session

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server)
      : stream_(std::move(socket), server.tls_), server_(server) {
    server_.metrics_.ConnectionOpened();
  }
  ~Session() {
    server_.connections_ -= 1;
    server_.metrics_.ConnectionClosed();
  }

  void Start() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    stream_.async_handshake(ssl::stream_base::server,
                            [self = shared_from_this()](beast::error_code ec) {
                              if (!ec) self->ReadHeader();
                            });
  }

 private:
  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_.config_.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(server_.config_.max_body_bytes));
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::seconds(server_.config_.idle_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return ReadFailed(ec);
    const auto& req = parser_->get();
    if (req.target() == "/v1/topology" && req.method() == http::verb::put) {
      parser_->body_limit(static_cast<uint64_t>(server_.config_.max_topology_bytes));
    }
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::seconds(server_.config_.request_timeout_s));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void ReadFailed(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return Reply(413,
                   "the body is larger than this route allows (max_body_bytes; "
                   "max_topology_bytes for PUT /v1/topology)",
                   false);
    }
    if (ec == http::error::header_limit) {
      return Reply(431, "the request headers are larger than max_header_bytes", false);
    }
    if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream) {
      return Reply(400, "malformed HTTP request: " + ec.message(), false);
    }
    Close();  // timeout, reset, end of stream
  }

  void Reply(int status, const std::string& message, bool keep_alive) {
    HttpResponse r;
    r.status = status;
    r.body = std::string("{\"error\":{\"code\":\"") +
             (status == 413   ? "too_large"
              : status == 431 ? "headers_too_large"
                              : "bad_request") +
             "\",\"message\":\"" + message + "\"}}\n";
    linger_ = true;
    Write(std::move(r), keep_alive, "invalid", "-", Clock::now());
  }

  // After refusing a request the client may still be sending: read and
  // drop what comes (bounded in bytes and time) so that closing does not
  // reset the connection before the client has read the answer.
  void Linger(size_t dropped = 0) {
    if (dropped > (size_t{64} << 20)) return Close();
    stream_.async_read_some(net::buffer(discard_),
                            [self = shared_from_this(), dropped](beast::error_code ec, size_t n) {
                              if (ec) return self->Close();
                              self->Linger(dropped + n);
                            });
  }

  void OnRequest(beast::error_code ec) {
    if (ec) return ReadFailed(ec);
    const Clock::time_point received = Clock::now();
    auto& req = parser_->get();
    const bool keep_alive = req.keep_alive();
    const std::string method(req.method_string());
    std::string target(req.target());
    if (target.empty() || target[0] != '/' || target.size() > 4096) {
      HttpResponse r = Error(400, "the request target must be a path of at most 4096 bytes");
      return Write(std::move(r), false, "invalid", method, received);
    }
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/favicon.ico") {
      HttpResponse r;
      r.status = 204;
      r.content_type = "image/x-icon";
      return Write(std::move(r), keep_alive, "/favicon.ico", method, received);
    }
    if (path == "/healthz" || path == "/" || path == "/index.html") {
      HttpResponse r;
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        r = Error(405, "use GET " + path);
      } else if (path == "/healthz") {
        r.content_type = "text/plain";
        r.body = "ok\n";
      } else {
        r.content_type = "text/html; charset=utf-8";
        r.body = std::string(DashboardHtml());
        r.headers.emplace_back("Content-Security-Policy",
                               "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "frame-ancestors 'none'");
      }
      return Write(std::move(r), keep_alive, path == "/healthz" ? "/healthz" : "/", method,
                   received);
    }
    Pending p;
    p.request.method = method;
    p.request.target = std::move(target);
    p.request.authorization = std::string(req[http::field::authorization]);
    p.request.content_type = std::string(req[http::field::content_type]);
    p.request.body = std::move(req.body());
    p.received = received;
    // Nothing reads from the socket until the answer is written.
    p.done = [self = shared_from_this(), keep_alive, method, received](HttpResponse r) {
      net::post(self->stream_.get_executor(),
                [self, r = std::move(r), keep_alive, method, received]() mutable {
                  const std::string route = r.route.empty() ? "unknown" : r.route;
                  self->Write(std::move(r), keep_alive, route, method, received);
                });
    };
    server_.Enqueue(std::move(p));
  }

  void Write(HttpResponse r, bool keep_alive, const std::string& route, const std::string& method,
             Clock::time_point received) {
    server_.metrics_.ApiRequest(route, method, r.status,
                                std::chrono::duration<double>(Clock::now() - received).count());
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<http::status>(r.status));
    res->set(http::field::server, "topo-scheduler");
    res->set(http::field::content_type, r.content_type);
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    for (const auto& [k, v] : r.headers) res->set(k, v);
    res->body() = std::move(r.body);
    res->keep_alive(keep_alive && r.status < 500);
    res->prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::seconds(server_.config_.request_timeout_s));
    http::async_write(
        stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
          if (ec) return;
          if (res->keep_alive()) {
            self->ReadHeader();
          } else if (self->linger_) {
            beast::get_lowest_layer(self->stream_).expires_after(std::chrono::seconds(2));
            self->Linger();
          } else {
            self->Close();
          }
        });
  }

  void Close() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(2));
    stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
      beast::get_lowest_layer(self->stream_).close();
    });
  }

  beast::ssl_stream<beast::tcp_stream> stream_;
  Server::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool linger_ = false;
  std::array<char, 16384> discard_;
};

}  // namespace

// ---------------------------------------------------------------- server

Status Server::Impl::Listen(const std::string& cert, const std::string& key) {
  beast::error_code ec;
  tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  tls_.use_certificate_chain_file(cert, ec);
  if (ec) return Status::Error("TLS certificate " + cert + ": " + ec.message());
  tls_.use_private_key_file(key, ssl::context::pem, ec);
  if (ec) return Status::Error("TLS key " + key + ": " + ec.message());
  const std::string where = config_.listen_host + ":" + std::to_string(config_.listen_port);
  net::ip::address address = net::ip::make_address(config_.listen_host, ec);
  if (ec) {
    return Status::Error("listen address " + where + ": \"" + config_.listen_host +
                         "\" is not an IP address (" + ec.message() + ")");
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.listen_port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Error("cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  return Status::Ok();
}

void Server::Impl::Accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (!ec) {
      if (connections_.load() >= config_.max_connections) {
        metrics_.ConnectionRefused();
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        connections_ += 1;
        std::make_shared<Session>(std::move(socket), *this)->Start();
      }
    }
    Accept();
  });
}

void Server::Impl::Drain() {
  std::vector<Pending> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(queue_);
    drain_posted_ = false;
  }
  std::vector<HttpResponse> answers(batch.size());
  const core::TimeMs now = WallMs();
  const auto deadline = std::chrono::seconds(config_.request_timeout_s);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (stopping_) {
      answers[i] = Error(503, "topo-scheduler is stopping; retry against the restarted daemon");
    } else if (Clock::now() - batch[i].received > deadline) {
      answers[i] = Error(503, "the request waited longer than request_timeout_s; retry");
    } else {
      answers[i] = service_.Handle(batch[i].request, now);
    }
  }
  if (Status c = service_.Commit(); !c.ok()) {
    for (HttpResponse& a : answers) {
      a = Error(503, "the scheduler could not write its state and is stopping: " + c.message());
    }
    Stop(c);
  }
  for (size_t i = 0; i < batch.size(); ++i) batch[i].done(std::move(answers[i]));
  if (!stopping_) ScheduleWakeup();
}

void Server::Impl::ScheduleWakeup() {
  const core::TimeMs next = service_.NextWakeup();
  const core::TimeMs now = WallMs();
  // At least once a minute, so time limits and checkpoints are looked at.
  const core::TimeMs wait =
      std::clamp<core::TimeMs>(next == core::kNever ? 60000 : next - now, 0, 60000);
  wakeup_.expires_after(std::chrono::milliseconds(wait));
  wakeup_.async_wait([this](beast::error_code ec) {
    if (ec || stopping_) return;
    service_.Tick(WallMs());
    if (Status c = service_.Commit(); !c.ok()) return Stop(c);
    ScheduleWakeup();
  });
}

void Server::Impl::Sample() {
  service_.SampleUtilization(WallMs());
  sampler_.expires_after(std::chrono::seconds(60));
  sampler_.async_wait([this](beast::error_code ec) {
    if (!ec && !stopping_) Sample();
  });
}

void Server::Impl::Stop(Status why) {
  if (stopping_) return;
  stopping_ = true;
  fatal_ = why;
  beast::error_code ignored;
  acceptor_.close(ignored);
  wakeup_.cancel();
  sampler_.cancel();
  signals_.cancel();
  // Let queued answers go out, then stop.
  net::post(strand_, [this] {
    auto timer = std::make_shared<net::steady_timer>(ioc_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer](beast::error_code) { ioc_.stop(); });
  });
}

Status Server::Impl::Run() {
  signals_.async_wait([this](beast::error_code ec, int sig) {
    if (ec) return;
    LogLine("topo-scheduler: signal " + std::to_string(sig) + ", stopping");
    net::post(strand_, [this] { Stop(Status::Ok()); });
  });
  net::post(strand_, [this] {
    Sample();
    // Startup: step whatever wakeup came due while the daemon was down.
    service_.Tick(WallMs());
    if (Status c = service_.Commit(); !c.ok()) return Stop(c);
    ScheduleWakeup();
  });
  Accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < config_.io_threads; ++i) threads.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (std::thread& t : threads) t.join();
  return fatal_;
}

Server::Server(const DaemonConfig& config, Service& service, Metrics& metrics)
    : impl_(std::make_unique<Impl>(config, service, metrics)) {}
Server::~Server() = default;
Status Server::Listen(const std::string& cert, const std::string& key) {
  return impl_->Listen(cert, key);
}
int Server::port() const { return impl_->port(); }
Status Server::Run() { return impl_->Run(); }

}  // namespace topo::daemon
