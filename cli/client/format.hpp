#pragma once
// Tables and summaries of the daemon's answers for people (docs/api.md
// shapes). Jobs come as the API's typed views (read leniently, as a client
// reads: absent fields keep their defaults); the other functions take JSON
// and tolerate missing fields and wrong types: a field the server did not
// send shows as "-". Times are shown in local time.
//
// Everything here prints other people's strings (job names, reasons, tenant,
// user and node names, commands) on an admin's terminal, so every string
// from the server passes TerminalSafe: through Cell() for text, and again in
// Table for every cell (it is idempotent). No field can start a line of its
// own, move the cursor or reorder what follows. `--json` output does not
// come through here.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/user_api.hpp"

namespace topo::cli {

// `text` as it may be printed on a terminal: control characters (C0, DEL and
// C1: U+0080-U+009F), the bidirectional embeddings, overrides and isolates
// (U+202A-U+202E, U+2066-U+2069; they reorder the rest of the line, so a name
// could make a row read as another job's), the line and paragraph separators
// (U+2028, U+2029) and bytes that are not UTF-8 become escapes: "\n", "\r",
// "\t", "\x1b", "\u202e", "\xff". Everything else is kept as it is,
// backslashes included, so applying it twice changes nothing (a name holding
// a backslash and an "n" looks like one holding a newline; --json tells
// them apart).
std::string TerminalSafe(std::string_view text);

// A rank's log bytes as a terminal may show them (`topo logs` on a TTY):
// newlines, tabs and a CR that ends a line ("\r\n") as they are, everything
// else TerminalSafe escapes escaped the same way ("\x1b", "\x00", "\r",
// "\u202e", "\xff"). Pieces of one log go through one LogEscaper in order:
// a UTF-8 character or a "\r\n" split between two pieces is held back and
// kept whole; Finish gives what is held back at the end.
class LogEscaper {
 public:
  std::string Escape(std::string_view piece);
  std::string Finish();

 private:
  std::string pending_;  // the tail of the last piece that may continue
};

// Columns separated by two spaces, padded to the widest cell; the last
// column is not padded. Headers and cells pass TerminalSafe.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);
  void AlignRight(size_t column);
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// A scalar as text: strings through TerminalSafe, null/absent "-", true
// "yes"; arrays and objects as compact JSON, through TerminalSafe too.
std::string Cell(const nlohmann::json& value);
// Run time the way squeue shows it: "0:05", "1:02:03", "2-03:04:05".
std::string FormatElapsed(int64_t ms);
// "2026-01-27 14:03:05" in local time; "-" for null.
std::string FormatTime(const nlohmann::json& time_ms);
// 7200 -> "2h", 5400 -> "1h30m", 90 -> "1m30s".
std::string FormatSeconds(int64_t seconds);

// GET /v1/jobs: ID TENANT USER NAME STATE GPUS NODES TIME REASON. TIME is the
// run time (until now_ms while running), 0:00 for jobs that have not started.
// start_column adds START after NODES (FormatStartTime). The jobs are the
// API's views (common/user_api.hpp), as api::ReadJobList reads them.
std::string FormatJobTable(const std::vector<api::JobView>& jobs, int64_t now_ms,
                           bool start_column = false);
// When a job started, or is expected to start: "14:05" for a job that has
// started (its start_ms; "2026-01-28 14:05" on another day than now_ms), and
// "~14:05 (est.)" for a waiting job with an estimated_start_ms (the
// scheduler's reservation plan, never a guess here); "-" otherwise.
std::string FormatStartTime(const api::JobView& job, int64_t now_ms);
// GET /v1/jobs/{id}: state, times, layout, placement per HBD/leaf/pod,
// metrics, ranks (the first 16 unless all_ranks), runs, incidents (restarts
// and requeues: cause, detection, restart, step, lost work) and history.
std::string FormatJobDetails(const api::JobView& job, int64_t now_ms, bool all_ranks);

// GET /v1/nodes: NAME STATE GPUS FREE HBD LEAF POD REASON; FREE counts the
// healthy GPUs with no job on nodes that are up.
std::string FormatNodeTable(const nlohmann::json& nodes);
// topo nodes --summary: {"by_gpu_type": [ROW...], "by_pod": [ROW...],
// "by_partition": [ROW...]} from a list of node views, ROW {"name",
// "nodes", "up", "draining", "drained", "down", "suspect", "gpus", "free"},
// rows in order of first appearance; a node counts in each partition that
// holds it (by_partition is empty when no node is in one), and the text
// shows the partitions' table only when there is one.
nlohmann::json NodeSummary(const nlohmann::json& nodes);
std::string FormatNodeSummary(const nlohmann::json& summary);
// GET /v1/nodes/{name}: the node, its GPUs and their history.
std::string FormatNodeDetails(const nlohmann::json& node);
// {"nodes": [...]} of drain/resume: "16 nodes draining: n[0-15]" per state.
std::string SummarizeNodesByState(const nlohmann::json& nodes);

// GET /v1/partitions: NAME NODES GPUS UP FREE DEFAULT-TIME MAX-TIME
// MAX-GPUS TIER PREEMPT TENANTS, the default partition's name marked "*"
// (as sinfo marks it); times and bounds of 0 shown as "-". The details:
// one partition's fields. (format_sets.cpp)
std::string FormatPartitionTable(const std::vector<api::PartitionView>& partitions);
std::string FormatPartitionDetails(const api::PartitionView& partition);
// GET /v1/reservations: NAME STATE START END NODES GPUS TENANTS
// MAINTENANCE, in local time; and one reservation's fields.
std::string FormatReservationTable(const std::vector<api::ReservationView>& reservations);
std::string FormatReservationDetails(const api::ReservationView& reservation);

std::string FormatTenantTable(const nlohmann::json& tenants);
std::string FormatQuota(const nlohmann::json& tenant);

// One line per event (fixed columns, so a --follow stream stays aligned),
// and one per command the event caused, indented under it.
std::string EventHeader();
std::string FormatEvent(const nlohmann::json& entry);

// GET /v1/audit: TIME ACTOR ACTION TARGET DETAIL. TARGET is what the action
// was done to, from its detail: "job 17", "n0:3" (a node's GPU), "n0",
// "token 0a1b2c3d", "user ada", "topology tiny", "tenant org/a" (the first
// that applies); DETAIL the detail's other fields as key=value.
std::string FormatAuditTable(const nlohmann::json& rows);

// A list of objects with their scalar fields as columns: `columns` first
// (those present), then the rest in the order met. "*_ms" fields are shown
// as times under a header without the suffix.
std::string FormatObjectTable(const nlohmann::json& items, const std::vector<std::string>& columns);

}  // namespace topo::cli
