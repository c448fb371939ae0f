// AgentConnection (connection.hpp): the TLS WebSocket client of every agent.

#include "connection.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <fstream>

namespace topo::agent {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using std::chrono::milliseconds;

struct AgentConnection::WsHolder {
  WsHolder(net::io_context& ioc, ssl::context& tls) : ws(ioc, tls) {}
  websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws;
};

namespace {

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

bool ParseServerUrl(const std::string& url, ServerUrl* out) {
  const std::string scheme = "wss://";
  if (url.rfind(scheme, 0) != 0) return false;
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  out->path = slash == std::string::npos ? "/v1/agent" : rest.substr(slash);
  size_t colon;
  if (!hostport.empty() && hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return false;
    out->host = hostport.substr(1, close - 1);
    if (close + 1 >= hostport.size() || hostport[close + 1] != ':') return false;
    colon = close + 1;
  } else {
    colon = hostport.rfind(':');
    if (colon == std::string::npos) return false;
    out->host = hostport.substr(0, colon);
  }
  out->port = hostport.substr(colon + 1);
  if (out->host.empty() || out->port.empty()) return false;
  return std::all_of(out->port.begin(), out->port.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

core::Result<std::vector<ConnectionTarget>> ParseServerList(const std::string& text) {
  std::vector<ConnectionTarget> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    ConnectionTarget t;
    if (item.empty() || !ParseServerUrl(item, &t.url)) {
      return core::Status::Error("--server " + text.substr(0, 200) + ": '" + item.substr(0, 200) +
                                 "' is not wss://HOST:PORT/PATH (several: comma-separated)");
    }
    t.url_text = item;
    out.push_back(std::move(t));
    start = comma + 1;
  }
  if (out.size() > 16) return core::Status::Error("--server: at most 16 scheduler addresses");
  return out;
}

ConnectionShared::ConnectionShared(net::io_context& io, ssl::context& t, ConnectionSettings s,
                                   AgentLog& l, uint64_t seed)
    : ioc(io), tls(t), settings(std::move(s)), log(l), rng(seed) {}

bool ConnectionShared::RefreshTargets(const std::string& node) {
  if (settings.endpoint_file.empty()) return false;
  std::ifstream in(settings.endpoint_file);
  std::string text;
  if (!in || !std::getline(in, text)) return false;
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text == settings.endpoint_text) return false;
  core::Result<std::vector<ConnectionTarget>> parsed = ParseServerList(text);
  if (!parsed.ok()) return false;
  log.Line(node, LogLevel::kInfo,
           "the scheduler's agent endpoint is now " + text + " (was " + settings.endpoint_text +
               ", read from " + settings.endpoint_file + ")");
  settings.targets = std::move(parsed).value();
  settings.endpoint_text = text;
  return true;
}

AgentConnection::AgentConnection(ConnectionShared& shared)
    : shared_(shared), beat_timer_(shared.ioc), wait_timer_(shared.ioc) {}

void AgentConnection::SetIdentity(X509* cert, EVP_PKEY* key) {
  cert_ = cert;
  key_ = key;
}

void AgentConnection::Start(AgentCore& core) {
  core_ = &core;
  net::co_spawn(shared_.ioc, ConnectLoop(), net::detached);
  net::co_spawn(shared_.ioc, HeartbeatLoop(), net::detached);
}

void AgentConnection::CloseSocket() {
  if (!ws_) return;
  boost::system::error_code ec;
  beast::get_lowest_layer(ws_->ws).socket().close(ec);  // the read loop ends
}

void AgentConnection::Close() {
  CloseSocket();
  beat_timer_.cancel();
  wait_timer_.cancel();
}

void AgentConnection::CloseAfter(std::string last) {
  beat_timer_.cancel();
  wait_timer_.cancel();
  if (!registered_ || !Send(std::move(last))) {
    CloseSocket();
    return;
  }
  close_when_sent_ = true;  // Send started the write; its end closes
}

void AgentConnection::Kill() {
  killed_ = true;
  CloseSocket();
}

void AgentConnection::Hang() { hung_ = true; }

void AgentConnection::Revive() {
  if (hung_) {
    hung_ = false;
    CloseSocket();  // a fresh connection and registration
  }
  if (killed_) {
    killed_ = false;
    wait_timer_.cancel();
  }
}

// ------------------------------------------------------------------ setup slots

awaitable<void> AgentConnection::AcquireSlot() {
  const int limit = shared_.settings.max_connecting;
  if (limit <= 0 || (shared_.connecting < limit && shared_.waiting.empty())) {
    ++shared_.connecting;
    co_return;
  }
  slot_granted_ = false;
  shared_.waiting.push_back(this);
  while (!slot_granted_ && !shared_.stopping) {
    wait_timer_.expires_at(net::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await wait_timer_.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

void AgentConnection::ReleaseSlot() {
  --shared_.connecting;
  const int limit = shared_.settings.max_connecting;
  while (!shared_.waiting.empty() && (limit <= 0 || shared_.connecting < limit)) {
    AgentConnection* next = shared_.waiting.front();
    shared_.waiting.pop_front();
    ++shared_.connecting;
    next->slot_granted_ = true;
    next->wait_timer_.cancel();
  }
}

// ------------------------------------------------------------------ loops

awaitable<void> AgentConnection::Session() {
  co_await AcquireSlot();
  // Released once the WebSocket is open, or when the attempt fails. After a
  // shutdown the io_context destroys suspended coroutines, and with them
  // this guard, whose queue may be gone: then it does nothing.
  struct SlotGuard {
    AgentConnection* self;
    bool held = true;
    void Release() {
      if (held && !self->shared_.stopping) self->ReleaseSlot();
      held = false;
    }
    ~SlotGuard() { Release(); }
  } slot{this};
  if (killed_ || shared_.stopping) co_return;
  const ConnectionSettings& settings = shared_.settings;
  // A copy: another connection's RefreshTargets may replace the list while
  // this one waits for the network.
  const ConnectionTarget s = settings.targets[target_ % settings.targets.size()];
  auto holder = std::make_shared<WsHolder>(shared_.ioc, shared_.tls);
  auto& ws = holder->ws;
  if (cert_ != nullptr) {
    SSL* native = ws.next_layer().native_handle();
    if (SSL_use_certificate(native, cert_) != 1 || SSL_use_PrivateKey(native, key_) != 1) {
      throw std::runtime_error("cannot use the client certificate of " + core_->node());
    }
  }
  if (!IsIpAddress(s.url.host)) {
    SSL_set_tlsext_host_name(ws.next_layer().native_handle(), s.url.host.c_str());
  }
  ws_ = holder;
  beast::get_lowest_layer(ws).expires_after(settings.connect_timeout);
  if (s.endpoint) {
    co_await beast::get_lowest_layer(ws).async_connect(*s.endpoint, use_awaitable);
  } else {
    tcp::resolver resolver(shared_.ioc);
    auto endpoints = co_await resolver.async_resolve(s.url.host, s.url.port, use_awaitable);
    co_await beast::get_lowest_layer(ws).async_connect(endpoints, use_awaitable);
  }
  ws.next_layer().set_verify_callback(ssl::host_name_verification(s.url.host));
  co_await ws.next_layer().async_handshake(ssl::stream_base::client, use_awaitable);
  beast::get_lowest_layer(ws).expires_never();
  auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::client);
  timeouts.handshake_timeout = settings.connect_timeout;
  if (settings.idle_timeout.count() > 0) {
    timeouts.idle_timeout = settings.idle_timeout;
    timeouts.keep_alive_pings = true;
  }
  ws.set_option(timeouts);
  ws.read_message_max(proto::kMaxMessageBytes);
  co_await ws.async_handshake(s.url.host + ":" + s.url.port, s.url.path, use_awaitable);
  slot.Release();
  ++gen_;
  ++shared_.stats.sessions;
  connected_ = true;
  shared_.log.Line(core_->node(), LogLevel::kInfo, "connected to " + s.url_text + "; registering");
  core_->OnConnected();
  beast::flat_buffer buffer;
  while (!shared_.stopping) {
    co_await ws.async_read(buffer, use_awaitable);
    ++shared_.stats.messages_in;
    const auto data = buffer.data();
    const std::string_view text(static_cast<const char*>(data.data()), data.size());
    if (!hung_) core_->OnText(text);
    buffer.consume(buffer.size());
  }
}

void AgentConnection::Disconnected() {
  CloseSocket();
  ws_.reset();
  ++gen_;
  outbox_.clear();
  writing_ = false;
  connected_ = false;
  if (registered_) --shared_.stats.registered;
  registered_ = false;
  core_->OnDisconnected();
}

awaitable<void> AgentConnection::ConnectLoop() {
  const ConnectionSettings& s = shared_.settings;
  int delay_ms = s.backoff_first_ms;
  for (int attempt = 1; !shared_.stopping; ++attempt) {
    if (killed_) {
      wait_timer_.expires_at(net::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await wait_timer_.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    std::string why = "the connection closed";
    try {
      co_await Session();
    } catch (const boost::system::system_error& e) {
      why = e.code() == websocket::error::closed ? "the scheduler closed the connection"
                                                 : e.code().message();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!core_->last_refusal().empty()) why += " (refused: " + core_->last_refusal() + ")";
    const bool was_registered = registered_;
    if (!connected_ && !killed_ && !shared_.stopping) ++shared_.stats.connect_failures;
    const std::string tried = s.targets[target_ % s.targets.size()].url_text;
    // The next attempt goes to the next scheduler address (HA replicas).
    target_ = (target_ + 1) % s.targets.size();
    Disconnected();
    if (shared_.stopping) break;
    if (was_registered) {
      ++shared_.stats.losses;
      delay_ms = s.backoff_first_ms;
      cycle_tries_ = 0;
      if (shared_.events != nullptr) shared_.events->OnLost(*this, why);
    }
    if (killed_) continue;
    // A local daemon restarted elsewhere: its state dir says where.
    if (shared_.RefreshTargets(core_->node())) target_ = 0;
    // Several addresses: the backoff grows once per round over all of them,
    // and within a round the next one is tried after the first delay. Else
    // the new leader of two replicas could open its port just when the
    // attempts' parity points them at the dead one, costing a whole doubled
    // delay (a failover's agents then took 12 s instead of 4 at p99).
    const bool round_done = ++cycle_tries_ % s.targets.size() == 0;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const int wait_ms =
        static_cast<int>((round_done ? delay_ms : s.backoff_first_ms) * jitter(shared_.rng));
    shared_.log.Line(core_->node(), LogLevel::kInfo,
                     std::string(was_registered ? "connection lost" : "connection attempt") + " " +
                         std::to_string(attempt) + " to " + tried + ": " + why + "; retrying in " +
                         std::to_string(wait_ms) + " ms");
    if (round_done) delay_ms = std::min(delay_ms * 2, s.backoff_max_ms);
    wait_timer_.expires_after(milliseconds(wait_ms));
    boost::system::error_code ec;
    co_await wait_timer_.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> AgentConnection::HeartbeatLoop() {
  using Clock = std::chrono::steady_clock;
  boost::system::error_code ec;
  if (shared_.settings.first_beat_spread_ms > 0) {
    std::uniform_int_distribution<int> phase(0, shared_.settings.first_beat_spread_ms);
    beat_timer_.expires_after(milliseconds(phase(shared_.rng)));
    co_await beat_timer_.async_wait(net::redirect_error(use_awaitable, ec));
  }
  // Beats keep their cadence on a loaded loop: each is due one interval
  // after the previous one was due, not after it was sent (a loop that lags
  // would otherwise stretch every interval by its lag).
  Clock::time_point due = Clock::now();
  while (!shared_.stopping) {
    if (registered_ && !hung_) {
      ++shared_.stats.heartbeats;
      core_->Heartbeat();
    }
    const Clock::time_point now = Clock::now();
    due += milliseconds(heartbeat_ms_);
    if (due < now) due = now;  // more than an interval behind: no burst to catch up
    beat_timer_.expires_at(due);
    co_await beat_timer_.async_wait(net::redirect_error(use_awaitable, ec));
    if (beat_now_) {  // registered: beat now, then count the intervals from here
      beat_now_ = false;
      due = Clock::now();
    }
  }
}

// ------------------------------------------------------------------ AgentLink

bool AgentConnection::Send(std::string text) {
  if (!connected_ || hung_ || !ws_) return false;
  outbox_.push_back(std::move(text));
  if (!writing_) WriteNext();
  return true;
}

void AgentConnection::Drop() { CloseSocket(); }

void AgentConnection::Registered(int heartbeat_ms) {
  if (!registered_) ++shared_.stats.registered;
  registered_ = true;
  heartbeat_ms_ = std::max(10, heartbeat_ms);
  beat_now_ = true;
  beat_timer_.cancel();  // beat now, then at the interval
}

void AgentConnection::WriteNext() {
  if (outbox_.empty() || !ws_) {
    writing_ = false;
    if (close_when_sent_ && ws_) {
      close_when_sent_ = false;
      // A close frame, so the last message is read before the socket ends
      // (the read loop sees the scheduler's answer and ends).
      auto holder = ws_;
      writing_ = true;
      holder->ws.async_close(websocket::close_code::going_away, [this, holder](beast::error_code) {
        writing_ = false;
        boost::system::error_code ignored;
        beast::get_lowest_layer(holder->ws).socket().close(ignored);
      });
    }
    return;
  }
  writing_ = true;
  auto holder = ws_;
  // The text must live until the write ends; the outbox is short (usually
  // one message), so taking the front is cheap.
  auto text = std::make_shared<std::string>(std::move(outbox_.front()));
  outbox_.erase(outbox_.begin());
  const uint64_t gen = gen_;
  holder->ws.text(true);
  holder->ws.async_write(
      net::buffer(*text), [this, holder, text, gen](beast::error_code ec, size_t) {
        if (gen != gen_) return;
        if (ec) {
          writing_ = false;
          shared_.log.Line(core_->node(), LogLevel::kInfo, "write failed: " + ec.message());
          boost::system::error_code ignored;
          beast::get_lowest_layer(holder->ws).socket().close(ignored);  // the read loop ends
          return;
        }
        WriteNext();
      });
}

}  // namespace topo::agent
