#pragma once
// The daemon's own certificate authority, made on first start.
//
//   STATE_DIR/ca.pem          the CA certificate: clients trust it (--ca, TOPO_CA)
//   STATE_DIR/ca-key.pem      its key (0600); signs the server's and, later,
//                             each agent's certificate
//   STATE_DIR/server.pem      the server certificate (CN topo-scheduler, SANs
//                             localhost, 127.0.0.1, ::1 and server_names)
//   STATE_DIR/server-key.pem  its key (0600)
//
// Keys are ECDSA P-256; certificates are X.509 v3, SHA-256 signed. Existing
// files are kept: a restart reuses them, so clients keep trusting ca.pem.

#include <string>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::daemon {

struct PkiPaths {
  std::string ca_cert, ca_key, server_cert, server_key;
};

// Creates whatever of the four files is missing (a missing CA also renews
// the server certificate). Errors name the file and the cause.
core::Result<PkiPaths> EnsurePki(const std::string& state_dir,
                                 const std::vector<std::string>& server_names);

// Signs a certificate for `common_name` with the CA in paths, writing
// cert_out and key_out (0600). client: for TLS client auth (agents); else
// server. sans: DNS names or IP addresses.
core::Status IssueCertificate(const PkiPaths& ca, const std::string& common_name,
                              const std::vector<std::string>& sans, bool client,
                              const std::string& cert_out, const std::string& key_out);

// Writes data to path atomically (temp file, fsync, rename) with the given
// mode.
core::Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode);

}  // namespace topo::daemon
