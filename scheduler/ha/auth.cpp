// Leadership's users and tokens (docs/ha.md, Users and tokens): the store's
// users and token hashes as one value at /toposched/<cluster>/auth (their
// JSON, compressed like the log's batches: records.hpp), written
// by the leader after each change in a txn fenced on its leader key, and
// taken whole by every standby and by a new leader before it serves.

#include <string>

#include "ha/leadership.hpp"
#include "ha/records.hpp"

namespace topo::ha {

using core::Result;
using core::Status;

namespace {

std::string AuthKey(const std::string& cluster) { return KeyPrefix(cluster) + "auth"; }

}  // namespace

Status Leadership::PublishAuth(const std::string& value) {
  if (lost_.load()) {
    return Status::Error(
        "this scheduler lost its leadership (term " + std::to_string(term_) + "): " + lost_reason(),
        core::ErrorCode::kUnavailable);
  }
  const int64_t limit = options_.max_request_bytes - kRequestMargin;
  Result<std::string> compressed = CompressJsonText(value);
  if (!compressed.ok() || static_cast<int64_t>(compressed.value().size()) > limit) {
    const std::string size = compressed.ok() ? std::to_string(compressed.value().size()) +
                                                   " bytes compressed (" +
                                                   std::to_string(value.size()) + " as JSON)"
                                             : std::to_string(value.size()) + " bytes as JSON";
    return Status::Error("the users and tokens are " + size +
                             ", more than one etcd request takes (" + std::to_string(limit) +
                             ": ha_etcd_max_request_bytes less 64 KiB); delete unused users or "
                             "raise the members' --max-request-bytes and that setting",
                         core::ErrorCode::kInsufficientStorage);
  }
  const std::string prefix = KeyPrefix(options_.cluster);
  TxnRequest t;
  t.compare.push_back(CreateRevisionIs(prefix + "leader", term_));
  t.success.push_back(PutRequest{AuthKey(options_.cluster), std::move(compressed).value(), 0});
  t.failure.push_back(KeyAlone(prefix + "leader"));
  Result<TxnResponse> r = log_client_->Txn(t);
  if (!r.ok()) {
    return Status::Error("the replicated store did not take the users and tokens: " + r.message(),
                         core::ErrorCode::kUnavailable);
  }
  if (r.value().succeeded) return Status::Ok();
  return MarkLost("the leader key is no longer this replica's (term " + std::to_string(term_) +
                  ") when writing the users and tokens");
}

Result<bool> Leadership::SyncAuth(store::Store& store) {
  Result<RangeResponse> r = log_client_->Range(KeyAlone(AuthKey(options_.cluster)));
  if (!r.ok()) return r.status();
  if (r.value().kvs.empty()) return false;
  const KeyValue& kv = r.value().kvs.front();
  if (kv.mod_revision == auth_revision_) return false;
  // Compressed as the leader writes it; plain JSON as earlier releases did.
  Result<std::string> text = JsonText(kv.value);
  if (!text.ok()) {
    return Status::Error(AuthKey(options_.cluster) + " (revision " +
                         std::to_string(kv.mod_revision) + "): " + text.message());
  }
  if (Status s = store.ImportAuth(text.value()); !s.ok()) {
    return Status::Error(AuthKey(options_.cluster) + " (revision " +
                         std::to_string(kv.mod_revision) + "): " + s.message());
  }
  auth_revision_ = kv.mod_revision;
  return true;
}

}  // namespace topo::ha
