// Server: the service strand, group commit, timers, the agents' listener.
// The API's HTTP sessions are in http_session.cpp.

#include "daemon/net/server.hpp"

#include "daemon/agents/agent_session.hpp"
#include "daemon/api/route.hpp"
#include "daemon/log.hpp"
#include "daemon/net/connection_table.hpp"
#include "daemon/net/http_session.hpp"
#include "daemon/pki/revocation.hpp"
#include "topo/common/agent_protocol.hpp"

#include <chrono>
#include <csignal>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

namespace topo::daemon {

namespace {

HttpResponse Stopping() {
  return StatusResponse(
      Unavailable("topo-scheduler is stopping; retry against the restarted daemon"));
}

}  // namespace

namespace beast = boost::beast;
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
  // When set, runs on the strand instead of Service::Handle (agent messages).
  std::function<HttpResponse(core::TimeMs)> work;
  Clock::time_point received;
  std::function<void(HttpResponse)> done;
};

// The daemon's log (log.hpp); the "topo-scheduler: " prefix of these lines
// is the logger's now.
void LogLine(const std::string& line) {
  constexpr std::string_view kPrefix = "topo-scheduler: ";
  std::string_view text = line;
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  log::Info(text);
}

}  // namespace

class Server::Impl {
 public:
  Impl(const DaemonConfig& config, Service& service, Metrics& metrics)
      : config_(config),
        service_(service),
        metrics_(metrics),
        connections_(config.max_connections, config.max_unauthenticated_per_peer,
                     config.max_connections_per_user),
        // tls_ is bound here and used only once listening.
        http_{config_, tls_, metrics_, connections_,
              [this](HttpRequest request, Clock::time_point received,
                     std::function<void(HttpResponse)> done) {
                Pending p{std::move(request), {}, received, std::move(done)};
                if (service_.ServedOffStrand(p.request)) return ServeOffStrand(std::move(p));
                Enqueue(std::move(p));
              }},
        ioc_(config.io_threads),
        strand_(net::make_strand(ioc_)),
        acceptor_(ioc_),
        tls_(ssl::context::tls_server),
        wakeup_(strand_),
        sampler_(strand_),
        signals_(ioc_, SIGINT, SIGTERM),
        agent_acceptor_(ioc_),
        agent_tls_(ssl::context::tls_server),
        read_threads_(static_cast<size_t>(std::max(1, config.read_threads))),
        liveness_(strand_),
        compaction_(strand_),
        revocation_watch_(strand_),
        agents_{agent_tls_,
                metrics_,
                [this](const std::string& node, const std::string& text, core::TimeMs now) {
                  return service_.AgentRegister(node, text, now);
                },
                [this](const std::string& node, const std::string& text, core::TimeMs now) {
                  return service_.AgentMessage(node, text, now);
                },
                [this](const std::string& node, core::TimeMs now) {
                  service_.AgentDisconnected(node, now);
                },
                revocations_,
                agent_sessions_,
                [this](std::function<HttpResponse(core::TimeMs)> work,
                       std::function<void(HttpResponse)> done) {
                  Enqueue(Pending{{}, std::move(work), Clock::now(), std::move(done)});
                },
                LogLine} {}

  Status Listen(const std::string& cert, const std::string& key);
  Status ListenAgents(const std::string& cert, const std::string& key, const std::string& ca);
  Status Run();
  int port() const { return port_; }

  // Any thread (Server::Shutdown): Stop on the strand.
  void RequestStop(Status why) {
    net::post(strand_, [this, why = std::move(why)] { Stop(why); });
  }

