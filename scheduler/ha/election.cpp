#include "ha/election.hpp"

#include <utility>

namespace topo::ha {

using core::Result;
using core::Status;

namespace {

std::string TermText(int64_t term) { return "term " + std::to_string(term); }

}  // namespace

Election::Election(EtcdClient* client, ElectionOptions options)
    : client_(client), options_(std::move(options)) {}

Status Election::Validate(const ElectionOptions& options) {
  if (options.key.empty() || options.key.size() > 1024) {
    return Status::Error("election key: must be 1..1024 bytes (e.g. /toposched/<cluster>/leader)");
  }
  if (options.name.empty() || options.name.size() > 1024) {
    return Status::Error("ha_name: must be 1..1024 bytes (this replica's name, e.g. its host)");
  }
  if (options.ttl_s < 2 || options.ttl_s > 60) {
    return Status::Error("ha_lease_ttl_s: " + std::to_string(options.ttl_s) +
                         " is outside 2..60 seconds");
  }
  return Status::Ok();
}

std::chrono::milliseconds Election::RenewInterval() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Ttl()) / 3;
}

Status Election::Lose(std::string why) {
  if (!lost_) {
    lost_ = true;
    lost_reason_ = std::move(why);
  }
  return Status::Error("leadership lost (" + TermText(term_) + "): " + lost_reason_,
                       core::ErrorCode::kUnavailable);
}

Result<CampaignResult> Election::Observe() {
  Result<RangeResponse> r = client_->Range(KeyAlone(options_.key));
  if (!r.ok()) return r.status();
  CampaignResult out;
  if (!r.value().kvs.empty()) {
    out.term = r.value().kvs.front().create_revision;
    out.holder = r.value().kvs.front().value;
  }
  return out;
}

Result<CampaignResult> Election::Campaign(SteadyTime now) {
  if (Status s = Validate(options_); !s.ok()) return s;
  if (lost_) return Status::Error("this election was lost (" + lost_reason_ + "); start a new one");
  if (won_) return CampaignResult{true, term_, options_.name};

  // A lease kept from a lost try is reused while it lives.
  if (lease_id_ != 0) {
    Result<LeaseKeepAliveResponse> k = client_->LeaseKeepAlive(lease_id_);
    if (!k.ok()) return k.status();
    if (k.value().ttl_s > 0) {
      lease_alive_since_ = now;
    } else {
      lease_id_ = 0;
    }
  }
  if (lease_id_ == 0) {
    Result<LeaseGrantResponse> g = client_->LeaseGrant(options_.ttl_s);
    if (!g.ok()) return g.status();
    lease_id_ = g.value().id;
    lease_alive_since_ = now;
  }

  TxnRequest txn;
  txn.compare.push_back(CreateRevisionIs(options_.key, 0));  // nobody holds it
  txn.success.push_back(PutRequest{options_.key, options_.name, lease_id_});
  txn.failure.push_back(KeyAlone(options_.key));
  Result<TxnResponse> t = client_->Txn(txn);

  auto ours = [this](const KeyValue& kv) {
    return kv.lease == lease_id_ && kv.value == options_.name;
  };
  if (!t.ok()) {
    // The answer was lost: the txn may have created the key. Look.
    Result<RangeResponse> r = client_->Range(KeyAlone(options_.key));
    if (!r.ok() || r.value().kvs.empty() || !ours(r.value().kvs.front())) return t.status();
    won_ = true;
    term_ = r.value().kvs.front().create_revision;
    return CampaignResult{true, term_, options_.name};
  }
  if (t.value().succeeded) {
    won_ = true;
    term_ = t.value().header.revision;  // the put created the key at this revision
    return CampaignResult{true, term_, options_.name};
  }
  CampaignResult held;
  if (!t.value().responses.empty() &&
      t.value().responses.front().kind == TxnOpResponse::Kind::kRange &&
      !t.value().responses.front().range.kvs.empty()) {
    const KeyValue& kv = t.value().responses.front().range.kvs.front();
    if (ours(kv)) {  // a retried txn whose first try created it
      won_ = true;
      term_ = kv.create_revision;
      return CampaignResult{true, term_, options_.name};
    }
    held.term = kv.create_revision;
    held.holder = kv.value;
  }
  return held;
}

Status Election::Renew(SteadyTime now) {
  if (lost_) return Lose(lost_reason_);
  if (!won_) return Status::Error("Renew before a won Campaign", core::ErrorCode::kConflict);
  if (now - lease_alive_since_ >= Ttl()) {
    return Lose("no keepalive succeeded for " + std::to_string(options_.ttl_s) +
                " s (the TTL); a successor may already lead");
  }
  Result<LeaseKeepAliveResponse> k = client_->LeaseKeepAlive(lease_id_);
  if (!k.ok()) {
    // Still within the TTL of the last good keepalive: keep trying.
    last_renew_error_ = k.message();
    return Status::Ok();
  }
  if (k.value().ttl_s <= 0)
    return Lose("etcd says lease " + std::to_string(lease_id_) + " is gone");
  lease_alive_since_ = now;
  Result<RangeResponse> r = client_->Range(KeyAlone(options_.key));
  if (!r.ok()) {
    last_renew_error_ = r.message();
    return Status::Ok();
  }
  if (r.value().kvs.empty()) return Lose("the key " + options_.key + " is gone");
  const KeyValue& kv = r.value().kvs.front();
  if (kv.lease != lease_id_ || kv.create_revision != term_) {
    return Lose("the key " + options_.key + " is now held by '" + kv.value + "', " +
                TermText(kv.create_revision));
  }
  last_renew_error_.clear();
  return Status::Ok();
}

bool Election::leader(SteadyTime now) const {
  return won_ && !lost_ && now - lease_alive_since_ < Ttl();
}

Status Election::Resign() {
  if (lease_id_ == 0) {
    (void)Lose("resigned");
    return Status::Ok();
  }
  Status s = client_->LeaseRevoke(lease_id_);
  lease_id_ = 0;
  (void)Lose("resigned");
  return s;
}

}  // namespace topo::ha
