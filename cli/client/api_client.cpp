#include "client/api_client.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "client/relay_client.hpp"
#include "client/tls_session_cache.hpp"
#include "topo/common/https_connection.hpp"

namespace topo::cli {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace http = boost::beast::http;
using boost::system::error_code;
using core::Result;
using core::Status;

namespace {

// Answers larger than this are refused (a 166k-GPU topology is ~20 MB).
constexpr uint64_t kMaxResponseBytes = uint64_t{1} << 30;

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Asio's messages are capitalised sentences ("Connection refused").
std::string Describe(const error_code& ec) {
  std::string m = ec.message();
  if (!m.empty()) m[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(m[0])));
  return m;
}

std::string Seconds(std::chrono::milliseconds d) {
  const long long ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

// OpenSSL's start-up, once per process, leaving out what a resumed
// session never reads (callgrind, a resumed `topo submit`: about 5.5 M of
// its 20.2 M instructions):
// - the legacy name tables of every cipher and digest: TLS fetches its
//   algorithms from the provider, and copying the tables into the provider's
//   name map was a sixth of the command. Certificate checks do look a
//   signature's digest up there (without it every CA is "too weak"), so a
//   full handshake adds the digests first (AddDigestNames);
// - libcrypto's error strings: the errors topo reports are libssl's (kept),
//   X.509 verification's (a table of their own) and its own;
// - the clean-up at exit: the process ends right after, and the kernel
//   frees its memory.
void StartOpenSsl() {
  static const bool started =
      OPENSSL_init_crypto(OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS |
                              OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS | OPENSSL_INIT_NO_ATEXIT,
                          nullptr) == 1;
  (void)started;
}

constexpr size_t kMaxCaFileBytes = 4u << 20;

// Adds the certificates (and CRLs) of a PEM text to `store`, as OpenSSL's
// file loader does: empty, or why they could not be read.
std::string AddCertificates(X509_STORE* store, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  std::string error;
  if (infos == nullptr) {
    const char* reason = ERR_reason_error_string(ERR_peek_last_error());
    error = reason != nullptr ? reason : "not a PEM certificate file";
  } else {
    int added = 0;
    for (int i = 0; i < sk_X509_INFO_num(infos); ++i) {
      const X509_INFO* info = sk_X509_INFO_value(infos, i);
      if (info->x509 != nullptr && X509_STORE_add_cert(store, info->x509) == 1) ++added;
      if (info->crl != nullptr && X509_STORE_add_crl(store, info->crl) == 1) ++added;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (added == 0) error = "no certificate could be read from it";
  }
  ERR_clear_error();
  return error;
}

// The digests' legacy names, as OPENSSL_INIT_ADD_ALL_DIGESTS would have
// added them: chain verification finds each signature's digest by them.
void AddDigestNames() {
  static const bool added = [] {
    for (const EVP_MD* md : {
             EVP_md5(),        EVP_md5_sha1(),   EVP_sha1(),       EVP_sha224(),     EVP_sha256(),
             EVP_sha384(),     EVP_sha512(),     EVP_sha512_224(), EVP_sha512_256(), EVP_sha3_224(),
             EVP_sha3_256(),   EVP_sha3_384(),   EVP_sha3_512(),   EVP_shake128(),   EVP_shake256(),
#ifndef OPENSSL_NO_RMD160
             EVP_ripemd160(),
#endif
#ifndef OPENSSL_NO_BLAKE2
             EVP_blake2b512(), EVP_blake2s256(),
#endif
#ifndef OPENSSL_NO_SM3
             EVP_sm3(),
#endif
         }) {
      if (md != nullptr) EVP_add_digest(md);
    }
    return true;
  }();
  (void)added;
}

}  // namespace

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string QueryEscape(std::string_view text) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',' || text[i] == ':' || text[i] == '@') {
      out += PercentEncode(text.substr(start, i - start), /*keep_slash=*/true);
      if (i < text.size()) out += text[i];
      start = i + 1;
    }
  }
  return out;
}

std::string ServerUrl::HostHeader() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + port;
}

std::string ServerUrl::ToString() const { return "https://" + HostHeader() + path_prefix; }

bool IsLoopbackHost(std::string_view host) {
  if (Lower(std::string(host)) == "localhost") return true;
  error_code ec;
  const asio::ip::address addr = asio::ip::make_address(std::string(host), ec);
  return !ec && addr.is_loopback();
}

