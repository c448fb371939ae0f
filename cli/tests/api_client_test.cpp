// ApiClient against a real TLS server on loopback: a small synchronous
// Beast HTTPS server on a thread, with certificates made here with OpenSSL.

#include "client/api_client.hpp"

#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

namespace topo::cli {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using nlohmann::json;

// ---- certificates

struct KeyAndCert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  KeyAndCert() = default;
  KeyAndCert(const KeyAndCert&) = delete;
  KeyAndCert& operator=(const KeyAndCert&) = delete;
  ~KeyAndCert() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
  std::string CertPem() const {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, cert);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<size_t>(n));
    BIO_free(bio);
    return out;
  }
  std::string KeyPem() const {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<size_t>(n));
    BIO_free(bio);
    return out;
  }
};

void AddExt(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  REQUIRE(ext != nullptr);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A CA when issuer is null (self-signed), else a server certificate for
// `san` ("IP:127.0.0.1,DNS:localhost") signed by issuer.
void MakeCert(KeyAndCert* out, const std::string& cn, const KeyAndCert* issuer,
              const std::string& san = "") {
  static std::atomic<long> serial{1};
  out->key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  REQUIRE(out->key != nullptr);
  X509* x = X509_new();
  out->cert = x;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, out->key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer->cert : x, x, nullptr, nullptr, 0);
  if (issuer == nullptr) {
    AddExt(x, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
    AddExt(x, &ctx, NID_subject_key_identifier, "hash");
  } else {
    AddExt(x, &ctx, NID_basic_constraints, "CA:FALSE");
    AddExt(x, &ctx, NID_ext_key_usage, "serverAuth");
    AddExt(x, &ctx, NID_subject_alt_name, san.c_str());
  }
  REQUIRE(X509_sign(x, issuer ? issuer->key : out->key, EVP_sha256()) > 0);
}

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Rewrites the saved session as if it had been received `age_s` ago.
void AgeSavedSession(const std::filesystem::path& path, long age_s) {
  const std::string pem = ReadAll(path);
  BIO* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  SSL_SESSION* s = PEM_read_bio_SSL_SESSION(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  REQUIRE(s != nullptr);
  REQUIRE(SSL_SESSION_set_time(s, static_cast<long>(std::time(nullptr)) - age_s) != 0);
  BIO* out = BIO_new(BIO_s_mem());
  REQUIRE(PEM_write_bio_SSL_SESSION(out, s) == 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << std::string(data, static_cast<size_t>(n));
  BIO_free(out);
  SSL_SESSION_free(s);
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "topo-ca-XXXXXX").string();
    const int fd = mkstemp(tmpl.data());
    REQUIRE(fd >= 0);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// ---- the server

struct Seen {
  std::string method, target, authorization, content_type, body, host, sni;
};

class TestServer {
 public:
  using Request = http::request<http::string_body>;
  using Response = http::response<http::string_body>;
  using Handler = std::function<Response(const Request&)>;

  // close_silently: drop the connection after each answer without saying
  // Connection: close (what an idle timeout on the server looks like).
  TestServer(const KeyAndCert& server, Handler handler, bool close_silently = false)
      : handler_(std::move(handler)), close_silently_(close_silently) {
    ctx_.use_certificate_chain(asio::buffer(server.CertPem()));
    ctx_.use_private_key(asio::buffer(server.KeyPem()), ssl::context::pem);
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] { Run(); });
  }
  ~TestServer() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket wake(ioc_);
    wake.connect({asio::ip::make_address("127.0.0.1"), port()}, ec);
    thread_.join();
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  int connections() const { return connections_; }
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Run() {
    while (!stop_) {
      tcp::socket sock(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (stop_) break;
      if (ec) continue;
      ++connections_;
      ssl::stream<tcp::socket> s(std::move(sock), ctx_);
      s.handshake(ssl::stream_base::server, ec);
      if (ec) continue;
      const char* sni = SSL_get_servername(s.native_handle(), TLSEXT_NAMETYPE_host_name);
      boost::beast::flat_buffer buf;
      while (true) {
        Request req;
        http::read(s, buf, req, ec);
        if (ec) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          seen_.push_back({std::string(req.method_string()), std::string(req.target()),
                           std::string(req[http::field::authorization]),
                           std::string(req[http::field::content_type]), req.body(),
                           std::string(req[http::field::host]), sni ? sni : ""});
        }
        Response res = handler_(req);
        res.version(11);
        res.keep_alive(req.keep_alive() && res.keep_alive());
        res.prepare_payload();
        http::write(s, res, ec);
        if (ec || !res.keep_alive() || close_silently_) break;
      }
      if (!close_silently_) s.shutdown(ec);
    }
  }

  asio::io_context ioc_;
  ssl::context ctx_{ssl::context::tls_server};
  tcp::acceptor acceptor_{ioc_};
  Handler handler_;
  bool close_silently_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::vector<Seen> seen_;
  std::thread thread_;
};

TestServer::Response JsonAnswer(http::status status, const json& body) {
  TestServer::Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump();
  res.keep_alive(true);
  return res;
}

// Echoes the request; /v1/conflict answers 409 the way the daemon does.
TestServer::Response Echo(const TestServer::Request& req) {
  if (req.target() == "/v1/conflict") {
    return JsonAnswer(http::status::conflict,
                      {{"error",
                        {{"code", "conflict"},
                         {"message",
                          "job 17 is completed; only waiting or running jobs can be "
                          "cancelled"}}}});
  }
  if (req.target() == "/text") {
    TestServer::Response res{http::status::bad_gateway, 11};
    res.body() = "upstream down\n";
    return res;
  }
  return JsonAnswer(http::status::ok, {{"method", std::string(req.method_string())},
                                       {"target", std::string(req.target())}});
}

struct Pki {
  KeyAndCert ca, server, other_ca, other_server;
  Pki() {
    MakeCert(&ca, "topo test CA", nullptr);
    MakeCert(&server, "topo-scheduler", &ca, "IP:127.0.0.1,DNS:localhost");
    MakeCert(&other_ca, "someone else's CA", nullptr);
    MakeCert(&other_server, "elsewhere", &ca, "DNS:sched.example.com");
  }
};

Pki& TestPki() {
  static Pki pki;
  return pki;
}

ClientOptions Options(unsigned short port, const std::string& ca_file,
                      const std::string& host = "127.0.0.1") {
  ClientOptions o;
  o.server = "https://" + host + ":" + std::to_string(port);
  o.ca_file = ca_file;
  o.ca_source = "--ca";
  o.token = "topo_0123";
  o.timeout = std::chrono::seconds(10);
  return o;
}

std::unique_ptr<ApiClient> MakeClient(const ClientOptions& o) {
  auto c = ApiClient::Create(o);
  REQUIRE_MESSAGE(c.ok(), c.message());
  return std::move(c.value());
}

TEST_CASE("ApiClient: a good request over verified TLS, kept alive") {
  Pki& pki = TestPki();
  TempFile ca(pki.ca.CertPem());
  TestServer server(pki.server, Echo);
  {
    auto client = MakeClient(Options(server.port(), ca.path));
    auto r = client->Request("POST", "/v1/jobs", json{{"spec", {{"gpus", 8}}}});
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(r.value().status == 200);
    CHECK(r.value().ok());
    CHECK(r.value().body == json{{"method", "POST"}, {"target", "/v1/jobs"}});

    auto g = client->Request("GET", "/v1/jobs?all=1");
    REQUIRE_MESSAGE(g.ok(), g.message());
    CHECK(g.value().body["target"] == "/v1/jobs?all=1");

    auto c = client->Request("POST", "/v1/conflict");
    REQUIRE(c.ok());
    CHECK(c.value().status == 409);
    CHECK(c.value().ErrorMessage() ==
          "job 17 is completed; only waiting or running jobs can be cancelled");

    auto t = client->Request("GET", "/text");
    REQUIRE(t.ok());
    CHECK(t.value().status == 502);
    CHECK(t.value().body.is_null());
    CHECK(t.value().ErrorMessage() == "server answered 502 Bad Gateway: upstream down");
    CHECK(client->connections_opened() == 1);
  }
  const std::vector<Seen> seen = server.seen();
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].method == "POST");
  CHECK(seen[0].authorization == "Bearer topo_0123");
  CHECK(seen[0].content_type == "application/json");
  CHECK(json::parse(seen[0].body) == json{{"spec", {{"gpus", 8}}}});
  CHECK(seen[0].host == "127.0.0.1:" + std::to_string(server.port()));
  CHECK(seen[0].sni.empty());  // no SNI for an IP address
  CHECK(seen[1].body.empty());
  CHECK(seen[1].content_type.empty());
  CHECK(server.connections() == 1);
}

