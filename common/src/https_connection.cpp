#include "topo/common/https_connection.hpp"

#include <openssl/x509_vfy.h>
#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>
#include <vector>

namespace topo::common {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

void HttpsConnection::SetClientDefaults(asio::ssl::context& ctx) {
  error_code ignored;
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1,
                  ignored);
  ctx.set_verify_mode(asio::ssl::verify_peer, ignored);
}

HttpsConnection::HttpsConnection(asio::ssl::context& ctx) : ctx_(ctx) {}

HttpsConnection::~HttpsConnection() { Close(false); }

template <typename Start, typename Cancel>
HttpsConnection::error_code HttpsConnection::Run(Start&& start, Cancel&& cancel) {
  std::optional<error_code> result;
  start([&result](const error_code& ec, auto&&...) { result = ec; });
  ioc_.restart();
  ioc_.run_until(deadline_);
  if (!result) {
    cancel();
    ioc_.restart();
    ioc_.run();
    return asio::error::timed_out;
  }
  return *result;
}

template <typename Start>
HttpsConnection::error_code HttpsConnection::RunOnStream(Start&& start) {
  return Run(start, [this] {
    error_code ignored;
    stream_->lowest_layer().close(ignored);
  });
}

std::optional<HttpsConnection::Failure> HttpsConnection::Connect(
    const std::string& host, const std::string& port, bool host_is_ip,
    const std::function<void(SSL*)>& prepare) {
  Close(false);
  std::vector<tcp::endpoint> endpoints;
  error_code ec;
  if (host_is_ip) {
    unsigned short number = 0;
    const auto [end, parse_ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    const asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec || parse_ec != std::errc() || end != port.data() + port.size()) {
      return Failure{Stage::kResolve, ec ? ec : asio::error::invalid_argument};
    }
    endpoints.emplace_back(address, number);
  } else {
    tcp::resolver resolver(ioc_);
    ec = Run(
        [&](auto handler) {
          resolver.async_resolve(
              host, port,
              [&endpoints, handler](const error_code& e, tcp::resolver::results_type r) mutable {
                for (const auto& entry : r) endpoints.push_back(entry.endpoint());
                handler(e);
              });
        },
        [&resolver] { resolver.cancel(); });
    if (ec) return Failure{Stage::kResolve, ec};
  }

  stream_ = std::make_unique<asio::ssl::stream<tcp::socket>>(ioc_, ctx_);
  SSL* ssl = stream_->native_handle();
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  bool named = false;
  if (host_is_ip) {
    named = X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    named = X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0) == 1 &&
            SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
  }
  if (!named) {
    stream_.reset();
    return Failure{Stage::kName, asio::error::invalid_argument};
  }
  if (prepare) prepare(ssl);

  ec = RunOnStream([&](auto handler) {
    asio::async_connect(
        stream_->next_layer(), endpoints,
        [handler](const error_code& e, const tcp::endpoint&) mutable { handler(e); });
  });
  if (ec) {
    stream_.reset();
    return Failure{Stage::kConnect, ec};
  }
  error_code nodelay_ec;
  stream_->next_layer().set_option(tcp::no_delay(true), nodelay_ec);
  ec = RunOnStream(
      [&](auto handler) { stream_->async_handshake(asio::ssl::stream_base::client, handler); });
  if (ec) {
    const long verify = SSL_get_verify_result(ssl);
    stream_.reset();
    return Failure{Stage::kHandshake, ec, verify};
  }
  return std::nullopt;
}

HttpsConnection::error_code HttpsConnection::Write(const Request& request) {
  return RunOnStream([&](auto handler) {
    http::async_write(*stream_, request,
                      [handler](const error_code& e, size_t) mutable { handler(e); });
  });
}

HttpsConnection::error_code HttpsConnection::Read(ResponseParser& parser) {
  return RunOnStream([&](auto handler) {
    http::async_read(*stream_, buffer_, parser,
                     [handler](const error_code& e, size_t) mutable { handler(e); });
  });
}

HttpsConnection::error_code HttpsConnection::ReadSome(ResponseParser& parser) {
  return RunOnStream([&](auto handler) {
    http::async_read_some(*stream_, buffer_, parser,
                          [handler](const error_code& e, size_t) mutable { handler(e); });
  });
}

bool HttpsConnection::PeerClosed() {
  if (buffer_.size() > 0 || SSL_pending(stream_->native_handle()) > 0) return true;
  pollfd p{};
  p.fd = stream_->lowest_layer().native_handle();
  p.events = POLLIN | POLLRDHUP;
  return ::poll(&p, 1, 0) != 0;
}

void HttpsConnection::Close(bool polite) {
  if (!stream_) return;
  if (polite) {
    // Marking the server's close_notify as received makes the shutdown
    // finish once ours is written.
    SSL_set_shutdown(stream_->native_handle(), SSL_RECEIVED_SHUTDOWN);
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    RunOnStream([this](auto handler) { stream_->async_shutdown(handler); });
  }
  error_code ignored;
  stream_->lowest_layer().close(ignored);
  stream_.reset();
  buffer_.clear();
}

}  // namespace topo::common
