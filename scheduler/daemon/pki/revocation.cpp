// Revocation checks on the agents' listener (revocation.hpp).

#include "daemon/pki/revocation.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

Result<int64_t> TimeOf(const ASN1_TIME* t, const char* which) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    ERR_clear_error();
    return Status::Error(std::string("the certificate's ") + which + " is unreadable");
  }
  return static_cast<int64_t>(::timegm(&tm));
}

std::string SerialHex(const ASN1_INTEGER* serial) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
  char* hex = bn != nullptr ? BN_bn2hex(bn) : nullptr;
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct CrlFree {
  void operator()(X509_CRL* p) const { X509_CRL_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};

}  // namespace

Result<CertFacts> DescribeCertificate(const X509* cert) {
  CertFacts f;
  f.serial = SerialHex(X509_get0_serialNumber(cert));
  if (f.serial.empty()) return Status::Error("the certificate's serial is unreadable");
  char cn[256] = {0};
  // The CN the agents' listener also takes as the node name (server.cpp).
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  f.node = cn;
  Result<int64_t> nb = TimeOf(X509_get0_notBefore(cert), "notBefore");
  if (!nb.ok()) return nb.status();
  Result<int64_t> na = TimeOf(X509_get0_notAfter(cert), "notAfter");
  if (!na.ok()) return na.status();
  f.not_before = nb.value();
  f.not_after = na.value();
  return f;
}

Result<Revocations> LoadRevocations(const PkiPaths& paths) {
  Revocations r;
  struct stat st {};
  if (::stat(paths.crl.c_str(), &st) == 0) {
    Result<std::string> pem = ReadAll(paths.crl);
    if (!pem.ok()) return pem.status();
    Result<std::string> ca_pem = ReadAll(paths.ca_cert);
    if (!ca_pem.ok()) return ca_pem.status();
    std::unique_ptr<BIO, CrlFree> cb(
        BIO_new_mem_buf(ca_pem.value().data(), static_cast<int>(ca_pem.value().size())));
    std::unique_ptr<X509, CrlFree> ca(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    std::unique_ptr<BIO, CrlFree> b(
        BIO_new_mem_buf(pem.value().data(), static_cast<int>(pem.value().size())));
    std::unique_ptr<X509_CRL, CrlFree> crl(
        PEM_read_bio_X509_CRL(b.get(), nullptr, nullptr, nullptr));
    ERR_clear_error();
    if (ca == nullptr) return Status::Error(paths.ca_cert + " holds no PEM certificate");
    const std::string fix = "; run `topo-scheduler ca revoke --node NAME` again to rewrite it";
    if (crl == nullptr) return Status::Error(paths.crl + " holds no PEM CRL" + fix);
    // A CRL anyone could write would let them un-revoke: only the CA's counts.
    if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_subject_name(ca.get())) != 0 ||
        X509_CRL_verify(crl.get(), X509_get0_pubkey(ca.get())) != 1) {
      ERR_clear_error();
      return Status::Error(paths.crl + " is not signed by the CA " + paths.ca_cert + fix);
    }
    STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl.get());
    for (int i = 0; i < sk_X509_REVOKED_num(revoked); ++i) {
      const X509_REVOKED* entry = sk_X509_REVOKED_value(revoked, i);
      Result<int64_t> when = TimeOf(X509_REVOKED_get0_revocationDate(entry), "revocationDate");
      r.serials[SerialHex(X509_REVOKED_get0_serialNumber(entry))] = when.ok() ? when.value() : 0;
    }
  }
  if (::stat(paths.revoked_nodes.c_str(), &st) == 0) {
    Result<std::string> text = ReadAll(paths.revoked_nodes);
    if (!text.ok()) return text.status();
    CertIndex index;
    if (Status s = ParseRevokedNodes(text.value(), paths.revoked_nodes, index); !s.ok()) return s;
    r.nodes = std::move(index.node_revoked_at);
  }
  return r;
}

std::optional<std::string> RevocationReason(const Revocations& r, const CertFacts& cert,
                                            const std::string& crl_path) {
  const std::string fix =
      "; give the node a new one with `topo-scheduler ca renew --node " + cert.node + " --out DIR`";
  if (auto it = r.serials.find(cert.serial); it != r.serials.end()) {
    return "certificate serial " + cert.serial + " of node " + cert.node + " was revoked at " +
           FormatUtc(it->second) + " (" + crl_path + ")" + fix;
  }
  if (auto it = r.nodes.find(cert.node); it != r.nodes.end() && cert.not_before < it->second) {
    return "certificate serial " + cert.serial + " of node " + cert.node + " (notBefore " +
           FormatUtc(cert.not_before) + ") predates the node's revocation at " +
           FormatUtc(it->second) + fix;
  }
  return std::nullopt;
}

