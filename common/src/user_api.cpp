// The user API's requests (user_api.hpp): POST /v1/jobs's body and the Slurm
// plugin's request line, as field tables that the engine (field_table.hpp)
// reads, writes and turns into the schema; the names every reader shares.
// The views are user_api_views.cpp.

#include "topo/common/user_api.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>

#include "field_schema.hpp"
#include "field_table.hpp"
#include "json_util.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_process.hpp"
#include "user_api_internal.hpp"

namespace topo::common::fields {

using api::PartitionRequest;
using api::ReservationRequest;
using api::SlurmOp;
using api::SlurmSubmitLine;
using api::SubmitRequest;

template <>
struct EnumTable<SlurmOp> {
  static constexpr std::array kValues = {SlurmOp::kSubmit, SlurmOp::kTest, SlurmOp::kRefresh};
  static std::string_view Name(SlurmOp op) {
    return op == SlurmOp::kSubmit ? "submit" : op == SlurmOp::kTest ? "test" : "refresh";
  }
};

// A partition's or a reservation's name.
constexpr Str kSetNameStr{core::kMaxNodeSetNameBytes, Chars::kSetName, false};

// The nodes of a partition or a reservation: a Slurm hostlist
// ("gpu[001-064],x7") or an array of node names, at least one, each once, at
// most kMaxNodeSetNodes; written as a hostlist.
struct NodeNamesCodec {
  static Status Read(const Json& v, const std::string& path, std::vector<std::string>& out,
                     Failure& f) {
    std::vector<std::string> names;
    if (v.is_string()) {
      const auto& text = v.get_ref<const std::string&>();
      if (text.empty()) return Fail(f, path, "must name at least one node, e.g. \"gpu[001-064]\"");
      Result<std::vector<std::string>> expanded = ExpandHostlist(text, api::kMaxNodeSetNodes);
      if (!expanded.ok()) return Fail(f, path, expanded.message());
      names = std::move(expanded).value();
    } else if (v.is_array()) {
      if (v.size() > api::kMaxNodeSetNodes) {
        return Fail(f, path,
                    "has " + std::to_string(v.size()) + " nodes; at most " +
                        std::to_string(api::kMaxNodeSetNodes));
      }
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) {
          return Fail(f, Index(path, i), "must be a node name (got " + Shown(v[i]) + ")");
        }
        names.push_back(v[i].get<std::string>());
      }
    } else {
      return Fail(f, path,
                  "must be a hostlist such as \"gpu[001-064]\" or an array of node names (got " +
                      std::string(TypeName(v)) + ")");
    }
    if (names.empty()) return Fail(f, path, "must name at least one node");
    std::set<std::string_view> seen;
    for (const std::string& n : names) {
      if (Status s = CheckNodeName(n); !s.ok()) return Fail(f, path, s.message());
      if (!seen.insert(n).second) {
        return Fail(f, path, "names node " + n + " twice; name each node once");
      }
    }
    out = std::move(names);
    return Status::Ok();
  }
  static OJson Write(const std::vector<std::string>& names) { return CompressHostlist(names); }
  static OJson Schema() {
    return {{"oneOf",
             OJson::array(
                 {OJson{{"type", "string"}, {"minLength", 1}},
                  OJson{{"type", "array"},
                        {"minItems", 1},
                        {"maxItems", api::kMaxNodeSetNodes},
                        {"items", SchemaOf(Str{kMaxNodeNameBytes, Chars::kNodeName, false})}}})},
            {"x-maxItems", api::kMaxNodeSetNodes}};
  }
};

constexpr List<Str> kTenantList{api::kMaxNodeSetTenants,
                                {api::kMaxTenantBytes, Chars::kTenant, false}};

