#include "ha/etcd_client.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "topo/common/https_connection.hpp"

namespace topo::ha {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace http = boost::beast::http;
using boost::system::error_code;
using core::Result;
using core::Status;
using nlohmann::json;

namespace {

Status Unavailable(std::string message) {
  return Status::Error(std::move(message), core::ErrorCode::kUnavailable);
}

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

std::string Describe(const error_code& ec) {
  if (ec == asio::error::timed_out) return "timed out";
  if (ec.category() == asio::error::get_ssl_category()) {
    const char* reason = ERR_reason_error_string(ec.value());
    if (reason != nullptr) return reason;
  }
  return ec.message();
}

// A PEM file an option names: readable and holding what it should.
Status CheckPem(const std::string& path, std::string_view option, std::string_view marker) {
  if (path.empty()) {
    return Status::Error(std::string(option) + " is required: the PEM file of the etcd client's " +
                         (option == "ca_file"     ? "CA"
                          : option == "cert_file" ? "certificate"
                                                  : "key"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(std::string(option) + " " + path + ": " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.size() > (1u << 20)) {
    return Status::Error(std::string(option) + " " + path + ": larger than 1 MiB; not a PEM file");
  }
  if (text.find(marker) == std::string::npos) {
    return Status::Error(std::string(option) + " " + path + ": no '" + std::string(marker) +
                         "' in it; give a PEM file");
  }
  return Status::Ok();
}

}  // namespace

std::string EtcdEndpoint::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "https://" + (v6 ? "[" + host + "]" : host) + ":" + port;
}

Result<EtcdEndpoint> ParseEtcdEndpoint(std::string_view text) {
  const std::string given(text);
  auto bad = [&](const std::string& why) {
    return Status::Error("etcd endpoint '" + given + "': " + why +
                         " (expected https://HOST:PORT, e.g. https://10.0.0.1:2379)");
  };
  if (text.size() > 300) return bad("longer than 300 characters");
  constexpr std::string_view kScheme = "https://";
  if (text.substr(0, kScheme.size()) != kScheme) {
    return bad(text.substr(0, 7) == "http://" ? "plain HTTP is refused; etcd must use TLS"
                                              : "no https:// scheme");
  }
  std::string_view rest = text.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) {
    return bad("no path, query or user info");
  }
  EtcdEndpoint out;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    out.host = std::string(rest.substr(1, close - 1));
    if (rest.substr(close + 1, 1) != ":") return bad("no :PORT");
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("no :PORT");
    out.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (out.host.empty()) return bad("empty host");
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
    return bad("port must be 1-65535");
  }
  out.port = std::to_string(p);
  error_code addr_ec;
  asio::ip::make_address(out.host, addr_ec);
  out.host_is_ip = !addr_ec;
  return out;
}

struct EtcdClient::Impl {
  EtcdClientOptions options;
  std::vector<EtcdEndpoint> endpoints;
  size_t current = 0;  // the endpoint tried first
  ssl::context ssl_ctx{ssl::context::tls_client};
  common::HttpsConnection conn{ssl_ctx};  // open to endpoints[current], or not

  void Close() { conn.Close(false); }

  Status Connect(const EtcdEndpoint& ep, common::HttpsConnection& c) {
    std::optional<common::HttpsConnection::Failure> failed =
        c.Connect(ep.host, ep.port, ep.host_is_ip);
    if (!failed) return Status::Ok();
    const error_code ec = failed->ec;
    const bool timed_out = ec == asio::error::timed_out;
    switch (failed->stage) {
      case common::HttpsConnection::Stage::kResolve:
        return Unavailable(timed_out
                               ? "cannot resolve " + ep.host + " within " + Seconds(options.timeout)
                               : "cannot resolve " + ep.host + ": " + Describe(ec));
      case common::HttpsConnection::Stage::kName:
        return Unavailable("cannot verify a certificate against " + ep.host);
      case common::HttpsConnection::Stage::kConnect:
        return Unavailable(
            "cannot connect: " +
            (timed_out ? "no answer within " + Seconds(options.timeout) : Describe(ec)));
      case common::HttpsConnection::Stage::kHandshake:
        break;
    }
    if (failed->verify != X509_V_OK) {
      return Unavailable(std::string("TLS verification failed: ") +
                         X509_verify_cert_error_string(failed->verify) +
                         " (checked against ca_file " + options.ca_file + ")");
    }
    return Unavailable("TLS handshake failed: " + Describe(ec) +
                       "; is it etcd's client URL, and does it accept ca_file's client "
                       "certificates?");
  }