RevocationList::RevocationList(PkiPaths paths, Logger log)
    : paths_(std::move(paths)), log_(std::move(log)) {}

RevocationList::FileId RevocationList::Stat() const {
  FileId id;
  struct stat st {};
  if (::stat(paths_.crl.c_str(), &st) != 0) return id;
  id.exists = true;
  id.dev = static_cast<uint64_t>(st.st_dev);
  id.ino = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<int64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

Status RevocationList::Load() {
  std::lock_guard lock(mu_);
  const FileId id = Stat();
  Result<Revocations> r = LoadRevocations(paths_);
  if (!r.ok()) return r.status();
  current_ = std::make_shared<const Revocations>(std::move(r).value());
  seen_ = id;
  loaded_ = id.exists;
  ++generation_;
  return Status::Ok();
}

void RevocationList::ReloadLocked(const FileId& id) {
  std::string problem;
  if (!id.exists && loaded_) {
    problem = paths_.crl + " disappeared; keeping the " + std::to_string(current_->serials.size()) +
              " revoked serial(s) already loaded (a restart rebuilds it from the index)";
  } else {
    Result<Revocations> r = LoadRevocations(paths_);
    if (r.ok()) {
      current_ = std::make_shared<const Revocations>(std::move(r).value());
      loaded_ = loaded_ || id.exists;
      ++generation_;
      last_problem_.clear();
      log_("topo-scheduler: loaded " + paths_.crl + ": " +
           std::to_string(current_->serials.size()) + " revoked serial(s), " +
           std::to_string(current_->nodes.size()) + " revoked node(s)");
    } else {
      problem = r.message() + "; keeping the revocations loaded before";
    }
  }
  seen_ = id;
  if (!problem.empty() && problem != last_problem_) {
    last_problem_ = problem;
    log_("topo-scheduler: " + problem);
  }
}

uint64_t RevocationList::Refresh() {
  // The stat outside the lock: handshakes only contend when a reload is due.
  const FileId id = Stat();
  std::lock_guard lock(mu_);
  if (!(id == seen_)) ReloadLocked(id);
  return generation_;
}

std::optional<std::string> RevocationList::Refusal(const CertFacts& cert) {
  const FileId id = Stat();
  std::shared_ptr<const Revocations> lists;
  {
    std::lock_guard lock(mu_);
    if (!(id == seen_)) ReloadLocked(id);
    lists = current_;
  }
  return RevocationReason(*lists, cert, paths_.crl);
}

bool RevocationList::VerifyPeer(bool preverified, X509_STORE_CTX* ctx, PeerVerdict* verdict) {
  const X509* cert = X509_STORE_CTX_get_current_cert(ctx);
  if (!preverified) {
    // The chain (CA, signature, validity) is OpenSSL's to judge; say why,
    // so that an expired certificate is not a silent refusal.
    const int err = X509_STORE_CTX_get_error(ctx);
    Result<CertFacts> facts =
        cert != nullptr ? DescribeCertificate(cert) : Status::Error("no certificate");
    // Deeper in the chain it is an issuer's certificate, not the node's.
    if (facts.ok() && X509_STORE_CTX_get_error_depth(ctx) == 0) verdict->peer = facts.value();
    verdict->refusal = std::string(X509_verify_cert_error_string(err));
    if (facts.ok()) {
      verdict->refusal += " (certificate serial " + facts.value().serial + ", CN " +
                          facts.value().node + ", notAfter " + FormatUtc(facts.value().not_after) +
                          ")";
    }
    if (err == X509_V_ERR_CERT_HAS_EXPIRED && facts.ok()) {
      verdict->refusal += "; give the node a new one with `topo-scheduler ca renew --node " +
                          facts.value().node + " --out DIR`";
    }
    return false;
  }
  // Only the client's own certificate, at depth 0, is ours to refuse.
  if (X509_STORE_CTX_get_error_depth(ctx) != 0) return true;
  Result<CertFacts> facts =
      cert != nullptr ? DescribeCertificate(cert) : Status::Error("no client certificate");
  if (!facts.ok()) {
    verdict->refusal = facts.message();
    X509_STORE_CTX_set_error(ctx, X509_V_ERR_UNSPECIFIED);
    return false;
  }
  verdict->peer = std::move(facts).value();
  if (std::optional<std::string> why = Refusal(verdict->peer)) {
    verdict->refusal = *why;
    verdict->revoked = true;
    X509_STORE_CTX_set_error(ctx, X509_V_ERR_CERT_REVOKED);
    return false;
  }
  return true;
}

}  // namespace topo::daemon
