#pragma once
// The messages of etcd's v3 JSON gateway (etcd 3.4: POST /v3/kv/range,
// /v3/kv/put, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive,
// /v3/lease/revoke), as typed structs with one writer and one validating
// reader each. No I/O: etcd_client.hpp sends them.
//
// The gateway speaks the protobuf JSON mapping: keys and values are base64,
// 64-bit integers arrive as JSON strings ("42"), and fields holding their
// zero value (0, false, empty) are left out. The readers accept exactly
// that: a missing number is 0, a number is a decimal string or a JSON
// integer, anything else is an error naming the field ("range.kvs[2].
// create_revision: expected a decimal integer, got true"). Unknown fields
// are ignored (a newer etcd may add some).
//
// Thread safety: pure functions.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/base64.hpp"
#include "topo/core/status.hpp"

namespace topo::ha {

// RFC 4648 base64 with padding (the gateway's bytes): common/base64.hpp.
using common::Base64Decode;
using common::Base64Encode;

// The smallest key greater than every key starting with prefix: the
// range_end that makes a range read "every key under prefix".
// REQUIRES: prefix is not empty and not all 0xff bytes.
std::string PrefixRangeEnd(std::string_view prefix);

// Every response's header.
struct ResponseHeader {
  uint64_t cluster_id = 0;
  uint64_t member_id = 0;
  int64_t revision = 0;  // the store's revision when the request was served
  uint64_t raft_term = 0;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the revision that created the key (0: absent)
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;  // the lease the key is attached to (0: none)
  bool operator==(const KeyValue&) const = default;
};

// ---- requests
struct RangeRequest {
  std::string key;
  std::string range_end;   // empty: key alone; PrefixRangeEnd(p) with key p: the prefix
  int64_t limit = 0;       // 0: no limit
  int64_t revision = 0;    // 0: the newest
  bool keys_only = false;  // the keys without their values
};

struct PutRequest {
  std::string key;
  std::string value;
  int64_t lease = 0;  // 0: none
};

struct DeleteRangeRequest {
  std::string key;
  std::string range_end;
};

// One condition of a txn: target(key) <result> the operand.
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue, kLease };
  enum class Op { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kCreate;
  Op op = Op::kEqual;
  int64_t number = 0;  // kVersion, kCreate, kMod, kLease
  std::string value;   // kValue
};

// The compares and reads the txns here are made of: a key's create_revision
// is `revision` (0: the key is absent), a key's value is `value`, one key.
Compare CreateRevisionIs(std::string key, int64_t revision);
Compare ValueIs(std::string key, std::string value);
RangeRequest KeyAlone(std::string key);

using TxnOp = std::variant<RangeRequest, PutRequest, DeleteRangeRequest>;

struct TxnRequest {
  std::vector<Compare> compare;  // all must hold for `success` to run
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

nlohmann::json ToJson(const RangeRequest& r);
nlohmann::json ToJson(const PutRequest& r);
nlohmann::json ToJson(const DeleteRangeRequest& r);
nlohmann::json ToJson(const TxnRequest& r);
nlohmann::json LeaseGrantJson(int64_t ttl_s);
nlohmann::json LeaseIdJson(int64_t lease_id);  // keepalive and revoke

// ---- responses
struct RangeResponse {
  ResponseHeader header;
  std::vector<KeyValue> kvs;
  int64_t count = 0;  // keys in the range (may exceed kvs.size() with a limit)
  bool more = false;
};

struct DeleteRangeResponse {
  ResponseHeader header;
  int64_t deleted = 0;
};

// One operation's answer inside a txn, in the order of the branch taken.
struct TxnOpResponse {
  enum class Kind { kRange, kPut, kDelete };
  Kind kind = Kind::kPut;
  RangeResponse range;  // kRange
  int64_t deleted = 0;  // kDelete
};

struct TxnResponse {
  ResponseHeader header;  // header.revision: the revision the txn produced
  bool succeeded = false;
  std::vector<TxnOpResponse> responses;
};

struct LeaseGrantResponse {
  ResponseHeader header;
  int64_t id = 0;
  int64_t ttl_s = 0;
};

// ttl_s <= 0: the lease no longer exists (expired or revoked).
struct LeaseKeepAliveResponse {
  ResponseHeader header;
  int64_t id = 0;
  int64_t ttl_s = 0;
};

core::Result<ResponseHeader> ParseHeader(const nlohmann::json& j, std::string_view where);
core::Result<RangeResponse> ParseRangeResponse(const nlohmann::json& j);
core::Result<ResponseHeader> ParsePutResponse(const nlohmann::json& j);
core::Result<DeleteRangeResponse> ParseDeleteRangeResponse(const nlohmann::json& j);
core::Result<TxnResponse> ParseTxnResponse(const nlohmann::json& j);
core::Result<LeaseGrantResponse> ParseLeaseGrantResponse(const nlohmann::json& j);
// The gateway wraps a keepalive's answer in {"result": ...}.
core::Result<LeaseKeepAliveResponse> ParseLeaseKeepAliveResponse(const nlohmann::json& j);

// ---- watch: POST /v3/watch answers with a stream of messages, one JSON
// object per line, for as long as the connection stays open.
nlohmann::json WatchCreateJson(std::string_view key, std::string_view range_end,
                               int64_t start_revision);
struct WatchMessage {
  ResponseHeader header;
  bool created = false;   // the watch is in place
  bool canceled = false;  // etcd ended it (see compact_revision, cancel_reason)
  // Canceled because start_revision was compacted away: what is older than
  // this is gone, so the watcher must read the keys again.
  int64_t compact_revision = 0;
  std::string cancel_reason;
  size_t events = 0;  // puts and deletes in [key, range_end)
};
// One message of the stream ({"result": {...}}, or {"error": {...}}).
core::Result<WatchMessage> ParseWatchMessage(const nlohmann::json& j);

// The gateway's error body ({"error": "...", "message": "...", "code": N},
// or {"error": {...}} from a streaming call): the message etcd gave, or
// empty when the body is not one.
std::string GatewayErrorMessage(const nlohmann::json& j);

}  // namespace topo::ha
