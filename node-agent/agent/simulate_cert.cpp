// In-memory client certificates for simulated nodes (simulate_cert.hpp).

#include "simulate_cert.hpp"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <utility>

namespace topo::agent {

namespace {

struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

}  // namespace

core::Status CertMinter::Load(const std::string& ca_file, const std::string& ca_key_file) {
  using core::Status;
  BioPtr kb(BIO_new_file(ca_key_file.c_str(), "r"));
  if (kb) ca_key_.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!ca_key_) return Status::Error("--ca-key " + ca_key_file + ": no PEM private key there");
  BioPtr cb(BIO_new_file(ca_file.c_str(), "r"));
  if (cb) ca_cert_.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!ca_cert_) return Status::Error("--ca " + ca_file + ": no PEM certificate there");
  if (X509_check_private_key(ca_cert_.get(), ca_key_.get()) != 1) {
    return Status::Error("--ca-key " + ca_key_file + " is not the key of " + ca_file);
  }
  node_key_.reset(EVP_EC_gen("P-256"));
  if (!node_key_) return Status::Error("cannot generate a P-256 key");
  return Status::Ok();
}

// What `topo-scheduler ca issue` gives an agent, less the key identifiers.
core::Result<CertPtr> CertMinter::Mint(const std::string& cn) const {
  using core::Status;
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return Status::Error("RAND_bytes failed");
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 86400);
  X509_set_pubkey(cert.get(), node_key_.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("toposched"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert_.get()));
  bool ok = true;
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                                   std::pair{NID_key_usage, "critical,digitalSignature"},
                                   std::pair{NID_ext_key_usage, "clientAuth"}}) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, ca_cert_.get(), cert.get(), nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ok = ok && ext != nullptr && X509_add_ext(cert.get(), ext, -1) == 1;
    X509_EXTENSION_free(ext);
  }
  if (!ok) return Status::Error("cannot add certificate extensions for " + cn);
  if (X509_sign(cert.get(), ca_key_.get(), EVP_sha256()) == 0) {
    return Status::Error("cannot sign the certificate of " + cn);
  }
  return cert;
}

}  // namespace topo::agent