Result<ServerUrl> ParseServerUrl(std::string_view url) {
  const std::string given(url);
  auto bad = [&](const std::string& why) {
    return Status::Error("server URL '" + given + "': " + why +
                         " (expected https://HOST[:PORT], e.g. https://127.0.0.1:8443)");
  };
  std::string_view rest = url;
  const size_t scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::string scheme = Lower(std::string(rest.substr(0, scheme_end)));
    if (scheme == "http") return bad("topo talks HTTPS only; use https://");
    if (scheme != "https") return bad("unknown scheme '" + scheme + "'");
    rest.remove_prefix(scheme_end + 3);
  }
  ServerUrl out;
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    if (path.find_first_of("?# ") != std::string_view::npos) return bad("no query or fragment");
    out.path_prefix = std::string(path);
  }
  if (authority.find('@') != std::string_view::npos) return bad("no user info");
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected ':' after ']'");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("empty port");
      authority = authority.substr(0, colon);
    }
    out.host = std::string(authority);
  }
  if (out.host.empty()) return bad("no host");
  for (char c : out.host) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '-' || c == '.' || c == ':' || c == '_' || c == '%')) {
      return bad("bad character '" + std::string(1, c) + "' in host");
    }
  }
  if (port.empty()) port = "8443";
  int port_number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (ec != std::errc() || end != port.data() + port.size() || port_number < 1 ||
      port_number > 65535) {
    return bad("port '" + std::string(port) + "' is not 1..65535");
  }
  out.port = std::to_string(port_number);
  error_code addr_ec;
  asio::ip::make_address(out.host, addr_ec);
  out.host_is_ip = !addr_ec;
  if (!out.host_is_ip && out.host.find(':') != std::string::npos) {
    return bad("'" + out.host + "' is not an IPv6 address");
  }
  return out;
}

std::string ApiResponse::ErrorMessage() const {
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const nlohmann::json& e = body["error"];
    if (e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
  }
  std::string reason(http::obsolete_reason(static_cast<http::status>(status)));
  std::string m = "server answered " + std::to_string(status);
  if (!reason.empty() && reason != "<unknown-status>") m += " " + reason;
  // A short plain-text body (a proxy's) is worth showing.
  std::string t = text.substr(0, 200);
  t.erase(std::remove(t.begin(), t.end(), '\r'), t.end());
  std::replace(t.begin(), t.end(), '\n', ' ');
  while (!t.empty() && t.back() == ' ') t.pop_back();
  if (!t.empty() && body.is_null()) m += ": " + t;
  return m;
}

std::string ApiResponse::ErrorField() const {
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const nlohmann::json& e = body["error"];
    if (e.contains("field") && e["field"].is_string()) return e["field"].get<std::string>();
  }
  return "";
}

struct ApiClient::Impl {
  ClientOptions options;
  ServerUrl url;
  // Made by SetUpTls when a request first goes to the server itself (not
  // through the connection relay): OpenSSL's start-up and its first context
  // are a third of a `topo submit`'s CPU.
  std::unique_ptr<ssl::context> ssl_ctx;
  std::unique_ptr<common::HttpsConnection> conn;  // open, or not
  std::string key;                                // SessionKey(url, CA PEM)
  std::string relay_socket;                       // "" without options.relay_dir
  bool relay_missing = false;
  int relayed = 0;
  int connections = 0;
  int resumed = 0;
  // The TLS session cache (disabled without options.tls_session_dir), the
  // session to offer on the next connection, and the newest one the server
  // handed out that is not saved yet (SessionArrived).
  std::unique_ptr<TlsSessionCache> session_cache;
  bool session_loaded = false;
  SslSessionPtr session;
  SslSessionPtr unsaved_session;
  bool session_from_file = false;   // `session` is the one the file holds
  bool file_session_fresh = false;  // it resumed, younger than a quarter of its lifetime

  // The --ca file's bytes, read once (they also name the session cache's
  // file); its certificates are parsed when a handshake first needs them, in
  // VerifyChain: a resumed session was verified when it was made, and parsing
  // the PEM is a tenth of a resumed `topo submit`'s CPU (docs/benchmarks.md,
  // CLI submissions). Empty: the system's CA paths.
  std::string ca_pem;
  std::string ca_load_message;  // "cannot load CA file F (from S)"
  bool ca_loaded = false;
  std::string ca_error;  // why parsing it failed, reported by Connect