  // Called by sessions (any thread): queue for the strand.
  void Enqueue(Pending p) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(p));
    if (!drain_posted_) {
      drain_posted_ = true;
      net::post(strand_, [this] { Drain(); });
    }
  }
  // Called by sessions (any thread): a read route that needs no strand,
  // answered on the read threads.
  void ServeOffStrand(Pending p);
  void Accept();
  void AcceptAgents();
  // Strand only: sends what the last commit produced to the agents' sessions.
  void RouteAgentMessages();

  const DaemonConfig config_;
  Service& service_;
  Metrics& metrics_;
  // Before ioc_: the sessions its unrun handlers hold end when it is
  // destroyed, and they release their slots here.
  ConnectionTable connections_;  // the API's connection slots
  HttpSessionContext http_;      // what the API's sessions see of the server
  net::io_context ioc_;
  net::strand<net::io_context::executor_type> strand_;
  tcp::acceptor acceptor_;
  ssl::context tls_;
  net::steady_timer wakeup_;
  net::steady_timer sampler_;
  net::signal_set signals_;
  tcp::acceptor agent_acceptor_;
  ssl::context agent_tls_;
  // Reads off the strand (Service::HandleRead): the event log and friends.
  net::thread_pool read_threads_;
  net::steady_timer liveness_;
  net::steady_timer compaction_;
  // Agents' certificates revoked since start (revocation.hpp): checked at
  // every handshake; the strand's watch closes connected sessions too.
  std::unique_ptr<RevocationList> revocations_;
  net::steady_timer revocation_watch_;
  uint64_t revocation_generation_ = 0;  // strand only
  // Strand only: the live session of each registered node.
  std::unordered_map<std::string, std::weak_ptr<AgentSession>> agent_sessions_;
  AgentSessionContext agents_;  // what the agents' sessions see of the server
  // Strand only: requests waiting on an agent's answer (Service deferred them).
  struct Deferred {
    std::function<void(HttpResponse)> done;
    std::shared_ptr<net::steady_timer> timer;
  };
  std::unordered_map<int64_t, Deferred> deferred_;
  static constexpr int kAgentAnswerTimeoutS = 10;
  int port_ = 0;
  int agent_port_ = 0;
  std::mutex mu_;
  std::vector<Pending> queue_;
  bool drain_posted_ = false;
  std::atomic<bool> stopping_ = false;  // written on the strand; read threads look too
  Status fatal_;                        // strand only

 private:
  void Drain();
  void Defer(int64_t id, std::function<void(HttpResponse)> done);
  void ScheduleWakeup();
  void ScheduleLiveness();
  void WatchRevocations();
  void Sample();
  // One compaction batch per wake: soon again while batches come back full
  // (a backlog), else in a minute. Each batch is one short transaction, so
  // the strand is never held long.
  void ScheduleCompaction(std::chrono::milliseconds after);
  void Stop(Status why);
};

// ---------------------------------------------------------------- server

Status Server::Impl::Listen(const std::string& cert, const std::string& key) {
  beast::error_code ec;
  tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  // Session resumption for the CLI, one process per command (issue 14): a
  // resumed handshake skips the certificate and its signature. TLS 1.3
  // tickets are stateless (encrypted with this process's ticket key), so
  // nothing grows here; one ticket per handshake is enough for a client that
  // keeps only the newest. The agents' mutual-TLS context is left as it is.
  {
    SSL_CTX* ctx = tls_.native_handle();
    static constexpr unsigned char kSessionContext[] = "topo-scheduler api";
    SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_clear_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 1);
  }
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
    if (!ec) AcceptHttpConnection(std::move(socket), http_);
    Accept();
  });
}

void Server::Impl::ServeOffStrand(Pending p) {
  net::post(read_threads_, [this, p = std::move(p)]() mutable {
    HttpResponse r;
    if (stopping_) {
      r = Stopping();
    } else {
      try {
        r = service_.HandleRead(p.request, WallMs());
      } catch (const std::exception& e) {
        LogLine(std::string("topo-scheduler: internal error on a read: ") + e.what());
        r = StatusResponse(
            core::Status::Error("internal error; nothing was changed", core::ErrorCode::kInternal));
      }
    }
    p.done(std::move(r));
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
      answers[i] = Stopping();
    } else if (Clock::now() - batch[i].received > deadline) {
      answers[i] =
          StatusResponse(Unavailable("the request waited longer than request_timeout_s; retry"));
    } else if (batch[i].work) {
      answers[i] = batch[i].work(now);
    } else {
      answers[i] = service_.Handle(batch[i].request, now);
    }
  }
  if (Status c = service_.Commit(); !c.ok()) {
    for (HttpResponse& a : answers) {
      a = StatusResponse(
          Unavailable("the scheduler could not write its state and is stopping: " + c.message()));
    }
    Stop(c);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (answers[i].deferred != 0 && !stopping_) {
      // The answer that comes later is the same caller's.
      Defer(answers[i].deferred,
            [user = answers[i].user, done = std::move(batch[i].done)](HttpResponse r) {
              r.user = user;
              done(std::move(r));
            });
    } else {
      batch[i].done(std::move(answers[i]));
    }
  }
  for (auto& [id, answer] : service_.TakeDeferredAnswers()) {
    auto it = deferred_.find(id);
    if (it == deferred_.end()) continue;
    it->second.timer->cancel();
    auto done = std::move(it->second.done);
    deferred_.erase(it);
    done(std::move(answer));
  }
  if (!stopping_) {
    RouteAgentMessages();
    ScheduleWakeup();
  }
}

