#pragma once
// The field-table engine of common/'s wire messages: one strict reader, one
// writer and one JSON Schema generator, all driven by the same table of each
// struct. Not installed; only common/src includes this (agent_protocol.cpp,
// user_api*.cpp).
//
// A struct T is described by a specialization of Table<T> (in this
// namespace, in the one .cpp that owns T):
//
//   template <>
//   struct Table<proto::Stop> {
//     static constexpr auto Fields() {
//       return std::tuple{F("job", &proto::Stop::job, Int{1, proto::kMaxJobId}),
//                         F("reason", &proto::Stop::reason, Str{1024, Chars::kLine})};
//     }
//     // Optional: the rules that span fields, run after every field read.
//     static core::Status Check(const proto::Stop& m, const std::string& path, Failure& f);
//   };
//
// Each field is its JSON name, its member and its limit: Int range, Num (a
// double) range, Bool, Str bytes and character class, Enum, List of a limit,
// Obj for a nested table, Map of string keys, EnvMap of environment
// variables, Custom for a type with a reader and writer of its own (the job
// spec), Nullable for a value that may be null, Flat for a struct whose
// fields sit in the parent object. An std::optional member is an optional
// field (absent when empty); an optional Nullable one is written as null.
// Adding a field is one line in a table; the reader, the writer and the
// schema follow.
//
// The schema generator that walks the same tables is field_schema.hpp.
//
// Errors are values: every reader returns a Status whose message starts
// with the field's path ("start.ranks[2].gpu: ...") and fills Failure with
// that path alone, for the caller's `field`.
//
// Thread safety: pure functions.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/base64.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_process.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/node_sets.hpp"
#include "topo/core/status.hpp"

namespace topo::common::fields {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;
using core::Result;
using core::Status;
using internal::Child;
using internal::Index;
using internal::Shown;
using internal::TypeName;

// ---------------------------------------------------------------- limits

struct Int {
  int64_t lo, hi;
};
struct Bool {};
// Character classes of strings.
enum class Chars : uint8_t {
  kText,       // anything but NUL (log data, command arguments, messages)
  kLine,       // no control characters (reasons, versions, models)
  kName,       // printable ASCII without spaces (addresses, uuids)
  kNodeName,   // common::ValidNodeName (node_name.hpp)
  kPath,       // empty, or an absolute path without NUL
  kUnixUser,   // proto::ValidUnixUser
  kEnvName,    // proto::ValidEnvName
  kTenant,     // api::ValidTenantName
  kRequestId,  // common::CheckClientRequestId
  kSetName,    // core::ValidateNodeSetName: a partition's or a reservation's name
};
struct Str {
  size_t max_bytes;
  Chars chars;
  bool allow_empty = true;
};
// Bytes (any: NUL, invalid UTF-8), carried as RFC 4648 base64 text;
// max_bytes bounds the bytes, not the text.
struct Base64 {
  size_t max_bytes;
};
template <class E>
struct Enum {};
struct Obj {};
template <class L>
struct List {
  size_t max_items;
  L element;
};
struct EnvMap {};
// A double in [lo, hi] (an integer reads as one).
struct Num {
  double lo, hi;
};
// An object of string keys (`key`) to values (`value`); std::map member.
template <class L>
struct Map {
  size_t max_entries;
  Str key;
  L value;
};
// A value read and written by Codec, which has
//   static Status Read(const Json&, const std::string& path, T&, Failure&);
//   static OJson Write(const T&);
//   static OJson Schema();
template <class Codec>
struct Custom {};
// A value, or null (std::optional member): null and absent read as empty,
// empty is written as null.
template <class L>
struct Nullable {
  L inner;
};
// A struct S (Table<S>) whose fields sit in the parent object. As an
// std::optional<S> member it is a part that is there when any of its fields
// is (its own required fields then are too), else absent.
struct Flat {};

template <class S, class M, class L>
struct Field {
  std::string_view name;
  M S::*member;
  L limit;
  std::string_view missing;  // said after "missing" when a required field is absent
};
template <class S, class M, class L>
constexpr Field<S, M, L> F(std::string_view name, M S::*member, L limit,
                           std::string_view missing = {}) {
  return {name, member, limit, missing};
}

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class L>
struct IsNullable : std::false_type {};
template <class L>
struct IsNullable<Nullable<L>> : std::true_type {};

// The fields of T (specialized by the .cpp that owns T).
template <class T>
struct Table;

// The names of an enum's values: kValues (every value, in the order the
// error lists them) and Name(value). Specialized beside the tables.
template <class E>
struct EnumTable;

// Shared by the agent protocol's `start` and the user API's submission.
template <>
struct EnumTable<core::LaunchMode> {
  static constexpr std::array kValues = {core::LaunchMode::kRank, core::LaunchMode::kNode};
  static std::string_view Name(core::LaunchMode m) { return LaunchModeName(m); }
};

// ---------------------------------------------------------------- reading

// What a reader reports (the field at fault and the message), and how it
// reads: `lenient` is a client's reading of an answer, which ignores fields
// it does not know and keeps the defaults of fields that are absent, so that
// a newer server's additions and an older one's omissions still read.
struct Failure {
  std::string field;
  std::string message;
  bool lenient = false;
};

inline Status Fail(Failure& f, const std::string& path, const std::string& problem) {
  f.field = path;
  f.message = path + ": " + problem;
  return Status::Error(f.message);
}

inline bool CharsOk(std::string_view s, Chars chars) {
  switch (chars) {
    case Chars::kText:
      return s.find('\0') == std::string_view::npos;
    case Chars::kLine:
      return std::none_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
      });
    case Chars::kName:
      return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    case Chars::kNodeName:
      return ValidNodeName(s);
    case Chars::kPath:
      return s.empty() || (s[0] == '/' && s.find('\0') == std::string_view::npos);
    case Chars::kUnixUser:
      return proto::ValidUnixUser(s);
    case Chars::kEnvName:
      return proto::ValidEnvName(s);
    case Chars::kTenant:
      return api::ValidTenantName(s);
    case Chars::kRequestId:
      return CheckClientRequestId(s).ok();
    case Chars::kSetName:
      return core::ValidateNodeSetName(std::string(s), "name").ok();
  }
  return false;
}

