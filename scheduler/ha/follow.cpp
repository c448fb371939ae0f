// Leadership's standby side: following the replicated log into the local
// store, and the topology epochs written beside it (docs/ha.md, Standbys).

#include <cstdio>
#include <optional>
#include <utility>

#include "ha/leadership.hpp"
#include "ha/records.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::ha {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

// The meta keys a topology import sets (ServiceState::ImportTopology), and
// the only ones an epoch key may carry: every epoch has the first three;
// "topology_base" (the state a change under running jobs carried over,
// base64) is "" or absent for a first import.
constexpr const char* kEpochMetaKeys[] = {"topology", "topology_from_seq", "policy"};
constexpr const char* kEpochBaseKey = "topology_base";

// Values read per range: each is at most 1 MiB (a batch, a header, a part),
// so an answer stays below kMaxEtcdResponseBytes even in base64.
constexpr int64_t kValuesPerRange = 8;
static_assert(kValuesPerRange * kMaxPartBytes * 4 / 3 + (1u << 20) < kMaxEtcdResponseBytes);

Status Corrupt(const std::string& key, const std::string& why) {
  return Status::Error("etcd key " + key + ": " + why + "; it is written only by topo-scheduler",
                       core::ErrorCode::kConflict);
}

// The local store's topology of the epoch that holds next_seq.
Result<std::optional<core::Topology>> StoredTopology(store::Store& store) {
  Result<std::optional<std::string>> text = store.GetMeta("topology");
  if (!text.ok()) return text.status();
  if (!text.value()) return std::optional<core::Topology>();
  Result<core::Topology> t = common::ParseTopologyJson(*text.value());
  if (!t.ok())
    return Status::Error("store " + store.path() + ": the stored topology: " + t.message());
  return std::optional<core::Topology>(std::move(t).value());
}

}  // namespace

// The value at kv, or, when kv holds a split value's header, the value its
// parts make (read with one range over kv.key + "/"). Errors name the key.
Result<json> Leadership::ReadSplit(const KeyValue& kv) {
  // A compressed batch: its marker cannot begin a JSON header.
  if (kv.value.starts_with(kCompressedMarker)) {
    Result<std::string> text = JsonText(kv.value);
    if (!text.ok()) return Corrupt(kv.key, text.message());
    return json::parse(text.value(), nullptr, false);
  }
  json j = json::parse(kv.value, nullptr, false);
  Result<std::optional<BatchParts>> header = ParseBatchParts(j);
  if (!header.ok()) return Corrupt(kv.key, header.message());
  if (!header.value()) return j;
  const BatchParts& h = *header.value();
  // In ranges of kValuesPerRange parts, so no answer exceeds the client's
  // limit whatever the batch's size.
  std::string text;
  text.reserve(static_cast<size_t>(h.bytes));
  int64_t i = 0;
  while (i < h.parts) {
    char name[32];
    std::snprintf(name, sizeof name, "/%04lld", static_cast<long long>(i));
    RangeRequest r;
    r.key = kv.key + name;
    r.range_end = PrefixRangeEnd(kv.key + "/");
    r.limit = kValuesPerRange;
    Result<RangeResponse> parts = log_client_->Range(r);
    if (!parts.ok()) return parts.status();
    if (parts.value().kvs.empty()) {
      return Corrupt(kv.key, "its header names " + std::to_string(h.parts) + " parts, etcd holds " +
                                 std::to_string(i));
    }
    for (const KeyValue& part : parts.value().kvs) {
      std::snprintf(name, sizeof name, "/%04lld", static_cast<long long>(i));
      if (part.key != kv.key + name) return Corrupt(part.key, "not the part expected here");
      if (++i > h.parts) {
        return Corrupt(kv.key,
                       "etcd holds more parts than its header's " + std::to_string(h.parts));
      }
      text += part.value;
    }
  }
  if (static_cast<int64_t>(text.size()) != h.bytes) {
    return Corrupt(kv.key, "its parts hold " + std::to_string(text.size()) + " bytes, the header " +
                               std::to_string(h.bytes));
  }
  Result<std::string> joined = JsonText(text);
  if (!joined.ok()) return Corrupt(kv.key, joined.message());
  return json::parse(joined.value(), nullptr, false);
}

std::string EpochKey(const std::string& cluster, int64_t from_seq) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020lld", static_cast<long long>(from_seq));
  return KeyPrefix(cluster) + "topology/" + digits;
}