template <>
struct Table<PartitionRequest> {
  static constexpr auto Fields() {
    using P = PartitionRequest;
    constexpr Int kLimit{0, api::kMaxTimeLimitS};
    return std::tuple{
        F("name", &P::name, kSetNameStr, "name the partition, e.g. {\"name\": \"gpu\"}"),
        F("nodes", &P::nodes, Custom<NodeNamesCodec>{},
          "give its nodes, e.g. {\"nodes\": \"gpu[001-064]\"}"),
        F("default_time_s", &P::default_time_s, kLimit),
        F("max_time_s", &P::max_time_s, kLimit),
        F("max_gpus", &P::max_gpus, Int{0, api::kMaxReservationGpus}),
        F("tenants", &P::tenants, kTenantList),
        F("priority_tier", &P::priority_tier, Int{-1000, 1000}),
        F("preemptible", &P::preemptible, Bool{}),
        F("default", &P::is_default, Bool{})};
  }
  static Status Check(const PartitionRequest& p, const std::string& path, Failure& f) {
    if (p.default_time_s && p.max_time_s && *p.max_time_s > 0 &&
        *p.default_time_s > *p.max_time_s) {
      return Fail(f, Child(path, "default_time_s"),
                  "is " + std::to_string(*p.default_time_s) + " s, more than max_time_s (" +
                      std::to_string(*p.max_time_s) + " s): lower it or raise max_time_s");
    }
    return Status::Ok();
  }
};

template <>
struct Table<ReservationRequest> {
  static constexpr auto Fields() {
    using R = ReservationRequest;
    return std::tuple{
        F("name", &R::name, kSetNameStr, "name the reservation, e.g. {\"name\": \"maint\"}"),
        F("nodes", &R::nodes, Custom<NodeNamesCodec>{}),
        F("gpus", &R::gpus, Int{1, api::kMaxReservationGpus}),
        F("start_ms", &R::start_ms, Int{0, api::kMaxTimeMs}),
        F("duration_s", &R::duration_s, Int{1, api::kMaxReservationS}),
        F("end_ms", &R::end_ms, Int{1, api::kMaxTimeMs}),
        F("tenants", &R::tenants, kTenantList),
        F("maintenance", &R::maintenance, Bool{}),
        F("partition", &R::partition, kSetNameStr)};
  }
  static Status Check(const ReservationRequest& r, const std::string& path, Failure& f) {
    if (r.nodes.has_value() == r.gpus.has_value()) {
      return Fail(f, Child(path, r.nodes ? "gpus" : "nodes"),
                  r.nodes ? "give nodes or gpus, not both"
                          : "missing; give the nodes (\"nodes\": \"gpu[001-008]\") or how many "
                            "GPUs the scheduler should choose whole nodes for (\"gpus\": 64)");
    }
    if (r.duration_s.has_value() == r.end_ms.has_value()) {
      return Fail(f, Child(path, r.duration_s ? "end_ms" : "duration_s"),
                  r.duration_s ? "give duration_s or end_ms, not both"
                               : "missing; give the window's length (\"duration_s\": 3600) or "
                                 "its end (\"end_ms\")");
    }
    if (r.end_ms && r.start_ms && *r.end_ms <= *r.start_ms) {
      return Fail(f, Child(path, "end_ms"),
                  "is not after start_ms (" + std::to_string(*r.start_ms) +
                      "): the window must end after it starts");
    }
    if (r.partition && !r.gpus) {
      return Fail(f, Child(path, "partition"),
                  "only chooses where the nodes of \"gpus\" come from; with \"nodes\" leave it "
                  "out");
    }
    return Status::Ok();
  }
};

template <>
struct Table<SubmitRequest> {
  static constexpr auto Fields() {
    using R = SubmitRequest;
    return std::tuple{
        F("spec", &R::spec, Custom<JobSpecCodec>{},
          "give the job spec v1, e.g. {\"spec\": {\"gpus\": 8}}"),
        F("tenant", &R::tenant, Str{api::kMaxTenantBytes, Chars::kTenant, false}),
        F("priority", &R::priority, Int{api::kMinPriority, api::kMaxPriority}),
        F("time_limit_s", &R::time_limit_s, Int{1, api::kMaxTimeLimitS}),
        F("checkpoint_interval_s", &R::checkpoint_interval_s, Int{-1, api::kMaxIntervalS}),
        // -1: never wait for a faster placement; 0: the tenant's or the
        // cluster's bound, as when absent.
        F("placement_wait_s", &R::placement_wait_s, Int{-1, api::kMaxIntervalS}),
        F("command", &R::command,
          List<Str>{proto::kMaxCommandArgs, {proto::kMaxArgBytes, Chars::kText}},
          "say what every rank runs, as an argv array, e.g. {\"spec\": {\"gpus\": 8}, "
          "\"command\": [\"python3\", \"train.py\"]} (topo submit: -- CMD ARGS, --wrap 'CMD', "
          "or a batch script)"),
        F("memory_mb_per_node", &R::memory_mb_per_node, Int{1, api::kMaxMemoryMbPerNode}),
        F("cpus_per_node", &R::cpus_per_node, Num{api::kMinCpusPerNode, api::kMaxCpusPerNode}),
        F("launch", &R::launch, Enum<core::LaunchMode>{}), F("env", &R::env, EnvMap{}),
        F("chdir", &R::chdir, Str{proto::kMaxPathBytes, Chars::kPath}),
        F("output", &R::output, Str{proto::kMaxPathBytes, Chars::kLine, false}),
        F("error", &R::error, Str{proto::kMaxPathBytes, Chars::kLine, false}),
        F("dependency", &R::dependency, Str{kMaxChainText, Chars::kLine}),
        F("array", &R::array, Str{kMaxChainText, Chars::kLine}),
        F("client_request_id", &R::client_request_id,
          Str{kMaxClientRequestId, Chars::kRequestId, false}),
        F("partition", &R::partition, kSetNameStr), F("reservation", &R::reservation, kSetNameStr)};
  }

