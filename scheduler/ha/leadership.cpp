#include "ha/leadership.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <utility>

#include "topo/common/event_json.hpp"

namespace topo::ha {

using core::Result;
using core::Status;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

Status Unavailable(std::string m) {
  return Status::Error(std::move(m), core::ErrorCode::kUnavailable);
}

}  // namespace

std::string TooLargeHint(const std::string& etcd_error) {
  // "etcdserver: request is too large" above --max-request-bytes; gRPC's own
  // "received message larger than max" above it plus gRPC's 512 KiB margin.
  if (etcd_error.find("too large") == std::string::npos &&
      etcd_error.find("larger than max") == std::string::npos) {
    return "";
  }
  return " (etcd refuses a request above its --max-request-bytes, 1.5 MiB by default; raise "
         "it on every member for batches this large, docs/ha.md)";
}

Result<std::vector<PutRequest>> SplitPuts(const std::string& key, std::string value, int64_t term,
                                          int64_t first_seq, int64_t last_seq,
                                          const std::function<std::string(int64_t)>& part_key) {
  std::vector<PutRequest> puts;
  if (value.size() <= kMaxBatchBytes) {
    puts.push_back(PutRequest{key, std::move(value), 0});
    return puts;
  }
  const int64_t parts = static_cast<int64_t>((value.size() + kMaxPartBytes - 1) / kMaxPartBytes);
  if (parts > kMaxBatchParts) {
    return Status::Error(std::to_string(value.size()) + " bytes need " + std::to_string(parts) +
                         " keys of 1 MiB, above the " + std::to_string(kMaxBatchParts) +
                         " one etcd txn may write (docs/ha.md, Size limits)");
  }
  BatchParts header;
  header.term = term;
  header.first_seq = first_seq;
  header.last_seq = last_seq;
  header.parts = parts;
  header.bytes = static_cast<int64_t>(value.size());
  puts.push_back(PutRequest{key, EncodeBatchParts(header), 0});
  for (int64_t i = 0; i < parts; ++i) {
    puts.push_back(PutRequest{
        part_key(i), value.substr(static_cast<size_t>(i) * kMaxPartBytes, kMaxPartBytes), 0});
  }
  return puts;
}

std::string KeyPrefix(const std::string& cluster) { return "/toposched/" + cluster + "/"; }

std::string LogKey(const std::string& cluster, int64_t first_seq) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020lld", static_cast<long long>(first_seq));
  return KeyPrefix(cluster) + "log/" + digits;
}

Result<std::string> EncodeBatch(int64_t term, int64_t first_seq,
                                std::span<const store::LogEntry> batch,
                                const core::Topology& topology) {
  try {
    json entries = json::array();
    for (const store::LogEntry& e : batch) {
      json commands = json::array();
      for (const core::Command& c : e.commands)
        commands.push_back(common::CommandToJson(c, topology));
      entries.push_back({{"time_ms", e.time_ms},
                         {"actor", e.actor},
                         {"event", common::EventToJson(e.event, topology)},
                         {"commands", std::move(commands)}});
    }
    return json{{"term", term}, {"first_seq", first_seq}, {"entries", std::move(entries)}}.dump();
  } catch (const json::exception& e) {  // a string that is not UTF-8
    return Status::Error(std::string("the batch cannot be written as JSON: ") + e.what());
  }
}

Leadership::Leadership(LeadershipOptions options, std::unique_ptr<EtcdClient> election_client,
                       std::unique_ptr<EtcdClient> log_client,
                       std::unique_ptr<EtcdClient> snapshot_client)
    : options_(std::move(options)),
      election_client_(std::move(election_client)),
      log_client_(std::move(log_client)),
      snapshot_client_(std::move(snapshot_client)) {
  election_ = std::make_unique<Election>(
      election_client_.get(),
      ElectionOptions{KeyPrefix(options_.cluster) + "leader", options_.name, options_.ttl_s});
}

Leadership::~Leadership() {
  StopPublishing();
  stop_renewing_ = true;
  if (renewer_.joinable()) renewer_.join();
}