inline std::string_view CharsRule(Chars chars) {
  switch (chars) {
    case Chars::kText:
      return "must not contain NUL";
    case Chars::kLine:
      return "must not contain control characters";
    case Chars::kName:
      return "must be printable ASCII without spaces";
    case Chars::kNodeName:
      return "must be a node name (1-64 bytes of A-Z a-z 0-9 . _ -, starting with a letter or a "
             "digit)";
    case Chars::kPath:
      return "must be an absolute path";
    case Chars::kUnixUser:
      return "must be a Unix account name ([A-Za-z0-9._-], not starting with '-' or '.')";
    case Chars::kEnvName:
      return "must be a variable name ([A-Za-z_][A-Za-z0-9_]*)";
    case Chars::kTenant:
      return "must be a tenant name: segments of a-z 0-9 _ . - (each starting with a letter or "
             "digit) joined by /, at most 8";
    case Chars::kRequestId:
      return "must hold only letters, digits and . _ : - (a random hex string from `topo "
             "submit`, or a name of your own such as nightly-2026-11-26)";
    case Chars::kSetName:
      return "must be a partition or reservation name (1-64 bytes of A-Z a-z 0-9 . _ -, not "
             "starting with - or .)";
  }
  return "";
}

template <class M>
Status ReadValue(const Json& v, const std::string& path, Int limit, M& out, Failure& f) {
  const std::string want =
      "must be an integer " + std::to_string(limit.lo) + ".." + std::to_string(limit.hi);
  if (!v.is_number_integer()) return Fail(f, path, want + " (got " + Shown(v) + ")");
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(limit.hi)) return Fail(f, path, want + " (got " + Shown(v) + ")");
    i = static_cast<int64_t>(u);
  } else {
    i = v.get<int64_t>();
  }
  if (i < limit.lo || i > limit.hi) return Fail(f, path, want + " (got " + Shown(v) + ")");
  out = static_cast<M>(i);
  return Status::Ok();
}

inline Status ReadValue(const Json& v, const std::string& path, Bool, bool& out, Failure& f) {
  if (!v.is_boolean()) {
    return Fail(f, path, "must be true or false (got " + std::string(TypeName(v)) + ")");
  }
  out = v.get<bool>();
  return Status::Ok();
}

