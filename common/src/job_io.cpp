// Job spec v1 (schema/job.schema.json), placements and metrics as JSON.

#include "topo/common/job_io.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "json_util.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/perf_model.hpp"

namespace topo::common {
namespace {

using core::GroupKind;
using core::Result;
using core::Status;
using core::Strength;
using core::TierConstraint;
using internal::Child;
using internal::Json;
using internal::PathError;

constexpr int64_t kMaxJobGpus = 10'000'000;
constexpr int64_t kMaxSpares = 100'000;

Result<TierConstraint> ReadConstraint(const Json& v, const std::string& path) {
  constexpr std::string_view kShape =
      "a constraint is \"none\", {\"required\": \"<tier>\"}, {\"preferred\": \"<tier>\"} or "
      "{\"auto\": \"<tier>\"}";
  if (v.is_string()) {
    if (v.get<std::string>() == "none") return TierConstraint{};
    return PathError(path, std::string(kShape) + " (got " + internal::Shown(v) + ")");
  }
  if (!v.is_object()) {
    return PathError(path, std::string(kShape) + " (got " + internal::Shown(v) + ")");
  }
  if (Status s = internal::CheckFields(v, path, {"required", "preferred", "auto"}); !s.ok()) {
    return s;
  }
  if (v.size() != 1) {
    return PathError(path, "give exactly one of \"required\", \"preferred\" or \"auto\"");
  }
  const std::string key = v.begin().key();
  Result<std::string> tier = internal::GetString(v, path, key, /*allow_empty=*/false);
  if (!tier.ok()) return tier.status();
  const Strength strength = key == "required"    ? Strength::kRequired
                            : key == "preferred" ? Strength::kPreferred
                                                 : Strength::kAuto;
  return TierConstraint{strength, tier.value()};
}

Status ReadParallelism(const Json& p, const std::string& path, core::Parallelism& out,
                       bool& dp_given) {
  if (!p.is_object()) return PathError(path, "must be an object {\"tp\": ..., \"pp\": ...}");
  if (Status s = internal::CheckFields(p, path, {"tp", "cp", "ep", "pp", "dp", "order"}); !s.ok()) {
    return s;
  }
  std::pair<std::string_view, int*> dims[] = {
      {"tp", &out.tp}, {"cp", &out.cp}, {"ep", &out.ep}, {"pp", &out.pp}, {"dp", &out.dp}};
  for (auto [key, field] : dims) {
    if (!p.contains(key)) continue;
    Result<int64_t> v = internal::GetInt(p, path, key, 1, kMaxJobGpus);
    if (!v.ok()) return v.status();
    *field = static_cast<int>(v.value());
  }
  dp_given = p.contains("dp");
  if (p.contains("order")) {
    Result<std::string> text = internal::GetString(p, path, "order", false);
    if (!text.ok()) return text.status();
    Result<std::vector<core::Dim>> order = core::ParseRankOrder(text.value());
    if (!order.ok()) return PathError(path, "\"order\": " + order.message());
    out.order = std::move(order).value();
  }
  return Status::Ok();
}

// A preset the step-time model knows, or the error listing them.
Status CheckPreset(const std::string& name, const std::string& path) {
  if (core::ModelPreset(name)) return Status::Ok();
  std::string known;
  for (const std::string& n : core::ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return PathError(path, "'" + (name.size() > 64 ? name.substr(0, 64) + "..." : name) +
                             "' is not a model preset; known: " + known +
                             " (or describe the model as an object, docs/perf-model.md)");
}

// "model": a preset name, or an object of the fields of core::ModelSpec
// (every one optional; "preset" names the base the others override).
Result<core::ModelSpec> ReadModel(const Json& v) {
  core::ModelSpec m;
  if (v.is_string()) {
    m.preset = v.get<std::string>();
    if (m.preset.empty()) return PathError("model", "a preset name must not be empty");
    if (Status s = CheckPreset(m.preset, "model"); !s.ok()) return s;
    return m;
  }
  if (!v.is_object()) {
    return PathError("model",
                     "a model is a preset name (e.g. \"llama3-70b\") or an object "
                     "{\"parameters\": ..., \"layers\": ..., ...} (got " +
                         internal::Shown(v) + ")");
  }
  if (Status s = internal::CheckFields(
          v, "model",
          {"preset", "parameters", "active_parameters", "layers", "hidden", "heads", "kv_heads",
           "sequence", "micro_batch", "global_batch", "experts", "top_k", "bytes_per_element",
           "virtual_stages", "recompute"});
      !s.ok()) {
    return s;
  }
  if (v.contains("preset")) {
    Result<std::string> name = internal::GetString(v, "model", "preset", false);
    if (!name.ok()) return name.status();
    m.preset = name.value();
    if (Status s = CheckPreset(m.preset, "model.preset"); !s.ok()) return s;
  }
  for (auto [key, field] : {std::pair<const char*, double*>{"parameters", &m.parameters},
                            {"active_parameters", &m.active_parameters}}) {
    if (!v.contains(key)) continue;
    const Json& x = v.at(key);
    if (!x.is_number() || !(x.get<double>() >= 1) || !(x.get<double>() <= 1e15)) {
      return PathError("model", "\"" + std::string(key) +
                                    "\" must be a number of parameters 1..1e15 (got " +
                                    internal::Shown(x) + ")");
    }
    *field = x.get<double>();
  }
  struct IntField {
    const char* key;
    int* field;
    int64_t hi;
  };
  for (IntField f : {IntField{"layers", &m.layers, 100000},
                     {"hidden", &m.hidden, 1000000},
                     {"heads", &m.heads, 100000},
                     {"kv_heads", &m.kv_heads, 100000},
                     {"sequence", &m.sequence, 100000000},
                     {"micro_batch", &m.micro_batch, 1000000},
                     {"global_batch", &m.global_batch, 100000000},
                     {"experts", &m.experts, 100000},
                     {"top_k", &m.top_k, 100000},
                     {"bytes_per_element", &m.bytes_per_element, 16},
                     {"virtual_stages", &m.virtual_stages, 1000}}) {
    if (!v.contains(f.key)) continue;
    Result<int64_t> x = internal::GetInt(v, "model", f.key, 1, f.hi);
    if (!x.ok()) return x.status();
    *f.field = static_cast<int>(x.value());
  }
  if (v.contains("recompute")) {
    if (!v.at("recompute").is_boolean()) {
      return PathError("model", "\"recompute\" must be true or false (got " +
                                    internal::Shown(v.at("recompute")) + ")");
    }
    m.recompute = v.at("recompute").get<bool>() ? 1 : 0;
  }
  return m;
}

Json ModelToJson(const core::ModelSpec& m) {
  Json j = Json::object();
  if (!m.preset.empty()) j["preset"] = m.preset;
  if (m.parameters > 0) j["parameters"] = m.parameters;
  if (m.active_parameters > 0) j["active_parameters"] = m.active_parameters;
  for (auto [key, value] : {std::pair<const char*, int>{"layers", m.layers},
                            {"hidden", m.hidden},
                            {"heads", m.heads},
                            {"kv_heads", m.kv_heads},
                            {"sequence", m.sequence},
                            {"micro_batch", m.micro_batch},
                            {"global_batch", m.global_batch},
                            {"experts", m.experts},
                            {"top_k", m.top_k},
                            {"bytes_per_element", m.bytes_per_element},
                            {"virtual_stages", m.virtual_stages}}) {
    if (value > 0) j[key] = value;
  }
  if (m.recompute >= 0) j["recompute"] = m.recompute > 0;
  return j;
}

Json ConstraintToJson(const TierConstraint& c) {
  switch (c.strength) {
    case Strength::kRequired:
      return Json{{"required", c.tier}};
    case Strength::kPreferred:
      return Json{{"preferred", c.tier}};
    case Strength::kAuto:
      return Json{{"auto", c.tier}};
    case Strength::kNone:
      break;
  }
  return "none";
}

constexpr size_t kMaxTypeOrFeatureEntries = 64;

// "gpu_types" and "features": arrays of short names.
Status ReadNameArray(const Json& j, const char* key, std::vector<std::string>& out) {
  if (!j.contains(key)) return Status::Ok();
  const Json& v = j.at(key);
  if (!v.is_array()) {
    return PathError(key, std::string("must be an array of names, e.g. [\"") +
                              (std::string_view(key) == "gpu_types" ? "H100" : "ib") + "\"]");
  }
  if (v.size() > kMaxTypeOrFeatureEntries) {
    return PathError(key, "lists " + std::to_string(v.size()) + " names; at most " +
                              std::to_string(kMaxTypeOrFeatureEntries));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return PathError(internal::Index(key, i), "must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return Status::Ok();
}

// "nodelist", "exclude", "avoid": Slurm hostlists of node names.
Status ReadNodeList(const Json& j, const char* key, std::vector<std::string>& out) {
  if (!j.contains(key)) return Status::Ok();
  Result<std::string> text = internal::GetString(j, "", key, /*allow_empty=*/false);
  if (!text.ok()) return text.status();
  Result<std::vector<std::string>> names = ExpandHostlist(text.value(), core::kMaxSelectionNames);
  if (!names.ok()) return PathError(key, names.message());
  for (const std::string& n : names.value()) {
    if (!ValidNodeName(n)) {
      return PathError(
          key, "node \"" + ShownName(n) + "\" is not a node name: " + std::string(NodeNameRule()));
    }
  }
  out = std::move(names).value();
  return Status::Ok();
}

}  // namespace

Result<core::JobSpec> JobSpecFromJson(const Json& j) {
  if (!j.is_object()) return PathError("", "a job spec is a JSON object");
  if (Status s = internal::CheckFields(
          j, "",
          {"name", "gpus", "gpus_per_node", "parallelism", "constraints", "spares", "model",
           "pids_max", "gpu_types", "features", "nodelist", "exclude", "avoid"});
      !s.ok()) {
    return s;
  }
  core::JobSpec job;
  if (j.contains("name")) {
    Result<std::string> name = internal::GetString(j, "", "name", /*allow_empty=*/true);
    if (!name.ok()) return name.status();
    if (name.value().size() > core::kMaxJobNameBytes) {
      return PathError("", "\"name\" is " + std::to_string(name.value().size()) +
                               " bytes; at most " + std::to_string(core::kMaxJobNameBytes));
    }
    job.name = name.value();
  }
  if (!j.contains("gpus")) return PathError("", "\"gpus\" is required");
  Result<int64_t> gpus = internal::GetInt(j, "", "gpus", 1, kMaxJobGpus);
  if (!gpus.ok()) return gpus.status();
  job.gpus = static_cast<int>(gpus.value());
  if (j.contains("gpus_per_node")) {
    Result<int64_t> g = internal::GetInt(j, "", "gpus_per_node", 0, core::kMaxGpusPerNode);
    if (!g.ok()) return g.status();
    job.gpus_per_node = static_cast<int>(g.value());
  }
  if (j.contains("spares")) {
    Result<int64_t> s = internal::GetInt(j, "", "spares", 0, kMaxSpares);
    if (!s.ok()) return s.status();
    job.spares = static_cast<int>(s.value());
  }
  if (j.contains("pids_max")) {
    Result<int64_t> n = internal::GetInt(j, "", "pids_max", 1, core::kMaxJobPids);
    if (!n.ok()) return n.status();
    job.pids_max = static_cast<int>(n.value());
  }

  core::Parallelism& p = job.parallelism;
  bool dp_given = false;
  if (j.contains("parallelism")) {
    if (Status s = ReadParallelism(j.at("parallelism"), "parallelism", p, dp_given); !s.ok()) {
      return s;
    }
  }
  // Products are capped so that no degree can overflow them (each is at most
  // 10^7).
  constexpr int64_t kCap = 100'000'000'000;  // 10^11 x 10^7 < INT64_MAX
  auto capped_product = [&](std::initializer_list<int> factors) {
    int64_t product = 1;
    for (int f : factors) product = std::min(kCap, product * f);
    return product;
  };
  if (!dp_given) {
    int64_t model = capped_product({p.tp, p.cp, p.pp});
    if (job.gpus % model != 0) {
      int64_t down = job.gpus / model * model;
      std::string model_text =
          model >= kCap ? "more than " + std::to_string(job.gpus) : std::to_string(model);
      std::string example =
          model >= kCap ? std::string()
                        : " (e.g. " + (down > 0 ? std::to_string(down) + " or " : std::string()) +
                              std::to_string(down + model) + ")";
      return PathError("parallelism", "\"dp\" is derived as gpus / (tp x cp x pp), but gpus " +
                                          std::to_string(job.gpus) + " is not a multiple of " +
                                          model_text + "; set \"gpus\" to a multiple of " +
                                          model_text + example + " or change tp, cp or pp");
    }
    p.dp = static_cast<int>(job.gpus / model);
  } else if (int64_t product = capped_product({p.tp, p.cp, p.pp, p.dp}); product != job.gpus) {
    return PathError(
        "parallelism",
        "tp x cp x pp x dp = " + std::to_string(p.tp) + " x " + std::to_string(p.cp) + " x " +
            std::to_string(p.pp) + " x " + std::to_string(p.dp) + " = " +
            (product >= kCap ? "more than " + std::to_string(job.gpus) : std::to_string(product)) +
            ", but gpus is " + std::to_string(job.gpus) +
            "; make the product equal gpus, or leave \"dp\" out to derive it");
  }

  if (j.contains("constraints")) {
    const Json& c = j.at("constraints");
    if (!c.is_object()) {
      return PathError("constraints", "must be an object {\"tp\": {\"required\": \"hbd\"}, ...}");
    }
    if (Status s = internal::CheckFields(c, "constraints", {"tp", "cp", "ep", "pp", "dp"});
        !s.ok()) {
      return s;
    }
    for (GroupKind kind : core::kAllGroupKinds) {
      std::string key(core::GroupKindName(kind));
      if (!c.contains(key)) continue;
      Result<TierConstraint> tc = ReadConstraint(c.at(key), Child("constraints", key));
      if (!tc.ok()) return tc.status();
      job.constraints[static_cast<int>(kind)] = std::move(tc).value();
    }
  }
  if (j.contains("model")) {
    Result<core::ModelSpec> m = ReadModel(j.at("model"));
    if (!m.ok()) return m.status();
    job.model = std::move(m).value();
  }
  core::NodeSelection& sel = job.selection;
  for (auto [key, names] :
       {std::pair{"gpu_types", &sel.gpu_types}, std::pair{"features", &sel.features}}) {
    if (Status s = ReadNameArray(j, key, *names); !s.ok()) return s;
  }
  for (auto [key, names] : {std::pair{"nodelist", &sel.nodelist},
                            std::pair{"exclude", &sel.exclude}, std::pair{"avoid", &sel.avoid}}) {
    if (Status s = ReadNodeList(j, key, *names); !s.ok()) return s;
  }
  if (Status s = core::ValidateJobSpec(job); !s.ok()) return s;
  if (job.model) {
    // Presets, top_k <= experts and the like: errors name the model field.
    Result<core::ResolvedModel> resolved = core::ResolveModel(job);
    if (!resolved.ok()) return PathError("model", resolved.message());
  }
  return job;
}

Result<core::JobSpec> ParseJobSpec(std::string_view text) {
  Result<Json> j = internal::ParseStrictJson(text);
  if (!j.ok()) return j.status();
  return JobSpecFromJson(j.value());
}

Json JobSpecToJson(const core::JobSpec& job) {
  const core::Parallelism& p = job.parallelism;
  Json constraints = Json::object();
  for (GroupKind kind : core::kAllGroupKinds) {
    constraints[std::string(core::GroupKindName(kind))] = ConstraintToJson(job.constraint(kind));
  }
  Json out{{"name", job.name},
           {"gpus", job.gpus},
           {"gpus_per_node", job.gpus_per_node},
           {"parallelism",
            {{"tp", p.tp},
             {"cp", p.cp},
             {"ep", p.ep},
             {"pp", p.pp},
             {"dp", p.dp},
             {"order", core::FormatRankOrder(p.order)}}},
           {"constraints", std::move(constraints)},
           {"spares", job.spares}};
  if (job.model) out["model"] = ModelToJson(*job.model);
  if (job.pids_max > 0) out["pids_max"] = job.pids_max;
  const core::NodeSelection& sel = job.selection;
  if (!sel.gpu_types.empty()) out["gpu_types"] = sel.gpu_types;
  if (!sel.features.empty()) out["features"] = sel.features;
  if (!sel.nodelist.empty()) out["nodelist"] = CompressHostlist(sel.nodelist);
  if (!sel.exclude.empty()) out["exclude"] = CompressHostlist(sel.exclude);
  if (!sel.avoid.empty()) out["avoid"] = CompressHostlist(sel.avoid);
  return out;
}

Json PlacementToJson(const core::Placement& placement, const core::Topology& topology) {
  Json ranks = Json::array();
  for (size_t r = 0; r < placement.ranks.size(); ++r) {
    const core::GpuSlot& slot = placement.ranks[r];
    ranks.push_back(Json{{"rank", r}, {"node", topology.node(slot.node).name}, {"gpu", slot.gpu}});
  }
  Json spares = Json::array();
  for (core::NodeId n : placement.spares) spares.push_back(topology.node(n).name);
  return Json{{"outcome", std::string(core::PlaceOutcomeName(placement.outcome))},
              {"reason", placement.reason},
              {"ranks", std::move(ranks)},
              {"spares", std::move(spares)}};
}

// One mapping of the core's figures to JSON: the user API's views'.
Json MetricsToJson(const core::PlacementMetrics& metrics, const core::Topology& topology) {
  return Json(api::MetricsViewJson(api::MetricsViewOf(metrics, topology)));
}

Json PredictionToJson(const core::StepPrediction& prediction, const std::string& model) {
  return Json(api::PredictionViewJson(api::PredictionViewOf(prediction, model)));
}

}  // namespace topo::common