  // One watch on endpoint i, on a connection of its own that ends with it.
  Result<WatchResult> WatchOn(size_t i, const std::string& body,
                              std::chrono::milliseconds max_wait) {
    const EtcdEndpoint& ep = endpoints[i];
    common::HttpsConnection watch(ssl_ctx);
    watch.set_deadline(std::chrono::steady_clock::now() + options.timeout);
    if (Status s = Connect(ep, watch); !s.ok()) return s;
    http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
    req.set(http::field::host, HostHeader(ep));
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "topo-scheduler-ha");
    req.body() = body;
    req.prepare_payload();
    if (error_code ec = watch.Write(req))
      return Unavailable("sending the watch failed: " + Describe(ec));
    // The stream's messages, one JSON object per line, until one says what
    // changed or max_wait passes.
    watch.set_deadline(std::chrono::steady_clock::now() + max_wait);
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxEtcdResponseBytes);
    size_t parsed = 0;  // the body's bytes already read as messages
    bool created = false;
    WatchResult out;
    for (;;) {
      const error_code ec = watch.ReadSome(parser);
      if (parser.is_header_done() && parser.get().result() != http::status::ok) {
        return Unavailable("watch: HTTP " + std::to_string(parser.get().result_int()));
      }
      const std::string& text = parser.get().body();
      for (size_t end; (end = text.find('\n', parsed)) != std::string::npos; parsed = end + 1) {
        json j = json::parse(text.begin() + static_cast<std::ptrdiff_t>(parsed),
                             text.begin() + static_cast<std::ptrdiff_t>(end), nullptr,
                             /*allow_exceptions=*/false);
        if (j.is_discarded()) return Unavailable("watch: a message that is not JSON");
        Result<WatchMessage> w = ParseWatchMessage(j);
        if (!w.ok()) return w.status();
        out.revision = std::max(out.revision, w.value().header.revision);
        if (w.value().events > 0 || w.value().compact_revision > 0) {
          out.changed = true;
          return out;
        }
        if (w.value().canceled) {
          return Unavailable("watch: canceled by etcd" + (w.value().cancel_reason.empty()
                                                              ? std::string()
                                                              : ": " + w.value().cancel_reason));
        }
        created = created || w.value().created;
      }
      if (ec == asio::error::timed_out) {
        if (!created) return Unavailable("watch: not in place within " + Seconds(max_wait));
        return out;
      }
      if (ec) return Unavailable("watch: the stream ended: " + Describe(ec));
    }
  }

  static std::string HostHeader(const EtcdEndpoint& ep) {
    return ep.host.find(':') != std::string::npos ? "[" + ep.host + "]:" + ep.port
                                                  : ep.host + ":" + ep.port;
  }

  enum class Outcome { kAnswered, kNotSent, kUnknown };

  // One request to endpoint i: the answer, or why not and whether it may
  // have been acted on.
  Result<json> Exchange(size_t i, const std::string& path, const std::string& body,
                        Outcome* outcome) {
    const EtcdEndpoint& ep = endpoints[i];
    *outcome = Outcome::kNotSent;
    conn.set_deadline(std::chrono::steady_clock::now() + options.timeout);
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, HostHeader(ep));
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "topo-scheduler-ha");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    // A kept-open connection the member has since closed fails on write or
    // with an empty read: then once more on a fresh connection.
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = conn.open() && current == i;
      if (!reused) {
        current = i;
        if (Status s = Connect(ep, conn); !s.ok()) return s;
      }
      error_code ec = conn.Write(req);
      if (ec) {
        Close();
        if (reused && ec != asio::error::timed_out) continue;
        return Unavailable("sending the request failed: " + Describe(ec));
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(kMaxEtcdResponseBytes);
      ec = conn.Read(parser);
      if (ec) {
        const bool got_some = parser.got_some();
        Close();
        if (reused && !got_some && ec != asio::error::timed_out) continue;
        *outcome = Outcome::kUnknown;
        return Unavailable(ec == asio::error::timed_out
                               ? "no answer within " + Seconds(options.timeout) +
                                     " (is a quorum of etcd members up?)"
                               : "reading the answer failed: " + Describe(ec));
      }
      *outcome = Outcome::kAnswered;
      http::response<http::string_body> res = parser.release();
      if (!res.keep_alive()) Close();
      json j = json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
      if (res.result() != http::status::ok) {
        std::string m = j.is_discarded() ? "" : GatewayErrorMessage(j);
        if (m.empty()) m = res.body().substr(0, 200);
        *outcome = res.result_int() >= 500 ? Outcome::kUnknown : Outcome::kAnswered;
        return Unavailable("HTTP " + std::to_string(res.result_int()) + ": " + m);
      }
      if (j.is_discarded()) return Unavailable("the answer is not JSON");
      // A streaming call (keepalive) reports errors inside a 200.
      if (j.is_object() && j.contains("error") && !j.contains("result")) {
        return Unavailable("etcd: " + GatewayErrorMessage(j));
      }
      return j;
    }
    return Unavailable("the connection closed twice");
  }
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  if (options.endpoints.empty()) {
    return Status::Error("endpoints: none given; name every etcd member as https://HOST:PORT");
  }
  if (options.endpoints.size() > 32) {
    return Status::Error("endpoints: " + std::to_string(options.endpoints.size()) +
                         " given, at most 32");
  }
  if (options.timeout.count() < 1 || options.timeout > std::chrono::seconds(60)) {
    return Status::Error("timeout: " + std::to_string(options.timeout.count()) +
                         " ms is outside 1 ms..60 s");
  }
  auto impl = std::make_unique<Impl>();
  for (const std::string& e : options.endpoints) {
    Result<EtcdEndpoint> ep = ParseEtcdEndpoint(e);
    if (!ep.ok()) return ep.status();
    impl->endpoints.push_back(ep.value());
  }
  if (Status s = CheckPem(options.ca_file, "ca_file", "-----BEGIN CERTIFICATE-----"); !s.ok()) {
    return s;
  }
  if (Status s = CheckPem(options.cert_file, "cert_file", "-----BEGIN CERTIFICATE-----"); !s.ok()) {
    return s;
  }
  if (Status s = CheckPem(options.key_file, "key_file", "PRIVATE KEY-----"); !s.ok()) return s;
  error_code ec;
  common::HttpsConnection::SetClientDefaults(impl->ssl_ctx);
  auto ssl_error = [&](const std::string& what) {
    const char* reason = ERR_reason_error_string(ERR_peek_last_error());
    ERR_clear_error();
    return Status::Error(what + ": " + (reason != nullptr ? reason : Describe(ec)));
  };
  impl->ssl_ctx.load_verify_file(options.ca_file, ec);
  if (ec) return ssl_error("ca_file " + options.ca_file);
  impl->ssl_ctx.use_certificate_chain_file(options.cert_file, ec);
  if (ec) return ssl_error("cert_file " + options.cert_file);
  impl->ssl_ctx.use_private_key_file(options.key_file, ssl::context::pem, ec);
  if (ec) return ssl_error("key_file " + options.key_file);
  if (SSL_CTX_check_private_key(impl->ssl_ctx.native_handle()) != 1) {
    ERR_clear_error();
    return Status::Error("key_file " + options.key_file + " does not match cert_file " +
                         options.cert_file);
  }
  impl->options = std::move(options);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