inline Status ReadValue(const Json& v, const std::string& path, Str limit, std::string& out,
                        Failure& f) {
  if (!v.is_string()) {
    return Fail(f, path, "must be a string (got " + std::string(TypeName(v)) + ")");
  }
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() && !limit.allow_empty) return Fail(f, path, "must not be empty");
  if (s.size() > limit.max_bytes) {
    return Fail(
        f, path,
        "is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(limit.max_bytes));
  }
  if (!CharsOk(s, limit.chars)) return Fail(f, path, std::string(CharsRule(limit.chars)));
  out = s;
  return Status::Ok();
}

inline Status ReadValue(const Json& v, const std::string& path, Base64 limit, std::string& out,
                        Failure& f) {
  if (!v.is_string()) {
    return Fail(f, path, "must be a base64 string (got " + std::string(TypeName(v)) + ")");
  }
  const auto& text = v.get_ref<const std::string&>();
  if (text.size() > Base64Length(limit.max_bytes)) {
    return Fail(f, path,
                "is " + std::to_string(text.size()) + " bytes of base64; at most " +
                    std::to_string(Base64Length(limit.max_bytes)) + " (" +
                    std::to_string(limit.max_bytes) + " bytes)");
  }
  Result<std::string> bytes = Base64Decode(text);
  if (!bytes.ok()) return Fail(f, path, "must be base64 (RFC 4648): " + bytes.message());
  out = std::move(bytes).value();
  return Status::Ok();
}

template <class E>
Status ReadValue(const Json& v, const std::string& path, Enum<E>, E& out, Failure& f) {
  std::string names;
  for (E e : EnumTable<E>::kValues) {
    names += (names.empty() ? "" : ", ") + std::string(EnumTable<E>::Name(e));
    if (v.is_string() && v.get_ref<const std::string&>() == EnumTable<E>::Name(e)) {
      out = e;
      return Status::Ok();
    }
  }
  return Fail(f, path, "must be one of " + names + " (got " + Shown(v) + ")");
}

template <class T>
Status ReadObject(const Json& v, const std::string& path, T& out, Failure& f, bool typed);

template <class T>
Status ReadValue(const Json& v, const std::string& path, Obj, T& out, Failure& f) {
  return ReadObject(v, path, out, f, false);
}

template <class L, class T>
Status ReadValue(const Json& v, const std::string& path, List<L> limit, std::vector<T>& out,
                 Failure& f) {
  if (!v.is_array()) {
    return Fail(f, path, "must be an array (got " + std::string(TypeName(v)) + ")");
  }
  if (v.size() > limit.max_items) {
    return Fail(
        f, path,
        "has " + std::to_string(v.size()) + " items; at most " + std::to_string(limit.max_items));
  }
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    T item{};
    if (Status st = ReadValue(v[i], Index(path, i), limit.element, item, f); !st.ok()) return st;
    out.push_back(std::move(item));
  }
  return Status::Ok();
}

inline Status ReadValue(const Json& v, const std::string& path, EnvMap,
                        std::map<std::string, std::string>& out, Failure& f) {
  if (!v.is_object()) {
    return Fail(f, path, "must be an object of strings (got " + std::string(TypeName(v)) + ")");
  }
  if (v.size() > proto::kMaxEnvVars) {
    return Fail(f, path,
                "has " + std::to_string(v.size()) + " variables; at most " +
                    std::to_string(proto::kMaxEnvVars));
  }
  size_t total = 0;
  out.clear();
  for (const auto& [key, value] : v.items()) {
    const std::string where = Child(path, key.size() <= 64 ? key : key.substr(0, 64) + "...");
    if (!proto::ValidEnvName(key)) return Fail(f, where, std::string(CharsRule(Chars::kEnvName)));
    std::string s;
    if (Status st = ReadValue(value, where, Str{proto::kMaxArgBytes, Chars::kText}, s, f);
        !st.ok()) {
      return st;
    }
    total += key.size() + 1 + s.size() + 1;
    out.emplace(key, std::move(s));
  }
  if (total > proto::kMaxEnvBytes) {
    return Fail(f, path,
                "is " + std::to_string(total) + " bytes as K=V strings; at most " +
                    std::to_string(proto::kMaxEnvBytes));
  }
  return Status::Ok();
}