void Server::Impl::Defer(int64_t id, std::function<void(HttpResponse)> done) {
  auto timer = std::make_shared<net::steady_timer>(strand_);
  timer->expires_after(std::chrono::seconds(kAgentAnswerTimeoutS));
  timer->async_wait([this, id](beast::error_code ec) {
    if (ec) return;
    auto it = deferred_.find(id);
    if (it == deferred_.end()) return;
    auto late = std::move(it->second.done);
    deferred_.erase(it);
    service_.ForgetDeferred(id);
    HttpResponse r =
        StatusResponse(core::Status::Error("the node's agent did not answer within " +
                                               std::to_string(kAgentAnswerTimeoutS) + " s; retry",
                                           core::ErrorCode::kTimedOut));
    r.route = "/v1/jobs/{id}/logs";
    late(std::move(r));
  });
  deferred_.emplace(id, Deferred{std::move(done), std::move(timer)});
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
    RouteAgentMessages();
    ScheduleWakeup();
  });
}

void Server::Impl::ScheduleLiveness() {
  // A twentieth of an interval: a node is declared down at most that late.
  liveness_.expires_after(
      std::chrono::milliseconds(std::max(10, config_.heartbeat_interval_ms / 20)));
  liveness_.async_wait([this](beast::error_code ec) {
    if (ec || stopping_) return;
    service_.CheckLiveness(WallMs());
    if (Status c = service_.Commit(); !c.ok()) return Stop(c);
    RouteAgentMessages();
    ScheduleLiveness();
  });
}

void Server::Impl::ScheduleCompaction(std::chrono::milliseconds after) {
  compaction_.expires_after(after);
  compaction_.async_wait([this](beast::error_code ec) {
    if (ec || stopping_) return;
    const bool more = service_.Compact(WallMs()) >= service_.CompactionBatch();
    ScheduleCompaction(more ? std::chrono::milliseconds(20) : std::chrono::milliseconds(60000));
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
  liveness_.cancel();
  compaction_.cancel();
  revocation_watch_.cancel();
  agent_acceptor_.close(ignored);
  signals_.cancel();
  for (auto& [id, d] : deferred_) {
    d.timer->cancel();
    d.done(Stopping());
  }
  deferred_.clear();
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
    ScheduleCompaction(std::chrono::milliseconds(1000));
    // Startup: step whatever wakeup came due while the daemon was down.
    service_.Tick(WallMs());
    if (Status c = service_.Commit(); !c.ok()) return Stop(c);
    ScheduleWakeup();
    ScheduleLiveness();
    if (revocations_ != nullptr) WatchRevocations();
  });
  Accept();
  if (agent_acceptor_.is_open()) AcceptAgents();
  std::vector<std::thread> threads;
  for (int i = 1; i < config_.io_threads; ++i) threads.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (std::thread& t : threads) t.join();
  read_threads_.join();
  return fatal_;
}

// ---------------------------------------------------------------- agents

void Server::Impl::WatchRevocations() {
  // Handshakes reload the revocations themselves; this also catches a
  // revocation while no agent connects, to close the sessions it concerns.
  revocation_watch_.expires_after(std::chrono::seconds(1));
  revocation_watch_.async_wait([this](beast::error_code ec) {
    if (ec || stopping_) return;
    if (const uint64_t generation = revocations_->Refresh(); generation != revocation_generation_) {
      revocation_generation_ = generation;
      for (auto& [node, weak] : agent_sessions_) {
        if (auto session = weak.lock()) session->CloseIfRevoked();
      }
    }
    WatchRevocations();
  });
}