  ~Impl() {
    if (conn) conn->Close(true);
  }

  Status SetUpTls() {
    if (ssl_ctx) return Status::Ok();
    StartOpenSsl();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    common::HttpsConnection::SetClientDefaults(*ctx);
    if (ca_pem.empty()) {
      error_code ec;
      ctx->set_default_verify_paths(ec);
      if (ec) return Status::Error("cannot load the system's CA certificates: " + Describe(ec));
    }
    SSL_CTX* native = ctx->native_handle();
    SSL_CTX_set_cert_verify_callback(native, &Impl::VerifyChain, this);
    // Sessions are handed to SessionArrived rather than kept in OpenSSL's
    // in-memory client cache, which no later process could see.
    SSL_CTX_set_ex_data(native, ExIndex(), this);
    SSL_CTX_set_session_cache_mode(native,
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(native, &Impl::SessionArrived);
    session_cache =
        std::make_unique<TlsSessionCache>(options.tls_session_dir, key, url.host, url.host_is_ip);
    ssl_ctx = std::move(ctx);
    conn = std::make_unique<common::HttpsConnection>(*ssl_ctx);
    return Status::Ok();
  }

  // OpenSSL's chain verification, with what only it needs loaded on first
  // use: the digests' names (StartOpenSsl) and the CA file.
  static int VerifyChain(X509_STORE_CTX* store_ctx, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    AddDigestNames();
    if (!self->ca_loaded && !self->ca_pem.empty()) {
      self->ca_loaded = true;
      self->ca_error =
          AddCertificates(SSL_CTX_get_cert_store(self->ssl_ctx->native_handle()), self->ca_pem);
    }
    if (!self->ca_error.empty()) {
      X509_STORE_CTX_set_error(store_ctx, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
      return 0;
    }
    return X509_verify_cert(store_ctx);
  }

  static int ExIndex() {
    static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
  }

  // OpenSSL's new-session callback: TLS 1.3 tickets arrive after the
  // handshake, while the answer is read; keep the newest. Returning 1 takes
  // the reference.
  static int SessionArrived(SSL* ssl, SSL_SESSION* s) {
    auto* self = static_cast<Impl*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ExIndex()));
    if (self == nullptr) return 0;
    self->unsaved_session.reset(s);
    return 1;
  }

  void Debug(const std::string& line) const {
    if (options.debug_tls) std::cerr << "tls: " << line << "\n";
  }

  // Once the answer is in: the ticket the server sent becomes the one to
  // offer next, here and (through the file) in the next process.
  void SaveNewSession() {
    if (!unsaved_session) return;
    session = std::move(unsaved_session);
    session_from_file = false;
    if (file_session_fresh) {
      // The file's ticket just resumed and has most of its life ahead: the
      // next command can resume it as well (tickets are stateless and
      // reusable), so the file is not rewritten on every command.
      file_session_fresh = false;
      Debug("the saved session is fresh; kept");
      return;
    }
    if (Status s = session_cache->Save(session.get()); !s.ok()) {
      Debug(s.message());
    } else {
      Debug("session saved to " + session_cache->path());
    }
  }

  std::string ConnectHint() const { return "; is topo-scheduler running? (--server, TOPO_SERVER)"; }

  std::string CaDescription() const {
    if (options.ca_file.empty()) {
      return "the system's CA certificates (pass the daemon's STATE_DIR/ca.pem with --ca or "
             "TOPO_CA)";
    }
    std::string d = "CA file " + options.ca_file;
    if (!options.ca_source.empty()) d += " (from " + options.ca_source + ")";
    return d;
  }