template <class M>
Status ReadValue(const Json& v, const std::string& path, Num limit, M& out, Failure& f) {
  auto text = [](double d) {
    return d > -1e15 && d < 1e15 && d == std::trunc(d) ? std::to_string(static_cast<int64_t>(d))
                                                       : internal::FormatDouble(d);
  };
  const std::string want = "must be a number " + text(limit.lo) + ".." + text(limit.hi);
  if (!v.is_number()) return Fail(f, path, want + " (got " + Shown(v) + ")");
  const double d = v.get<double>();
  if (!(d >= limit.lo && d <= limit.hi)) return Fail(f, path, want + " (got " + Shown(v) + ")");
  out = d;
  return Status::Ok();
}

template <class L, class T>
Status ReadValue(const Json& v, const std::string& path, Map<L> limit,
                 std::map<std::string, T>& out, Failure& f) {
  if (!v.is_object()) {
    return Fail(f, path, "must be an object (got " + std::string(TypeName(v)) + ")");
  }
  if (v.size() > limit.max_entries) {
    return Fail(f, path,
                "has " + std::to_string(v.size()) + " entries; at most " +
                    std::to_string(limit.max_entries));
  }
  out.clear();
  for (const auto& item : v.items()) {
    const std::string& key = item.key();
    const std::string where = Child(path, key.size() <= 64 ? key : key.substr(0, 64) + "...");
    std::string name;
    if (Status st = ReadValue(Json(key), where, limit.key, name, f); !st.ok()) return st;
    T value{};
    if (Status st = ReadValue(item.value(), where, limit.value, value, f); !st.ok()) return st;
    out.emplace(std::move(name), std::move(value));
  }
  return Status::Ok();
}

template <class Codec, class T>
Status ReadValue(const Json& v, const std::string& path, Custom<Codec>, T& out, Failure& f) {
  return Codec::Read(v, path, out, f);
}

// Table<T>::Check when the table has one: the rules that span fields.
template <class T>
Status CheckFields(const T& v, const std::string& path, Failure& f) {
  if constexpr (requires { Table<T>::Check(v, path, f); }) {
    return Table<T>::Check(v, path, f);
  } else {
    return Status::Ok();
  }
}

// Whether `key` is a field of T's object (Flat parts included); `names`
// gets them all, for the message.
template <class T>
bool KnowsField(std::string_view key, std::string* names) {
  bool known = false;
  std::apply(
      [&](const auto&... fd) {
        (
            [&] {
              if constexpr (std::is_same_v<std::decay_t<decltype(fd.limit)>, Flat>) {
                using M = std::decay_t<decltype(std::declval<T>().*fd.member)>;
                using S = typename std::conditional_t<IsOptional<M>::value, M,
                                                      std::optional<M>>::value_type;
                known = KnowsField<S>(key, names) || known;
              } else {
                known = known || fd.name == key;
                if (names) *names += (names->empty() ? "" : ", ") + std::string(fd.name);
              }
            }(),
            ...);
      },
      Table<T>::Fields());
  return known;
}

// Whether any field of S (a Flat part) is in `object`.
template <class S>
bool AnyFieldIn(const Json& object) {
  bool any = false;
  std::apply(
      [&](const auto&... fd) {
        (
            [&] {
              if constexpr (std::is_same_v<std::decay_t<decltype(fd.limit)>, Flat>) {
                using M = std::decay_t<decltype(std::declval<S>().*fd.member)>;
                using P = typename std::conditional_t<IsOptional<M>::value, M,
                                                      std::optional<M>>::value_type;
                any = any || AnyFieldIn<P>(object);
              } else {
                any = any || object.contains(std::string(fd.name));
              }
            }(),
            ...);
      },
      Table<S>::Fields());
  return any;
}

template <class T>
Status ReadFields(const Json& object, const std::string& path, T& out, Failure& f);

// One member from `object` (the parent's object): plain and std::optional
// members.
template <class M, class L>
Status ReadMember(const Json& object, const std::string& path, std::string_view name,
                  std::string_view missing, const L& limit, M& member, Failure& f) {
  auto it = object.find(std::string(name));
  if constexpr (IsOptional<M>::value) {
    if (it == object.end()) {
      member.reset();
      return Status::Ok();
    }
    typename M::value_type value{};
    Status st = ReadValue(*it, Child(path, name), limit, value, f);
    if (st.ok()) member = std::move(value);
    return st;
  } else {
    if (it == object.end()) {
      if (f.lenient) return Status::Ok();
      return Fail(f, Child(path, name),
                  missing.empty() ? std::string("missing") : "missing; " + std::string(missing));
    }
    return ReadValue(*it, Child(path, name), limit, member, f);
  }
}

