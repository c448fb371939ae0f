// Self-signed CA and certificates with OpenSSL 3 (EVP, X509).

#include "daemon/pki/pki.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "daemon/pki/revocation.hpp"
#include "topo/common/node_name.hpp"

namespace topo::daemon {
namespace {

using core::Result;
using core::Status;

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using CertPtr = std::unique_ptr<X509, Free>;
using BioPtr = std::unique_ptr<BIO, Free>;

std::string OpenSslError(const std::string& what) {
  unsigned long e = ERR_get_error();
  char buf[256] = {0};
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return what + (e != 0 ? std::string(": ") + buf : std::string());
}

bool Exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

Result<std::string> Slurp(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot read " + path + ": " + std::strerror(errno));
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Status::Error("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

Result<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Status::Error(OpenSslError("generating a P-256 key"));
  return key;
}

std::string KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<KeyPtr> ReadKey(const std::string& path) {
  Result<std::string> pem = Slurp(path);
  if (!pem.ok()) return pem.status();
  BioPtr bio(BIO_new_mem_buf(pem.value().data(), static_cast<int>(pem.value().size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return Status::Error(OpenSslError(path + " holds no PEM private key"));
  return key;
}

Result<CertPtr> ReadCert(const std::string& path) {
  Result<std::string> pem = Slurp(path);
  if (!pem.ok()) return pem.status();
  BioPtr bio(BIO_new_mem_buf(pem.value().data(), static_cast<int>(pem.value().size())));
  CertPtr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return Status::Error(OpenSslError(path + " holds no PEM certificate"));
  return cert;
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

bool IsIp(const std::string& s) {
  return !s.empty() && (s.find(':') != std::string::npos ||
                        s.find_first_not_of("0123456789.") == std::string::npos);
}

// A certificate for key, signed by issuer_key (issuer == nullptr: self-signed).
Result<CertPtr> MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                         bool ca, bool client, const std::vector<std::string>& sans,
                         time_t not_before, time_t not_after) {
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return Status::Error(OpenSslError("RAND_bytes"));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  if (ASN1_TIME_set(X509_getm_notBefore(cert.get()), not_before) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), not_after) == nullptr) {
    return Status::Error(OpenSslError("setting the certificate's validity"));
  }
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("toposched"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer_cert));
  bool ok = true;
  if (ca) {
    ok = ok && AddExt(cert.get(), issuer_cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    ok = ok && AddExt(cert.get(), issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    ok = ok && AddExt(cert.get(), issuer_cert, NID_basic_constraints, "critical,CA:FALSE");
    ok = ok && AddExt(cert.get(), issuer_cert, NID_key_usage, "critical,digitalSignature");
    ok = ok &&
         AddExt(cert.get(), issuer_cert, NID_ext_key_usage, client ? "clientAuth" : "serverAuth");
  }
  ok = ok && AddExt(cert.get(), issuer_cert, NID_subject_key_identifier, "hash");
  if (issuer != nullptr) {
    ok = ok && AddExt(cert.get(), issuer_cert, NID_authority_key_identifier, "keyid:always");
  }
  if (!sans.empty()) {
    std::string san;
    for (const std::string& s : sans) {
      san += (san.empty() ? "" : ",") + std::string(IsIp(s) ? "IP:" : "DNS:") + s;
    }
    ok = ok && AddExt(cert.get(), issuer_cert, NID_subject_alt_name, san);
  }
  if (!ok) return Status::Error(OpenSslError("adding certificate extensions"));
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return Status::Error(OpenSslError("signing the certificate"));
  }
  return cert;
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Error("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      return Status::Error("cannot write " + tmp + ": " + err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return Status::Error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

namespace {

// Holds pki/lock (flock) for its life: two `ca` commands at once would
// otherwise both read the index and the later write would drop the other's
// certificate or revocation.
class PkiLock {
 public:
  static Result<std::unique_ptr<PkiLock>> Take(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return Status::Error("cannot lock " + path + ": " + err);
    }
    return std::unique_ptr<PkiLock>(new PkiLock(fd));
  }
  ~PkiLock() { ::close(fd_); }  // closing releases the lock
  PkiLock(const PkiLock&) = delete;
  PkiLock& operator=(const PkiLock&) = delete;

 private:
  explicit PkiLock(int fd) : fd_(fd) {}
  int fd_;
};

// Splits a line at tabs.
std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t tab = line.find('\t', pos);
    out.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
    if (tab == std::string::npos) return out;
    pos = tab + 1;
  }
}

bool ParseSeconds(const std::string& text, int64_t& out) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || p != text.data() + text.size() || x < 0) return false;
  out = x;
  return true;
}

bool IsSerialHex(const std::string& s) {
  return !s.empty() && s.size() <= 64 &&
         s.find_first_not_of("0123456789ABCDEF") == std::string::npos;
}

// Calls each(fields) for every line that is not blank or a
// comment; stops at the first error.
Status ForEachRecord(const std::string& text, const std::string& path, size_t want_fields,
                     const std::function<Status(const std::vector<std::string>&)>& each) {
  std::istringstream in(text);
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = Fields(line);
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (f.size() != want_fields) {
      return Status::Error(
          where + "expected " + std::to_string(want_fields) + " tab-separated fields, got " +
          std::to_string(f.size()) +
          "; the file is written by `topo-scheduler ca`, restore it from a backup");
    }
    if (Status s = each(f); !s.ok()) return Status::Error(where + s.message());
  }
  return Status::Ok();
}

std::string CrlPem(X509_CRL* crl) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_CRL(bio.get(), crl);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// The CRL number of an existing crl.pem (0 when there is none or it has
// none): the next CRL must have a larger one (RFC 5280, 5.2.3).
uint64_t PreviousCrlNumber(const std::string& path) {
  Result<std::string> pem = Slurp(path);
  if (!pem.ok()) return 0;
  BioPtr bio(BIO_new_mem_buf(pem.value().data(), static_cast<int>(pem.value().size())));
  X509_CRL* crl = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr);
  if (crl == nullptr) {
    ERR_clear_error();
    return 0;
  }
  uint64_t number = 0;
  auto* n = static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr));
  if (n != nullptr) {
    if (ASN1_INTEGER_get_uint64(&number, n) != 1) number = 0;
    ASN1_INTEGER_free(n);
  }
  X509_CRL_free(crl);
  ERR_clear_error();
  return number;
}

}  // namespace

