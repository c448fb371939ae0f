// HttpSession: one Beast HTTPS connection of the API, from admission to close.

#include "daemon/net/http_session.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <nlohmann/json.hpp>

#include "daemon/api/route.hpp"
#include "daemon/net/server.hpp"

namespace topo::daemon {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

CloseReason MetricOf(ConnectionTable::Eviction why) {
  switch (why) {
    case ConnectionTable::Eviction::kUnauthenticated:
      return CloseReason::kEvictedUnauthenticated;
    case ConnectionTable::Eviction::kHeaviestUser:
      return CloseReason::kEvictedHeaviestUser;
    case ConnectionTable::Eviction::kUserCap:
      return CloseReason::kMaxConnectionsPerUser;
  }
  return CloseReason::kEvictedUnauthenticated;
}

// The error body of an answer the session gives itself (no route ran):
// {"error": {"code", "message", "field"?}}, as StatusResponse writes them.
std::string ErrorBody(int status, const std::string& message, const std::string& field) {
  nlohmann::json error{{"code", status == 413   ? "too_large"
                                : status == 431 ? "headers_too_large"
                                                : "bad_request"},
                       {"message", message}};
  if (!field.empty()) error["field"] = field;
  return nlohmann::json{{"error", std::move(error)}}.dump() + "\n";
}

// What part of a request Beast's parser refused, and how to say it.
std::pair<std::string, std::string> MalformedPart(beast::error_code ec) {
  if (ec == http::error::bad_method) return {"method", "the method is not an HTTP token"};
  if (ec == http::error::bad_target) {
    return {"target", "the request target is not a path (spaces and control bytes are escaped)"};
  }
  if (ec == http::error::bad_version)
    return {"version", "the version must be HTTP/1.0 or HTTP/1.1"};
  if (ec == http::error::bad_field) return {"headers", "a header line is not NAME: VALUE"};
  if (ec == http::error::bad_value) {
    return {"headers", "a header value holds a control byte (NUL, CR, LF, ...)"};
  }
  if (ec == http::error::bad_content_length) {
    return {"Content-Length", "Content-Length must be one whole number of bytes, given once"};
  }
  if (ec == http::error::bad_transfer_encoding) {
    return {"Transfer-Encoding", "Transfer-Encoding must be chunked"};
  }
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) {
    return {"body", "a chunk of the chunked body is malformed"};
  }
  if (ec == http::error::bad_line_ending) return {"headers", "lines must end in CRLF"};
  return {"", ec.message()};
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A header the request must not have, or have twice, as (field, message);
// nullopt when its headers are fine (RFC 9112 3.2, 6.1; RFC 9110 5.3).
template <typename Request>
std::optional<std::pair<std::string, std::string>> BadHeader(const Request& req) {
  const size_t hosts = req.count(http::field::host);
  if ((req.version() >= 11 && hosts == 0) || hosts > 1) {
    return std::pair<std::string, std::string>{
        "Host", "an HTTP/1.1 request carries exactly one Host header (RFC 9112 3.2)"};
  }
  for (const auto& [field, name] : {std::pair{http::field::authorization, "Authorization"},
                                    std::pair{http::field::content_type, "Content-Type"}}) {
    if (req.count(field) > 1) {
      return std::pair<std::string, std::string>{
          name, std::string("the ") + name + " header is given twice; give it once"};
    }
  }
  if (req.count(http::field::transfer_encoding) > 0) {
    const auto te_field = req[http::field::transfer_encoding];
    const std::string_view te(te_field.data(), te_field.size());
    if (req.count(http::field::transfer_encoding) > 1 || !IEquals(te, "chunked")) {
      return std::pair<std::string, std::string>{
          "Transfer-Encoding",
          "Transfer-Encoding must be chunked alone, or absent (with Content-Length)"};
    }
  }
  return std::nullopt;
}

// Closes the evicted connections (outside the table's lock), counting each.
void CloseEvicted(std::vector<ConnectionTable::Evicted>& evicted, Metrics& metrics) {
  for (ConnectionTable::Evicted& e : evicted) {
    metrics.ConnectionCutOff(MetricOf(e.why));
    if (e.close) e.close();
  }
}

// The peer as the per-peer cap counts it: an IPv4 client reaching an IPv6
// socket (::ffff:a.b.c.d) is the IPv4 address it is.
std::string PeerKey(const net::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()).to_string();
  }
  return address.to_string();
}

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpSessionContext& context)
      : stream_(std::move(socket), context.tls), context_(context) {}
  ~HttpSession() {
    if (id_ == 0) return;  // refused: never counted
    context_.connections.Close(id_);
    context_.metrics.ConnectionClosed();
  }

  // Admitted as `id`: the first-request deadline starts now.
  void Start(ConnectionTable::Id id) {
    id_ = id;
    context_.metrics.ConnectionOpened();
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::seconds(context_.config.first_request_timeout_s));
    // A client speaking plain HTTP to this port gets told so, not a reset.
    beast::async_detect_ssl(beast::get_lowest_layer(stream_), buffer_,
                            [self = shared_from_this()](beast::error_code ec, bool tls) {
                              if (ec) return self->CountTimeout(ec);
                              if (!tls) return self->RefusePlainHttp();
                              self->Handshake();
                            });
  }

  // Any thread: the table chose this connection to make room.
  void Evict() {
    net::post(stream_.get_executor(),
              [self = shared_from_this()] { beast::get_lowest_layer(self->stream_).close(); });
  }

 private:
  // What a timeout cuts short, for the metric.
  enum class Phase { kFirstRequest, kIdle, kRequest };

  void Handshake() {
    stream_.async_handshake(ssl::stream_base::server, buffer_.data(),
                            [self = shared_from_this()](beast::error_code ec, size_t used) {
                              if (ec) return self->CountTimeout(ec);
                              self->buffer_.consume(used);
                              self->ReadHeader();
                            });
  }

  // The first bytes were not a TLS ClientHello: a plain-HTTP client (http://
  // for https://). One answer in plain text, then the connection closes.
  void RefusePlainHttp() {
    context_.metrics.ApiRequest("invalid", "-", 400, 0);
    const std::string body = ErrorBody(
        400, "this port speaks HTTPS only: use https:// (the CA is the daemon's ca.pem)", "");
    auto text = std::make_shared<std::string>(
        "HTTP/1.1 400 Bad Request\r\nServer: topo-scheduler\r\nContent-Type: "
        "application/json\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    auto& socket = beast::get_lowest_layer(stream_);
    socket.expires_after(std::chrono::seconds(2));
    net::async_write(socket, net::buffer(*text),
                     [self = shared_from_this(), text](beast::error_code, size_t) {
                       beast::error_code ignored;
                       beast::get_lowest_layer(self->stream_)
                           .socket()
                           .shutdown(tcp::socket::shutdown_send, ignored);
                     });
  }

  void CountTimeout(beast::error_code ec) {
    if (ec != beast::error::timeout) return;
    context_.metrics.ConnectionCutOff(phase_ == Phase::kFirstRequest
                                          ? CloseReason::kFirstRequestTimeout
                                      : phase_ == Phase::kIdle ? CloseReason::kIdleTimeout
                                                               : CloseReason::kRequestTimeout);
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(context_.config.max_header_bytes));
    // The largest any route allows: the parser checks a Content-Length
    // against the limit as soon as the headers are in, before OnHeader can
    // raise it for PUT /v1/topology. OnHeader sets the route's own.
    parser_->body_limit(static_cast<uint64_t>(
        std::max(context_.config.max_body_bytes, context_.config.max_topology_bytes)));
    // The first request keeps the deadline set at accept.
    if (phase_ != Phase::kFirstRequest) {
      phase_ = Phase::kIdle;
      beast::get_lowest_layer(stream_).expires_after(
          std::chrono::seconds(context_.config.idle_timeout_s));
    }
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return ReadFailed(ec);
    const auto& req = parser_->get();
    if (std::optional<std::pair<std::string, std::string>> bad = BadHeader(req)) {
      return Reply(400, bad->second, false, bad->first);
    }
    const bool topology = req.target() == "/v1/topology" && req.method() == http::verb::put;
    const auto limit = static_cast<uint64_t>(topology ? context_.config.max_topology_bytes
                                                      : context_.config.max_body_bytes);
    if (const auto length = parser_->content_length(); length && *length > limit) {
      return ReadFailed(http::error::body_limit);
    }
    parser_->body_limit(limit);  // a chunked body counts against it as it arrives
    if (phase_ != Phase::kFirstRequest) {
      phase_ = Phase::kRequest;
      beast::get_lowest_layer(stream_).expires_after(
          std::chrono::seconds(context_.config.request_timeout_s));
    }
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void ReadFailed(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return Reply(413,
                   "the body is larger than this route allows (max_body_bytes; "
                   "max_topology_bytes for PUT /v1/topology)",
                   false, "body");
    }
    if (ec == http::error::header_limit) {
      return Reply(431, "the request headers are larger than max_header_bytes", false, "headers");
    }
    if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream) {
      const auto [field, what] = MalformedPart(ec);
      return Reply(400, "malformed HTTP request: " + what, false, field);
    }
    CountTimeout(ec);
    Close();  // timeout, reset, end of stream, evicted
  }

  void Reply(int status, const std::string& message, bool keep_alive, const std::string& field) {
    HttpResponse r;
    r.status = status;
    r.body = ErrorBody(status, message, field);
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
    // From here until its answer is written the connection is never
    // evicted; if it was chosen just before, the request is dropped unread.
    if (!context_.connections.RequestStarted(id_)) return;
    phase_ = Phase::kRequest;
    const Clock::time_point received = Clock::now();
    auto& req = parser_->get();
    const bool keep_alive = req.keep_alive();
    const std::string method(req.method_string());
    std::string target(req.target());
    if (target.empty() || target[0] != '/' || target.size() > 4096) {
      HttpResponse r = StatusResponse(
          Invalid("the request target must be a path of at most 4096 bytes", "target"));
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
        r = StatusResponse(
            core::Status::Error("use GET " + path, core::ErrorCode::kMethodNotAllowed));
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
    HttpRequest request;
    request.method = method;
    request.target = std::move(target);
    request.authorization = std::string(req[http::field::authorization]);
    request.content_type = std::string(req[http::field::content_type]);
    request.body = std::move(req.body());
    // Nothing reads from the socket until the answer is written.
    auto done = [self = shared_from_this(), keep_alive, method, received](HttpResponse r) {
      net::post(self->stream_.get_executor(),
                [self, r = std::move(r), keep_alive, method, received]() mutable {
                  const std::string route = r.route.empty() ? "unknown" : r.route;
                  bool keep = keep_alive;
                  if (!r.user.empty()) {
                    // The connection is this user's now; past the user's
                    // cap its idle ones make room, or this one goes.
                    ConnectionTable::Authentication a =
                        self->context_.connections.Authenticated(self->id_, r.user);
                    CloseEvicted(a.evicted, self->context_.metrics);
                    if (!a.keep_open) {
                      keep = false;
                      self->context_.metrics.ConnectionCutOff(CloseReason::kMaxConnectionsPerUser);
                    }
                  }
                  self->Write(std::move(r), keep, route, method, received);
                });
    };
    context_.enqueue(std::move(request), received, std::move(done));
  }

  void Write(HttpResponse r, bool keep_alive, const std::string& route, const std::string& method,
             Clock::time_point received) {
    context_.metrics.ApiRequest(route, method, r.status,
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
    phase_ = Phase::kRequest;
    beast::get_lowest_layer(stream_).expires_after(
        std::chrono::seconds(context_.config.request_timeout_s));
    http::async_write(
        stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
          self->context_.connections.RequestDone(self->id_);
          if (ec) return self->CountTimeout(ec);
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
  HttpSessionContext& context_;
  ConnectionTable::Id id_ = 0;  // 0 until admitted
  Phase phase_ = Phase::kFirstRequest;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool linger_ = false;
  std::array<char, 16384> discard_;
};

}  // namespace

void AcceptHttpConnection(tcp::socket socket, HttpSessionContext& context) {
  beast::error_code ec;
  // Answers are small and written whole: without this each exchange waits
  // for the peer's delayed ACK (issue 14: 40 ms per CLI connection).
  socket.set_option(tcp::no_delay(true), ec);
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  auto session = std::make_shared<HttpSession>(std::move(socket), context);
  std::weak_ptr<HttpSession> weak = session;
  ConnectionTable::Admission admission = context.connections.Open(PeerKey(peer.address()), [weak] {
    if (auto s = weak.lock()) s->Evict();
  });
  CloseEvicted(admission.evicted, context.metrics);
  switch (admission.verdict) {
    case ConnectionTable::Verdict::kAdmitted:
      session->Start(admission.id);
      return;
    case ConnectionTable::Verdict::kRefusedPeer:
      context.metrics.ConnectionRefused(RefuseReason::kMaxUnauthenticatedPerPeer);
      return;  // the session's destructor closes the socket
    case ConnectionTable::Verdict::kRefusedFull:
      context.metrics.ConnectionRefused(RefuseReason::kMaxConnections);
      return;
  }
}

}  // namespace topo::daemon
