#pragma once
// TlsSessionCache: the TLS session of the last connection to one server,
// kept in a file so that the next `topo` process resumes it (an abbreviated
// handshake: no certificate sent, signed or verified) instead of doing a full
// handshake. Each `topo` invocation is a new process, so without this every
// command pays a full handshake (issue 14).
//
//   DIR/tls-session-<sha256(server URL, CA PEM)[:32]>.pem
//
// DIR is $XDG_CACHE_HOME/topo or ~/.cache/topo, created 0700. The file is
// written 0600, atomically (a temporary file in DIR, then rename), so
// concurrent `topo` processes read a whole session or none.
//
// Trust: the file is used for resumption only. A resumed session is bound to
// the server that issued it (only that server can decrypt its ticket and
// knows its secret), and a full handshake still verifies the server's
// certificate against the CA. Because the file holds a secret that would let
// its writer impersonate the server, Load ignores a file that is not a
// regular file, not owned by this user, readable or writable by anyone else,
// larger than kMaxFileBytes, not a PEM SSL session, not resumable, or whose
// stored server certificate does not name the host; Save then replaces it.
// A directory that is not this user's, or that others may write to, disables
// the cache (Load finds nothing, Save writes nothing).
//
// Thread safety: the object is immutable after construction; concurrent
// processes are safe through the atomic rename.

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::cli {

struct SslSessionFree {
  void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
};
using SslSessionPtr = std::unique_ptr<SSL_SESSION, SslSessionFree>;

class TlsSessionCache {
 public:
  static constexpr size_t kMaxFileBytes = 64 * 1024;

  // `dir` "" disables the cache. `key` SessionKey(server URL, CA PEM),
  // `host` the host the certificate must name (an IP literal when
  // host_is_ip).
  TlsSessionCache(std::string dir, std::string_view key, std::string host, bool host_is_ip);

  bool enabled() const { return !dir_.empty(); }
  const std::string& path() const { return path_; }

  // The saved session, or null with *why_not saying why ("no file" when
  // there is none).
  SslSessionPtr Load(std::string* why_not) const;
  // Writes `session` (PEM) in place of the file. Errors name the path.
  core::Status Save(SSL_SESSION* session) const;

 private:
  // Ok when dir_ is this user's and not writable by others; with create, it
  // (and a missing parent) is made 0700 first.
  core::Status CheckDir(bool create) const;

  std::string dir_;
  std::string path_;
  std::string host_;
  bool host_is_ip_ = false;
};

// What names one server's files in the cache directory (this session file,
// the connection relay's socket): sha256(server URL, CA PEM) in hex, 32
// digits. `server_url` as ServerUrl::ToString(), `ca_pem` the trusted CAs'
// PEM text ("" for the system's).
std::string SessionKey(std::string_view server_url, std::string_view ca_pem);

// Ok when `dir` is this user's directory and not writable by others; with
// create, it (and a missing parent) is made 0700 first. Errors name it.
core::Status CheckPrivateDir(const std::string& dir, bool create);

// $XDG_CACHE_HOME/topo (when absolute) or $HOME/.cache/topo; "" without HOME.
std::string DefaultCacheDir(const std::string& xdg_cache_home, const std::string& home);

}  // namespace topo::cli
