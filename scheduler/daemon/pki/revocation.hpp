#pragma once
// What the agents' listener checks on every TLS handshake beyond the chain
// OpenSSL verifies: that the client certificate is not revoked.
//
// A certificate is revoked (pki.hpp, docs/daemon.md "Certificates") when
//  - its serial is listed in STATE_DIR/crl.pem, a CRL signed by the CA, or
//  - its CN names a node of STATE_DIR/pki/revoked-nodes.tsv and its
//    notBefore is earlier than that node's revocation time.
//
// RevocationList holds the loaded lists and reloads them when crl.pem
// changes (`topo-scheduler ca revoke` writes it last): every look stats the
// file, and a different inode, size or mtime means a reload. So a
// revocation takes effect at the next handshake of a running daemon, with
// no restart and no signal.

#include <openssl/x509.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "daemon/pki/pki.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// The parts of a certificate that revocation looks at. Times: Unix seconds.
struct CertFacts {
  std::string serial;  // uppercase hex, as in pki/issued.tsv
  std::string node;    // the subject's CN
  int64_t not_before = 0;
  int64_t not_after = 0;
};

// REQUIRES: cert != nullptr. An error when a field cannot be read.
core::Result<CertFacts> DescribeCertificate(const X509* cert);

struct Revocations {
  std::unordered_map<std::string, int64_t> serials;  // revoked serial -> revocation time
  std::map<std::string, int64_t> nodes;              // node -> its last revocation time
};

// Reads crl.pem, which must be signed by the CA of paths.ca_cert, and
// pki/revoked-nodes.tsv. A missing file lists nothing. Errors name the file.
core::Result<Revocations> LoadRevocations(const PkiPaths& paths);

// Why `cert` is refused under `r` (a sentence naming the serial, the node,
// the revocation time and the command that issues a new certificate), or
// nullopt when it is not revoked.
std::optional<std::string> RevocationReason(const Revocations& r, const CertFacts& cert,
                                            const std::string& crl_path);

// What an agent connection's verify callback found about its client
// certificate.
struct PeerVerdict {
  CertFacts peer;        // the client's certificate, when it could be read
  std::string refusal;   // why it was refused; empty: accepted
  bool revoked = false;  // refused as revoked (else by OpenSSL's own checks)
};

// Thread safe: handshakes on every I/O thread and the service strand call
// it at once; a mutex guards the file identity and the current lists, which
// are shared immutable snapshots, so a look holds the lock only to compare
// and copy a pointer (and, rarely, to reload).
class RevocationList {
 public:
  using Logger = std::function<void(const std::string&)>;
  // log: where reload problems go (each distinct one once).
  RevocationList(PkiPaths paths, Logger log);

  // Loads the lists at start: an unreadable or forged crl.pem is an error
  // (the daemon must not start without the revocations it was given).
  core::Status Load();

  // Reloads when crl.pem changed since the last look. A reload that fails
  // (or a crl.pem that disappeared) keeps the lists in use: failing open
  // would readmit revoked certificates. Returns the generation of the lists
  // in use, bumped by every successful reload.
  uint64_t Refresh();

  // Refresh, then RevocationReason against the lists in use.
  std::optional<std::string> Refusal(const CertFacts& cert);

  // The body of an agent connection's TLS verify callback. Keeps OpenSSL's
  // verdict on the chain (CA, validity), noting its reason in *verdict, and
  // refuses a revoked client certificate (depth 0) with
  // X509_V_ERR_CERT_REVOKED, so the client gets a "certificate revoked"
  // alert. Returns whether the handshake may go on.
  bool VerifyPeer(bool preverified, X509_STORE_CTX* ctx, PeerVerdict* verdict);

 private:
  struct FileId {
    bool exists = false;
    uint64_t dev = 0, ino = 0;
    int64_t size = 0, mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  FileId Stat() const;
  // REQUIRES: mu_ held.
  void ReloadLocked(const FileId& now);

  const PkiPaths paths_;
  const Logger log_;
  std::mutex mu_;
  // Guarded by mu_.
  FileId seen_;
  bool loaded_ = false;  // a CRL file was loaded at least once
  std::shared_ptr<const Revocations> current_ = std::make_shared<Revocations>();
  uint64_t generation_ = 0;
  std::string last_problem_;
};

}  // namespace topo::daemon
