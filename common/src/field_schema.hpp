#pragma once
// The JSON Schema (draft 2020-12) of a field table (field_table.hpp): what
// the strict reader accepts, as properties, types, bounds, patterns and the
// required fields. Byte limits appear as "maxLength" (an upper bound in
// characters too) plus "x-maxBytes". Included by field_table.hpp; not
// installed.
//
// Thread safety: pure functions.

#include "field_table.hpp"

namespace topo::common::fields {

inline OJson SchemaOf(Int limit) {
  return {{"type", "integer"}, {"minimum", limit.lo}, {"maximum", limit.hi}};
}
inline OJson SchemaOf(Bool) { return {{"type", "boolean"}}; }
inline OJson SchemaOf(Num limit) {
  return {{"type", "number"}, {"minimum", limit.lo}, {"maximum", limit.hi}};
}
inline OJson SchemaOf(Str limit) {
  OJson s = {{"type", "string"}, {"maxLength", limit.max_bytes}, {"x-maxBytes", limit.max_bytes}};
  if (!limit.allow_empty) s["minLength"] = 1;
  switch (limit.chars) {
    case Chars::kText:
      break;
    case Chars::kLine:
      s["pattern"] = "^[^\\u0000-\\u001f\\u007f]*$";
      break;
    case Chars::kName:
      s["pattern"] = "^[!-~]*$";
      break;
    case Chars::kNodeName:
      s["pattern"] = "^[A-Za-z0-9][A-Za-z0-9._-]*$";
      break;
    case Chars::kPath:
      s["pattern"] = "^(/.*)?$";
      break;
    case Chars::kUnixUser:
      s["pattern"] = "^[A-Za-z0-9_][A-Za-z0-9._-]*$";
      break;
    case Chars::kEnvName:
      s["pattern"] = "^[A-Za-z_][A-Za-z0-9_]*$";
      break;
    case Chars::kTenant:
      s["pattern"] = "^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*){0,7}$";
      break;
    case Chars::kRequestId:
      s["pattern"] = "^[A-Za-z0-9._:-]*$";
      break;
    case Chars::kSetName:
      s["pattern"] = "^[A-Za-z0-9_][A-Za-z0-9._-]*$";
      break;
  }
  return s;
}
inline OJson SchemaOf(Base64 limit) {
  const size_t text = Base64Length(limit.max_bytes);
  return {{"type", "string"},
          {"contentEncoding", "base64"},
          {"maxLength", text},
          {"x-maxBytes", text},
          {"pattern", "^[A-Za-z0-9+/]*={0,2}$"}};
}
template <class E>
OJson SchemaOf(Enum<E>) {
  OJson values = OJson::array();
  for (E e : EnumTable<E>::kValues) values.push_back(std::string(EnumTable<E>::Name(e)));
  return {{"type", "string"}, {"enum", values}};
}
template <class T, bool kTyped>
OJson ObjectSchema();
template <class T>
OJson SchemaFor(Obj) {
  return ObjectSchema<T, false>();
}
template <class T, class L>
OJson SchemaFor(L limit) {
  return SchemaOf(limit);
}
template <class T, class L>
OJson SchemaFor(List<L> limit) {
  return {{"type", "array"},
          {"maxItems", limit.max_items},
          {"items", SchemaFor<typename T::value_type>(limit.element)}};
}
template <class T>
OJson SchemaFor(EnvMap) {
  return {{"type", "object"},
          {"maxProperties", proto::kMaxEnvVars},
          {"propertyNames", SchemaOf(Str{256, Chars::kEnvName, false})},
          {"additionalProperties", SchemaOf(Str{proto::kMaxArgBytes, Chars::kText})},
          {"x-maxBytes", proto::kMaxEnvBytes}};
}
template <class T, class L>
OJson SchemaFor(const Map<L>& limit) {
  return {{"type", "object"},
          {"maxProperties", limit.max_entries},
          {"propertyNames", SchemaOf(limit.key)},
          {"additionalProperties", SchemaFor<typename T::mapped_type>(limit.value)}};
}
template <class T, class Codec>
OJson SchemaFor(Custom<Codec>) {
  return Codec::Schema();
}

// T's fields into `properties` and `required` (Flat parts merged; an
// optional part's fields are never required).
template <class T>
void SchemaFields(OJson& properties, OJson& required, bool in_optional_part) {
  std::apply(
      [&](const auto&... fd) {
        (
            [&] {
              using M = std::decay_t<decltype(std::declval<T>().*fd.member)>;
              using L = std::decay_t<decltype(fd.limit)>;
              const std::string name(fd.name);
              if constexpr (std::is_same_v<L, Flat>) {
                if constexpr (IsOptional<M>::value) {
                  SchemaFields<typename M::value_type>(properties, required, true);
                } else {
                  SchemaFields<M>(properties, required, in_optional_part);
                }
              } else if constexpr (IsNullable<L>::value) {
                properties[name] = {
                    {"anyOf", OJson::array({SchemaFor<typename M::value_type>(fd.limit.inner),
                                            OJson{{"type", "null"}}})}};
              } else if constexpr (IsOptional<M>::value) {
                properties[name] = SchemaFor<typename M::value_type>(fd.limit);
              } else {
                properties[name] = SchemaFor<M>(fd.limit);
                if (!in_optional_part) required.push_back(name);
              }
            }(),
            ...);
      },
      Table<T>::Fields());
}

// The schema of T's object; kTyped: with the message's "type" first, a
// constant T::kType.
template <class T, bool kTyped>
OJson ObjectSchema() {
  OJson properties = OJson::object();
  OJson required = OJson::array();
  if constexpr (kTyped) {
    properties["type"] = {{"const", std::string(T::kType)}};
    required.push_back("type");
  }
  SchemaFields<T>(properties, required, false);
  return {{"type", "object"},
          {"properties", properties},
          {"required", required},
          {"additionalProperties", false}};
}

}  // namespace topo::common::fields