std::string FormatUtc(int64_t t) {
  const time_t tt = static_cast<time_t>(t);
  struct tm tm {};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

PkiPaths PkiPathsIn(const std::string& dir) {
  PkiPaths p;
  p.ca_cert = dir + "/ca.pem";
  p.ca_key = dir + "/ca-key.pem";
  p.server_cert = dir + "/server.pem";
  p.server_key = dir + "/server-key.pem";
  p.crl = dir + "/crl.pem";
  p.issued_index = dir + "/pki/issued.tsv";
  p.revoked_nodes = dir + "/pki/revoked-nodes.tsv";
  p.lock = dir + "/pki/lock";
  return p;
}

Result<PkiPaths> EnsurePki(const std::string& dir, const std::vector<std::string>& server_names) {
  const PkiPaths p = PkiPathsIn(dir);
  bool new_ca = false;
  if (!Exists(p.ca_cert) || !Exists(p.ca_key)) {
    Result<KeyPtr> key = NewKey();
    if (!key.ok()) return key.status();
    const time_t now = ::time(nullptr);
    Result<CertPtr> cert = MakeCert(key.value().get(), "toposched CA", nullptr, nullptr,
                                    /*ca=*/true, false, {}, now - 3600, now + 3650L * 86400);
    if (!cert.ok()) return cert.status();
    if (Status s = WriteFileAtomic(p.ca_key, KeyPem(key.value().get()), 0600); !s.ok()) return s;
    if (Status s = WriteFileAtomic(p.ca_cert, CertPem(cert.value().get()), 0644); !s.ok()) {
      return s;
    }
    new_ca = true;
  }
  if (new_ca || !Exists(p.server_cert) || !Exists(p.server_key)) {
    std::vector<std::string> sans = {"localhost", "127.0.0.1", "::1"};
    for (const std::string& n : server_names) sans.push_back(n);
    if (Status s = IssueCertificate(p, "topo-scheduler", sans, /*client=*/false, p.server_cert,
                                    p.server_key);
        !s.ok()) {
      return s;
    }
  }
  const std::string pki_dir = std::filesystem::path(p.issued_index).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(pki_dir, ec);
  if (ec) return Status::Error("cannot create " + pki_dir + ": " + ec.message());
  ::chmod(pki_dir.c_str(), 0700);
  // A missing CRL is rebuilt from the index, so that deleting crl.pem does
  // not quietly readmit revoked certificates after the next start. A new CA
  // starts with an empty one: the CRL path always holds a CRL.
  if (!Exists(p.crl)) {
    Result<std::unique_ptr<PkiLock>> lock = PkiLock::Take(p.lock);
    if (!lock.ok()) return lock.status();
    Result<CertIndex> index = ReadCertIndex(p);
    if (!index.ok()) return index.status();
    if (Status s = WriteCrl(p, index.value(), ::time(nullptr)); !s.ok()) return s;
  }
  return p;
}

Status IssueCertificate(const PkiPaths& ca, const std::string& cn,
                        const std::vector<std::string>& sans, bool client,
                        const std::string& cert_out, const std::string& key_out, int valid_days) {
  Result<KeyPtr> ca_key = ReadKey(ca.ca_key);
  if (!ca_key.ok()) return ca_key.status();
  Result<CertPtr> ca_cert = ReadCert(ca.ca_cert);
  if (!ca_cert.ok()) return ca_cert.status();
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  const time_t now = ::time(nullptr);
  Result<CertPtr> cert =
      MakeCert(key.value().get(), cn, ca_cert.value().get(), ca_key.value().get(), false, client,
               sans, now - 3600, now + static_cast<time_t>(valid_days) * 86400);
  if (!cert.ok()) return cert.status();
  if (Status s = WriteFileAtomic(key_out, KeyPem(key.value().get()), 0600); !s.ok()) return s;
  return WriteFileAtomic(cert_out, CertPem(cert.value().get()), 0644);
}

// ---------------------------------------------------------------- index

Status CheckNodeName(const std::string& node) {
  // The one node-name rule (common/node_name.hpp): a certificate for a name
  // no topology can hold would bring no node up.
  if (common::ValidNodeName(node)) return Status::Ok();
  return Status::Error("--node \"" + common::ShownName(node) + "\": a node name is " +
                       std::string(common::NodeNameRule()) +
                       " (it is the certificate's CN and its file name)");
}

namespace {

// A node of pki/*.tsv: written by this daemon, maybe before the node-name
// rule, so only what keeps a line and a file name whole is checked.
Status CheckRecordedNode(const std::string& node) {
  bool ok = !node.empty() && node.size() <= 64 && node != "." && node != "..";
  for (unsigned char c : node) ok = ok && c > 0x20 && c != 0x7f && c != '/';
  return ok ? Status::Ok() : Status::Error("bad node name");
}

}  // namespace

std::string IssuedText(const CertIndex& index) {
  std::string out =
      "# Node certificates issued by `topo-scheduler ca` (docs/daemon.md, Certificates).\n"
      "# serial\tnode\tnot_before\tnot_after\trevoked_at (Unix seconds; - : not revoked)\n";
  for (const IssuedCert& c : index.issued) {
    out += c.serial + "\t" + c.node + "\t" + std::to_string(c.not_before) + "\t" +
           std::to_string(c.not_after) + "\t" +
           (c.revoked_at > 0 ? std::to_string(c.revoked_at) : std::string("-")) + "\n";
  }
  return out;
}

std::string RevokedNodesText(const CertIndex& index) {
  std::string out =
      "# Nodes revoked by `topo-scheduler ca revoke`: a certificate for the node whose\n"
      "# notBefore is earlier than revoked_at is refused (docs/daemon.md, Certificates).\n"
      "# node\trevoked_at (Unix seconds)\n";
  for (const auto& [node, at] : index.node_revoked_at) {
    out += node + "\t" + std::to_string(at) + "\n";
  }
  return out;
}

Status ParseIssued(const std::string& text, const std::string& path, CertIndex& index) {
  return ForEachRecord(text, path, 5, [&index](const std::vector<std::string>& f) {
    IssuedCert c;
    c.serial = f[0];
    c.node = f[1];
    if (!IsSerialHex(c.serial)) return Status::Error("serial \"" + f[0] + "\" is not hex");
    if (Status s = CheckRecordedNode(c.node); !s.ok()) return s;
    if (!ParseSeconds(f[2], c.not_before) || !ParseSeconds(f[3], c.not_after)) {
      return Status::Error("not_before and not_after must be Unix seconds");
    }
    if (f[4] != "-" && (!ParseSeconds(f[4], c.revoked_at) || c.revoked_at == 0)) {
      return Status::Error("revoked_at must be Unix seconds or -");
    }
    index.issued.push_back(std::move(c));
    return Status::Ok();
  });
}

Status ParseRevokedNodes(const std::string& text, const std::string& path, CertIndex& index) {
  return ForEachRecord(text, path, 2, [&index](const std::vector<std::string>& f) {
    if (Status s = CheckRecordedNode(f[0]); !s.ok()) return s;
    int64_t at = 0;
    if (!ParseSeconds(f[1], at) || at == 0) {
      return Status::Error("revoked_at must be Unix seconds");
    }
    int64_t& kept = index.node_revoked_at[f[0]];
    kept = std::max(kept, at);
    return Status::Ok();
  });
}

Result<CertIndex> ReadCertIndex(const PkiPaths& paths) {
  CertIndex index;
  if (Exists(paths.issued_index)) {
    Result<std::string> text = Slurp(paths.issued_index);
    if (!text.ok()) return text.status();
    if (Status s = ParseIssued(text.value(), paths.issued_index, index); !s.ok()) return s;
  }
  if (Exists(paths.revoked_nodes)) {
    Result<std::string> text = Slurp(paths.revoked_nodes);
    if (!text.ok()) return text.status();
    if (Status s = ParseRevokedNodes(text.value(), paths.revoked_nodes, index); !s.ok()) return s;
  }
  return index;
}

Status WriteCertIndex(const PkiPaths& paths, const CertIndex& index) {
  if (Status s = WriteFileAtomic(paths.issued_index, IssuedText(index), 0600); !s.ok()) return s;
  return WriteFileAtomic(paths.revoked_nodes, RevokedNodesText(index), 0600);
}

// ---------------------------------------------------------------- issue, revoke

namespace {

// Marks every unrevoked certificate of node in index revoked at now, except
// `keep` (a serial), and records now as the node's revocation time.
std::vector<IssuedCert> MarkRevoked(CertIndex& index, const std::string& node, int64_t now,
                                    const std::string& keep) {
  std::vector<IssuedCert> revoked;
  for (IssuedCert& c : index.issued) {
    if (c.node != node || c.revoked_at != 0 || c.serial == keep) continue;
    c.revoked_at = now;
    revoked.push_back(c);
  }
  int64_t& at = index.node_revoked_at[node];
  at = std::max(at, now);
  return revoked;
}

}  // namespace

Result<IssuedCert> IssueNodeCertificate(const PkiPaths& paths, const std::string& node, int days,
                                        const std::string& cert_out, const std::string& key_out,
                                        int64_t now, bool revoke_old) {
  if (Status s = CheckNodeName(node); !s.ok()) return s;
  if (days < 1 || days > 3650) {
    return Status::Error("--days " + std::to_string(days) + " is out of range; use 1..3650");
  }
  Result<std::unique_ptr<PkiLock>> lock = PkiLock::Take(paths.lock);
  if (!lock.ok()) return lock.status();
  Result<CertIndex> index = ReadCertIndex(paths);
  if (!index.ok()) return index.status();
  CertIndex& idx = index.value();
  Result<KeyPtr> ca_key = ReadKey(paths.ca_key);
  if (!ca_key.ok()) return ca_key.status();
  Result<CertPtr> ca_cert = ReadCert(paths.ca_cert);
  if (!ca_cert.ok()) return ca_cert.status();
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();

  // An hour back for clock skew, but not before the node's last revocation:
  // the daemon refuses any certificate of a revoked node that predates it.
  int64_t revoked_at = 0;
  if (auto it = idx.node_revoked_at.find(node); it != idx.node_revoked_at.end()) {
    revoked_at = it->second;
  }
  if (revoke_old) revoked_at = std::max(revoked_at, now);
  const int64_t not_before = std::max(now - 3600, revoked_at);
  const int64_t not_after = now + int64_t{days} * 86400;
  Result<CertPtr> cert = MakeCert(key.value().get(), node, ca_cert.value().get(),
                                  ca_key.value().get(), false, /*client=*/true, {node},
                                  static_cast<time_t>(not_before), static_cast<time_t>(not_after));
  if (!cert.ok()) return cert.status();

  IssuedCert record;
  Result<CertFacts> facts = DescribeCertificate(cert.value().get());
  if (!facts.ok()) return facts.status();
  record.serial = facts.value().serial;
  record.node = node;
  record.not_before = not_before;
  record.not_after = not_after;
  if (revoke_old) MarkRevoked(idx, node, now, record.serial);
  idx.issued.push_back(record);
  // The index first: a certificate on disk that the index does not know
  // could not be revoked by name; an index entry whose files were never
  // written costs nothing.
  if (Status s = WriteCertIndex(paths, idx); !s.ok()) return s;
  if (Status s = WriteFileAtomic(key_out, KeyPem(key.value().get()), 0600); !s.ok()) return s;
  if (Status s = WriteFileAtomic(cert_out, CertPem(cert.value().get()), 0644); !s.ok()) return s;
  if (revoke_old) {
    if (Status s = WriteCrl(paths, idx, now); !s.ok()) return s;
  }
  return record;
}

Result<RevokeReport> RevokeNode(const PkiPaths& paths, const std::string& node, int64_t now) {
  if (Status s = CheckNodeName(node); !s.ok()) return s;
  Result<std::unique_ptr<PkiLock>> lock = PkiLock::Take(paths.lock);
  if (!lock.ok()) return lock.status();
  Result<CertIndex> index = ReadCertIndex(paths);
  if (!index.ok()) return index.status();
  RevokeReport report;
  report.revoked = MarkRevoked(index.value(), node, now, "");
  report.revoked_at = index.value().node_revoked_at[node];
  if (Status s = WriteCertIndex(paths, index.value()); !s.ok()) return s;
  // Last: the daemon reloads the revocations when crl.pem changes.
  if (Status s = WriteCrl(paths, index.value(), now); !s.ok()) return s;
  return report;
}

Status WriteCrl(const PkiPaths& paths, const CertIndex& index, int64_t now) {
  Result<KeyPtr> ca_key = ReadKey(paths.ca_key);
  if (!ca_key.ok()) return ca_key.status();
  Result<CertPtr> ca_cert = ReadCert(paths.ca_cert);
  if (!ca_cert.ok()) return ca_cert.status();
  std::unique_ptr<X509_CRL, decltype(&X509_CRL_free)> crl(X509_CRL_new(), &X509_CRL_free);
  bool ok = crl != nullptr && X509_CRL_set_version(crl.get(), 1) == 1 &&  // v2
            X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(ca_cert.value().get())) == 1;
  std::unique_ptr<ASN1_TIME, decltype(&ASN1_TIME_free)> this_update(
      ASN1_TIME_set(nullptr, static_cast<time_t>(now)), &ASN1_TIME_free);
  ok = ok && this_update != nullptr && X509_CRL_set1_lastUpdate(crl.get(), this_update.get()) == 1;
  ok = ok && X509_CRL_set1_nextUpdate(crl.get(), X509_get0_notAfter(ca_cert.value().get())) == 1;
  for (const IssuedCert& c : index.issued) {
    if (!ok || c.revoked_at == 0) continue;
    X509_REVOKED* entry = X509_REVOKED_new();
    BIGNUM* bn = nullptr;
    ok = entry != nullptr && BN_hex2bn(&bn, c.serial.c_str()) != 0;
    ASN1_INTEGER* serial = ok ? BN_to_ASN1_INTEGER(bn, nullptr) : nullptr;
    ASN1_TIME* when = ok ? ASN1_TIME_set(nullptr, static_cast<time_t>(c.revoked_at)) : nullptr;
    ok = ok && serial != nullptr && when != nullptr &&
         X509_REVOKED_set_serialNumber(entry, serial) == 1 &&
         X509_REVOKED_set_revocationDate(entry, when) == 1 &&
         X509_CRL_add0_revoked(crl.get(), entry) == 1;
    if (ok) entry = nullptr;  // the CRL owns it now
    X509_REVOKED_free(entry);
    ASN1_TIME_free(when);
    ASN1_INTEGER_free(serial);
    BN_free(bn);
  }
  if (!ok) return Status::Error(OpenSslError("building the CRL " + paths.crl));
  std::unique_ptr<ASN1_INTEGER, decltype(&ASN1_INTEGER_free)> number(ASN1_INTEGER_new(),
                                                                     &ASN1_INTEGER_free);
  ok = number != nullptr &&
       ASN1_INTEGER_set_uint64(number.get(), PreviousCrlNumber(paths.crl) + 1) == 1 &&
       X509_CRL_add1_ext_i2d(crl.get(), NID_crl_number, number.get(), 0, 0) == 1;
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert.value().get(), nullptr, nullptr, crl.get(), 0);
  std::unique_ptr<X509_EXTENSION, Free> aki(
      X509V3_EXT_conf_nid(nullptr, &ctx, NID_authority_key_identifier, "keyid:always"));
  ok = ok && aki != nullptr && X509_CRL_add_ext(crl.get(), aki.get(), -1) == 1;
  ok = ok && X509_CRL_sort(crl.get()) == 1;
  if (!ok) return Status::Error(OpenSslError("adding the CRL's extensions"));
  if (X509_CRL_sign(crl.get(), ca_key.value().get(), EVP_sha256()) == 0) {
    return Status::Error(OpenSslError("signing the CRL " + paths.crl + " with " + paths.ca_key));
  }
  return WriteFileAtomic(paths.crl, CrlPem(crl.get()), 0644);
}

}  // namespace topo::daemon