template <class T, class L>
Status ReadMember(const Json& object, const std::string& path, std::string_view name,
                  std::string_view, const Nullable<L>& limit, std::optional<T>& member,
                  Failure& f) {
  auto it = object.find(std::string(name));
  if (it == object.end() || it->is_null()) {
    member.reset();
    return Status::Ok();
  }
  T value{};
  Status st = ReadValue(*it, Child(path, name), limit.inner, value, f);
  if (st.ok()) member = std::move(value);
  return st;
}

template <class S>
Status ReadMember(const Json& object, const std::string& path, std::string_view, std::string_view,
                  const Flat&, S& member, Failure& f) {
  return ReadFields(object, path, member, f);
}

template <class S>
Status ReadMember(const Json& object, const std::string& path, std::string_view, std::string_view,
                  const Flat&, std::optional<S>& member, Failure& f) {
  if (!AnyFieldIn<S>(object)) {
    member.reset();
    return Status::Ok();
  }
  S part{};
  Status st = ReadFields(object, path, part, f);
  if (st.ok()) member = std::move(part);
  return st;
}

// T's fields from `object`, then T's Check.
template <class T>
Status ReadFields(const Json& object, const std::string& path, T& out, Failure& f) {
  Status status = Status::Ok();
  std::apply(
      [&](const auto&... fd) {
        ((status = status.ok()
                       ? ReadMember(object, path, fd.name, fd.missing, fd.limit, out.*fd.member, f)
                       : status),
         ...);
      },
      Table<T>::Fields());
  if (!status.ok()) return status;
  return CheckFields(out, path, f);
}

// Reads an object of T's fields at `path`; `typed`: a "type" key (the
// message's) is allowed beside them.
template <class T>
Status ReadObject(const Json& v, const std::string& path, T& out, Failure& f, bool typed) {
  if (!v.is_object()) {
    return Fail(f, path, "must be an object (got " + std::string(TypeName(v)) + ")");
  }
  if (!f.lenient) {
    for (const auto& item : v.items()) {
      const std::string& key = item.key();
      if (typed && key == "type") continue;
      std::string names;
      if (!KnowsField<T>(key, &names)) {
        return Fail(f, Child(path, key.size() <= 64 ? key : key.substr(0, 64) + "..."),
                    "unknown field" + (names.empty() ? std::string(" (this message has none)")
                                                     : "; allowed: " + names));
      }
    }
  }
  return ReadFields(v, path, out, f);
}

// Deepest nesting of brackets outside strings, counted before the parser
// builds anything; false when text nests deeper than max_depth.
inline bool WithinDepth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

// ParseStrictJson's error as the path and problem of a Failure: a duplicate
// key names its field ("x.y: duplicate field \"k\"" -> "x.y.k").
inline Status FailParse(Failure& f, const std::string& message) {
  const size_t dup = message.find(": duplicate field \"");
  if (dup != std::string::npos) {
    std::string path = message.substr(0, dup);
    const std::string key = message.substr(dup + 19, message.size() - dup - 20);
    if (path == "top level") path.clear();
    return Fail(f, Child(path, key), "appears twice in one object");
  }
  return Fail(f, "", message);
}

// ---------------------------------------------------------------- writing

template <class M>
OJson WriteValue(Int, const M& v) {
  return static_cast<int64_t>(v);
}
inline OJson WriteValue(Bool, bool v) { return v; }
inline OJson WriteValue(Str, const std::string& v) { return v; }
inline OJson WriteValue(Base64, const std::string& v) { return Base64Encode(v); }
template <class E>
OJson WriteValue(Enum<E>, E v) {
  return std::string(EnumTable<E>::Name(v));
}
template <class T>
OJson WriteObject(const T& v);
template <class T>
OJson WriteValue(Obj, const T& v) {
  return WriteObject(v);
}
template <class L, class T>
OJson WriteValue(List<L> limit, const std::vector<T>& v) {
  OJson out = OJson::array();
  for (const T& item : v) out.push_back(WriteValue(limit.element, item));
  return out;
}
inline OJson WriteValue(EnvMap, const std::map<std::string, std::string>& v) {
  OJson out = OJson::object();
  for (const auto& [k, value] : v) out[k] = value;
  return out;
}