Result<json> EtcdClient::Call(std::string_view path, const json& body, bool retry_after_write) {
  Impl& m = *impl_;
  const std::string p(path);
  const std::string text = body.dump();
  std::string why;
  const size_t n = m.endpoints.size();
  const size_t first = m.current;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    Impl::Outcome outcome = Impl::Outcome::kNotSent;
    Result<json> r = m.Exchange(i, p, text, &outcome);
    if (r.ok()) return r;
    const std::string here = m.endpoints[i].ToString() + ": " + r.message();
    if (outcome == Impl::Outcome::kAnswered) return Unavailable("etcd " + p + " at " + here);
    if (outcome == Impl::Outcome::kUnknown && !retry_after_write) {
      return Unavailable("etcd " + p + " at " + here +
                         "; the request may or may not have been applied");
    }
    if (!why.empty()) why += "; ";
    why += here;
    m.Close();
  }
  return Unavailable("etcd " + p + ": no member answered (" + why + ")");
}

Result<EtcdClient::WatchResult> EtcdClient::Watch(std::string_view key, std::string_view range_end,
                                                  int64_t start_revision,
                                                  std::chrono::milliseconds max_wait) {
  Impl& m = *impl_;
  const std::string body = WatchCreateJson(key, range_end, start_revision).dump();
  std::string why;
  const size_t n = m.endpoints.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (m.current + k) % n;
    Result<WatchResult> r = m.WatchOn(i, body, max_wait);
    if (r.ok()) return r;
    if (!why.empty()) why += "; ";
    why += m.endpoints[i].ToString() + ": " + r.message();
  }
  return Unavailable("etcd /v3/watch: no member watched (" + why + ")");
}