Status Leadership::AppendEpoch(int64_t from_seq,
                               std::span<const std::pair<std::string, std::string>> meta) {
  if (lost_.load()) {
    return Status::Error(
        "this scheduler lost its leadership (term " + std::to_string(term_) + "): " + lost_reason(),
        core::ErrorCode::kUnavailable);
  }
  json value = json::object();
  for (const auto& [k, v] : meta) value[k] = v;
  std::string text = json{{"term", term_}, {"from_seq", from_seq}, {"meta", value}}.dump();
  const size_t bytes = text.size();
  Result<std::vector<PutRequest>> puts =
      SplitPuts(EpochKey(options_.cluster, from_seq), std::move(text), term_, from_seq, from_seq,
                [&](int64_t i) { return EpochPartKey(options_.cluster, from_seq, i); });
  if (!puts.ok()) {
    return Status::Error(
        "the topology (" + std::to_string(bytes) + " bytes as JSON): " + puts.message(),
        core::ErrorCode::kUnavailable);
  }
  const std::string prefix = KeyPrefix(options_.cluster);
  TxnRequest t;
  t.compare.push_back(CreateRevisionIs(prefix + "leader", term_));
  t.compare.push_back(ValueIs(prefix + "head", std::to_string(from_seq - 1)));
  for (PutRequest& p : puts.value()) t.success.push_back(std::move(p));
  t.failure.push_back(KeyAlone(prefix + "leader"));
  t.failure.push_back(KeyAlone(prefix + "head"));
  Result<TxnResponse> r = log_client_->Txn(t);
  if (!r.ok()) {
    return Status::Error("the replicated log did not take the topology import: " + r.message() +
                             TooLargeHint(r.message()),
                         core::ErrorCode::kUnavailable);
  }
  if (r.value().succeeded) return Status::Ok();
  return MarkLost(DescribeFailedAppend(r.value(), from_seq - 1));
}