inline OJson WriteValue(Num, double v) { return v; }
template <class L, class T>
OJson WriteValue(const Map<L>& limit, const std::map<std::string, T>& v) {
  OJson out = OJson::object();
  for (const auto& [k, value] : v) out[k] = WriteValue(limit.value, value);
  return out;
}
template <class Codec, class T>
OJson WriteValue(Custom<Codec>, const T& v) {
  return Codec::Write(v);
}

template <class T>
void WriteFields(const T& v, OJson& out);

template <class M, class L>
void WriteMember(OJson& out, std::string_view name, const L& limit, const M& member) {
  if constexpr (IsOptional<M>::value) {
    if (member) out[std::string(name)] = WriteValue(limit, *member);
  } else {
    out[std::string(name)] = WriteValue(limit, member);
  }
}
template <class T, class L>
void WriteMember(OJson& out, std::string_view name, const Nullable<L>& limit,
                 const std::optional<T>& member) {
  out[std::string(name)] = member ? WriteValue(limit.inner, *member) : OJson(nullptr);
}
template <class S>
void WriteMember(OJson& out, std::string_view, const Flat&, const S& member) {
  WriteFields(member, out);
}
template <class S>
void WriteMember(OJson& out, std::string_view, const Flat&, const std::optional<S>& member) {
  if (member) WriteFields(*member, out);
}

template <class T>
void WriteFields(const T& v, OJson& out) {
  std::apply([&](const auto&... fd) { (WriteMember(out, fd.name, fd.limit, v.*fd.member), ...); },
             Table<T>::Fields());
}

template <class T>
OJson WriteObject(const T& v) {
  OJson out = OJson::object();
  WriteFields(v, out);
  return out;
}

// ---------------------------------------------------------------- text

// A top-level failure (the text, not a field): message without a path.
inline Status FailTop(Failure& f, const std::string& problem) {
  f.field.clear();
  f.message = problem;
  return Status::Error(problem);
}

// Reads T from JSON text of at most max_bytes nesting at most max_depth:
// the object's fields, strictly (or leniently, a client's reading). On error
// *field (when given) names the field at fault, "" for the text as a whole.
template <class T>
Result<T> ParseObjectText(std::string_view text, size_t max_bytes, int max_depth, bool lenient,
                          std::string* field) {
  Failure f;
  f.lenient = lenient;
  auto done = [&](Status st) -> Result<T> {
    if (field) *field = f.field;
    return st;
  };
  if (text.size() > max_bytes) {
    return done(FailTop(f, "the text is " + std::to_string(text.size()) + " bytes; at most " +
                               std::to_string(max_bytes)));
  }
  if (!WithinDepth(text, max_depth)) {
    return done(FailTop(f, "the JSON is nested deeper than " + std::to_string(max_depth)));
  }
  Result<Json> parsed = internal::ParseStrictJson(text);
  if (!parsed.ok()) {
    Status st = FailParse(f, parsed.message());
    if (f.field.empty()) st = FailTop(f, parsed.message());
    return done(st);
  }
  if (!parsed.value().is_object()) {
    return done(FailTop(f, "must be a JSON object, not " + std::string(TypeName(parsed.value()))));
  }
  T out{};
  if (Status st = ReadObject(parsed.value(), "", out, f, false); !st.ok()) return done(st);
  if (field) field->clear();
  return out;
}

// The same from an object already parsed.
template <class T>
Result<T> ReadObjectJson(const Json& object, bool lenient, std::string* field) {
  Failure f;
  f.lenient = lenient;
  T out{};
  Status st = object.is_object()
                  ? ReadObject(object, "", out, f, false)
                  : FailTop(f, "must be a JSON object, not " + std::string(TypeName(object)));
  if (field) *field = f.field;
  if (!st.ok()) return st;
  return out;
}

template <class T>
std::string WriteText(const T& v) {
  return WriteObject(v).dump(-1, ' ', false, OJson::error_handler_t::replace);
}

}  // namespace topo::common::fields