TEST_CASE("ApiClient: a DNS name is sent as SNI and verified") {
  Pki& pki = TestPki();
  TempFile ca(pki.ca.CertPem());
  TestServer server(pki.server, Echo);
  {
    auto client = MakeClient(Options(server.port(), ca.path, "localhost"));
    auto r = client->Request("GET", "/v1/whoami");
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(r.value().status == 200);
  }
  REQUIRE(server.seen().size() == 1);
  CHECK(server.seen()[0].sni == "localhost");
}

TEST_CASE("ApiClient: the TLS session is saved 0600 and the next client resumes it") {
  Pki& pki = TestPki();
  TempFile ca(pki.ca.CertPem());
  TestServer server(pki.server, Echo);
  std::string tmpl = (std::filesystem::temp_directory_path() / "topo-cache-XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  const std::string dir = tmpl + "/cache/topo";  // the parent is made too
  ClientOptions o = Options(server.port(), ca.path);
  o.tls_session_dir = dir;
  {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 0);
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().rfind("tls-session-", 0) == 0);
  struct stat st {};
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // A resumed ticket younger than a quarter of its lifetime stays in the
  // file (it is reusable): no rewrite per command, and it resumes again.
  const std::string saved_pem = ReadAll(files[0]);
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  const ino_t saved_inode = st.st_ino;
  for (int i = 0; i < 2; ++i) {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 1);
  }
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK(st.st_ino == saved_inode);
  CHECK(ReadAll(files[0]) == saved_pem);
  // Past a quarter of its lifetime (the server's hint), the newer ticket the
  // server sent replaces it.
  {
    const std::string pem = ReadAll(files[0]);
    BIO* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    SSL_SESSION* s = PEM_read_bio_SSL_SESSION(in, nullptr, nullptr, nullptr);
    BIO_free(in);
    REQUIRE(s != nullptr);
    const long lifetime = static_cast<long>(SSL_SESSION_get_ticket_lifetime_hint(s));
    SSL_SESSION_free(s);
    REQUIRE(lifetime > 8);
    AgeSavedSession(files[0], lifetime / 2);
  }
  const std::string aged_pem = ReadAll(files[0]);
  {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 1);
  }
  CHECK(ReadAll(files[0]) != aged_pem);
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // Another server URL (same CA) has a file of its own: a full handshake.
  {
    ClientOptions by_name = Options(server.port(), ca.path, "localhost");
    by_name.tls_session_dir = dir;
    auto client = MakeClient(by_name);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 0);
  }
  // A file others can read is not trusted, and is replaced.
  REQUIRE(::chmod(files[0].c_str(), 0644) == 0);
  {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 0);
  }
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // Garbage in the file: a full handshake, then a good file again.
  std::ofstream(files[0]) << "-----BEGIN SSL SESSION PARAMETERS-----\nAAAA\n"
                             "-----END SSL SESSION PARAMETERS-----\n";
  {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 0);
  }
  {
    auto client = MakeClient(o);
    REQUIRE(client->Request("GET", "/v1/whoami").ok());
    CHECK(client->handshakes_resumed() == 1);
  }
  std::filesystem::remove_all(tmpl);
}

