// Server: the service strand, group commit, timers, the agents' listener.
// The API's HTTP sessions are in http_session.cpp.

#include "daemon/server.hpp"

#include "daemon/connection_table.hpp"
#include "daemon/http_session.hpp"
#include "daemon/log.hpp"
#include "daemon/revocation.hpp"
#include "daemon/service_internal.hpp"
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

#include <openssl/x509.h>
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
        connections_(config.max_connections, config.max_connections_per_peer),
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
        revocation_watch_(strand_) {}

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
  std::unordered_map<std::string, std::weak_ptr<class AgentSession>> agent_sessions_;
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
      r = Error(503, "topo-scheduler is stopping; retry against the restarted daemon");
    } else {
      try {
        r = service_.HandleRead(p.request, WallMs());
      } catch (const std::exception& e) {
        LogLine(std::string("topo-scheduler: internal error on a read: ") + e.what());
        r = Error(500, "internal error; nothing was changed");
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
      answers[i] = Error(503, "topo-scheduler is stopping; retry against the restarted daemon");
    } else if (Clock::now() - batch[i].received > deadline) {
      answers[i] = Error(503, "the request waited longer than request_timeout_s; retry");
    } else if (batch[i].work) {
      answers[i] = batch[i].work(now);
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
  for (size_t i = 0; i < batch.size(); ++i) {
    if (answers[i].deferred != 0 && !stopping_) {
      Defer(answers[i].deferred, std::move(batch[i].done));
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
    HttpResponse r = Error(504, "the node's agent did not answer within " +
                                    std::to_string(kAgentAnswerTimeoutS) + " s; retry");
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
    d.done(Error(503, "topo-scheduler is stopping; retry against the restarted daemon"));
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

class AgentSession : public std::enable_shared_from_this<AgentSession> {
 public:
  AgentSession(tcp::socket socket, Server::Impl& server)
      : ws_(std::move(socket), server.agent_tls_), server_(server) {}

  void Start() {
    beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(10));
    if (server_.revocations_ != nullptr) {
      // `this`, not a shared_ptr: the stream owning the callback is ours.
      ws_.next_layer().set_verify_callback([this](bool preverified, ssl::verify_context& ctx) {
        return server_.revocations_->VerifyPeer(preverified, ctx.native_handle(), &verdict_);
      });
    }
    ws_.next_layer().async_handshake(
        ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
          if (ec) {
            // A refused certificate (revoked, expired, another CA's) is
            // said once per connection, here; no certificate at all is not.
            const PeerVerdict& v = self->verdict_;
            if (!v.refusal.empty()) {
              LogLine("topo-scheduler: agent " + (v.peer.node.empty() ? "?" : v.peer.node) +
                      ": TLS handshake refused: " + v.refusal);
            }
            if (v.revoked) self->server_.metrics_.AgentCertificateRevoked(true);
            return;
          }
          self->cert_node_ = self->PeerCommonName();
          beast::get_lowest_layer(self->ws_).expires_never();
          self->ws_.set_option(
              beast::websocket::stream_base::timeout::suggested(beast::role_type::server));
          self->ws_.read_message_max(proto::kMaxMessageBytes);
          self->ws_.async_accept([self](beast::error_code ec2) {
            if (!ec2) self->Read();
          });
        });
  }

  // Any thread: queue a message for the agent.
  void Send(std::string text, bool close_after = false) {
    net::post(ws_.get_executor(),
              [self = shared_from_this(), text = std::move(text), close_after]() mutable {
                self->out_.push_back(std::move(text));
                self->close_after_ |= close_after;
                if (self->out_.size() == 1) self->WriteNext();
              });
  }

  const std::string& node() const { return node_; }

  // Strand only, once registered: closes the session when its certificate
  // was revoked after the handshake.
  void CloseIfRevoked() {
    if (closing_revoked_) return;
    std::optional<std::string> why = server_.revocations_->Refusal(verdict_.peer);
    if (!why) return;
    closing_revoked_ = true;
    LogLine("topo-scheduler: agent " + node_ + ": closing the connection: " + *why);
    server_.metrics_.AgentCertificateRevoked(false);
    Send(proto::WriteSchedulerMessage(proto::Error{why->substr(0, proto::kMaxReasonBytes), "", ""}),
         true);
  }

 private:
  std::string PeerCommonName() {
    X509* cert = SSL_get1_peer_certificate(ws_.next_layer().native_handle());
    if (cert == nullptr) return {};
    char cn[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    return cn;
  }

  void Read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Gone();
      std::string text = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      self->OnMessage(std::move(text));
    });
  }

  void OnMessage(std::string text) {
    auto self = shared_from_this();
    Pending p;
    p.received = Clock::now();
    const bool first = node_.empty();
    p.work = [self, text = std::move(text), first](core::TimeMs now) {
      HttpResponse r;
      Server::Impl& srv = self->server_;
      // Nothing an agent sends may end the daemon: the protocol's reader
      // throws nothing, and this catches what a bug elsewhere might.
      try {
        if (first) {
          // Revoked between its handshake and this message: the watch only
          // closes sessions that were registered when it looked.
          if (std::optional<std::string> why = srv.revocations_->Refusal(self->verdict_.peer)) {
            r.status = 400;
            r.body = *why;
            return r;
          }
          core::Result<std::string> reply = srv.service_.AgentRegister(self->cert_node_, text, now);
          if (!reply.ok()) {
            r.status = 400;
            r.body = reply.message();
            return r;
          }
          self->node_ = self->cert_node_;
          if (auto old = srv.agent_sessions_[self->node_].lock(); old && old != self) {
            old->Send(proto::WriteSchedulerMessage(
                          proto::Error{"replaced by a newer connection of this node", "", ""}),
                      true);
          }
          srv.agent_sessions_[self->node_] = self;
          r.body = std::move(reply).value();
          return r;
        }
        if (std::optional<std::string> reply = srv.service_.AgentMessage(self->node_, text, now)) {
          r.body = std::move(*reply);
        }
      } catch (const std::exception& e) {
        LogLine("topo-scheduler: agent " + self->cert_node_ +
                ": internal error on a message: " + e.what());
        r.body = proto::WriteSchedulerMessage(
            proto::Error{"internal error; the message was not applied", "", ""});
      }
      return r;
    };
    p.done = [self](HttpResponse r) {
      if (r.status != 200) {
        // Only a refused registration closes the connection.
        LogLine("topo-scheduler: agent " + (self->cert_node_.empty() ? "?" : self->cert_node_) +
                ": registration refused: " + r.body);
        self->Send(proto::WriteSchedulerMessage(
                       proto::Error{r.body.substr(0, proto::kMaxReasonBytes), "", "register"}),
                   true);
        return;
      }
      if (!r.body.empty()) self->Send(std::move(r.body));
      net::post(self->ws_.get_executor(), [self] { self->Read(); });
    };
    server_.Enqueue(std::move(p));
  }

  void WriteNext() {
    ws_.text(true);
    ws_.async_write(net::buffer(out_.front()),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (ec) return self->Gone();
                      self->out_.pop_front();
                      if (!self->out_.empty()) return self->WriteNext();
                      if (self->close_after_) {
                        self->ws_.async_close(beast::websocket::close_code::policy_error,
                                              [self](beast::error_code) {});
                      }
                    });
  }

  void Gone() {
    if (gone_ || node_.empty()) return;
    gone_ = true;
    auto self = shared_from_this();
    Pending p;
    p.received = Clock::now();
    p.work = [self](core::TimeMs now) {
      Server::Impl& srv = self->server_;
      auto it = srv.agent_sessions_.find(self->node_);
      if (it != srv.agent_sessions_.end() && it->second.lock() == self) {
        srv.agent_sessions_.erase(it);
        srv.service_.AgentDisconnected(self->node_, now);
      }
      return HttpResponse{};
    };
    p.done = [](HttpResponse) {};
    server_.Enqueue(std::move(p));
  }

  beast::websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws_;
  Server::Impl& server_;
  beast::flat_buffer buffer_;
  std::string cert_node_;
  PeerVerdict verdict_;           // written by the handshake, read on the strand after
  bool closing_revoked_ = false;  // strand only
  std::string node_;              // set on the strand once registered
  std::deque<std::string> out_;
  bool close_after_ = false;
  bool gone_ = false;
};

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
          std::make_shared<AgentSession>(std::move(socket), *this)->Start();
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
            std::make_shared<AgentSession>(std::move(more), *this)->Start();
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