  Status Connect() {
    const std::string where = url.ToString();
    std::optional<common::HttpsConnection::Failure> failed =
        conn->Connect(url.host, url.port, url.host_is_ip, [this](SSL* ssl) {
          if (!session_loaded) {
            session_loaded = true;
            std::string why_not;
            session = session_cache->Load(&why_not);
            session_from_file = session != nullptr;
            if (!session && session_cache->enabled() && why_not != "no file") {
              Debug("ignoring " + session_cache->path() + ": " + why_not);
            }
          }
          if (session) SSL_set_session(ssl, session.get());
        });
    using Stage = common::HttpsConnection::Stage;
    if (!failed || failed->stage == Stage::kHandshake) ++connections;
    if (failed) {
      const error_code ec = failed->ec;
      const bool timed_out = ec == asio::error::timed_out;
      switch (failed->stage) {
        case Stage::kResolve:
          if (timed_out) {
            return Status::Error("cannot resolve '" + url.host + "' of " + where +
                                 ": timed out after " + Seconds(options.timeout) +
                                 " (--server, TOPO_SERVER, --timeout)");
          }
          return Status::Error("cannot resolve '" + url.host + "' of " + where + ": " +
                               Describe(ec) + " (--server, TOPO_SERVER)");
        case Stage::kName:
          return Status::Error("cannot verify against " +
                               std::string(url.host_is_ip ? "IP address " : "host name ") +
                               url.host);
        case Stage::kConnect:
          return Status::Error(
              "cannot connect to " + where + ": " +
              (timed_out ? "timed out after " + Seconds(options.timeout) : Describe(ec)) +
              ConnectHint() + (timed_out ? " (--timeout)" : ""));
        case Stage::kHandshake:
          break;
      }
      if (session && !timed_out) {
        // A session the server refuses outright (a file altered into another
        // valid session) must not lock the user out: once more, without it.
        Debug("resuming failed (" + Describe(ec) + "); trying a full handshake");
        session.reset();
        session_from_file = false;
        return Connect();
      }
      if (timed_out) {
        return Status::Error("TLS handshake with " + where + " timed out after " +
                             Seconds(options.timeout) +
                             "; is it topo-scheduler's HTTPS port? (--server, --timeout)");
      }
      if (!ca_error.empty()) {
        return Status::Error(ca_load_message + ": " + ca_error + " (--ca, TOPO_CA)");
      }
      if (failed->verify != X509_V_OK) {
        std::string why = X509_verify_cert_error_string(failed->verify);
        if (failed->verify == X509_V_ERR_HOSTNAME_MISMATCH ||
            failed->verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
          why += ": the server's certificate is not for '" + url.host +
                 "' (connect by a name or address the certificate lists)";
        }
        return Status::Error("TLS verification of " + where + " failed: " + why +
                             "; the certificate was checked against " + CaDescription());
      }
      return Status::Error("TLS handshake with " + where + " failed: " + Describe(ec) +
                           "; is it topo-scheduler's HTTPS port? (--server, TOPO_SERVER)");
    }
    if (SSL_session_reused(conn->native_handle()) == 1) {
      ++resumed;
      Debug("resumed");
      if (session_from_file) {
        const long lifetime =
            static_cast<long>(SSL_SESSION_get_ticket_lifetime_hint(session.get()));
        const long age =
            static_cast<long>(std::time(nullptr)) - SSL_SESSION_get_time(session.get());
        file_session_fresh = lifetime > 0 && age >= 0 && age < lifetime / 4;
      }
    } else {
      Debug("full handshake");
    }
    return Status::Ok();
  }

  // The last Request failed before any byte of it was sent (resolving,
  // connecting, the TLS handshake): the server cannot have acted on it.
  bool unsent = false;

  enum class Stage { kWrite, kRead };
  struct Failure {
    error_code ec;
    Stage stage;
    bool got_bytes = false;
  };