  // What the types do not say: the rules of job_process.hpp and
  // job_chain.hpp, shared with the CLI and the agent's `start`.
  static Status Check(const SubmitRequest& r, const std::string& path, Failure& f) {
    if (const auto& c = r.checkpoint_interval_s;
        c && *c >= 0 && *c < api::kMinCheckpointIntervalS) {
      return Fail(f, Child(path, "checkpoint_interval_s"),
                  *c == 0 ? "must be -1 (never) or 60.." + std::to_string(api::kMaxIntervalS)
                          : "is " + std::to_string(*c) +
                                ", below the minimum of 60 (or -1 for "
                                "never)");
    }
    if (r.command.empty()) {
      return Fail(f, Child(path, "command"),
                  "must not be empty: say what every rank runs, as an argv array");
    }
    size_t bytes = 0;
    for (const std::string& a : r.command) bytes += a.size() + 1;
    if (bytes > proto::kMaxCommandBytes) {
      return Fail(f, Child(path, "command"),
                  "takes " + std::to_string(bytes) + " bytes with its NULs; at most " +
                      std::to_string(proto::kMaxCommandBytes) +
                      " fit beside the job's environment: put a long script in a file the job "
                      "reads");
    }
    if (r.command[0].empty()) {
      return Fail(f, Child(path, "command") + "[0]", "the program must not be empty");
    }
    if (r.env) {
      for (const auto& [name, value] : *r.env) {
        if (Status s = CheckJobEnvVar(name, value); !s.ok()) {
          return FailWith(f, Child(Child(path, "env"), name), s.message());
        }
      }
    }
    if (r.chdir) {
      if (Status s = CheckWorkingDir(*r.chdir); !s.ok()) {
        return FailWith(f, Child(path, "chdir"), s.message());
      }
    }
    for (const auto& [name, pattern] : {std::pair{"output", &r.output}, {"error", &r.error}}) {
      if (!*pattern) continue;
      if (Status s = CheckOutputPattern(**pattern); !s.ok()) {
        return Fail(f, Child(path, name), s.message());
      }
    }
    if (r.dependency) {
      if (auto d = ParseDependencies(*r.dependency); !d.ok()) {
        return FailWith(f, Child(path, "dependency"), d.message());
      }
    }
    if (r.array) {
      if (auto a = ParseArraySpec(*r.array); !a.ok()) {
        return FailWith(f, Child(path, "array"), a.message());
      }
    }
    return Status::Ok();
  }
};

