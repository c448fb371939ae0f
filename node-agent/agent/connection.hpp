#pragma once
// The agent's connection to topo-scheduler (docs/agent-protocol.md): one
// mutually authenticated TLS WebSocket per node, the same code for a real
// node (agent.cpp) and for each node of `topo-agent --simulate`
// (simulate.cpp). It drives an AgentCore:
//   connected    -> core.OnConnected()   (the core sends `register`)
//   text frame   -> core.OnText(text)
//   every beat   -> core.Heartbeat()     (while registered)
//   closed       -> core.OnDisconnected(), then a reconnect after a backoff
// and is the core's AgentLink (Send, Registered).
//
// Several scheduler addresses (HA replicas): each attempt goes to one, and
// after a failed attempt or a lost connection the next one is tried; the
// backoff below grows once per round over all of them.
// With an endpoint file (a local daemon's STATE/agent-endpoint, topo-agent
// --scheduler-state-dir) the addresses are read again from it after every
// failed attempt or lost connection: a daemon restarted on another port is
// found there, not dialled at its old port forever.
// Reconnects: the delay starts at backoff_first_ms, doubles per failed
// attempt up to backoff_max_ms, is multiplied by a random factor in
// [0.8, 1.2] (so a thousand agents that lost the scheduler together do not
// come back together), and starts over after a registration. An `error`
// from the scheduler does not reconnect (the scheduler closes the
// connection itself when it refuses the registration; its message is
// logged with the retry).
// Deadlines: TCP connect, TLS and WebSocket handshakes each within
// connect_timeout; a connection silent for idle_timeout is closed (pings
// are sent at half of it); writes are queued, one in flight.
//
// Simulation hooks: Kill (drop without a close frame and stay away until
// Revive: a host lost), Hang (stay connected, send nothing, ignore what
// comes: a network cut the TCP connection does not see), Revive; and a
// limit on connection setups in progress across all connections of one
// ConnectionShared (thousands of TLS handshakes at once would time out).
//
// Thread safety: everything runs on ConnectionShared::ioc's one thread.

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <utility>  // before Boost 1.74's awaitable.hpp, which needs std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "agent_core.hpp"

namespace topo::agent {

// "wss://host:port/path" -> parts.
struct ServerUrl {
  std::string host;
  std::string port;
  std::string path;
};
// false when the URL is not of that form (the path defaults to /v1/agent).
bool ParseServerUrl(const std::string& url, ServerUrl* out);

// One scheduler address (HA: each replica's; docs/ha.md).
struct ConnectionTarget {
  ServerUrl url;
  std::string url_text;  // for logs
  // Resolved once (simulate); without it the host is resolved per attempt.
  std::optional<boost::asio::ip::tcp::endpoint> endpoint;
};
// "wss://A:7443/v1/agent,wss://B:7443/v1/agent" -> targets; an error names
// the address that is not of that form.
core::Result<std::vector<ConnectionTarget>> ParseServerList(const std::string& text);

struct ConnectionSettings {
  // Tried in turn: after a failed attempt or a lost connection, the next.
  std::vector<ConnectionTarget> targets;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds idle_timeout{10000};  // 0: never closed for silence
  int backoff_first_ms = 100;
  int backoff_max_ms = 5000;
  int first_beat_spread_ms = 0;  // the first heartbeat waits a random 0..this
  int max_connecting = 0;        // connection setups at once; 0: no limit
  // Where the addresses come from ("": fixed): re-read after a failure
  // (above); the text it held when `targets` were made is endpoint_text.
  std::string endpoint_file;
  std::string endpoint_text;
};

// Counters over every connection of one ConnectionShared.
struct ConnectionStats {
  int64_t registered = 0;  // connections registered now
  int64_t sessions = 0;    // WebSocket sessions opened
  int64_t losses = 0;      // registered connections that ended
  int64_t heartbeats = 0;
  int64_t messages_in = 0;
  int64_t connect_failures = 0;  // attempts that never got a session
};

class AgentConnection;

// Told when a registered connection ends (simulate prints it).
class ConnectionEvents {
 public:
  virtual ~ConnectionEvents() = default;
  virtual void OnLost(const AgentConnection& connection, const std::string& why) = 0;
};

// What the connections of one process share.
struct ConnectionShared {
  ConnectionShared(boost::asio::io_context& ioc, boost::asio::ssl::context& tls,
                   ConnectionSettings settings, AgentLog& log, uint64_t seed);
  boost::asio::io_context& ioc;
  boost::asio::ssl::context& tls;
  // Fixed but for `targets`, which RefreshTargets may replace (between
  // attempts, on the one thread).
  ConnectionSettings settings;
  AgentLog& log;
  ConnectionEvents* events = nullptr;
  std::mt19937_64 rng;
  bool stopping = false;  // set before closing every connection to end their loops
  ConnectionStats stats;
  // Connection setups in progress, and those waiting for a turn.
  int connecting = 0;
  std::deque<AgentConnection*> waiting;

