#include "ha/gateway.hpp"

#include <array>
#include <charconv>
#include <limits>
#include <string>
#include <utility>

namespace topo::ha {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

// Gateway integers go out as decimal strings: lease ids exceed 2^53, where
// a JSON number would lose digits in some readers.
std::string Dec(int64_t v) { return std::to_string(v); }

Status FieldError(std::string_view where, std::string_view field, const std::string& what) {
  return Status::Error(std::string(where) + "." + std::string(field) + ": " + what,
                       core::ErrorCode::kUnavailable);
}

std::string Shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}

// An integer field of the protobuf JSON mapping: absent (0), a decimal
// string or a JSON integer.
template <typename Int>
Status ReadInt(const json& obj, std::string_view where, std::string_view field, Int* out) {
  *out = 0;
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (it->is_number_integer()) {
    if (it->is_number_unsigned()) {
      const auto u = it->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<Int>::max())) {
        return FieldError(where, field, "out of range: " + Shown(*it));
      }
      *out = static_cast<Int>(u);
    } else {
      const auto s = it->get<int64_t>();
      if (std::numeric_limits<Int>::is_signed == false && s < 0) {
        return FieldError(where, field, "negative: " + Shown(*it));
      }
      *out = static_cast<Int>(s);
    }
    return Status::Ok();
  }
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    Int v{};
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, v);
    if (s.empty() || s.size() > 20 || ec != std::errc() || p != end) {
      return FieldError(where, field, "expected a decimal integer, got " + Shown(*it));
    }
    *out = v;
    return Status::Ok();
  }
  return FieldError(where, field, "expected a decimal integer, got " + Shown(*it));
}

Status ReadBool(const json& obj, std::string_view where, std::string_view field, bool* out) {
  *out = false;
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean())
    return FieldError(where, field, "expected true or false, got " + Shown(*it));
  *out = it->get<bool>();
  return Status::Ok();
}

Status ReadBytes(const json& obj, std::string_view where, std::string_view field,
                 std::string* out) {
  out->clear();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return FieldError(where, field, "expected base64 text, got " + Shown(*it));
  Result<std::string> bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes.ok()) return FieldError(where, field, bytes.message());
  *out = std::move(bytes).value();
  return Status::Ok();
}

Status NeedObject(const json& j, std::string_view where) {
  if (!j.is_object()) {
    return Status::Error(std::string(where) + ": expected a JSON object, got " + Shown(j),
                         core::ErrorCode::kUnavailable);
  }
  return Status::Ok();
}

#define HA_TRY(expr)                             \
  do {                                           \
    if (Status s_ = (expr); !s_.ok()) return s_; \
  } while (false)

Result<KeyValue> ParseKeyValue(const json& j, const std::string& where) {
  HA_TRY(NeedObject(j, where));
  KeyValue kv;
  HA_TRY(ReadBytes(j, where, "key", &kv.key));
  HA_TRY(ReadBytes(j, where, "value", &kv.value));
  HA_TRY(ReadInt(j, where, "create_revision", &kv.create_revision));
  HA_TRY(ReadInt(j, where, "mod_revision", &kv.mod_revision));
  HA_TRY(ReadInt(j, where, "version", &kv.version));
  HA_TRY(ReadInt(j, where, "lease", &kv.lease));
  return kv;
}

Result<RangeResponse> ParseRange(const json& j, const std::string& where) {
  HA_TRY(NeedObject(j, where));
  RangeResponse r;
  auto header = j.find("header");
  if (header != j.end()) {
    Result<ResponseHeader> h = ParseHeader(*header, where + ".header");
    if (!h.ok()) return h.status();
    r.header = h.value();
  }
  HA_TRY(ReadInt(j, where, "count", &r.count));
  HA_TRY(ReadBool(j, where, "more", &r.more));
  if (auto kvs = j.find("kvs"); kvs != j.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return FieldError(where, "kvs", "expected an array, got " + Shown(*kvs));
    r.kvs.reserve(kvs->size());
    for (size_t i = 0; i < kvs->size(); ++i) {
      Result<KeyValue> kv = ParseKeyValue((*kvs)[i], where + ".kvs[" + std::to_string(i) + "]");
      if (!kv.ok()) return kv.status();
      r.kvs.push_back(std::move(kv).value());
    }
  }
  return r;
}

