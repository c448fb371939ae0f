// The materialized tables: how a logged entry changes them, and the queries
// that read them.
//
// A row is derived from the logged event and the commands the core returned
// for it, never from the core's memory, so the tables can be rebuilt from the
// log alone. Where the core changes a job without a command, the row keeps
// the last value a command or event carried (docs/store.md, "Gaps").

#include <algorithm>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "store/store_impl.hpp"
#include "topo/common/event_json.hpp"

namespace topo::store {
namespace {

using core::Result;
using core::Status;
using internal::Statement;
using Json = nlohmann::json;

const std::string& NodeName(const core::Topology& topo, core::NodeId n) {
  return topo.node(n).name;
}

// Columns of JobRow, in the order ReadJobRow expects.
constexpr std::string_view kJobColumns =
    "id, tenant, user, state, reason, spec, priority, time_limit_ms, checkpoint_interval_ms, "
    "submit_ms, start_ms, last_start_ms, end_ms, restarts, checkpoint_step, checkpoint_ms, "
    "ranks, spares, submit_seq, updated_seq, "
    "(SELECT COUNT(*) FROM job_runs r WHERE r.job = jobs.id), "
    "(SELECT r.nodes FROM job_runs r WHERE r.job = jobs.id ORDER BY r.run DESC LIMIT 1), "
    "(SELECT COALESCE(SUM(r.gpu_ms), 0) FROM job_runs r WHERE r.job = jobs.id), "
    "partition, reservation";
// The same on a schema without job_runs (tests that migrate to an older
// version): no runs, and no partition or reservation.
constexpr std::string_view kJobColumnsWithoutRuns =
    "id, tenant, user, state, reason, spec, priority, time_limit_ms, checkpoint_interval_ms, "
    "submit_ms, start_ms, last_start_ms, end_ms, restarts, checkpoint_step, checkpoint_ms, "
    "ranks, spares, submit_seq, updated_seq, 0, NULL, 0, NULL, NULL";

JobRow ReadJobRow(const Statement& q) {
  JobRow r;
  r.id = q.Int64(0);
  r.tenant = q.Text(1);
  r.user = q.Text(2);
  r.state = common::ParseJobState(q.Text(3)).value_or(core::JobState::kQueued);
  r.reason = q.Text(4);
  r.spec_json = q.Text(5);
  r.priority = static_cast<int>(q.Int64(6));
  r.time_limit_ms = q.Int64(7);
  r.checkpoint_interval_ms = q.Int64(8);
  r.submit_ms = q.Int64(9);
  r.start_ms = q.Int64OrMinusOne(10);
  r.last_start_ms = q.Int64OrMinusOne(11);
  r.end_ms = q.Int64OrMinusOne(12);
  r.restarts = static_cast<int>(q.Int64(13));
  r.checkpoint_step = q.Int64(14);
  r.checkpoint_ms = q.Int64OrMinusOne(15);
  r.ranks_json = q.Text(16);
  r.spares_json = q.Text(17);
  r.submit_seq = q.Int64(18);
  r.updated_seq = q.Int64(19);
  r.runs = static_cast<int>(q.Int64(20));
  r.last_run_nodes = q.IsNull(21) ? 0 : static_cast<int>(q.Int64(21));
  r.ended_gpu_ms = q.Int64(22);
  if (!q.IsNull(23)) r.partition = q.Text(23);
  if (!q.IsNull(24)) r.reservation = q.Text(24);
  return r;
}

// Why a run ended at a restart: the event that made the core move the job.
// The migration that backfills job_runs (schema/sql/0004_job_runs.sql)
// writes the same text; keep them together.
std::string RestartCause(const std::string& kind, const Json& event) {
  auto text = [&](const char* key) {
    auto it = event.find(key);
    return it != event.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto number = [&](const char* key) {
    auto it = event.find(key);
    return it != event.end() && it->is_number_integer() ? std::to_string(it->get<int64_t>())
                                                        : std::string();
  };
  if (kind == "rank_exited") {
    return "rank " + number("rank") + " exited with status " + number("exit_code");
  }
  if (kind == "gpu_event") {
    return text("kind") + " " + number("code") + " on " + text("node") + " GPU " + number("gpu");
  }
  if (kind == "node_state_requested") {
    const std::string reason = text("reason");
    return "node " + text("node") + " " + text("state") + (reason.empty() ? "" : ": " + reason);
  }
  if (kind == "node_evacuated") return "node " + text("node") + " was drained";
  const std::string reason = text("reason");
  return kind + (reason.empty() ? "" : ": " + reason);
}

// The exit status the entry's event reports for the job, if any.
std::optional<int64_t> ExitCodeFor(const std::string& kind, const Json& event, JobId job) {
  if (kind != "job_finished" && kind != "rank_exited") return std::nullopt;
  if (event.value("id", JobId{0}) != job) return std::nullopt;
  auto it = event.find("exit_code");
  if (it == event.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

int DistinctNodes(const Json& ranks) {
  std::set<std::string> nodes;
  for (const Json& slot : ranks) {
    if (slot.is_array() && !slot.empty() && slot[0].is_string()) nodes.insert(slot[0]);
  }
  return static_cast<int>(nodes.size());
}

}  // namespace

std::string JobColumns(bool has_job_runs, bool has_node_sets) {
  if (!has_job_runs) return std::string(kJobColumnsWithoutRuns);
  std::string columns(kJobColumns);
  // A schema before 0008_job_node_sets.sql (tests that migrate to an older
  // version): no partition or reservation.
  if (!has_node_sets) columns.replace(columns.rfind("partition"), std::string::npos, "NULL, NULL");
  return columns;
}
JobRow ReadJobRowAt(const Statement& q) { return ReadJobRow(q); }

Status Store::Impl::PrepareWriteStatements() {
  struct Sql {
    Statement* target;
    std::string_view text;
  };
  const Sql statements[] = {
      {&write.insert_event,
       "INSERT INTO events(seq, time_ms, actor, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)"},
      // A duplicate submission changes nothing, in the core and here.
      {&write.insert_job,
       "INSERT OR IGNORE INTO jobs(id, tenant, user, state, reason, spec, priority, "
       "time_limit_ms, checkpoint_interval_ms, submit_ms, submit_seq, updated_seq) "
       "VALUES (?1, ?2, ?3, 'queued', 'submitted', ?4, ?5, ?6, ?7, ?8, ?9, ?9)"},
      {&write.job_request_id, "UPDATE jobs SET client_request_id = ?2 WHERE id = ?1"},
      {&write.job_node_sets, "UPDATE jobs SET partition = ?2, reservation = ?3 WHERE id = ?1"},
      {&write.jobs_by_request,
       "SELECT id FROM jobs WHERE user = ?1 AND client_request_id = ?2 ORDER BY id LIMIT 100001"},
      // As the core: only a newer step counts, whatever the job's state.
      {&write.job_checkpoint,
       "UPDATE jobs SET checkpoint_step = ?2, checkpoint_ms = ?3, updated_seq = ?4 "
       "WHERE id = ?1 AND checkpoint_step < ?2"},
      // A start after a requeue carries the restarts counted since (the core
      // counts a requeue after a failure as a restart).
      {&write.job_start,
       "UPDATE jobs SET ranks = ?2, spares = ?3, start_ms = COALESCE(start_ms, ?4), "
       "last_start_ms = ?4, restarts = MAX(restarts, ?6), updated_seq = ?5 WHERE id = ?1"},
      {&write.job_restart,
       "UPDATE jobs SET ranks = ?2, spares = ?3, last_start_ms = ?4, restarts = ?5, "
       "checkpoint_step = ?6, updated_seq = ?7 WHERE id = ?1"},
      {&write.job_stop,
       "UPDATE jobs SET ranks = '[]', spares = '[]', updated_seq = ?2 WHERE id = ?1"},
      // ?4: 1 when the new state is terminal; ?5: 1 when it holds GPUs.
      {&write.job_state,
       "UPDATE jobs SET state = ?2, reason = ?3, "
       "end_ms = CASE WHEN ?4 THEN ?6 ELSE end_ms END, "
       "ranks = CASE WHEN ?5 THEN ranks ELSE '[]' END, "
       "spares = CASE WHEN ?5 THEN spares ELSE '[]' END, updated_seq = ?7 WHERE id = ?1"},
      {&write.upsert_tenant,
       "INSERT INTO tenants(name, config, updated_seq) VALUES (?1, ?2, ?3) "
       "ON CONFLICT(name) DO UPDATE SET config = excluded.config, "
       "updated_seq = excluded.updated_seq"},
      {&write.upsert_node,
       "INSERT INTO nodes(name, state, reason, time_ms) VALUES (?1, ?2, ?3, ?4) "
       "ON CONFLICT(name) DO UPDATE SET state = excluded.state, reason = excluded.reason, "
       "time_ms = excluded.time_ms"},
      {&write.insert_gpu_health,
       "INSERT INTO gpu_health(seq, node, gpu, health, reason, time_ms) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      {&write.insert_job_event, "INSERT OR IGNORE INTO job_events(job, seq) VALUES (?1, ?2)"},
      {&write.run_open,
       "INSERT INTO job_runs(job, run, start_ms, gpus, nodes, ranks, start_seq) VALUES (?1, "
       "(SELECT COALESCE(MAX(run), 0) + 1 FROM job_runs WHERE job = ?1), ?2, ?3, ?4, ?5, ?6)"},
      {&write.run_close,
       "UPDATE job_runs SET end_ms = ?2, end_reason = ?3, exit_code = ?4, "
       "gpu_ms = (?2 - start_ms) * gpus, end_seq = ?5 WHERE job = ?1 AND end_ms IS NULL"},
  };
  for (const Sql& s : statements) {
    const bool runs = s.target == &write.run_open || s.target == &write.run_close;
    if (runs && !has_job_runs) continue;
    if ((s.target == &write.job_request_id || s.target == &write.jobs_by_request) &&
        !has_client_request_id) {
      continue;
    }
    if (s.target == &write.job_node_sets && !has_node_sets) continue;
    Result<Statement> st = db.Prepare(s.text);
    if (!st.ok()) return Error("preparing statements", st.status());
    *s.target = std::move(st).value();
  }
  return Status::Ok();
}

Status Store::Impl::Materialize(const core::Topology& topo, const LogEntry& entry,
                                const EncodedEntry& encoded, int64_t seq, TimeMs time) {
  // Effects of the event itself (what no command carries).
  Status status = std::visit(
      [&](const auto& e) -> Status {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, core::JobSubmitted>) {
          const core::JobRequest& r = e.request;
          Statement& q = write.insert_job;
          q.Bind(1, e.id).Bind(2, r.tenant.empty() ? std::string_view("default") : r.tenant);
          q.Bind(3, r.user).Bind(4, encoded.event.at("request").at("spec").dump());
          q.Bind(5, r.priority).Bind(6, r.time_limit).Bind(7, r.checkpoint_interval);
          if (Status s = q.Bind(8, time).Bind(9, seq).Run(); !s.ok()) return s;
          if ((!r.partition.empty() || !r.reservation.empty()) && has_node_sets) {
            Statement& n = write.job_node_sets;
            n.Bind(1, e.id);
            if (r.partition.empty()) {
              n.BindNull(2);
            } else {
              n.Bind(2, r.partition);
            }
            if (r.reservation.empty()) {
              n.BindNull(3);
            } else {
              n.Bind(3, r.reservation);
            }
            if (Status s = n.Run(); !s.ok()) return s;
          }
          if (r.client_request_id.empty() || !has_client_request_id) return Status::Ok();
          return write.job_request_id.Bind(1, e.id).Bind(2, r.client_request_id).Run();
        } else if constexpr (std::is_same_v<T, core::CheckpointCompleted>) {
          return write.job_checkpoint.Bind(1, e.id)
              .Bind(2, e.step)
              .Bind(3, time)
              .Bind(4, seq)
              .Run();
        } else if constexpr (std::is_same_v<T, core::TenantConfigured>) {
          if (e.tenant.name.empty()) return Status::Ok();  // the core ignores it too
          Statement& q = write.upsert_tenant;
          return q.Bind(1, e.tenant.name)
              .Bind(2, encoded.event.at("tenant").dump())
              .Bind(3, seq)
              .Run();
        } else {
          return Status::Ok();
        }
      },
      entry.event);
  if (!status.ok()) return status;

  // The per-job index: every job the event or a command names.
  auto index = [&](const Json& j) -> Status {
    auto id = j.find("id");
    if (id == j.end() || !id->is_number_integer()) return Status::Ok();
    return write.insert_job_event.Bind(1, id->get<int64_t>()).Bind(2, seq).Run();
  };
  if (status = index(encoded.event); !status.ok()) return status;
  for (const Json& c : encoded.commands) {
    if (status = index(c); !status.ok()) return status;
  }

  // Runs (job_runs): a start or restart opens one; a restart, a stop or a
  // state that holds no GPUs ends the open one.
  if (encoded.kind == "rank_exited" && encoded.event.value("exit_code", 0) != 0) {
    held_exit_codes[encoded.event.value("id", JobId{0})] = encoded.event.value("exit_code", 0);
  }
  auto close_run = [&](JobId id, const std::string& reason) -> Status {
    std::optional<int64_t> code = ExitCodeFor(encoded.kind, encoded.event, id);
    if (auto held = held_exit_codes.find(id); held != held_exit_codes.end()) {
      // The rank's exit decided when its attribution window ended.
      if (!code && encoded.kind == "tick") code = held->second;
      held_exit_codes.erase(held);
    }
    if (!has_job_runs) return Status::Ok();
    Statement& q = write.run_close;
    q.Bind(1, id).Bind(2, time).Bind(3, reason);
    if (code) {
      q.Bind(4, *code);
    } else {
      q.BindNull(4);
    }
    return q.Bind(5, seq).Run();
  };
  auto open_run = [&](JobId id, const Json& ranks) -> Status {
    if (!has_job_runs) return Status::Ok();
    Statement& q = write.run_open;
    q.Bind(1, id).Bind(2, time).Bind(3, static_cast<int64_t>(ranks.size()));
    return q.Bind(4, DistinctNodes(ranks)).Bind(5, ranks.dump()).Bind(6, seq).Run();
  };
  for (size_t i = 0; i < entry.commands.size(); ++i) {
    const Json& json = encoded.commands[i];
    status = std::visit(
        [&](const auto& c) -> Status {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, core::StartJob>) {
            if (Status s = close_run(c.id, "started again"); !s.ok()) return s;
            return open_run(c.id, json.at("ranks"));
          } else if constexpr (std::is_same_v<T, core::RestartJob>) {
            const std::string why = "restarted after " + RestartCause(encoded.kind, encoded.event);
            if (Status s = close_run(c.id, why); !s.ok()) return s;
            return open_run(c.id, json.at("ranks"));
          } else if constexpr (std::is_same_v<T, core::StopJob>) {
            return close_run(c.id, c.reason);
          } else if constexpr (std::is_same_v<T, core::JobStateChanged>) {
            if (c.state == core::JobState::kRunning || c.state == core::JobState::kPreempting) {
              return Status::Ok();
            }
            return close_run(c.id, c.reason);
          } else {
            return Status::Ok();
          }
        },
        entry.commands[i]);
    if (!status.ok()) return status;
    status = std::visit(
        [&](const auto& c) -> Status {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, core::StartJob>) {
            Statement& q = write.job_start;
            q.Bind(1, c.id).Bind(2, json.at("ranks").dump()).Bind(3, json.at("spares").dump());
            return q.Bind(4, time).Bind(5, seq).Bind(6, c.launch.restart_count).Run();
          } else if constexpr (std::is_same_v<T, core::RestartJob>) {
            Statement& q = write.job_restart;
            q.Bind(1, c.id).Bind(2, json.at("ranks").dump()).Bind(3, json.at("spares").dump());
            q.Bind(4, time).Bind(5, c.launch.restart_count).Bind(6, c.launch.checkpoint_step);
            return q.Bind(7, seq).Run();
          } else if constexpr (std::is_same_v<T, core::StopJob>) {
            return write.job_stop.Bind(1, c.id).Bind(2, seq).Run();
          } else if constexpr (std::is_same_v<T, core::JobStateChanged>) {
            const bool holds =
                c.state == core::JobState::kRunning || c.state == core::JobState::kPreempting;
            Statement& q = write.job_state;
            q.Bind(1, c.id).Bind(2, core::JobStateName(c.state)).Bind(3, c.reason);
            q.Bind(4, core::IsTerminal(c.state) ? 1 : 0).Bind(5, holds ? 1 : 0);
            return q.Bind(6, time).Bind(7, seq).Run();
          } else if constexpr (std::is_same_v<T, core::NodeStateChanged>) {
            Statement& q = write.upsert_node;
            q.Bind(1, NodeName(topo, c.node)).Bind(2, core::NodeStateName(c.state));
            return q.Bind(3, c.reason).Bind(4, time).Run();
          } else if constexpr (std::is_same_v<T, core::GpuHealthChanged>) {
            Statement& q = write.insert_gpu_health;
            q.Bind(1, seq).Bind(2, NodeName(topo, c.node)).Bind(3, c.gpu);
            q.Bind(4, core::GpuHealthName(c.health)).Bind(5, c.reason);
            return q.Bind(6, time).Run();
          } else {
            // RequestCheckpoint, DrainNode: instructions to agents; the state
            // they lead to arrives as its own command or event.
            return Status::Ok();
          }
        },
        entry.commands[i]);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- queries

Result<std::optional<JobRow>> Store::GetJob(JobId id) {
  Result<Statement> q =
      impl_->db.Prepare("SELECT " + JobColumns(impl_->has_job_runs, impl_->has_node_sets) +
                        " FROM jobs WHERE id = ?1");
  if (!q.ok()) return impl_->Error("reading job", q.status());
  q.value().Bind(1, id);
  Result<bool> row = q.value().Step();
  if (!row.ok()) return impl_->Error("reading job " + std::to_string(id), row.status());
  if (!row.value()) return std::optional<JobRow>();
  return std::optional<JobRow>(ReadJobRow(q.value()));
}

Result<std::vector<JobRow>> Store::ListJobs(const JobQuery& query) {
  std::string sql = "SELECT " + JobColumns(impl_->has_job_runs, impl_->has_node_sets) +
                    " FROM jobs WHERE id > ?1";
  if (query.tenant) sql += " AND tenant = ?2";
  if (!query.include_terminal) {
    sql += " AND state NOT IN ('completed', 'failed', 'cancelled', 'rejected')";
  }
  sql += " ORDER BY id LIMIT ?3";
  Result<Statement> q = impl_->db.Prepare(sql);
  if (!q.ok()) return impl_->Error("listing jobs", q.status());
  q.value().Bind(1, query.after_id).Bind(3, query.limit);
  if (query.tenant) q.value().Bind(2, *query.tenant);
  Result<std::vector<JobRow>> rows = Collect<JobRow>(q.value(), ReadJobRow);
  if (!rows.ok()) return impl_->Error("listing jobs", rows.status());
  return rows;
}

Result<std::vector<JobId>> Store::JobsByClientRequest(const std::string& user,
                                                      const std::string& client_request_id) {
  if (!impl_->has_client_request_id) return std::vector<JobId>{};
  if (impl_->read_only) return impl_->Error("reading jobs by request id", "the store is read-only");
  // Prepared once with the write statements: every CLI submission asks.
  Statement& q = impl_->write.jobs_by_request;
  q.Bind(1, user).Bind(2, client_request_id);
  Result<std::vector<JobId>> ids = Collect<JobId>(q, [](const Statement& s) { return s.Int64(0); });
  q.Reset();
  if (!ids.ok()) return impl_->Error("reading jobs by request id", ids.status());
  return ids;
}

Result<JobId> Store::MaxJobId() {
  Result<int64_t> id = impl_->db.QueryInt("SELECT COALESCE(MAX(id), 0) FROM jobs");
  if (!id.ok()) return impl_->Error("reading jobs", id.status());
  return std::max(id.value(), impl_->max_job_id);
}

Result<std::vector<core::TenantConfig>> Store::ListTenants() {
  Result<Statement> q = impl_->db.Prepare("SELECT name, config FROM tenants ORDER BY name");
  if (!q.ok()) return impl_->Error("listing tenants", q.status());
  std::vector<core::TenantConfig> out;
  for (;;) {
    Result<bool> row = q.value().Step();
    if (!row.ok()) return impl_->Error("listing tenants", row.status());
    if (!row.value()) break;
    const std::string name = q.value().Text(0);
    Json config = Json::parse(q.value().Text(1), nullptr, /*allow_exceptions=*/false);
    Result<core::TenantConfig> t = common::TenantConfigFromJson(config);
    if (!t.ok()) return impl_->Error("tenant \"" + name + "\" config", t.status());
    out.push_back(std::move(t).value());
  }
  return out;
}

Result<std::vector<NodeRow>> Store::ListNodes() {
  Result<Statement> q =
      impl_->db.Prepare("SELECT name, state, reason, time_ms FROM nodes ORDER BY name");
  if (!q.ok()) return impl_->Error("listing nodes", q.status());
  Result<std::vector<NodeRow>> rows = Collect<NodeRow>(q.value(), [](const Statement& s) {
    return NodeRow{s.Text(0), common::ParseNodeState(s.Text(1)).value_or(core::NodeState::kDown),
                   s.Text(2), s.Int64(3)};
  });
  if (!rows.ok()) return impl_->Error("listing nodes", rows.status());
  return rows;
}

Result<std::vector<GpuHealthRow>> Store::GpuHealthHistory(std::string_view node) {
  Result<Statement> q = impl_->db.Prepare(
      "SELECT seq, node, gpu, health, reason, time_ms FROM gpu_health WHERE node = ?1 "
      "ORDER BY seq, rowid");
  if (!q.ok()) return impl_->Error("reading GPU health", q.status());
  q.value().Bind(1, node);
  Result<std::vector<GpuHealthRow>> rows = Collect<GpuHealthRow>(q.value(), [](const Statement& s) {
    return GpuHealthRow{s.Int64(0),
                        s.Text(1),
                        static_cast<int>(s.Int64(2)),
                        common::ParseGpuHealth(s.Text(3)).value_or(core::GpuHealth::kFailed),
                        s.Text(4),
                        s.Int64(5)};
  });
  if (!rows.ok()) return impl_->Error("reading GPU health", rows.status());
  return rows;
}

Result<std::vector<RawEvent>> Store::ListEvents(const EventQuery& query) {
  std::string sql = "SELECT seq, time_ms, actor, kind, body FROM events WHERE seq > ?1";
  if (query.before_seq > 0) sql += " AND seq < ?4";
  if (query.job) {
    sql += " AND seq IN (SELECT seq FROM job_events WHERE job = ?3 AND seq > ?1";
    if (query.before_seq > 0) sql += " AND seq < ?4";
    sql += ")";
  }
  sql += query.newest_first ? " ORDER BY seq DESC LIMIT ?2" : " ORDER BY seq LIMIT ?2";
  Result<Statement> q = impl_->db.Prepare(sql);
  if (!q.ok()) return impl_->Error("listing events", q.status());
  q.value().Bind(1, query.after_seq).Bind(2, query.limit);
  if (query.job) q.value().Bind(3, *query.job);
  if (query.before_seq > 0) q.value().Bind(4, query.before_seq);
  Result<std::vector<RawEvent>> rows = Collect<RawEvent>(q.value(), [](const Statement& s) {
    return RawEvent{s.Int64(0), s.Int64(1), s.Text(2), s.Text(3), s.Text(4)};
  });
  if (!rows.ok()) return impl_->Error("listing events", rows.status());
  return rows;
}

}  // namespace topo::store
