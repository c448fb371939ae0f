// AgentSession (agent_session.hpp): one node agent's connection.

#include "daemon/agents/agent_session.hpp"

#include <openssl/x509.h>

#include <chrono>
#include <optional>

#include "topo/common/agent_protocol.hpp"

namespace topo::daemon {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

AgentSession::AgentSession(tcp::socket socket, AgentSessionContext& context)
    : ws_(std::move(socket), context.tls), context_(context) {}

void AgentSession::Start() {
  beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(10));
  if (context_.revocations != nullptr) {
    // `this`, not a shared_ptr: the stream owning the callback is ours.
    ws_.next_layer().set_verify_callback([this](bool preverified, ssl::verify_context& ctx) {
      return context_.revocations->VerifyPeer(preverified, ctx.native_handle(), &verdict_);
    });
  }
  ws_.next_layer().async_handshake(ssl::stream_base::server, [self = shared_from_this()](
                                                                 beast::error_code ec) {
    if (ec) {
      // A refused certificate (revoked, expired, another CA's) is
      // said once per connection, here; no certificate at all is not.
      const PeerVerdict& v = self->verdict_;
      if (!v.refusal.empty()) {
        self->context_.log("topo-scheduler: agent " + (v.peer.node.empty() ? "?" : v.peer.node) +
                           ": TLS handshake refused: " + v.refusal);
      }
      if (v.revoked) self->context_.metrics.AgentCertificateRevoked(true);
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

void AgentSession::Send(std::string text, bool close_after) {
  net::post(ws_.get_executor(),
            [self = shared_from_this(), text = std::move(text), close_after]() mutable {
              self->out_.push_back(std::move(text));
              self->close_after_ |= close_after;
              if (self->out_.size() == 1) self->WriteNext();
            });
}

void AgentSession::CloseIfRevoked() {
  if (closing_revoked_) return;
  std::optional<std::string> why = context_.revocations->Refusal(verdict_.peer);
  if (!why) return;
  closing_revoked_ = true;
  context_.log("topo-scheduler: agent " + node_ + ": closing the connection: " + *why);
  context_.metrics.AgentCertificateRevoked(false);
  Send(proto::WriteSchedulerMessage(proto::Error{why->substr(0, proto::kMaxReasonBytes), "", ""}),
       true);
}

std::string AgentSession::PeerCommonName() {
  X509* cert = SSL_get1_peer_certificate(ws_.next_layer().native_handle());
  if (cert == nullptr) return {};
  char cn[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  X509_free(cert);
  return cn;
}

void AgentSession::Read() {
  ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->Gone();
    std::string text = beast::buffers_to_string(self->buffer_.data());
    self->buffer_.consume(self->buffer_.size());
    self->OnMessage(std::move(text));
  });
}

void AgentSession::OnMessage(std::string text) {
  auto self = shared_from_this();
  const bool first = node_.empty();
  auto work = [self, text = std::move(text), first](core::TimeMs now) {
    HttpResponse r;
    AgentSessionContext& ctx = self->context_;
    // Nothing an agent sends may end the daemon: the protocol's reader
    // throws nothing, and this catches what a bug elsewhere might.
    try {
      if (first) {
        // Revoked between its handshake and this message: the watch only
        // closes sessions that were registered when it looked.
        if (std::optional<std::string> why = ctx.revocations->Refusal(self->verdict_.peer)) {
          r.status = 400;
          r.body = *why;
          return r;
        }
        core::Result<std::string> reply = ctx.registered(self->cert_node_, text, now);
        if (!reply.ok()) {
          r.status = 400;
          r.body = reply.message();
          return r;
        }
        self->node_ = self->cert_node_;
        if (auto old = ctx.sessions[self->node_].lock(); old && old != self) {
          old->Send(proto::WriteSchedulerMessage(
                        proto::Error{"replaced by a newer connection of this node", "", ""}),
                    true);
        }
        ctx.sessions[self->node_] = self;
        r.body = std::move(reply).value();
        return r;
      }
      if (std::optional<std::string> reply = ctx.message(self->node_, text, now)) {
        r.body = std::move(*reply);
      }
    } catch (const std::exception& e) {
      ctx.log("topo-scheduler: agent " + self->cert_node_ +
              ": internal error on a message: " + e.what());
      r.body = proto::WriteSchedulerMessage(
          proto::Error{"internal error; the message was not applied", "", ""});
    }
    return r;
  };
  auto done = [self](HttpResponse r) {
    if (r.status != 200) {
      // Only a refused registration closes the connection.
      self->context_.log("topo-scheduler: agent " +
                         (self->cert_node_.empty() ? "?" : self->cert_node_) +
                         ": registration refused: " + r.body);
      self->Send(proto::WriteSchedulerMessage(
                     proto::Error{r.body.substr(0, proto::kMaxReasonBytes), "", "register"}),
                 true);
      return;
    }
    if (!r.body.empty()) self->Send(std::move(r.body));
    net::post(self->ws_.get_executor(), [self] { self->Read(); });
  };
  context_.post(std::move(work), std::move(done));
}

void AgentSession::WriteNext() {
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

void AgentSession::Gone() {
  if (gone_ || node_.empty()) return;
  gone_ = true;
  auto self = shared_from_this();
  context_.post(
      [self](core::TimeMs now) {
        AgentSessionContext& ctx = self->context_;
        auto it = ctx.sessions.find(self->node_);
        if (it != ctx.sessions.end() && it->second.lock() == self) {
          ctx.sessions.erase(it);
          ctx.disconnected(self->node_, now);
        }
        return HttpResponse{};
      },
      [](HttpResponse) {});
}

}  // namespace topo::daemon