std::string_view TargetName(Compare::Target t) {
  switch (t) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreate:
      return "CREATE";
    case Compare::Target::kMod:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
    case Compare::Target::kLease:
      return "LEASE";
  }
  return "CREATE";
}

std::string_view OpName(Compare::Op op) {
  switch (op) {
    case Compare::Op::kEqual:
      return "EQUAL";
    case Compare::Op::kGreater:
      return "GREATER";
    case Compare::Op::kLess:
      return "LESS";
    case Compare::Op::kNotEqual:
      return "NOT_EQUAL";
  }
  return "EQUAL";
}

json OpJson(const TxnOp& op) {
  if (const auto* r = std::get_if<RangeRequest>(&op)) return {{"request_range", ToJson(*r)}};
  if (const auto* p = std::get_if<PutRequest>(&op)) return {{"request_put", ToJson(*p)}};
  return {{"request_delete_range", ToJson(std::get<DeleteRangeRequest>(op))}};
}

}  // namespace

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's convention)
}

json ToJson(const RangeRequest& r) {
  json j = {{"key", Base64Encode(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = Base64Encode(r.range_end);
  if (r.limit != 0) j["limit"] = Dec(r.limit);
  if (r.revision != 0) j["revision"] = Dec(r.revision);
  if (r.keys_only) j["keys_only"] = true;
  return j;
}

json ToJson(const PutRequest& r) {
  json j = {{"key", Base64Encode(r.key)}, {"value", Base64Encode(r.value)}};
  if (r.lease != 0) j["lease"] = Dec(r.lease);
  return j;
}

json ToJson(const DeleteRangeRequest& r) {
  json j = {{"key", Base64Encode(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = Base64Encode(r.range_end);
  return j;
}

json ToJson(const TxnRequest& r) {
  json compare = json::array();
  for (const Compare& c : r.compare) {
    json cj = {
        {"key", Base64Encode(c.key)}, {"target", TargetName(c.target)}, {"result", OpName(c.op)}};
    switch (c.target) {
      case Compare::Target::kVersion:
        cj["version"] = Dec(c.number);
        break;
      case Compare::Target::kCreate:
        cj["create_revision"] = Dec(c.number);
        break;
      case Compare::Target::kMod:
        cj["mod_revision"] = Dec(c.number);
        break;
      case Compare::Target::kLease:
        cj["lease"] = Dec(c.number);
        break;
      case Compare::Target::kValue:
        cj["value"] = Base64Encode(c.value);
        break;
    }
    compare.push_back(std::move(cj));
  }
  json success = json::array();
  for (const TxnOp& op : r.success) success.push_back(OpJson(op));
  json failure = json::array();
  for (const TxnOp& op : r.failure) failure.push_back(OpJson(op));
  return {{"compare", std::move(compare)},
          {"success", std::move(success)},
          {"failure", std::move(failure)}};
}

Compare CreateRevisionIs(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Compare::Target::kCreate;
  c.op = Compare::Op::kEqual;
  c.number = revision;
  return c;
}

Compare ValueIs(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Compare::Target::kValue;
  c.op = Compare::Op::kEqual;
  c.value = std::move(value);
  return c;
}

RangeRequest KeyAlone(std::string key) {
  RangeRequest r;
  r.key = std::move(key);
  return r;
}

json LeaseGrantJson(int64_t ttl_s) { return {{"TTL", Dec(ttl_s)}}; }
json LeaseIdJson(int64_t lease_id) { return {{"ID", Dec(lease_id)}}; }

Result<ResponseHeader> ParseHeader(const json& j, std::string_view where) {
  HA_TRY(NeedObject(j, where));
  ResponseHeader h;
  HA_TRY(ReadInt(j, where, "cluster_id", &h.cluster_id));
  HA_TRY(ReadInt(j, where, "member_id", &h.member_id));
  HA_TRY(ReadInt(j, where, "revision", &h.revision));
  HA_TRY(ReadInt(j, where, "raft_term", &h.raft_term));
  if (h.revision < 0) return FieldError(where, "revision", "negative: " + Shown(j["revision"]));
  return h;
}

namespace {
// Every unary response carries a header; its absence means the body is not
// etcd's answer at all.
Result<ResponseHeader> NeedHeader(const json& j, std::string_view where) {
  HA_TRY(NeedObject(j, where));
  auto it = j.find("header");
  if (it == j.end()) {
    return Status::Error(std::string(where) + ": no header; not an etcd answer: " + Shown(j),
                         core::ErrorCode::kUnavailable);
  }
  return ParseHeader(*it, std::string(where) + ".header");
}
}  // namespace

Result<RangeResponse> ParseRangeResponse(const json& j) {
  Result<ResponseHeader> h = NeedHeader(j, "range");
  if (!h.ok()) return h.status();
  return ParseRange(j, "range");
}

Result<ResponseHeader> ParsePutResponse(const json& j) { return NeedHeader(j, "put"); }

Result<DeleteRangeResponse> ParseDeleteRangeResponse(const json& j) {
  Result<ResponseHeader> h = NeedHeader(j, "delete_range");
  if (!h.ok()) return h.status();
  DeleteRangeResponse r;
  r.header = h.value();
  HA_TRY(ReadInt(j, "delete_range", "deleted", &r.deleted));
  return r;
}

Result<TxnResponse> ParseTxnResponse(const json& j) {
  Result<ResponseHeader> h = NeedHeader(j, "txn");
  if (!h.ok()) return h.status();
  TxnResponse r;
  r.header = h.value();
  HA_TRY(ReadBool(j, "txn", "succeeded", &r.succeeded));
  auto it = j.find("responses");
  if (it == j.end() || it->is_null()) return r;
  if (!it->is_array())
    return FieldError("txn", "responses", "expected an array, got " + Shown(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string where = "txn.responses[" + std::to_string(i) + "]";
    const json& op = (*it)[i];
    HA_TRY(NeedObject(op, where));
    TxnOpResponse out;
    if (auto rr = op.find("response_range"); rr != op.end()) {
      out.kind = TxnOpResponse::Kind::kRange;
      Result<RangeResponse> range = ParseRange(*rr, where + ".response_range");
      if (!range.ok()) return range.status();
      out.range = std::move(range).value();
    } else if (auto dr = op.find("response_delete_range"); dr != op.end()) {
      out.kind = TxnOpResponse::Kind::kDelete;
      HA_TRY(NeedObject(*dr, where + ".response_delete_range"));
      HA_TRY(ReadInt(*dr, where + ".response_delete_range", "deleted", &out.deleted));
    } else if (op.contains("response_put")) {
      out.kind = TxnOpResponse::Kind::kPut;
    } else {
      return Status::Error(where +
                               ": expected response_range, response_put or "
                               "response_delete_range, got " +
                               Shown(op),
                           core::ErrorCode::kUnavailable);
    }
    r.responses.push_back(std::move(out));
  }
  return r;
}

Result<LeaseGrantResponse> ParseLeaseGrantResponse(const json& j) {
  Result<ResponseHeader> h = NeedHeader(j, "lease_grant");
  if (!h.ok()) return h.status();
  LeaseGrantResponse r;
  r.header = h.value();
  HA_TRY(ReadInt(j, "lease_grant", "ID", &r.id));
  HA_TRY(ReadInt(j, "lease_grant", "TTL", &r.ttl_s));
  if (auto e = j.find("error"); e != j.end() && e->is_string() && !e->get<std::string>().empty()) {
    return Status::Error("lease_grant: " + e->get<std::string>(), core::ErrorCode::kUnavailable);
  }
  if (r.id == 0 || r.ttl_s <= 0) {
    return Status::Error("lease_grant: no lease in the answer (ID " + std::to_string(r.id) +
                             ", TTL " + std::to_string(r.ttl_s) + ")",
                         core::ErrorCode::kUnavailable);
  }
  return r;
}

Result<LeaseKeepAliveResponse> ParseLeaseKeepAliveResponse(const json& j) {
  HA_TRY(NeedObject(j, "lease_keepalive"));
  auto it = j.find("result");
  if (it == j.end()) {
    return Status::Error("lease_keepalive: no result in the answer: " + Shown(j),
                         core::ErrorCode::kUnavailable);
  }
  Result<ResponseHeader> h = NeedHeader(*it, "lease_keepalive.result");
  if (!h.ok()) return h.status();
  LeaseKeepAliveResponse r;
  r.header = h.value();
  HA_TRY(ReadInt(*it, "lease_keepalive.result", "ID", &r.id));
  HA_TRY(ReadInt(*it, "lease_keepalive.result", "TTL", &r.ttl_s));
  return r;
}

json WatchCreateJson(std::string_view key, std::string_view range_end, int64_t start_revision) {
  json create = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) create["range_end"] = Base64Encode(range_end);
  if (start_revision > 0) create["start_revision"] = Dec(start_revision);
  return {{"create_request", std::move(create)}};
}

Result<WatchMessage> ParseWatchMessage(const json& j) {
  HA_TRY(NeedObject(j, "watch"));
  auto it = j.find("result");
  if (it == j.end()) {
    const std::string m = GatewayErrorMessage(j);
    return Status::Error("watch: " + (m.empty() ? "no result in the message: " + Shown(j) : m),
                         core::ErrorCode::kUnavailable);
  }
  const std::string where = "watch.result";
  HA_TRY(NeedObject(*it, where));
  WatchMessage w;
  // A cancel's header may leave the revision out (a proto3 zero).
  if (auto h = it->find("header"); h != it->end()) {
    Result<ResponseHeader> header = ParseHeader(*h, where + ".header");
    if (!header.ok()) return header.status();
    w.header = header.value();
  }
  for (auto [field, out] : {std::pair{"created", &w.created}, std::pair{"canceled", &w.canceled}}) {
    if (auto f = it->find(field); f != it->end() && !f->is_null()) {
      if (!f->is_boolean()) return FieldError(where, field, "not true or false: " + Shown(*f));
      *out = f->get<bool>();
    }
  }
  HA_TRY(ReadInt(*it, where, "compact_revision", &w.compact_revision));
  if (auto r = it->find("cancel_reason"); r != it->end() && !r->is_null()) {
    if (!r->is_string()) return FieldError(where, "cancel_reason", "not a string: " + Shown(*r));
    w.cancel_reason = r->get<std::string>().substr(0, 300);
  }
  if (auto e = it->find("events"); e != it->end() && !e->is_null()) {
    if (!e->is_array()) return FieldError(where, "events", "not an array: " + Shown(*e));
    w.events = e->size();
  }
  return w;
}

std::string GatewayErrorMessage(const json& j) {
  if (!j.is_object()) return "";
  const json* e = &j;
  if (auto inner = j.find("error"); inner != j.end() && inner->is_object()) e = &*inner;
  for (const char* field : {"message", "error"}) {
    if (auto m = e->find(field);
        m != e->end() && m->is_string() && !m->get<std::string>().empty()) {
      std::string s = m->get<std::string>();
      if (s.size() > 300) s = s.substr(0, 300) + "...";
      return s;
    }
  }
  return "";
}

#undef HA_TRY

}  // namespace topo::ha
