#include "client/tls_session_cache.hpp"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace topo::cli {

using core::Status;

namespace {

// SHA-256 through the low-level functions: EVP's first digest starts the
// default provider, two thirds of a `topo` command that goes through the
// connection relay (5.2 M of 7.6 M instructions, callgrind) and never makes
// a TLS context. OpenSSL 3 marks them deprecated in favour of EVP; they
// compute the same digest. (SHA256(), the one-shot, goes through EVP.)
std::string HexSha256(std::string_view a, std::string_view b) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  SHA256_CTX ctx;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  const char separator = '\0';
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, a.data(), a.size());
  SHA256_Update(&ctx, &separator, 1);
  SHA256_Update(&ctx, b.data(), b.size());
  SHA256_Final(digest, &ctx);
#pragma GCC diagnostic pop
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : digest) {
    if (out.size() >= 32) break;
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string DefaultCacheDir(const std::string& xdg_cache_home, const std::string& home) {
  if (!xdg_cache_home.empty() && xdg_cache_home.front() == '/') return xdg_cache_home + "/topo";
  if (home.empty()) return "";
  return home + "/.cache/topo";
}

std::string SessionKey(std::string_view server_url, std::string_view ca_pem) {
  return HexSha256(server_url, ca_pem.empty() ? std::string_view("system") : ca_pem);
}

Status CheckPrivateDir(const std::string& dir, bool create) {
  if (create) {
    // The parent (~/.cache) too, when it is missing; 0700 like XDG asks.
    const std::string parent = Parent(dir);
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Error("cannot create " + parent + ": " + std::strerror(errno));
    }
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Error("cannot create " + dir + ": " + std::strerror(errno));
    }
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::Error(dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return Status::Error(dir + " is not a directory");
  if (st.st_uid != ::geteuid()) return Status::Error(dir + " belongs to another user");
  if ((st.st_mode & 022) != 0) return Status::Error(dir + " is writable by others");
  return Status::Ok();
}

TlsSessionCache::TlsSessionCache(std::string dir, std::string_view key, std::string host,
                                 bool host_is_ip)
    : dir_(std::move(dir)), host_(std::move(host)), host_is_ip_(host_is_ip) {
  if (!dir_.empty()) path_ = dir_ + "/tls-session-" + std::string(key) + ".pem";
}

Status TlsSessionCache::CheckDir(bool create) const { return CheckPrivateDir(dir_, create); }

SslSessionPtr TlsSessionCache::Load(std::string* why_not) const {
  if (!enabled()) {
    *why_not = "no cache directory";
    return nullptr;
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why_not = errno == ENOENT ? "no file" : std::string("cannot open it: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  std::string text;
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok) {
    *why_not = "cannot stat it";
  } else if (!S_ISREG(st.st_mode)) {
    *why_not = "not a regular file";
    ok = false;
  } else if (st.st_uid != ::geteuid()) {
    *why_not = "owned by another user";
    ok = false;
  } else if ((st.st_mode & 077) != 0) {
    *why_not = "readable or writable by others (not 0600)";
    ok = false;
  } else if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    *why_not = "larger than " + std::to_string(kMaxFileBytes) + " bytes";
    ok = false;
  }
  if (ok) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!ok) return nullptr;
  if (Status s = CheckDir(/*create=*/false); !s.ok()) {
    *why_not = s.message();
    return nullptr;
  }

  BIO* bio = BIO_new_mem_buf(text.data(), static_cast<int>(text.size()));
  SslSessionPtr session(PEM_read_bio_SSL_SESSION(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  ERR_clear_error();
  if (!session) {
    *why_not = "not a PEM TLS session";
    return nullptr;
  }
  if (SSL_SESSION_is_resumable(session.get()) != 1) {
    *why_not = "the session is not resumable";
    return nullptr;
  }
  if (SSL_SESSION_get_protocol_version(session.get()) < TLS1_2_VERSION) {
    *why_not = "the session is older than TLS 1.2";
    return nullptr;
  }
  // The certificate the server showed when the session began must name this
  // server: a session saved for another one is never offered here.
  X509* peer = SSL_SESSION_get0_peer(session.get());
  const int named = peer == nullptr ? 0
                    : host_is_ip_   ? X509_check_ip_asc(peer, host_.c_str(), 0)
                                    : X509_check_host(peer, host_.c_str(), host_.size(),
                                                      X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, nullptr);
  if (named != 1) {
    *why_not = "the session's server certificate does not name " + host_;
    return nullptr;
  }
  return session;
}

Status TlsSessionCache::Save(SSL_SESSION* session) const {
  if (!enabled() || session == nullptr) return Status::Ok();
  if (Status s = CheckDir(/*create=*/true); !s.ok()) {
    return Status::Error("TLS session cache: " + s.message());
  }
  BIO* bio = BIO_new(BIO_s_mem());
  if (PEM_write_bio_SSL_SESSION(bio, session) != 1) {
    BIO_free(bio);
    ERR_clear_error();
    return Status::Error("TLS session cache: cannot encode the session");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);

  std::string tmp = dir_ + "/.tls-session-XXXXXX";
  const int fd = ::mkstemp(tmp.data());  // 0600
  if (fd < 0) {
    return Status::Error("TLS session cache: cannot create a file in " + dir_ + ": " +
                         std::strerror(errno));
  }
  size_t written = 0;
  while (written < pem.size()) {
    const ssize_t w = ::write(fd, pem.data() + written, pem.size() - written);
    if (w <= 0) break;
    written += static_cast<size_t>(w);
  }
  const bool closed = ::close(fd) == 0;
  if (written != pem.size() || !closed || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::Error("TLS session cache: cannot write " + path_ + ": " + why);
  }
  return Status::Ok();
}

}  // namespace topo::cli