  std::variant<ApiResponse, Failure> Exchange(const http::request<http::string_body>& req) {
    error_code ec = conn->Write(req);
    if (ec) return Failure{ec, Stage::kWrite};
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxResponseBytes);
    ec = conn->Read(parser);
    if (ec) return Failure{ec, Stage::kRead, parser.got_some()};
    http::response<http::string_body> res = parser.release();
    ApiResponse out;
    out.status = static_cast<int>(res.result_int());
    out.text = std::move(res.body());
    ReadHeaders(res, &out);
    SaveNewSession();
    if (!res.keep_alive()) conn->Close(false);
    return out;
  }

  static void ReadHeaders(const http::response<http::string_body>& res, ApiResponse* out) {
    if (auto it = res.find(http::field::retry_after); it != res.end()) {
      out->retry_after = std::string(it->value());
    }
    if (auto it = res.find(http::field::content_type); it != res.end()) {
      out->content_type = std::string(it->value());
    }
  }

  // One request: through the connection relay when one serves this server,
  // else (or when the relay could not send it) directly.
  Result<ApiResponse> Send(std::string_view method, std::string_view target, std::string body,
                           std::string_view authorization, std::string_view content_type,
                           bool safe_to_repeat, std::chrono::milliseconds timeout) {
    const http::verb verb = http::string_to_verb({method.data(), method.size()});
    if (verb == http::verb::unknown) {
      return Status::Error("unknown HTTP method '" + std::string(method) + "'");
    }
    if (target.empty() || target.front() != '/') {
      return Status::Error("request target '" + std::string(target) + "' must start with '/'");
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const bool idempotent = verb == http::verb::get || verb == http::verb::put ||
                            verb == http::verb::delete_ || verb == http::verb::head;
    http::request<http::string_body> req{verb, std::string(target), 11};
    req.set(http::field::host, url.HostHeader());
    req.set(http::field::user_agent, options.user_agent);
    req.set(http::field::accept, "application/json");
    if (!authorization.empty()) req.set(http::field::authorization, std::string(authorization));
    if (!body.empty() || !content_type.empty()) {
      req.set(http::field::content_type, std::string(content_type));
      req.body() = std::move(body);
    }
    req.keep_alive(true);
    req.prepare_payload();

    if (!relay_socket.empty() && !relay_missing && (!conn || !conn->open())) {
      req.set(std::string(relay::kTimeoutHeader), std::to_string(timeout.count()));
      relay::SendResult r = relay::Send(relay_socket, req, deadline, idempotent || safe_to_repeat);
      switch (r.outcome) {
        case relay::Outcome::kAnswered: {
          ++relayed;
          ApiResponse out;
          out.status = static_cast<int>(r.response.result_int());
          out.text = std::move(r.response.body());
          ReadHeaders(r.response, &out);
          return out;
        }
        case relay::Outcome::kNoRelay:
          relay_missing = true;
          if (!r.message.empty()) Debug("relay: " + r.message);
          break;
        case relay::Outcome::kUnsent:
          Debug("relay: " + r.message + "; connecting directly");
          break;
        case relay::Outcome::kFailed:
          unsent = false;
          if (r.timed_out) {
            return Status::Error("no answer from " + url.ToString() + " within " +
                                 Seconds(timeout) + " (--timeout)");
          }
          return Status::Error("request to " + url.ToString() + " through the connection relay (" +
                               relay_socket + ") failed: " + r.message);
      }
      req.erase(std::string(relay::kTimeoutHeader));
    }
    if (Status s = SetUpTls(); !s.ok()) {
      unsent = true;
      return s;
    }
    req.target(url.path_prefix + std::string(target));
    conn->set_deadline(deadline);
    const std::string where = url.ToString();
    // A kept-open connection the server has since closed fails at once; then
    // one fresh connection is tried, when the request cannot have been acted
    // on (nothing came back, and it is idempotent or was never sent).
    for (int attempt = 0;; ++attempt) {
      if (conn->open() && conn->PeerClosed()) conn->Close(false);
      const bool reused = conn->open();
      unsent = true;
      if (!conn->open()) {
        if (Status s = Connect(); !s.ok()) return s;
      }
      unsent = false;
      std::variant<ApiResponse, Failure> r = Exchange(req);
      if (auto* ok = std::get_if<ApiResponse>(&r)) return std::move(*ok);
      const Failure f = std::get<Failure>(r);
      conn->Close(false);
      const bool stale = reused && attempt == 0 && f.ec != asio::error::timed_out && !f.got_bytes &&
                         (idempotent || f.stage == Stage::kWrite);
      if (stale) continue;
      if (f.ec == asio::error::timed_out) {
        return Status::Error("no answer from " + where + " within " + Seconds(timeout) +
                             " (--timeout)");
      }
      return Status::Error("request to " + where + " failed: " + Describe(f.ec) +
                           (f.stage == Stage::kRead && !f.got_bytes
                                ? " (the server closed the connection without answering)"
                                : ""));
    }
  }
};

bool ApiClient::last_failure_unsent() const { return impl_->unsent; }

ApiClient::ApiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiClient::~ApiClient() = default;

