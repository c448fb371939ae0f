#pragma once
// A client of etcd's v3 JSON gateway over HTTPS with a client certificate
// (docs/ha.md, Engine and route). Synchronous: each call sends one POST and
// waits for its answer under one deadline (connect, TLS handshake, write and
// read together), then returns a typed, validated answer (gateway.hpp) or an
// error that names the endpoint, the call and the cause.
//
//   auto client = EtcdClient::Create({.endpoints = {"https://10.0.0.1:2379", ...},
//                                     .ca_file = ..., .cert_file = ..., .key_file = ...});
//   Result<TxnResponse> t = client.value()->Txn(txn);
//
// Endpoints. The client keeps one kept-alive connection to the endpoint that
// answered last and starts there. When an endpoint cannot be reached (connect
// or handshake fails, or its deadline passes before the request was written)
// the next is tried, in order, each with a fresh deadline, so a lost member
// costs one timeout at most. Once a request was written, a read/range call
// and a lease call are retried on the next endpoint too; a put or txn is not
// (it may have been applied): the error then says the outcome is unknown,
// and the caller's own compare (docs/ha.md: fencing on `head`) makes a retry
// safe.
//
// Answers that are not 200 carry etcd's message ("etcdserver: request timed
// out"): the error repeats it. A majority of members lost shows as no answer
// within the deadline from the members still up.
//
// Thread safety: none; one owner calls it (the election's thread, the
// daemon's strand).

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ha/gateway.hpp"
#include "topo/core/status.hpp"

namespace topo::ha {

struct EtcdClientOptions {
  // https://HOST:PORT of each member; IP literals are verified as such.
  std::vector<std::string> endpoints;
  std::string ca_file;                      // PEM: the CA that signed the members' certificates
  std::string cert_file;                    // PEM: this client's certificate (chain)
  std::string key_file;                     // PEM: its private key
  std::chrono::milliseconds timeout{2000};  // per request and endpoint, 1 ms..60 s
};

// One parsed endpoint.
struct EtcdEndpoint {
  std::string host;
  std::string port;
  bool host_is_ip = false;
  std::string ToString() const;
};

// "https://HOST:PORT" (IPv6 in brackets); anything else is an error naming
// the text and the expected form. The port is required: etcd has no default
// over HTTPS worth guessing.
core::Result<EtcdEndpoint> ParseEtcdEndpoint(std::string_view text);

// The largest answer accepted (a range of snapshot parts stays below it).
inline constexpr size_t kMaxEtcdResponseBytes = 16u << 20;

class EtcdClient {
 public:
  // Validates the options and loads the PEM files (errors name the option
  // and the file); connects lazily, on the first call.
  static core::Result<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  core::Result<RangeResponse> Range(const RangeRequest& request);
  core::Result<ResponseHeader> Put(const PutRequest& request);
  core::Result<DeleteRangeResponse> DeleteRange(const DeleteRangeRequest& request);
  core::Result<TxnResponse> Txn(const TxnRequest& request);
  core::Result<LeaseGrantResponse> LeaseGrant(int64_t ttl_s);
  // TTL <= 0 in the answer: the lease is gone (expired or revoked).
  core::Result<LeaseKeepAliveResponse> LeaseKeepAlive(int64_t lease_id);
  core::Status LeaseRevoke(int64_t lease_id);
  // Waits until a key in [key, range_end) is put or deleted at or after
  // start_revision (0: from now), or max_wait passes. changed: something
  // changed, or start_revision was compacted away (read again); else
  // max_wait passed first. revision: the newest store revision the watch
  // saw, so that a next watch from revision + 1 misses nothing. An etcd
  // watch on the gateway's stream, on a connection of its own that the call
  // ends (which ends the watch), so it blocks up to max_wait; the members
  // are tried in order as by Call.
  struct WatchResult {
    bool changed = false;
    int64_t revision = 0;
  };
  core::Result<WatchResult> Watch(std::string_view key, std::string_view range_end,
                                  int64_t start_revision, std::chrono::milliseconds max_wait);

  // The raw call behind them: POST `path` with `body`, the answer's JSON.
  // retry_after_write: whether a request already written may be sent again
  // to the next endpoint (true only for calls that change nothing twice).
  core::Result<nlohmann::json> Call(std::string_view path, const nlohmann::json& body,
                                    bool retry_after_write);

  const EtcdClientOptions& options() const;
  // The endpoint that answered last (or will be tried first).
  std::string current_endpoint() const;

 private:
  struct Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace topo::ha