Result<std::unique_ptr<Leadership>> Leadership::Create(LeadershipOptions options) {
  if (Status s =
          Election::Validate({KeyPrefix(options.cluster) + "leader", options.name, options.ttl_s});
      !s.ok()) {
    return s;
  }
  auto rename = [](const Status& s) {
    // The client names its own options; the daemon's user knows the ha_* keys.
    std::string m = s.message();
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"ca_file", "ha_etcd_ca"},
                                   {"cert_file", "ha_etcd_cert"},
                                   {"key_file", "ha_etcd_key"},
                                   {"endpoints:", "ha_etcd_endpoints:"}}) {
      if (m.rfind(from, 0) == 0) m = to + m.substr(from.size());
    }
    return Status::Error(m);
  };
  // The election's requests get a shorter deadline: a keepalive that tries
  // every endpoint in turn must still end well within a TTL, so a lease in
  // trouble is noticed in time. The log's appends keep the full timeout.
  EtcdClientOptions election_etcd = options.etcd;
  const std::chrono::milliseconds share(
      int64_t{options.ttl_s} * 1000 /
      (3 * std::max<int64_t>(1, static_cast<int64_t>(options.etcd.endpoints.size()))));
  election_etcd.timeout =
      std::clamp(share, std::chrono::milliseconds(100),
                 std::max(options.etcd.timeout, std::chrono::milliseconds(100)));
  Result<std::unique_ptr<EtcdClient>> a = EtcdClient::Create(election_etcd);
  if (!a.ok()) return rename(a.status());
  Result<std::unique_ptr<EtcdClient>> b = EtcdClient::Create(options.etcd);
  if (!b.ok()) return rename(b.status());
  Result<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(options.etcd);
  if (!c.ok()) return rename(c.status());
  return std::unique_ptr<Leadership>(new Leadership(std::move(options), std::move(a).value(),
                                                    std::move(b).value(), std::move(c).value()));
}

Status Leadership::WaitToLead(const std::function<void(const std::string&)>& say,
                              const std::atomic<bool>& stop, const std::function<void()>& between) {
  std::string last;
  while (!stop.load()) {
    Result<CampaignResult> c = election_->Campaign(Clock::now());
    std::string line;
    if (!c.ok()) {
      line = "standby: cannot campaign: " + c.message();
    } else if (c.value().won) {
      term_ = c.value().term;
      say("elected leader '" + options_.name + "' (term " + std::to_string(term_) + ")");
      return Status::Ok();
    } else if (c.value().term != 0) {
      line = "standby: leader is '" + c.value().holder + "' (term " +
             std::to_string(c.value().term) + ")";
    } else {
      line = "standby: campaigning";
    }
    if (line != last) say(line);
    last = line;
    const auto round_start = Clock::now();
    if (between) between();
    WaitForChange(round_start, round_start + election_->RenewInterval(), stop);
  }
  return Status::Error("stopped while waiting to lead", core::ErrorCode::kUnavailable);
}