template <>
struct Table<SlurmSubmitLine> {
  static constexpr Nullable<Str> kText{{api::kMaxSlurmStringBytes, Chars::kText}};
  static constexpr Nullable<Int> kNumber{{api::kSlurmNoValue, api::kMaxSlurmNumber}};
  static constexpr auto Fields() {
    using L = SlurmSubmitLine;
    return std::tuple{F("v", &L::v, Int{1, 1}),
                      F("op", &L::op, Enum<SlurmOp>{}),
                      F("uid", &L::uid, kNumber),
                      F("name", &L::name, kText),
                      F("account", &L::account, kText),
                      F("partition", &L::partition, kText),
                      F("comment", &L::comment, kText),
                      F("features", &L::features, kText),
                      F("req_nodes", &L::req_nodes, kText),
                      F("exc_nodes", &L::exc_nodes, kText),
                      F("tres_per_job", &L::tres_per_job, kText),
                      F("tres_per_node", &L::tres_per_node, kText),
                      F("tres_per_socket", &L::tres_per_socket, kText),
                      F("tres_per_task", &L::tres_per_task, kText),
                      F("min_nodes", &L::min_nodes, kNumber),
                      F("max_nodes", &L::max_nodes, kNumber),
                      F("time_limit_min", &L::time_limit_min, kNumber),
                      F("req_switch", &L::req_switch, kNumber),
                      F("wait4switch", &L::wait4switch, kNumber),
                      F("segment", &L::segment, kNumber),
                      F("exclusive_topo", &L::exclusive_topo, Nullable<Bool>{}),
                      F("batch", &L::batch, Nullable<Bool>{}),
                      F("array", &L::array, Nullable<Bool>{}),
                      F("env", &L::env, Nullable<EnvMap>{})};
  }
  static Status Check(const SlurmSubmitLine& l, const std::string& path, Failure& f) {
    if (!l.env) return Status::Ok();
    for (const auto& [name, value] : *l.env) {
      if (name.rfind("TOPO_", 0) != 0) {
        return Fail(f, Child(Child(path, "env"), name),
                    "not a TOPO_* variable: the plugin sends only those of the job's environment");
      }
    }
    return Status::Ok();
  }
};

}  // namespace topo::common::fields

namespace topo::api {

namespace fields = common::fields;

bool ValidUserName(std::string_view name) {
  if (name.empty() || name.size() > kMaxUserNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == '-' || (c == '@' && i > 0);
    if (!ok) return false;
  }
  return name[0] != '.' && name[0] != '-';
}

// A submission nests at most: spec.model{...}, spec.constraints.tp{...}.
constexpr int kMaxRequestDepth = 8;

core::Result<SubmitRequest> ParseSubmitRequest(std::string_view text, std::string* field) {
  return fields::ParseObjectText<SubmitRequest>(text, kMaxRequestBytes, kMaxRequestDepth, false,
                                                field);
}
core::Result<SubmitRequest> ReadSubmitRequest(const nlohmann::json& body, std::string* field) {
  return fields::ReadObjectJson<SubmitRequest>(body, false, field);
}
std::string WriteSubmitRequest(const SubmitRequest& request) { return fields::WriteText(request); }
nlohmann::ordered_json SubmitRequestJson(const SubmitRequest& request) {
  return fields::WriteObject(request);
}

core::Result<SlurmSubmitLine> ParseSlurmSubmitLine(std::string_view text, std::string* field) {
  return fields::ParseObjectText<SlurmSubmitLine>(text, kMaxSlurmLineBytes, 4, false, field);
}
std::string WriteSlurmSubmitLine(const SlurmSubmitLine& line) { return fields::WriteText(line); }

core::Result<PartitionRequest> ReadPartitionRequest(const nlohmann::json& body,
                                                    std::string* field) {
  return fields::ReadObjectJson<PartitionRequest>(body, false, field);
}
core::Result<ReservationRequest> ReadReservationRequest(const nlohmann::json& body,
                                                        std::string* field) {
  return fields::ReadObjectJson<ReservationRequest>(body, false, field);
}
std::string WritePartitionRequest(const PartitionRequest& request) {
  return fields::WriteText(request);
}
std::string WriteReservationRequest(const ReservationRequest& request) {
  return fields::WriteText(request);
}

nlohmann::ordered_json ApiSchema() {
  fields::OJson defs = fields::OJson::object();
  defs["submit_request"] = fields::ObjectSchema<SubmitRequest, false>();
  fields::AddViewSchemas(defs);
  defs["slurm_submit_line"] = fields::ObjectSchema<SlurmSubmitLine, false>();
  defs["partition_request"] = fields::ObjectSchema<PartitionRequest, false>();
  defs["reservation_request"] = fields::ObjectSchema<ReservationRequest, false>();
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"title", "toposched user API"},
          {"description",
           "The bodies of the HTTPS API (docs/api.md) and the Slurm plugin's request line "
           "(docs/slurm.md), generated from common/src/user_api*.cpp; job specs are "
           "schema/job.schema.json."},
          {"x-maxRequestBytes", kMaxRequestBytes},
          {"$defs", defs}};
}

}  // namespace topo::api