TEST_CASE("ApiClient: a certificate from another CA is refused, naming the CA file") {
  Pki& pki = TestPki();
  TempFile other(pki.other_ca.CertPem());
  TestServer server(pki.server, Echo);
  auto client = MakeClient(Options(server.port(), other.path));
  auto r = client->Request("GET", "/v1/whoami");
  REQUIRE_FALSE(r.ok());
  const std::string m = r.message();
  CAPTURE(m);
  CHECK(m.rfind(
            "TLS verification of https://127.0.0.1:" + std::to_string(server.port()) + " failed: ",
            0) == 0);
  CHECK(m.find("local issuer certificate") != std::string::npos);
  CHECK(m.find("CA file " + other.path + " (from --ca)") != std::string::npos);
  CHECK(server.seen().empty());
}

TEST_CASE("ApiClient: a CA file that is PEM-shaped but unreadable fails the first handshake") {
  // The CA file is parsed when a full handshake first needs it (a resumed
  // session needs none): a broken one must still stop the connection, with
  // the CA file's error, and nothing may reach the server.
  Pki& pki = TestPki();
  TempFile broken("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
  TestServer server(pki.server, Echo);
  auto client = MakeClient(Options(server.port(), broken.path));
  auto r = client->Request("GET", "/v1/whoami");
  REQUIRE_FALSE(r.ok());
  const std::string m = r.message();
  CAPTURE(m);
  CHECK(m.rfind("cannot load CA file " + broken.path + " (from --ca): ", 0) == 0);
  CHECK(m.find("(--ca, TOPO_CA)") != std::string::npos);
  CHECK(server.seen().empty());
}

TEST_CASE("ApiClient: a certificate for another host is refused") {
  Pki& pki = TestPki();
  TempFile ca(pki.ca.CertPem());
  TestServer server(pki.other_server, Echo);
  auto client = MakeClient(Options(server.port(), ca.path));
  auto r = client->Request("GET", "/v1/whoami");
  REQUIRE_FALSE(r.ok());
  CAPTURE(r.message());
  CHECK(r.message().find("IP address mismatch: the server's certificate is not for "
                         "'127.0.0.1'") != std::string::npos);
  auto by_name = MakeClient(Options(server.port(), ca.path, "localhost"));
  auto n = by_name->Request("GET", "/v1/whoami");
  REQUIRE_FALSE(n.ok());
  CHECK(n.message().find("hostname mismatch") != std::string::npos);
}

TEST_CASE("ApiClient: connection refused says the daemon is unreachable") {
  unsigned short port = 0;
  {
    asio::io_context ioc;
    tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  TempFile ca(TestPki().ca.CertPem());
  auto client = MakeClient(Options(port, ca.path));
  auto r = client->Request("GET", "/v1/whoami");
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "cannot connect to https://127.0.0.1:" + std::to_string(port) +
                           ": connection refused; is topo-scheduler running? (--server, "
                           "TOPO_SERVER)");
}

TEST_CASE("ApiClient: a server that never answers runs into the deadline") {
  asio::io_context ioc;
  // Listening, never accepting: the kernel completes TCP, TLS never starts.
  tcp::acceptor silent(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  TempFile ca(TestPki().ca.CertPem());
  ClientOptions o = Options(silent.local_endpoint().port(), ca.path);
  o.timeout = std::chrono::milliseconds(300);
  auto client = MakeClient(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client->Request("GET", "/v1/whoami");
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("timed out after 0.3 s") != std::string::npos);
  CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("ApiClient: a kept-open connection the server dropped is reopened") {
  Pki& pki = TestPki();
  TempFile ca(pki.ca.CertPem());
  TestServer server(pki.server, Echo, /*close_silently=*/true);
  {
    auto client = MakeClient(Options(server.port(), ca.path));
    for (int i = 0; i < 3; ++i) {
      auto r = client->Request("GET", "/v1/jobs");
      REQUIRE_MESSAGE(r.ok(), r.message());
      CHECK(r.value().status == 200);
    }
    CHECK(client->connections_opened() == 3);
  }
  CHECK(server.seen().size() == 3);
}

TEST_CASE("ApiClient::Create: bad URLs, CA files and tokens fail before any network") {
  ClientOptions o;
  o.server = "http://127.0.0.1:8443";
  CHECK(ApiClient::Create(o).message().find("HTTPS only") != std::string::npos);
  o.server = "https://127.0.0.1:8443";
  o.ca_file = "/nonexistent/ca.pem";
  o.ca_source = "TOPO_CA";
  const std::string m = ApiClient::Create(o).message();
  CHECK(m ==
        "cannot load CA file /nonexistent/ca.pem (from TOPO_CA): No such file or directory "
        "(--ca, TOPO_CA)");
  TempFile not_pem("hello\n");
  o.ca_file = not_pem.path;
  CHECK(ApiClient::Create(o).message().find("no PEM certificate in it") != std::string::npos);
  // A path that never ends is read only up to a bound.
  o.ca_file = "/dev/zero";
  CHECK(ApiClient::Create(o).message() ==
        "cannot load CA file /dev/zero (from TOPO_CA): larger than 4 MiB, not a CA file; give the "
        "daemon's STATE_DIR/ca.pem (--ca, TOPO_CA)");
  o.ca_file.clear();
  o.token = "topo_x\r\nX-Evil: 1";
  CHECK(ApiClient::Create(o).message().find("control character") != std::string::npos);
  o.token = "topo_ok";
  CHECK(ApiClient::Create(o).ok());
  auto c = ApiClient::Create(o);
  CHECK_FALSE(c.value()->Request("BREW", "/x").ok());
  CHECK_FALSE(c.value()->Request("GET", "no-slash").ok());
}

}  // namespace
}  // namespace topo::cli