Result<std::unique_ptr<ApiClient>> ApiClient::Create(ClientOptions options) {
  Result<ServerUrl> url = ParseServerUrl(options.server);
  if (!url.ok()) return url.status();
  if (options.timeout.count() <= 0) return Status::Error("the timeout must be positive");
  for (char c : options.token) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return Status::Error(
          "the API token has a space or control character; check where it came "
          "from (--token, --token-file, TOPO_TOKEN, the config file)");
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->url = url.value();
  std::string ca_pem;  // names the session cache's file together with the URL
  if (!options.ca_file.empty()) {
    std::string m = "cannot load CA file " + options.ca_file;
    if (!options.ca_source.empty()) m += " (from " + options.ca_source + ")";
    std::ifstream f(options.ca_file, std::ios::binary);
    if (!f) return Status::Error(m + ": " + std::strerror(errno) + " (--ca, TOPO_CA)");
    // A CA bundle is kilobytes (the system's, a few hundred); read no more
    // than a bound, whatever the path names (/dev/zero, a disk image). In
    // chunks: a buffer of the bound's size would be zeroed and faulted in
    // on every start (4 MiB, about half of a submission's CPU).
    char chunk[16384];
    while (ca_pem.size() <= kMaxCaFileBytes &&
           f.read(chunk, static_cast<std::streamsize>(sizeof chunk)).gcount() > 0) {
      ca_pem.append(chunk, static_cast<size_t>(f.gcount()));
    }
    if (ca_pem.size() > kMaxCaFileBytes) {
      return Status::Error(
          m + ": larger than " + std::to_string(kMaxCaFileBytes >> 20) +
          " MiB, not a CA file; give the daemon's STATE_DIR/ca.pem (--ca, TOPO_CA)");
    }
    if (ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Status::Error(m +
                           ": no PEM certificate in it (-----BEGIN CERTIFICATE-----); give "
                           "the daemon's STATE_DIR/ca.pem (--ca, TOPO_CA)");
    }
    impl->ca_pem = ca_pem;
    impl->ca_load_message = std::move(m);
  }
  impl->key = SessionKey(impl->url.ToString(), ca_pem);
  impl->relay_socket = relay::SocketPath(options.relay_dir, impl->key);
  impl->options = std::move(options);
  if (impl->relay_socket.empty()) {
    // Without a relay every request goes directly: fail here, not at the
    // first request, when the system's CAs cannot be read.
    if (Status s = impl->SetUpTls(); !s.ok()) return s;
  }
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));
}

Result<ApiResponse> ApiClient::Request(std::string_view method, std::string_view target,
                                       const std::optional<nlohmann::json>& body) {
  std::string text;
  const bool json = body.has_value();
  if (json) text = body->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const bool safe_to_repeat = json && body->is_object() && body->contains("client_request_id");
  Result<ApiResponse> answer =
      impl_->Send(method, target, std::move(text),
                  impl_->options.token.empty() ? "" : "Bearer " + impl_->options.token,
                  json ? "application/json" : "", safe_to_repeat, impl_->options.timeout);
  // Parsed here, not in Send: Forward passes the text on as it is.
  if (answer.ok() && !answer.value().text.empty()) {
    ApiResponse& a = answer.value();
    a.body = nlohmann::json::parse(a.text, nullptr, /*allow_exceptions=*/false);
    if (a.body.is_discarded()) a.body = nullptr;
  }
  return answer;
}

Result<ApiResponse> ApiClient::Forward(std::string_view method, std::string_view target,
                                       std::string body, std::string_view authorization,
                                       std::string_view content_type,
                                       std::chrono::milliseconds timeout) {
  return impl_->Send(method, target, std::move(body), authorization, content_type, false, timeout);
}

const std::string& ApiClient::session_key() const { return impl_->key; }
const std::string& ApiClient::relay_socket() const { return impl_->relay_socket; }
bool ApiClient::relay_missing() const { return impl_->relay_missing; }
int ApiClient::requests_relayed() const { return impl_->relayed; }

const ClientOptions& ApiClient::options() const { return impl_->options; }
const ServerUrl& ApiClient::url() const { return impl_->url; }
int ApiClient::connections_opened() const { return impl_->connections; }
int ApiClient::handshakes_resumed() const { return impl_->resumed; }

}  // namespace topo::cli