  // Reads settings.endpoint_file again; when it names other addresses than
  // the targets were made from, they replace them (logged as for `node`).
  // True when they changed. A file that is missing, empty or does not parse
  // changes nothing (the daemon may be writing it).
  bool RefreshTargets(const std::string& node);
};

class AgentConnection final : public AgentLink {
 public:
  explicit AgentConnection(ConnectionShared& shared);
  AgentConnection(const AgentConnection&) = delete;
  AgentConnection& operator=(const AgentConnection&) = delete;

  // This connection's client certificate and key (simulate: one per node);
  // unset: the TLS context's. They must outlive the connection.
  void SetIdentity(X509* cert, EVP_PKEY* key);
  // Spawns the connect and heartbeat loops on shared.ioc for core.
  // REQUIRES: called once; core outlives the loops.
  void Start(AgentCore& core);
  // Closes the socket and cancels the timers: with shared.stopping set the
  // loops end.
  void Close();
  // As Close(), but a registered connection first sends `last` and closes
  // the WebSocket once it is written (a close frame, then the socket), so
  // the scheduler reads it: an agent that exits says `leaving`.
  // REQUIRES: shared.stopping set (no reconnect follows).
  void CloseAfter(std::string last);
  void Kill();
  void Hang();
  void Revive();

  // AgentLink
  bool Send(std::string text) override;
  void Registered(int heartbeat_ms) override;
  void Drop() override;

  const AgentCore* core() const { return core_; }
  bool connected() const { return connected_; }
  bool registered() const { return registered_; }
  bool killed() const { return killed_; }
  bool hung() const { return hung_; }

 private:
  struct WsHolder;
  boost::asio::awaitable<void> ConnectLoop();
  boost::asio::awaitable<void> Session();
  boost::asio::awaitable<void> HeartbeatLoop();
  boost::asio::awaitable<void> AcquireSlot();
  void ReleaseSlot();
  void Disconnected();
  void WriteNext();
  void CloseSocket();

  ConnectionShared& shared_;
  AgentCore* core_ = nullptr;
  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  std::shared_ptr<WsHolder> ws_;
  uint64_t gen_ = 0;  // connection generation: callbacks of an old one do nothing
  std::vector<std::string> outbox_;
  bool writing_ = false;
  bool close_when_sent_ = false;  // CloseAfter: close once the outbox is written
  bool connected_ = false;
  bool registered_ = false;
  bool killed_ = false;
  bool hung_ = false;
  bool slot_granted_ = false;
  bool beat_now_ = false;   // Registered() woke the heartbeat loop
  size_t target_ = 0;       // the index in settings.targets of this (or the next) attempt
  size_t cycle_tries_ = 0;  // failed attempts since the last registration or loss
  int heartbeat_ms_ = 1000;
  boost::asio::steady_timer beat_timer_;
  boost::asio::steady_timer wait_timer_;  // backoff, a turn to connect, a killed node's revive
};

}  // namespace topo::agent