void Server::Impl::RouteAgentMessages() {
  for (auto& [node, text] : service_.TakeAgentMessages()) {
    auto it = agent_sessions_.find(node);
    if (it == agent_sessions_.end()) continue;  // not connected: it resyncs on register
    if (auto session = it->second.lock()) session->Send(std::move(text));
  }
}

Status Server::Impl::ListenAgents(const std::string& cert, const std::string& key,
                                  const std::string& ca) {
  beast::error_code ec;
  agent_tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1);
  agent_tls_.use_certificate_chain_file(cert, ec);
  if (!ec) agent_tls_.use_private_key_file(key, ssl::context::pem, ec);
  if (!ec) agent_tls_.load_verify_file(ca, ec);
  if (ec) return Status::Error("agent TLS (" + cert + ", " + ca + "): " + ec.message());
  revocations_ = std::make_unique<RevocationList>(PkiPathsIn(config_.state_dir), LogLine);
  if (Status s = revocations_->Load(); !s.ok()) return s;
  revocation_generation_ = revocations_->Refresh();
  // Mutual TLS: no client certificate signed by our CA, no connection.
  agent_tls_.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  const std::string where =
      config_.agent_listen_host + ":" + std::to_string(config_.agent_listen_port);
  net::ip::address address = net::ip::make_address(config_.agent_listen_host, ec);
  if (ec) return Status::Error("agent_listen " + where + ": not an IP address");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.agent_listen_port));
  agent_acceptor_.open(endpoint.protocol(), ec);
  if (!ec) agent_acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) agent_acceptor_.bind(endpoint, ec);
  if (!ec) agent_acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (!ec) agent_acceptor_.non_blocking(true, ec);  // AcceptAgents drains the backlog
  if (ec) return Status::Error("cannot listen for agents on " + where + ": " + ec.message());
  agent_port_ = agent_acceptor_.local_endpoint().port();
  return Status::Ok();
}

void Server::Impl::AcceptAgents() {
  agent_acceptor_.async_accept(
      net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted) return;
        // Agents' messages are small and latency-bound, like the API's answers.
        if (!ec) {
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);
          std::make_shared<AgentSession>(std::move(socket), agents_)->Start();
        }
        // Thousands of agents connect at once when a cluster comes up: take
        // what waits in the backlog now, not one connection per reactor
        // cycle (under heartbeat load that was ~20/s, and handshakes timed
        // out in the backlog).
        for (int i = 0; !ec && i < 256; ++i) {
          tcp::socket more(net::make_strand(ioc_));
          agent_acceptor_.accept(more, ec);  // non-blocking: would_block ends it
          if (!ec) {
            beast::error_code ignored;
            more.set_option(tcp::no_delay(true), ignored);
            std::make_shared<AgentSession>(std::move(more), agents_)->Start();
          }
        }
        if (ec && ec != net::error::would_block && ec != net::error::try_again) {
          // Out of file descriptors (EMFILE) and the like: accepting again
          // at once would spin; retry in 100 ms (on the strand, which owns stopping_).
          LogLine("topo-scheduler: accepting an agent connection: " + ec.message());
          auto timer = std::make_shared<net::steady_timer>(strand_, std::chrono::milliseconds(100));
          timer->async_wait([this, timer](beast::error_code) {
            if (!stopping_) AcceptAgents();
          });
          return;
        }
        AcceptAgents();
      });
}

Server::Server(const DaemonConfig& config, Service& service, Metrics& metrics)
    : impl_(std::make_unique<Impl>(config, service, metrics)) {}
Server::~Server() = default;
Status Server::Listen(const std::string& cert, const std::string& key) {
  return impl_->Listen(cert, key);
}
int Server::port() const { return impl_->port(); }
Status Server::ListenAgents(const std::string& cert, const std::string& key,
                            const std::string& ca) {
  return impl_->ListenAgents(cert, key, ca);
}
int Server::agent_port() const { return impl_->agent_port_; }
Status Server::Run() { return impl_->Run(); }
void Server::Shutdown(Status why) { impl_->RequestStop(std::move(why)); }
// Slurm mode's bridge (slurm_bridge.cpp) reaches the Service only through here.
void Server::Post(std::function<HttpResponse(core::TimeMs)> work,
                  std::function<void(HttpResponse)> done) {
  impl_->Enqueue(Pending{HttpRequest{}, std::move(work), Clock::now(), std::move(done)});
}

}  // namespace topo::daemon
