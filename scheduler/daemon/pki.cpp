// Self-signed CA and certificates with OpenSSL 3 (EVP, X509).

#include "daemon/pki.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

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
                         long valid_days) {
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return Status::Error(OpenSslError("RAND_bytes"));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), valid_days * 86400);
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

Result<PkiPaths> EnsurePki(const std::string& dir, const std::vector<std::string>& server_names) {
  PkiPaths p{dir + "/ca.pem", dir + "/ca-key.pem", dir + "/server.pem", dir + "/server-key.pem"};
  bool new_ca = false;
  if (!Exists(p.ca_cert) || !Exists(p.ca_key)) {
    Result<KeyPtr> key = NewKey();
    if (!key.ok()) return key.status();
    Result<CertPtr> cert = MakeCert(key.value().get(), "toposched CA", nullptr, nullptr,
                                    /*ca=*/true, false, {}, 3650);
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
  return p;
}

Status IssueCertificate(const PkiPaths& ca, const std::string& cn,
                        const std::vector<std::string>& sans, bool client,
                        const std::string& cert_out, const std::string& key_out) {
  Result<KeyPtr> ca_key = ReadKey(ca.ca_key);
  if (!ca_key.ok()) return ca_key.status();
  Result<CertPtr> ca_cert = ReadCert(ca.ca_cert);
  if (!ca_cert.ok()) return ca_cert.status();
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  Result<CertPtr> cert = MakeCert(key.value().get(), cn, ca_cert.value().get(),
                                  ca_key.value().get(), false, client, sans, 825);
  if (!cert.ok()) return cert.status();
  if (Status s = WriteFileAtomic(key_out, KeyPem(key.value().get()), 0600); !s.ok()) return s;
  return WriteFileAtomic(cert_out, CertPem(cert.value().get()), 0644);
}

}  // namespace topo::daemon
