#pragma once
// One blocking HTTPS connection, every step bounded by a deadline: the Asio
// and OpenSSL mechanics that the CLI's API client (cli/client/api_client.cpp)
// and the daemon's etcd client (scheduler/ha/etcd_client.cpp) share. Each of
// them keeps its own policy: which failures to retry, sessions, messages.
//
// Built as its own library (topo_https) that names no OpenSSL to link: the
// `topo` client links Debian's static archives, the daemon the shared ones,
// and a binary must hold one OpenSSL. Not thread-safe.

#include <openssl/ssl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace topo::common {

class HttpsConnection {
 public:
  using error_code = boost::system::error_code;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using ResponseParser = boost::beast::http::response_parser<boost::beast::http::string_body>;

  // kName: `host` cannot be set as the name the certificate must carry.
  enum class Stage { kResolve, kName, kConnect, kHandshake };
  struct Failure {
    Stage stage;
    error_code ec;    // boost::asio::error::timed_out when the deadline passed
    long verify = 0;  // X509_V_OK, or why the server's certificate was refused
  };

  // What every client context here starts with: TLS 1.2 or newer, and the
  // server's certificate verified.
  static void SetClientDefaults(boost::asio::ssl::context& ctx);

  // `ctx` (its CAs, client certificate, callbacks) must outlive this.
  explicit HttpsConnection(boost::asio::ssl::context& ctx);
  ~HttpsConnection();
  HttpsConnection(const HttpsConnection&) = delete;
  HttpsConnection& operator=(const HttpsConnection&) = delete;

  // The time every following step must finish by.
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

  // Resolves `host` (an IP literal without a resolver: Asio's runs
  // getaddrinfo on a thread it starts, milliseconds per process), connects,
  // sets TCP_NODELAY and completes the TLS handshake, the server's
  // certificate checked to name `host`: its IP address, or its DNS name (also
  // sent as SNI; RFC 6066 forbids literals). `prepare` runs on the SSL just
  // before the handshake (a session to offer). Closes any open connection
  // first. On failure nothing stays open.
  std::optional<Failure> Connect(const std::string& host, const std::string& port, bool host_is_ip,
                                 const std::function<void(SSL*)>& prepare = nullptr);

  bool open() const { return stream_ != nullptr; }
  // True when an open, idle connection can no longer carry a request: the
  // server closed it (EOF, close_notify) or sent something unasked. A kept
  // connection is checked before reuse, so a request is not written into a
  // connection the server already ended (it could not be told apart from
  // one the server dropped while acting on it).
  // REQUIRES: open()
  bool PeerClosed();
  // REQUIRES: open()
  SSL* native_handle() { return stream_->native_handle(); }

  // One request out, one answer in (the parser sets the body limit). An
  // error leaves the connection open; the caller closes it.
  // REQUIRES: open()
  error_code Write(const Request& request);
  error_code Read(ResponseParser& parser);
  // What has arrived of a streamed answer (a chunked body that stays open):
  // at least one more piece of it, appended to the parser's body.
  error_code ReadSome(ResponseParser& parser);

  // Ends the connection. `polite`: sends close_notify first, without waiting
  // for the server's (at most 250 ms), so the server sees a clean end and the
  // client saves a round trip.
  void Close(bool polite);

 private:
  // Runs one asynchronous operation, started by start(handler), until it
  // completes or the deadline passes; then cancel() aborts it.
  template <typename Start, typename Cancel>
  error_code Run(Start&& start, Cancel&& cancel);
  template <typename Start>
  error_code RunOnStream(Start&& start);

  boost::asio::ssl::context& ctx_;
  boost::asio::io_context ioc_;
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket>> stream_;
  boost::beast::flat_buffer buffer_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace topo::common