void Leadership::WaitForChange(Clock::time_point round_start, Clock::time_point until,
                               const std::atomic<bool>& stop) {
  // Watches of at most half a second each, so `stop` is seen soon; each one
  // starts where the last one's revision ended, so no change between them is
  // missed. A change ends the wait, but rounds (a campaign and a range read)
  // stay kMinRound apart however busy the leader's log is.
  constexpr auto kMinRound = std::chrono::milliseconds(100);
  constexpr auto kSlice = std::chrono::milliseconds(500);
  const std::string prefix = KeyPrefix(options_.cluster);
  auto sleep_until = [&](Clock::time_point t) {
    while (!stop.load() && Clock::now() < t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  while (!stop.load() && Clock::now() < until) {
    const auto slice = std::min<Clock::duration>(until - Clock::now(), kSlice);
    Result<EtcdClient::WatchResult> w =
        election_client_->Watch(prefix, PrefixRangeEnd(prefix), watch_from_,
                                std::chrono::duration_cast<std::chrono::milliseconds>(slice));
    if (!w.ok()) {
      // etcd unreachable: the round's pace, as the campaign will say.
      watch_from_ = 0;
      sleep_until(until);
      return;
    }
    // No revision: the start was compacted away; the next watch starts now.
    watch_from_ = w.value().revision > 0 ? w.value().revision + 1 : 0;
    if (w.value().changed) {
      sleep_until(round_start + kMinRound);
      return;
    }
  }
}

Status Leadership::TakeOver(int64_t local_last_seq) {
  const std::string head_key = KeyPrefix(options_.cluster) + "head";
  const std::string leader_key = KeyPrefix(options_.cluster) + "leader";
  TxnRequest t;
  t.compare.push_back(CreateRevisionIs(leader_key, term_));
  t.compare.push_back(CreateRevisionIs(head_key, 0));
  t.success.push_back(PutRequest{head_key, std::to_string(local_last_seq), 0});
  t.failure.push_back(KeyAlone(head_key));
  t.failure.push_back(KeyAlone(leader_key));
  Result<TxnResponse> r = log_client_->Txn(t);
  if (!r.ok()) return r.status();
  if (r.value().succeeded) return Status::Ok();  // the replicated log starts here
  const auto& responses = r.value().responses;
  if (responses.size() != 2) return Unavailable("etcd: unexpected answer to the take-over txn");
  const auto& leader = responses[1].range.kvs;
  if (leader.empty() || leader.front().create_revision != term_) {
    return MarkLost("lost the leadership before taking over");
  }
  const auto& head = responses[0].range.kvs;
  if (head.empty()) return Unavailable("etcd: the head key vanished during the take-over");
  const std::string& h = head.front().value;
  if (h == std::to_string(local_last_seq)) return Status::Ok();
  int64_t head_seq = 0;
  const auto [end, ec] = std::from_chars(h.data(), h.data() + h.size(), head_seq);
  if (ec != std::errc() || end != h.data() + h.size() || head_seq < 0) {
    return Status::Error("etcd: the head key holds '" + h.substr(0, 40) +
                             "', not a seq; it is written only by topo-scheduler",
                         core::ErrorCode::kConflict);
  }
  return Status::Error(
      "the replicated log in etcd ends at seq " + h + " but this replica's store at seq " +
          std::to_string(local_last_seq) +
          (head_seq > local_last_seq
               ? ": this replica did not catch up with it"
               : ": this store holds batches the replicated log does not; it must not lead"),
      core::ErrorCode::kConflict);
}

void Leadership::StartRenewing(std::function<void(const std::string&)> on_lost) {
  renewer_ = std::thread([this, on_lost = std::move(on_lost)] {
    while (!stop_renewing_.load()) {
      const auto until = Clock::now() + election_->RenewInterval();
      while (!stop_renewing_.load() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (stop_renewing_.load()) return;
      if (Status s = election_->Renew(Clock::now()); !s.ok()) {
        (void)MarkLost(election_->lost_reason());
        on_lost(lost_reason());
        return;
      }
    }
  });
}

Status Leadership::MarkLost(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_reason_.empty()) lost_reason_ = why;
  }
  lost_ = true;
  return Unavailable("this scheduler lost its leadership (term " + std::to_string(term_) +
                     "): " + lost_reason());
}

std::string Leadership::lost_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_reason_;
}

bool Leadership::AppliedBefore(const TxnResponse& t, int64_t last_seq) const {
  if (t.responses.size() != 2) return false;
  const auto& leader = t.responses[0].range.kvs;
  const auto& head = t.responses[1].range.kvs;
  return !leader.empty() && leader.front().create_revision == term_ && !head.empty() &&
         head.front().value == std::to_string(last_seq);
}

