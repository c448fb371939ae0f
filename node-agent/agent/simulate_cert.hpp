#pragma once
// Client certificates for `topo-agent --simulate` (simulate.hpp): each
// simulated node gets its own X.509 certificate (CN = node name), signed in
// memory by the scheduler's CA key, like `topo-scheduler ca issue` would.
// One P-256 key is shared by every simulated node (a simulation shortcut).
//
// Thread safety: none; one owner.

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "topo/core/status.hpp"

namespace topo::agent {

struct OpenSslFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree>;
using CertPtr = std::unique_ptr<X509, OpenSslFree>;

class CertMinter {
 public:
  // Reads the CA certificate and its key (PEM) and makes the nodes' key.
  // Errors name the file.
  core::Status Load(const std::string& ca_file, const std::string& ca_key_file);
  // A TLS client certificate for `cn`, valid for 30 days.
  // REQUIRES: Load succeeded.
  core::Result<CertPtr> Mint(const std::string& cn) const;
  // The private key of every minted certificate.
  EVP_PKEY* node_key() const { return node_key_.get(); }

 private:
  KeyPtr ca_key_;
  CertPtr ca_cert_;
  KeyPtr node_key_;
};

}  // namespace topo::agent
