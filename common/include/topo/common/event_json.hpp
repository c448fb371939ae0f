#pragma once
// Wire format of SchedulerCore's events and commands: the body of the store's
// event log (scheduler/store) and of the `/v1/events` API.
//
//   {"type": "job_submitted", "id": 7, "request": {"spec": {...}, "tenant": "org/a", ...}}
//   {"type": "start_job", "id": 7, "ranks": [["n0", 0], ["n0", 1]], "spares": ["n3"]}
//
// Nodes are written by name, never by id, so a log survives a re-import of
// the topology that renumbers the nodes. Every field is written explicitly;
// the readers are strict (unknown or missing fields, wrong types, unknown
// names are errors that name the JSON path, e.g. "request.spec.gpus: ...").
// Round trip: XFromJson(XToJson(x, topo), topo) gives back x, for every x the
// writer accepts (see the REQUIRES below). Enum values are written by their
// core names (JobStateName, NodeStateName, GpuHealthName).
//
// Format, one object per alternative ("type" first; TenantConfig and
// JobRequest as below):
//   events:   job_submitted {id, request}        job_cancelled {id, reason}
//             job_hold_changed {id, hold}        job_finished {id, exit_code}
//             rank_exited {id, rank, exit_code}  checkpoint_completed {id, step}
//             node_state_requested {node, state, reason}       heartbeat {node}
//             gpu_event {node, gpu, kind, code}  tenant_configured {tenant}
//             tick {}                            node_evacuated {node, reason}
//             job_launch_failed {id, node, reason, permanent}
//             node_states_requested {requests: [{node, state, reason}, ...]}
//               (one batch, applied in order; at least one request)
//             start_unacknowledged {id, nodes: [node, ...], waited_ms}
//             partition_configured {partition}   partition_deleted {name}
//             reservation_configured {reservation}
//             reservation_deleted {name}
//   commands: start_job {id, ranks, spares}
//             restart_job {id, ranks, spares, checkpoint_step, restart_count}
//             stop_job {id, reason}              request_checkpoint {id, reason}
//             drain_node {node, reason}          node_state_changed {node, state, reason}
//             gpu_health_changed {node, gpu, health, reason}
//             job_state_changed {id, state, reason}
//   request:  {spec (job_io.hpp), tenant, user, priority, time_limit_ms,
//              checkpoint_interval_ms, command ([argv...]; optional on read),
//              launch, env, chdir, output, error (job_process.hpp; each
//              written only when not the default), partition, reservation
//              (each written only when named)}
//   tenant:   {name, guaranteed_gpus, borrow_limit_gpus, max_job_gpus,
//              max_running_jobs, max_queued_jobs, shares, placement_wait_ms,
//              partitions: {PARTITION: {max_gpus, max_job_gpus,
//              max_running_jobs}, ...}} (the last three optional on read:
//              logs from before them; partitions by the node-set name rule,
//              at most core::kMaxTenantPartitions, limits 0 (none) ..
//              core::kMaxPartitionLimit)
//   partition: {name, nodes: [node, ...], default_time_ms, max_time_ms,
//              max_gpus, tenants: [tenant, ...], priority_tier, preemptible,
//              default}
//   reservation: {name, nodes: [node, ...], start_ms, end_ms, tenants,
//              maintenance}
//   ranks:    [[node, gpu], ...] in rank order; spares: [node, ...]
//   gpu_event kinds: xid, ecc_single_bit, ecc_double_bit, thermal, off_bus,
//              cleared
//
// Thread safety: pure functions.

#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/cluster_state.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::common {

// REQUIRES (writers): every NodeId is a node of topology (an out-of-range id
// is written as null, which the readers reject); a JobSubmitted's spec passes
// core::ValidateJobSpec (JobSpecFromJson insists on it); TenantConfig::shares
// is finite (JSON has no NaN); a NodeStatesRequested holds at least one
// request. The store checks an event reads back before it logs it.
nlohmann::json EventToJson(const core::Event& event, const core::Topology& topology);
core::Result<core::Event> EventFromJson(const nlohmann::json& j, const core::Topology& topology);

nlohmann::json CommandToJson(const core::Command& command, const core::Topology& topology);
core::Result<core::Command> CommandFromJson(const nlohmann::json& j,
                                            const core::Topology& topology);

// The "type" tag of an event or command ("job_submitted", "start_job", ...).
std::string_view EventTypeName(const core::Event& event);
// Every event's "type", in the order of core::Event's alternatives (the
// names `GET /v1/events?type=` and `topo events --type` take).
std::span<const std::string_view> EventTypeNames();
std::string_view CommandTypeName(const core::Command& command);

// Pieces shared with the store's materialized tables.
nlohmann::json TenantConfigToJson(const core::TenantConfig& tenant);
core::Result<core::TenantConfig> TenantConfigFromJson(const nlohmann::json& j);
// TenantConfig::partitions as the tenant's "partitions" object (the log's,
// the API's TENANT view and PUT body).
nlohmann::json PartitionLimitsToJson(
    const std::map<std::string, core::PartitionLimits>& partitions);
// Partitions and reservations as the log carries them: the set's name by
// core::ValidateNodeSetName, node names by the node-name rule, tenants by
// the tenant rule, sizes and times (up to the year 9999) checked here; what
// needs the topology by core::ValidatePartition/ValidateReservation.
nlohmann::json PartitionConfigToJson(const core::PartitionConfig& partition);
core::Result<core::PartitionConfig> PartitionConfigFromJson(const nlohmann::json& j);
nlohmann::json ReservationConfigToJson(const core::ReservationConfig& reservation);
core::Result<core::ReservationConfig> ReservationConfigFromJson(const nlohmann::json& j);
// At most this many dependencies per job (each an afterok/afterany/afternotok
// on one job id): the API, the CLI and the log reader all refuse more.
inline constexpr size_t kMaxJobDependencies = 64;
// A submission's client_request_id (its idempotency key): 1 to 64 bytes of
// letters, digits and . _ : -, so it is safe in logs, URLs and messages. The
// API and the CLI check it with CheckClientRequestId; the log reader only its
// type and size.
inline constexpr size_t kMaxClientRequestId = 64;
core::Status CheckClientRequestId(std::string_view id);
nlohmann::json JobRequestToJson(const core::JobRequest& request);
core::Result<core::JobRequest> JobRequestFromJson(const nlohmann::json& j);
nlohmann::json GpuSlotsToJson(const std::vector<core::GpuSlot>& slots,
                              const core::Topology& topology);
core::Result<std::vector<core::GpuSlot>> GpuSlotsFromJson(const nlohmann::json& j,
                                                          const core::Topology& topology);
nlohmann::json NodeListToJson(const std::vector<core::NodeId>& nodes,
                              const core::Topology& topology);
core::Result<std::vector<core::NodeId>> NodeListFromJson(const nlohmann::json& j,
                                                         const core::Topology& topology);

// Inverses of the core's name functions; nullopt for an unknown name.
std::optional<core::JobState> ParseJobState(std::string_view name);
std::optional<core::NodeState> ParseNodeState(std::string_view name);
std::optional<core::GpuHealth> ParseGpuHealth(std::string_view name);
// GPU event kinds by their wire names (xid, ecc_single_bit, ...), shared with
// the agent protocol; "unknown" past the last kind.
std::string_view GpuEventKindName(core::GpuEventKind kind);
std::optional<core::GpuEventKind> ParseGpuEventKind(std::string_view name);

}  // namespace topo::common