std::string Leadership::DescribeFailedAppend(const TxnResponse& t, int64_t expected_head) const {
  if (t.responses.size() != 2) return "the append's compare failed";
  const auto& leader = t.responses[0].range.kvs;
  if (leader.empty()) return "the leader key is gone (the lease expired)";
  if (leader.front().create_revision != term_) {
    return "the leader key is now held by '" + leader.front().value + "' (term " +
           std::to_string(leader.front().create_revision) + ")";
  }
  const auto& head = t.responses[1].range.kvs;
  return "the replicated log's head is " +
         (head.empty() ? "missing" : "at seq " + head.front().value) +
         ", this leader expected seq " + std::to_string(expected_head) + " (another writer?)";
}

Status Leadership::Append(int64_t first_seq, std::span<const store::LogEntry> batch,
                          const core::Topology& topology) {
  if (batch.empty()) return Status::Ok();
  if (lost_.load()) {
    return Unavailable("this scheduler lost its leadership (term " + std::to_string(term_) +
                       "): " + lost_reason());
  }
  Result<std::string> text = EncodeBatch(term_, first_seq, batch, topology);
  if (!text.ok()) return text.status();
  Result<std::string> value = CompressJsonText(text.value());
  // A batch too long to compress whole, or larger than one etcd request once
  // compressed, takes several appends in halves, in order, each fenced and
  // moving head (a batch of one entry goes as it is: its error names the
  // limit or the setting).
  if (batch.size() > 1 && (!value.ok() || static_cast<int64_t>(value.value().size()) >
                                              options_.max_request_bytes - kRequestMargin)) {
    const size_t half = batch.size() / 2;
    if (Status s = Append(first_seq, batch.first(half), topology); !s.ok()) return s;
    return Append(first_seq + static_cast<int64_t>(half), batch.subspan(half), topology);
  }
  if (!value.ok()) {
    return Unavailable("a batch of " + std::to_string(batch.size()) +
                       " entries: " + value.message());
  }
  const std::string prefix = KeyPrefix(options_.cluster);
  const int64_t last_seq = first_seq + static_cast<int64_t>(batch.size()) - 1;
  TxnRequest t;
  t.compare.push_back(CreateRevisionIs(prefix + "leader", term_));
  t.compare.push_back(ValueIs(prefix + "head", std::to_string(first_seq - 1)));
  Result<std::vector<PutRequest>> puts =
      SplitPuts(LogKey(options_.cluster, first_seq), std::move(value).value(), term_, first_seq,
                last_seq, [&](int64_t i) { return LogPartKey(options_.cluster, first_seq, i); });
  if (!puts.ok()) {
    return Unavailable("a batch of " + std::to_string(batch.size()) +
                       " entries: " + puts.message());
  }
  for (PutRequest& p : puts.value()) t.success.push_back(std::move(p));
  t.success.push_back(PutRequest{prefix + "head", std::to_string(last_seq), 0});
  t.failure.push_back(KeyAlone(prefix + "leader"));
  t.failure.push_back(KeyAlone(prefix + "head"));
  Result<TxnResponse> r = log_client_->Txn(t);
  // An answer lost (a member down, etcd electing its own raft leader): the
  // same txn again, on the next member, while this replica leads. Safe: the
  // compare on head lets it apply at most once, and a retry that finds head
  // at last_seq under this term means the lost attempt applied (no other
  // writer can move head while the leader key is ours).
  const int attempts = std::max<int>(2, static_cast<int>(options_.etcd.endpoints.size()));
  bool retried = false;
  for (int attempt = 1; !r.ok() && attempt < attempts && !lost_.load(); ++attempt) {
    retried = true;
    r = log_client_->Txn(t);
  }
  if (!r.ok()) {
    return Unavailable("the replicated log did not take seq " + std::to_string(first_seq) + "-" +
                       std::to_string(last_seq) + ": " + r.message() + TooLargeHint(r.message()));
  }
  if (r.value().succeeded) return Status::Ok();
  if (retried && AppliedBefore(r.value(), last_seq)) return Status::Ok();
  return MarkLost(DescribeFailedAppend(r.value(), first_seq - 1));
}

Status Leadership::Resign() {
  StopPublishing();
  stop_renewing_ = true;
  if (renewer_.joinable()) renewer_.join();
  lost_ = true;
  return election_->Resign();
}

}  // namespace topo::ha
