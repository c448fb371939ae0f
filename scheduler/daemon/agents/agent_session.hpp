#pragma once
// One node agent's connection (docs/agent-protocol.md): the mutual-TLS
// handshake against the scheduler's CA and its revocations, the WebSocket,
// the first message as the registration and every later one handed to the
// service on its strand, the replies and commands written back in order.
//
// The session never touches the service off the strand: each message goes
// through AgentSessionContext::post, which runs it on the strand with the
// group commit (the node's registration and reports are logged before they
// are answered), and its reply comes back through `done`.
//
// Thread safety: a session runs on its own strand (its socket's executor);
// Send may be called from any thread; node() and CloseIfRevoked only on the
// service's strand.

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "daemon/http.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pki/revocation.hpp"
#include "topo/core/status.hpp"
#include "topo/core/time.hpp"

namespace topo::daemon {

class AgentSession;

// What the sessions need from the server. Every member outlives every
// session.
struct AgentSessionContext {
  boost::asio::ssl::context& tls;
  Metrics& metrics;
  // Strand only: the service's side of a node's connection
  // (Service::AgentRegister, AgentMessage, AgentDisconnected).
  std::function<core::Result<std::string>(const std::string& cert_node, const std::string& text,
                                          core::TimeMs now)>
      registered;
  std::function<std::optional<std::string>(const std::string& node, const std::string& text,
                                           core::TimeMs now)>
      message;
  std::function<void(const std::string& node, core::TimeMs now)> disconnected;
  // Null until the agents' listener loads them; then every handshake checks
  // the peer against them.
  std::unique_ptr<RevocationList>& revocations;
  // Strand only: the live session of each registered node.
  std::unordered_map<std::string, std::weak_ptr<AgentSession>>& sessions;
  // Any thread: runs `work` on the service's strand with the next group
  // commit, then `done` with its result (on any thread). A result whose
  // status is not 200 refused the registration.
  std::function<void(std::function<HttpResponse(core::TimeMs)> work,
                     std::function<void(HttpResponse)> done)>
      post;
  std::function<void(const std::string&)> log;
};

class AgentSession : public std::enable_shared_from_this<AgentSession> {
 public:
  AgentSession(boost::asio::ip::tcp::socket socket, AgentSessionContext& context);

  // The handshake, then the reads; the session lives while its socket does.
  void Start();
  // Any thread: queues a message for the agent (and closes the connection
  // once it is written, when close_after).
  void Send(std::string text, bool close_after = false);
  // Strand only: the node it registered as ("" before).
  const std::string& node() const { return node_; }
  // Strand only, once registered: closes the session when its certificate
  // was revoked after the handshake.
  void CloseIfRevoked();

 private:
  std::string PeerCommonName();
  void Read();
  void OnMessage(std::string text);
  void WriteNext();
  void Gone();

  boost::beast::websocket::stream<boost::beast::ssl_stream<boost::beast::tcp_stream>> ws_;
  AgentSessionContext& context_;
  boost::beast::flat_buffer buffer_;
  std::string cert_node_;
  PeerVerdict verdict_;           // written by the handshake, read on the strand after
  bool closing_revoked_ = false;  // strand only
  std::string node_;              // set on the strand once registered
  std::deque<std::string> out_;
  bool close_after_ = false;
  bool gone_ = false;
};

}  // namespace topo::daemon
