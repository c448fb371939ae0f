#pragma once
// The daemon's own certificate authority, made on first start, and the
// record of the node certificates it signed.
//
//   STATE_DIR/ca.pem          the CA certificate: clients trust it (--ca, TOPO_CA)
//   STATE_DIR/ca-key.pem      its key (0600); signs the server's and each
//                             agent's certificate, and the CRL
//   STATE_DIR/server.pem      the server certificate (CN topo-scheduler, SANs
//                             localhost, 127.0.0.1, ::1 and server_names)
//   STATE_DIR/server-key.pem  its key (0600)
//   STATE_DIR/crl.pem         the X.509 CRL of revoked node certificates
//   STATE_DIR/pki/issued.tsv  every node certificate issued (0600)
//   STATE_DIR/pki/revoked-nodes.tsv  the time of each node's last revocation (0600)
//   STATE_DIR/pki/lock        serializes `ca` commands against each other
//
// Keys are ECDSA P-256; certificates are X.509 v3, SHA-256 signed, with
// random 127-bit serials (16 random bytes, the top bit cleared so the DER
// integer stays positive in 16 bytes). Existing files are kept: a restart
// reuses them, so clients keep trusting ca.pem.
//
// Revocation has two parts, both written by RevokeNode (docs/daemon.md,
// "Certificates"):
//  - the serials of the node's certificates in the index go into crl.pem;
//  - the node's revocation time goes into revoked-nodes.tsv: a certificate
//    for that node whose notBefore is earlier is refused too, which covers
//    certificates the index never saw (`topo-agent --simulate` mints its own
//    from the CA key; certificates issued before the index existed).
//    Certificates issued for the node afterwards start at that time.
// crl.pem is always written last: the daemon reloads both when it changes.
//
// Thread safety: the functions here are called by `topo-scheduler ca ...`
// (one process at a time per state directory, pki/lock) and at start.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::daemon {

struct PkiPaths {
  std::string ca_cert, ca_key, server_cert, server_key;
  std::string crl;            // crl.pem
  std::string issued_index;   // pki/issued.tsv
  std::string revoked_nodes;  // pki/revoked-nodes.tsv
  std::string lock;           // pki/lock
};

// The paths of the files above in state_dir (nothing is touched).
PkiPaths PkiPathsIn(const std::string& state_dir);

// Creates whatever of the CA and server files is missing (a missing CA also
// renews the server certificate), the pki/ directory (0700), and crl.pem
// from the index when it is missing. Errors name the file and the cause.
core::Result<PkiPaths> EnsurePki(const std::string& state_dir,
                                 const std::vector<std::string>& server_names);

// Signs a certificate for `common_name` with the CA in paths, valid from an
// hour ago (clock skew) for valid_days, writing cert_out and key_out (0600).
// client: for TLS client auth (agents); else server. sans: DNS names or IP
// addresses. Not recorded in the index (the server's certificate).
core::Status IssueCertificate(const PkiPaths& ca, const std::string& common_name,
                              const std::vector<std::string>& sans, bool client,
                              const std::string& cert_out, const std::string& key_out,
                              int valid_days = 825);

// ---- node certificates: the index, issue, revoke, renew, the CRL

// One node certificate `ca issue` or `ca renew` signed. Times are Unix
// seconds (UTC).
struct IssuedCert {
  std::string serial;  // uppercase hex, as `openssl x509 -noout -serial` prints it
  std::string node;    // its CN
  int64_t not_before = 0;
  int64_t not_after = 0;
  int64_t revoked_at = 0;  // 0: not revoked
};

struct CertIndex {
  std::vector<IssuedCert> issued;                  // in the order they were issued
  std::map<std::string, int64_t> node_revoked_at;  // node -> its latest revocation
};

// A node name for a new certificate (its CN and its file name): the one
// node-name rule (common/node_name.hpp); the error names --node.
core::Status CheckNodeName(const std::string& node);

// Reads pki/issued.tsv and pki/revoked-nodes.tsv (missing files: empty).
// A malformed line is an error naming the file and line.
core::Result<CertIndex> ReadCertIndex(const PkiPaths& paths);
// Writes both files atomically (0600).
core::Status WriteCertIndex(const PkiPaths& paths, const CertIndex& index);

// The two files' text, and back (path names the file in errors).
std::string IssuedText(const CertIndex& index);
std::string RevokedNodesText(const CertIndex& index);
core::Status ParseIssued(const std::string& text, const std::string& path, CertIndex& index);
core::Status ParseRevokedNodes(const std::string& text, const std::string& path, CertIndex& index);

// Signs a new client certificate (new key, new serial) for node, valid for
// `days` days from an hour before now, but never from before the node's
// last revocation (else it would be refused as predating it); records it
// in the index, then writes OUT cert_out and key_out (0600). With
// revoke_old, every earlier certificate of the node is revoked at `now` in
// the same index update and the CRL is rewritten (`ca renew --revoke-old`).
// REQUIRES: 1 <= days <= 3650. Holds pki/lock while it runs.
core::Result<IssuedCert> IssueNodeCertificate(const PkiPaths& paths, const std::string& node,
                                              int days, const std::string& cert_out,
                                              const std::string& key_out, int64_t now,
                                              bool revoke_old = false);

struct RevokeReport {
  std::vector<IssuedCert> revoked;  // newly revoked by this call
  int64_t revoked_at = 0;           // the node's revocation time now on record
};

// Revokes every certificate of node in the index that is not revoked yet,
// records `now` as the node's revocation time, and rewrites crl.pem (also
// when nothing new was revoked, so that running it again repairs a CRL a
// failed run left behind). Holds pki/lock while it runs.
core::Result<RevokeReport> RevokeNode(const PkiPaths& paths, const std::string& node, int64_t now);

// Writes crl.pem (atomically, 0644): an X.509 v2 CRL signed by the CA that
// lists every revoked certificate of the index, thisUpdate now, nextUpdate
// the CA's own notAfter (no certificate of this CA outlives it), a CRL
// number one above the previous crl.pem's.
core::Status WriteCrl(const PkiPaths& paths, const CertIndex& index, int64_t now);

// Unix seconds as "2025-01-31T12:00:00Z" (what the `ca` commands and the
// refusals print).
std::string FormatUtc(int64_t unix_seconds);

// Writes data to path atomically (temp file, fsync, rename) with the given
// mode.
core::Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode);

}  // namespace topo::daemon