Result<int64_t> Leadership::CatchUp(store::Store& store) {
  const std::string prefix = KeyPrefix(options_.cluster);
  int64_t applied = 0;
  while (true) {
    const int64_t next = store.LastSeq() + 1;
    // An epoch that starts at next comes before the batch at next.
    Result<RangeResponse> epoch = log_client_->Range(KeyAlone(EpochKey(options_.cluster, next)));
    if (!epoch.ok()) return epoch.status();
    if (!epoch.value().kvs.empty()) {
      const KeyValue& kv = epoch.value().kvs.front();
      Result<json> joined = ReadSplit(kv);
      if (!joined.ok()) return joined.status();
      json j = std::move(joined).value();
      if (!j.is_object() || !j.contains("meta") || !j["meta"].is_object()) {
        return Corrupt(kv.key, "not an epoch record {\"term\", \"from_seq\", \"meta\"}");
      }
      std::vector<std::pair<std::string, std::string>> meta;
      for (const char* k : kEpochMetaKeys) {
        auto it = j["meta"].find(k);
        if (it == j["meta"].end() || !it->is_string()) {
          return Corrupt(kv.key, std::string("meta.") + k + " is missing or not a string");
        }
        meta.emplace_back(k, it->get<std::string>());
      }
      if (auto it = j["meta"].find(kEpochBaseKey); it == j["meta"].end()) {
        meta.emplace_back(kEpochBaseKey, "");  // a first import: no state before it
      } else if (!it->is_string()) {
        return Corrupt(kv.key, std::string("meta.") + kEpochBaseKey + " is not a string");
      } else {
        meta.emplace_back(kEpochBaseKey, it->get<std::string>());
      }
      if (meta[1].second != std::to_string(next)) {
        return Corrupt(kv.key, "meta.topology_from_seq is " + meta[1].second.substr(0, 24) +
                                   ", not the key's seq " + std::to_string(next));
      }
      if (Result<core::Topology> t = common::ParseTopologyJson(meta[0].second); !t.ok()) {
        return Corrupt(kv.key, "meta.topology: " + t.message());
      }
      Result<std::optional<std::string>> have = store.GetMeta("topology");
      Result<std::optional<std::string>> have_from = store.GetMeta("topology_from_seq");
      Result<std::optional<std::string>> have_base = store.GetMeta(kEpochBaseKey);
      if (!have.ok()) return have.status();
      if (!have_from.ok()) return have_from.status();
      if (!have_base.ok()) return have_base.status();
      if (have.value() != meta[0].second || have_from.value() != meta[1].second ||
          have_base.value().value_or("") != meta[3].second) {
        if (Status s = store.SetMetas(meta); !s.ok()) return s;
      }
    }
    RangeRequest r;
    r.key = LogKey(options_.cluster, next);
    r.range_end = PrefixRangeEnd(prefix + "log/");
    r.limit = kValuesPerRange;
    Result<RangeResponse> log = log_client_->Range(r);
    if (!log.ok()) return log.status();
    if (log.value().kvs.empty()) {
      // Nothing after this store: the end of the log, or a log trimmed past
      // it. head, then log/ again (a batch appended before that head read is
      // visible to the second read), tell them apart.
      Result<RangeResponse> head = log_client_->Range(KeyAlone(prefix + "head"));
      if (!head.ok()) return head.status();
      if (head.value().kvs.empty()) return applied;
      Result<int64_t> head_seq = ParseAppliedSeq(head.value().kvs.front().value);
      if (!head_seq.ok() || head_seq.value() <= store.LastSeq()) return applied;
      log = log_client_->Range(r);
      if (!log.ok()) return log.status();
      if (log.value().kvs.empty()) {
        return Status::Error("the replicated log ends at seq " + std::to_string(head_seq.value()) +
                                 " but holds no batch after this replica's store's seq " +
                                 std::to_string(store.LastSeq()) +
                                 ": it was trimmed past this store and no snapshot in etcd "
                                 "covers the gap; give this replica the state directory of one "
                                 "that is up to date",
                             core::ErrorCode::kConflict);
      }
    }
    Result<std::optional<core::Topology>> topology = StoredTopology(store);
    if (!topology.ok()) return topology.status();
    for (const KeyValue& kv : log.value().kvs) {
      std::string part;
      if (SeqOfKey(kv.key, prefix + "log/", &part) && !part.empty()) continue;  // ReadSplit's
      const int64_t want = store.LastSeq() + 1;
      Result<json> joined = ReadSplit(kv);
      if (!joined.ok()) return joined.status();
      json j = std::move(joined).value();
      if (!j.is_object() || !j.contains("first_seq") || !j["first_seq"].is_number_integer() ||
          !j.contains("entries") || !j["entries"].is_array() || j["entries"].empty()) {
        return Corrupt(kv.key, "not a batch {\"term\", \"first_seq\", \"entries\"}");
      }
      const int64_t first_seq = j["first_seq"].get<int64_t>();
      if (first_seq != want) {
        return Status::Error(
            "etcd key " + kv.key + " holds the batch from seq " + std::to_string(first_seq) +
                " but this replica's store ends at seq " + std::to_string(want - 1) +
                ": the replicated log no longer holds the batches in between and no snapshot "
                "in etcd covers them (or this store has batches the log lacks); give this "
                "replica the state directory of one that is up to date",
            core::ErrorCode::kConflict);
      }
      // A later epoch begins inside this range: apply it first.
      if (first_seq != next) {
        Result<RangeResponse> e =
            log_client_->Range(KeyAlone(EpochKey(options_.cluster, first_seq)));
        if (!e.ok()) return e.status();
        if (!e.value().kvs.empty()) break;
      }
      if (!topology.value()) {
        return Corrupt(kv.key, "a batch before any topology epoch");
      }
      std::vector<store::LogEntry> entries;
      for (const json& e : j["entries"]) {
        if (!e.is_object() || !e.contains("time_ms") || !e["time_ms"].is_number_integer() ||
            !e.contains("actor") || !e["actor"].is_string() || !e.contains("event") ||
            !e.contains("commands") || !e["commands"].is_array()) {
          return Corrupt(kv.key,
                         "an entry is not {\"time_ms\", \"actor\", \"event\", \"commands\"}");
        }
        store::LogEntry entry;
        entry.time_ms = e["time_ms"].get<int64_t>();
        entry.actor = e["actor"].get<std::string>();
        Result<core::Event> ev = common::EventFromJson(e["event"], *topology.value());
        if (!ev.ok()) return Corrupt(kv.key, "event: " + ev.message());
        entry.event = std::move(ev).value();
        for (const json& c : e["commands"]) {
          Result<core::Command> cmd = common::CommandFromJson(c, *topology.value());
          if (!cmd.ok()) return Corrupt(kv.key, "command: " + cmd.message());
          entry.commands.push_back(std::move(cmd).value());
        }
        entries.push_back(std::move(entry));
      }
      Result<store::AppendResult> a = store.Append(*topology.value(), entries);
      if (!a.ok()) return a.status();
      if (a.value().first_seq != first_seq) {
        return Status::Error("store " + store.path() + " gave the batch of etcd key " + kv.key +
                                 " seq " + std::to_string(a.value().first_seq),
                             core::ErrorCode::kConflict);
      }
      applied += static_cast<int64_t>(entries.size());
    }
  }
}

}  // namespace topo::ha
