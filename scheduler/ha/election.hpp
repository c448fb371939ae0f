#pragma once
// Leader election on etcd with a lease and a campaign key (docs/ha.md,
// Leader election).
//
//   Election e(client, {.key = "/toposched/prod/leader", .name = "sched-a", .ttl_s = 5});
//   Result<CampaignResult> c = e.Campaign(now);   // won, or who holds the key
//   while (leading) {                             // every RenewInterval()
//     if (Status s = e.Renew(now); !s.ok()) -> lost: stop acting as leader
//   }
//   e.Resign();                                   // on a clean stop
//
// Campaign grants a lease with the TTL (once; a lost election keeps it for
// the next try while it lives) and creates the key with a txn whose compare
// is create_revision(key) == 0, so at most one contender succeeds; the key
// dies with the lease. The term is the key's create_revision: etcd assigns
// it, it only grows, and a later leader's is larger.
//
// Lost is final (campaign again with a new Election). Renew reports it when
//   - no keepalive succeeded for a whole TTL, counted from the *sending* of
//     the last one that did (so a process paused past its TTL knows at once
//     that a successor may exist, before it acts), or
//   - etcd says the lease is gone (TTL <= 0), or
//   - the key no longer holds this lease (deleted, or created by another).
// leader(now) is the cheap check between renewals: won, not lost, and within
// the TTL of the last successful keepalive's sending.
//
// The clock is an argument (steady time), so tests drive it; the calls that
// reach etcd block for at most the client's timeout per endpoint.
//
// Thread safety: none; one owner.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "ha/etcd_client.hpp"
#include "topo/core/status.hpp"

namespace topo::ha {

using SteadyTime = std::chrono::steady_clock::time_point;

struct ElectionOptions {
  std::string key;   // the campaign key, e.g. /toposched/<cluster>/leader
  std::string name;  // this contender's value in it (ha_name)
  int ttl_s = 5;     // the lease's TTL, 2..60
};

struct CampaignResult {
  bool won = false;
  int64_t term = 0;    // the key's create_revision (won: ours; else the holder's; 0: no holder)
  std::string holder;  // the key's value (won: our name)
};

class Election {
 public:
  // REQUIRES: client outlives the Election.
  Election(EtcdClient* client, ElectionOptions options);

  // Checks the options (errors name the field): key and name non-empty and
  // at most 1 KiB, TTL within 2..60 s.
  static core::Status Validate(const ElectionOptions& options);

  // One try at the key. Errors: etcd unreachable or without quorum (the
  // message names the endpoints and the cause), invalid options, or this
  // election already lost.
  core::Result<CampaignResult> Campaign(SteadyTime now);

  // Keeps the lease alive and checks the key; Ok while still the leader.
  // An error means lost (final), with the reason.
  // REQUIRES: Campaign won.
  core::Status Renew(SteadyTime now);

  // Won, not lost, and the last successful keepalive was sent less than a
  // TTL ago.
  bool leader(SteadyTime now) const;

  // Revokes the lease (the key goes at once, so a standby need not wait for
  // the TTL). The election is lost afterwards.
  core::Status Resign();

  // Who holds the key now (nothing: no holder), without campaigning.
  core::Result<CampaignResult> Observe();

  std::chrono::milliseconds RenewInterval() const;  // TTL / 3
  int64_t term() const { return term_; }
  int64_t lease_id() const { return lease_id_; }
  bool lost() const { return lost_; }
  const std::string& lost_reason() const { return lost_reason_; }
  // Why the last Renew could not reach etcd while still within the TTL
  // (empty after a clean one).
  const std::string& last_renew_error() const { return last_renew_error_; }
  const ElectionOptions& options() const { return options_; }

 private:
  core::Status Lose(std::string why);
  std::chrono::milliseconds Ttl() const { return std::chrono::seconds(options_.ttl_s); }

  EtcdClient* client_;
  ElectionOptions options_;
  int64_t lease_id_ = 0;
  SteadyTime lease_alive_since_{};  // when the grant or the last good keepalive was sent
  bool won_ = false;
  bool lost_ = false;
  std::string lost_reason_;
  std::string last_renew_error_;
  int64_t term_ = 0;
};

}  // namespace topo::ha