Result<RangeResponse> EtcdClient::Range(const RangeRequest& request) {
  Result<json> j = Call("/v3/kv/range", ToJson(request), true);
  if (!j.ok()) return j.status();
  return ParseRangeResponse(j.value());
}

Result<ResponseHeader> EtcdClient::Put(const PutRequest& request) {
  Result<json> j = Call("/v3/kv/put", ToJson(request), false);
  if (!j.ok()) return j.status();
  return ParsePutResponse(j.value());
}

Result<DeleteRangeResponse> EtcdClient::DeleteRange(const DeleteRangeRequest& request) {
  Result<json> j = Call("/v3/kv/deleterange", ToJson(request), false);
  if (!j.ok()) return j.status();
  return ParseDeleteRangeResponse(j.value());
}

Result<TxnResponse> EtcdClient::Txn(const TxnRequest& request) {
  Result<json> j = Call("/v3/kv/txn", ToJson(request), false);
  if (!j.ok()) return j.status();
  return ParseTxnResponse(j.value());
}

Result<LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_s) {
  // A second grant after a lost answer only leaves an unused lease behind,
  // which expires.
  Result<json> j = Call("/v3/lease/grant", LeaseGrantJson(ttl_s), true);
  if (!j.ok()) return j.status();
  return ParseLeaseGrantResponse(j.value());
}

Result<LeaseKeepAliveResponse> EtcdClient::LeaseKeepAlive(int64_t lease_id) {
  Result<json> j = Call("/v3/lease/keepalive", LeaseIdJson(lease_id), true);
  if (!j.ok()) return j.status();
  return ParseLeaseKeepAliveResponse(j.value());
}

Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  Result<json> j = Call("/v3/lease/revoke", LeaseIdJson(lease_id), true);
  if (!j.ok()) return j.status();
  if (!j.value().is_object() || !j.value().contains("header")) {
    return Unavailable("etcd /v3/lease/revoke: no header in the answer; not an etcd answer");
  }
  return ParseHeader(j.value()["header"], "lease_revoke").status();
}

const EtcdClientOptions& EtcdClient::options() const { return impl_->options; }

std::string EtcdClient::current_endpoint() const {
  return impl_->endpoints[impl_->current].ToString();
}

}  // namespace topo::ha
