// SchedulerCore::Snapshot and Restore: the core's state as versioned bytes.
//
// Layout (all integers little-endian, fixed width):
//   "TOPOSNAP"  u32 version  payload  u64 FNV-1a of everything before it
// The payload is written and read by one pair of functions per part, in the
// same order; containers are a u64 count then their elements, in the
// container's own (ordered) iteration order, so the bytes are canonical.
//
// A new field of the core's state must be added here, on both sides, and
// kSnapshotVersion raised, the reader taking the field only from snapshots of
// the new version (Bounds::version) and keeping every older version readable:
// a store whose early events were compacted away has nothing else to start
// from. Version 2 added a request's client_request_id; version 3 the time a
// deferred reclaim is tried again; version 4 the allocations' stamps and the
// reservation plan a pass keeps (KeptPlan); version 5 the policy's
// fairshare_max_wait, when jobs became eligible again (eligible_at_) and the
// pass's next overdue wake-up (overdue_wake_); version 6 a job spec's
// pids_max; version 7 the policy's attribution_window and the rank exits
// waiting for their verdict (held_exits_), and moved backfill_depth from the
// fixed config into the live policy. A snapshot before version 5 restores
// with fairshare_max_wait 0, one before version 6 with pids_max 0 (the
// node's limit), one before version 7 with attribution_window 0 and the
// backfill_depth of its fixed config (64 for every daemon's), what its core
// did. Version 8 added a job spec's node selection (NodeSelection), the
// kAuto constraint strength and the nodes that failed a job
// (JobRecord::failed_nodes); an older snapshot's jobs select no nodes and
// remember none. Version 9 added partitions and reservations (NodeSets), a
// request's partition and reservation, and the failed nodes remembered by
// job name. Version 10 added a tenant's per-partition limits
// (TenantConfig::partitions) and the partition each job holding GPUs counts
// in (JobRecord::quota_partition); what tenants hold per partition is
// rebuilt from those jobs. An older snapshot's tenants have no per-partition
// limits and its running jobs count in their partition as its sets give it.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "scheduler_impl.hpp"
#include "topo/core/topology_diff.hpp"

namespace topo::core {
namespace {

constexpr std::string_view kMagic = "TOPOSNAP";
// A string field longer than this is corruption (reasons, names and
// commands are far shorter; the daemon's readers cap them).
constexpr uint64_t kMaxString = 1 << 20;

uint64_t Fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Identifies the topology: node count, names and GPUs per node.
uint64_t TopologyFingerprint(const Topology& topo) {
  std::string s;
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    s += topo.node(n).name;
    s += '/';
    s += std::to_string(topo.node(n).gpus);
    s += ';';
  }
  return Fnv1a(s);
}

class Writer {
 public:
  std::string out;
  uint32_t version = SchedulerCore::kSnapshotVersion;  // of the format written
  // Where WriteConfig put backfill_depth in a version 6 or older config.
  size_t backfill_depth_at = std::string::npos;
  // Set when the snapshot is written onto another topology (SnapshotOnto):
  // this core's node id -> the other's.
  const std::vector<NodeId>* to_new = nullptr;

  int64_t Node(NodeId n) const { return to_new == nullptr ? n : (*to_new)[n]; }

  void U8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Str(std::string_view s) {
    U64(s.size());
    out.append(s);
  }
  template <typename E>
  void Enum(E e) {
    U8(static_cast<uint8_t>(e));
  }
  template <typename C, typename F>
  void Each(const C& c, F f) {
    U64(c.size());
    for (const auto& x : c) f(x);
  }
};

// Reads what Writer wrote; the first problem sticks (later reads give zeros)
// and names the byte it was found at.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool done() const { return pos_ == in_.size(); }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = what + " (at byte " + std::to_string(pos_) + ")";
    pos_ = in_.size();
  }

  uint8_t U8() {
    if (pos_ >= in_.size()) {
      Fail("truncated");
      return 0;
    }
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(U8()) << (8 * i);
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(U8()) << (8 * i);
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  int Int(const char* what, int64_t lo = INT32_MIN, int64_t hi = INT32_MAX) {
    const int64_t v = I64();
    if (v < lo || v > hi) {
      Fail(std::string(what) + " " + std::to_string(v) + " is out of range");
      return 0;
    }
    return static_cast<int>(v);
  }
  double F64(const char* what) {
    const double v = std::bit_cast<double>(U64());
    if (!std::isfinite(v)) {
      Fail(std::string(what) + " is not a finite number");
      return 0;
    }
    return v;
  }
  bool Bool() {
    const uint8_t v = U8();
    if (v > 1) Fail("a flag is neither 0 nor 1");
    return v == 1;
  }
  // The next n bytes as they are (empty when fewer are left).
  std::string_view Bytes(size_t n) {
    if (n > in_.size() - pos_) {
      Fail("truncated");
      return {};
    }
    const std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::string Str() {
    const uint64_t n = U64();
    if (n > kMaxString || n > in_.size() - pos_) {
      Fail("a string of " + std::to_string(n) + " bytes does not fit");
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // REQUIRES: E's values run 0..last.
  template <typename E>
  E Enum(const char* what, E last) {
    const uint8_t v = U8();
    if (v > static_cast<uint8_t>(last)) {
      Fail(std::string("unknown ") + what + " " + std::to_string(v));
      return E{};
    }
    return static_cast<E>(v);
  }
  // A count of elements of at least min_bytes each: more than the bytes
  // left could hold is corruption, not a reason to allocate.
  size_t Count(size_t min_bytes = 1) {
    const uint64_t n = U64();
    if (n > (in_.size() - pos_) / min_bytes) {
      Fail("a count of " + std::to_string(n) + " is larger than the bytes left");
      return 0;
    }
    return static_cast<size_t>(n);
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string error_;
};

// ---------------------------------------------------------------- parts

void WritePolicy(Writer& w, const SchedulingPolicy& p) {
  if (w.version >= 7) {
    w.I64(p.backfill_depth);
    w.I64(p.attribution_window);
  }
  if (w.version >= 5) w.I64(p.fairshare_max_wait);
  w.Bool(p.backfill);
  w.Bool(p.preemption);
  w.I64(p.preempt_grace);
  w.I64(p.preempt_restart_cost);
  w.I64(p.preempt_protect_after);
  w.I64(p.placement_wait);
  w.I64(p.default_time_limit);
  w.I64(p.default_checkpoint_interval);
  w.I64(p.max_app_failures);
  w.I64(p.restart_backoff_initial);
  w.I64(p.restart_backoff_max);
}

// What WritePolicy writes at `version`: 2 flags and 9 integers, one more
// from version 5 and two more from version 7.
constexpr size_t PolicyBytes(uint32_t version) {
  return 2 + (9 + (version >= 5 ? 1 : 0) + (version >= 7 ? 2 : 0)) * 8;
}

SchedulingPolicy ReadPolicy(Reader& r, uint32_t version) {
  SchedulingPolicy p;
  if (version >= 7) {
    p.backfill_depth = r.Int("backfill_depth", 1, 1 << 30);
    p.attribution_window = r.I64();
  }
  if (version >= 5) p.fairshare_max_wait = r.I64();
  p.backfill = r.Bool();
  p.preemption = r.Bool();
  p.preempt_grace = r.I64();
  p.preempt_restart_cost = r.I64();
  p.preempt_protect_after = r.Int("preempt_protect_after");
  p.placement_wait = r.I64();
  p.default_time_limit = r.I64();
  p.default_checkpoint_interval = r.I64();
  p.max_app_failures = r.Int("max_app_failures");
  p.restart_backoff_initial = r.I64();
  p.restart_backoff_max = r.I64();
  return p;
}

// Every field of the config, for the check that the restoring core was
// built under the same one.
void WriteConfig(Writer& w, const SchedulerConfig& c) {
  w.Str(c.placer);
  w.I64(c.placer_options.degraded_max_job_gpus);
  w.Bool(c.placer_options.explain_shortfall);
  w.Bool(c.placer_options.choose_by_speed);
  w.Str(c.queue_order);
  if (w.version <= 6) {
    w.backfill_depth_at = w.out.size();
    w.I64(c.backfill_depth);
  }
  w.F64(c.placement_wait_slowdown);
  w.Bool(c.replace_on_failure);
  w.Enum(c.requeue);
  w.Bool(c.restart_from_checkpoint);
  w.I64(c.fairshare_half_life);
  w.I64(c.heartbeat_suspect_after);
  w.I64(c.heartbeat_down_after);
  w.Bool(c.heartbeats_required);
  w.Bool(c.nodes_start_down);
  w.I64(c.master_ports.first);
  w.I64(c.master_ports.count);
  WritePolicy(w, SchedulingPolicy::Of(c));
}

void WriteSpec(Writer& w, const JobSpec& s) {
  w.Str(s.name);
  w.I64(s.gpus);
  w.I64(s.gpus_per_node);
  const Parallelism& p = s.parallelism;
  for (int v : {p.tp, p.cp, p.ep, p.pp, p.dp}) w.I64(v);
  w.Each(p.order, [&](Dim d) { w.Enum(d); });
  for (const TierConstraint& c : s.constraints) {
    // Before version 8 an auto constraint was a required one.
    w.Enum(w.version < 8 && c.strength == Strength::kAuto ? Strength::kRequired : c.strength);
    w.Str(c.tier);
  }
  w.I64(s.spares);
  w.Bool(s.model.has_value());
  if (s.model) {
    const ModelSpec& m = *s.model;
    w.Str(m.preset);
    w.F64(m.parameters);
    w.F64(m.active_parameters);
    for (int v :
         {m.layers, m.hidden, m.heads, m.kv_heads, m.sequence, m.micro_batch, m.global_batch,
          m.experts, m.top_k, m.bytes_per_element, m.virtual_stages, m.recompute}) {
      w.I64(v);
    }
  }
  if (w.version >= 6) w.I64(s.pids_max);
  if (w.version >= 8) {
    const NodeSelection& sel = s.selection;
    for (const std::vector<std::string>* names :
         {&sel.gpu_types, &sel.features, &sel.nodelist, &sel.exclude, &sel.avoid}) {
      w.Each(*names, [&](const std::string& n) { w.Str(n); });
    }
  }
}

JobSpec ReadSpec(Reader& r, uint32_t version) {
  JobSpec s;
  s.name = r.Str();
  s.gpus = r.Int("gpus");
  s.gpus_per_node = r.Int("gpus_per_node");
  Parallelism& p = s.parallelism;
  for (int* v : {&p.tp, &p.cp, &p.ep, &p.pp, &p.dp}) *v = r.Int("parallelism");
  p.order.resize(r.Count());
  for (Dim& d : p.order) d = r.Enum("rank order dimension", Dim::kPp);
  for (TierConstraint& c : s.constraints) {
    c.strength =
        r.Enum("constraint strength", version >= 8 ? Strength::kAuto : Strength::kRequired);
    c.tier = r.Str();
  }
  s.spares = r.Int("spares");
  if (r.Bool()) {
    ModelSpec& m = s.model.emplace();
    m.preset = r.Str();
    m.parameters = r.F64("parameters");
    m.active_parameters = r.F64("active_parameters");
    for (int* v :
         {&m.layers, &m.hidden, &m.heads, &m.kv_heads, &m.sequence, &m.micro_batch, &m.global_batch,
          &m.experts, &m.top_k, &m.bytes_per_element, &m.virtual_stages, &m.recompute}) {
      *v = r.Int("model field");
    }
  }
  if (version >= 6) s.pids_max = r.Int("pids_max");
  if (version >= 8) {
    NodeSelection& sel = s.selection;
    for (std::vector<std::string>* names :
         {&sel.gpu_types, &sel.features, &sel.nodelist, &sel.exclude, &sel.avoid}) {
      names->resize(r.Count(8));
      for (std::string& n : *names) n = r.Str();
    }
  }
  return s;
}

void WriteTenant(Writer& w, const TenantConfig& t) {
  w.Str(t.name);
  for (int v : {t.guaranteed_gpus, t.borrow_limit_gpus, t.max_job_gpus, t.max_running_jobs,
                t.max_queued_jobs}) {
    w.I64(v);
  }
  w.F64(t.shares);
  w.I64(t.placement_wait);
  if (w.version >= 10) {
    w.Each(t.partitions, [&](const auto& kv) {
      w.Str(kv.first);
      for (int v : {kv.second.max_gpus, kv.second.max_job_gpus, kv.second.max_running_jobs}) {
        w.I64(v);
      }
    });
  }
}

TenantConfig ReadTenant(Reader& r, uint32_t version) {
  TenantConfig t;
  t.name = r.Str();
  if (t.name.empty()) r.Fail("a tenant without a name");
  for (int* v : {&t.guaranteed_gpus, &t.borrow_limit_gpus, &t.max_job_gpus, &t.max_running_jobs,
                 &t.max_queued_jobs}) {
    *v = r.Int("tenant limit");
  }
  t.shares = r.F64("shares");
  t.placement_wait = r.I64();
  if (version >= 10) {
    // A name (8 bytes of length at least) and three limits.
    const size_t n = r.Count(8 + 3 * 8);
    if (n > kMaxTenantPartitions) r.Fail("tenant " + t.name + " limits too many partitions");
    for (size_t i = 0; i < n && r.ok(); ++i) {
      std::string name = r.Str();
      PartitionLimits l;
      for (int* v : {&l.max_gpus, &l.max_job_gpus, &l.max_running_jobs}) {
        *v = r.Int("partition limit", 0, kMaxPartitionLimit);
      }
      if (!t.partitions.emplace(std::move(name), l).second) r.Fail("a partition limit twice");
    }
    if (Status s = ValidatePartitionLimits(t.partitions); r.ok() && !s.ok()) {
      r.Fail("tenant " + t.name + ": " + s.message());
    }
  }
  return t;
}

// Range checks against the topology.
struct Bounds {
  const Topology& topo;
  uint32_t version = SchedulerCore::kSnapshotVersion;  // of the snapshot being read
  NodeId Node(Reader& r) const {
    return static_cast<NodeId>(r.Int("node", 0, static_cast<int64_t>(topo.node_count()) - 1));
  }
  GpuSlot Slot(Reader& r) const {
    GpuSlot s;
    s.node = Node(r);
    s.gpu = r.Int("GPU", 0, std::max(0, topo.node(s.node).gpus - 1));
    return s;
  }
  JobId Job(Reader& r) const {
    const int64_t id = r.I64();
    if (id < 0) r.Fail("job id " + std::to_string(id) + " is negative");
    return id;
  }
};

void WriteSlots(Writer& w, const std::vector<GpuSlot>& slots) {
  w.Each(slots, [&](const GpuSlot& s) {
    w.I64(w.Node(s.node));
    w.I64(s.gpu);
  });
}

std::vector<GpuSlot> ReadSlots(Reader& r, const Bounds& b) {
  std::vector<GpuSlot> out(r.Count(16));
  for (GpuSlot& s : out) s = b.Slot(r);
  return out;
}

void WriteNodes(Writer& w, const std::vector<NodeId>& nodes) {
  w.Each(nodes, [&](NodeId n) { w.I64(w.Node(n)); });
}

std::vector<NodeId> ReadNodes(Reader& r, const Bounds& b) {
  std::vector<NodeId> out(r.Count(8));
  for (NodeId& n : out) n = b.Node(r);
  return out;
}

template <typename K, typename V, typename WK, typename WV>
void WriteMap(Writer& w, const std::map<K, V>& m, WK wk, WV wv) {
  w.Each(m, [&](const auto& kv) {
    wk(kv.first);
    wv(kv.second);
  });
}

template <typename K, typename V, typename RK, typename RV>
void ReadMap(Reader& r, std::map<K, V>& m, RK rk, RV rv) {
  const size_t n = r.Count();
  for (size_t i = 0; i < n && r.ok(); ++i) {
    K k = rk();
    V v = rv();
    if (!m.emplace(std::move(k), std::move(v)).second) r.Fail("a key appears twice");
  }
}

template <typename K, typename RK>
void ReadSet(Reader& r, std::set<K>& s, RK rk) {
  const size_t n = r.Count();
  for (size_t i = 0; i < n && r.ok(); ++i) {
    if (!s.insert(rk()).second) r.Fail("an element appears twice");
  }
}

void WriteJob(Writer& w, const JobRecord& j) {
  w.I64(j.id);
  const JobRequest& q = j.request;
  WriteSpec(w, q.spec);
  w.Str(q.tenant);
  w.Str(q.user);
  w.I64(q.priority);
  w.I64(q.time_limit);
  w.I64(q.checkpoint_interval);
  w.I64(q.placement_wait);
  w.Each(q.command, [&](const std::string& a) { w.Str(a); });
  w.Str(q.unix_user);
  w.I64(q.memory_mb_per_node);
  w.I64(q.cpu_millis_per_node);
  auto write_deps = [&](const std::vector<Dependency>& deps) {
    w.Each(deps, [&](const Dependency& d) {
      w.Enum(d.kind);
      w.I64(d.job);
    });
  };
  w.Enum(q.process.launch);
  WriteMap(
      w, q.process.env, [&](const std::string& k) { w.Str(k); },
      [&](const std::string& v) { w.Str(v); });
  w.Str(q.process.working_dir);
  w.Str(q.process.output);
  w.Str(q.process.error);
  write_deps(q.dependencies);
  w.I64(q.array_job);
  w.I64(q.array_task);
  w.I64(q.array_throttle);
  if (w.version >= 2) w.Str(q.client_request_id);
  write_deps(j.waiting_on);
  w.Enum(j.state);
  w.Str(j.reason);
  for (TimeMs t : {j.submit_time, j.first_start, j.last_start, j.end_time}) w.I64(t);
  WriteSlots(w, j.ranks);
  WriteNodes(w, j.spares);
  w.I64(j.restarts);
  w.I64(j.preemptions);
  w.I64(j.checkpoint_step);
  w.I64(j.checkpoint_time);
  w.I64(j.productive_ms);
  w.F64(j.lost_gpu_ms);
  w.I64(j.preempt_deadline);
  w.Bool(j.borrowed);
  w.Bool(j.requeued_at_head);
  w.I64(j.app_failures);
  w.I64(j.launch_failures);
  w.I64(j.restart_at);
  if (w.version >= 8) w.Each(j.failed_nodes, [&](const std::string& n) { w.Str(n); });
  if (w.version >= 9) {
    w.Str(q.partition);
    w.Str(q.reservation);
  }
  if (w.version >= 10) w.Str(j.quota_partition);
}

// Partitions and reservations (version 9), by node name: onto another
// topology, names it lacks are left out (and a set left with none).
void WriteNodeSets(Writer& w, const NodeSets& sets, const std::set<std::string>& asked,
                   const Topology* onto) {
  auto names = [&](const std::vector<std::string>& nodes) {
    std::vector<std::string> kept;
    for (const std::string& n : nodes) {
      if (onto == nullptr || onto->FindNode(n) >= 0) kept.push_back(n);
    }
    return kept;
  };
  auto str = [&](const std::string& v) { w.Str(v); };
  std::vector<PartitionConfig> parts;
  for (const auto& [name, p] : sets.partitions()) {
    PartitionConfig q = p;
    q.nodes = names(p.nodes);
    if (!q.nodes.empty()) parts.push_back(std::move(q));
  }
  w.Each(parts, [&](const PartitionConfig& p) {
    w.Str(p.name);
    w.Each(p.nodes, str);
    w.I64(p.default_time);
    w.I64(p.max_time);
    w.I64(p.max_gpus);
    w.Each(p.tenants, str);
    w.I64(p.priority_tier);
    w.Bool(p.preemptible);
    w.Bool(p.is_default);
  });
  std::vector<ReservationConfig> res;
  for (const auto& [name, r] : sets.reservations()) {
    ReservationConfig q = r;
    q.nodes = names(r.nodes);
    if (!q.nodes.empty()) res.push_back(std::move(q));
  }
  w.Each(res, [&](const ReservationConfig& r) {
    w.Str(r.name);
    w.Each(r.nodes, str);
    w.I64(r.start);
    w.I64(r.end);
    w.Each(r.tenants, str);
    w.Bool(r.maintenance);
  });
  w.Each(std::vector<std::string>(asked.begin(), asked.end()), str);
}

JobRecord ReadJob(Reader& r, const Bounds& b) {
  JobRecord j;
  j.id = b.Job(r);
  JobRequest& q = j.request;
  q.spec = ReadSpec(r, b.version);
  q.tenant = r.Str();
  q.user = r.Str();
  q.priority = r.Int("priority");
  q.time_limit = r.I64();
  q.checkpoint_interval = r.I64();
  q.placement_wait = r.I64();
  q.command.resize(r.Count(8));
  for (std::string& a : q.command) a = r.Str();
  q.unix_user = r.Str();
  q.memory_mb_per_node = r.I64();
  q.cpu_millis_per_node = r.Int("cpu_millis_per_node");
  auto read_deps = [&](std::vector<Dependency>& deps) {
    deps.resize(r.Count(9));
    for (Dependency& d : deps) {
      d.kind = r.Enum("dependency kind", DependencyKind::kAfterNotOk);
      d.job = b.Job(r);
    }
  };
  q.process.launch = r.Enum("launch mode", LaunchMode::kNode);
  ReadMap(
      r, q.process.env, [&] { return r.Str(); }, [&] { return r.Str(); });
  q.process.working_dir = r.Str();
  q.process.output = r.Str();
  q.process.error = r.Str();
  read_deps(q.dependencies);
  q.array_job = b.Job(r);
  q.array_task = r.Int("array task", -1);
  q.array_throttle = r.Int("array throttle", 0);
  if (b.version >= 2) q.client_request_id = r.Str();
  read_deps(j.waiting_on);
  j.state = r.Enum("job state", JobState::kRejected);
  j.reason = r.Str();
  for (TimeMs* t : {&j.submit_time, &j.first_start, &j.last_start, &j.end_time}) *t = r.I64();
  j.ranks = ReadSlots(r, b);
  j.spares = ReadNodes(r, b);
  j.restarts = r.Int("restarts", 0);
  j.preemptions = r.Int("preemptions", 0);
  j.checkpoint_step = r.I64();
  j.checkpoint_time = r.I64();
  j.productive_ms = r.I64();
  j.lost_gpu_ms = r.F64("lost_gpu_ms");
  j.preempt_deadline = r.I64();
  j.borrowed = r.Bool();
  j.requeued_at_head = r.Bool();
  j.app_failures = r.Int("app_failures", 0);
  j.launch_failures = r.Int("launch_failures", 0);
  j.restart_at = r.I64();
  if (b.version >= 8) {
    std::vector<std::string> failed(r.Count(8));
    for (std::string& n : failed) n = r.Str();
    j.SetFailedNodes(std::move(failed));
  }
  if (b.version >= 9) {
    q.partition = r.Str();
    q.reservation = r.Str();
  }
  if (b.version >= 10) j.quota_partition = r.Str();
  if (r.ok()) {
    if (Status s = ValidateJobSpec(q.spec); !s.ok()) {
      r.Fail("job " + std::to_string(j.id) + ": " + s.message());
    }
    const bool holds = j.state == JobState::kRunning || j.state == JobState::kPreempting;
    if (holds && static_cast<int>(j.ranks.size()) != q.spec.gpus) {
      r.Fail("job " + std::to_string(j.id) + " runs on " + std::to_string(j.ranks.size()) +
             " GPUs, not its " + std::to_string(q.spec.gpus));
    }
    if (!holds && (!j.ranks.empty() || !j.spares.empty())) {
      r.Fail("job " + std::to_string(j.id) + " holds GPUs while " +
             std::string(JobStateName(j.state)));
    }
    if (j.ranks.empty() && !j.quota_partition.empty()) {
      r.Fail("job " + std::to_string(j.id) + " counts in partition '" + j.quota_partition +
             "' but holds no GPUs");
    }
  }
  return j;
}

}  // namespace

// A snapshot written onto another topology: the nodes of `next` in its own
// order, each with the state of the node of the same name here (old_of),
// or a new node's (down, healthy, free, never heard from).
struct Onto {
  const Topology* next = nullptr;
  std::vector<NodeId> to_new;  // by this core's node id; -1: removed
  std::vector<NodeId> old_of;  // by next's node id; -1: added
};

struct SnapshotAccess {
  static std::string Write(const SchedulerCore::Impl& c, uint32_t version,
                           const Onto* onto = nullptr);
  static Status Read(SchedulerCore::Impl& c, std::string_view bytes);
};

std::string SnapshotAccess::Write(const SchedulerCore::Impl& c, uint32_t version,
                                  const Onto* onto) {
  Writer w;
  w.version = version;
  w.out.append(kMagic);
  w.U32(version);
  const Topology& topo = c.topo_;
  if (onto != nullptr) w.to_new = &onto->to_new;
  // The nodes written, in order: this core's, or next's (each its old id,
  // -1 for a node added).
  std::vector<NodeId> order;
  if (onto != nullptr) {
    order = onto->old_of;
  } else {
    for (NodeId n = 0; n < topo.node_count(); ++n) order.push_back(n);
  }
  const Topology& written = onto != nullptr ? *onto->next : topo;
  w.I64(written.node_count());
  w.U64(TopologyFingerprint(written));
  WriteConfig(w, c.config_);
  w.I64(c.now_);

  // Quotas and fairshare.
  const QuotaLedger& q = c.quotas_;
  w.Each(q.tenants_, [&](const auto& kv) { WriteTenant(w, kv.second); });
  auto str = [&](const std::string& s) { w.Str(s); };
  auto i64 = [&](int64_t v) { w.I64(v); };
  auto f64 = [&](double v) { w.F64(v); };
  WriteMap(w, q.gpus_, str, i64);
  WriteMap(w, q.running_, str, i64);
  WriteMap(w, q.usage_, str, f64);
  w.I64(q.usage_time_);

  // Node and GPU health, and what is busy.
  const ClusterState& cs = c.alloc_.cluster();
  for (NodeId n : order) {
    if (n < 0) {  // added: down until its agent registers
      w.Enum(NodeState::kDown);
      for (int i = 0; i < 3; ++i) w.U64(0);
      continue;
    }
    w.Enum(cs.node_state(n));
    w.U64(cs.failed_mask(n));
    w.U64(cs.degraded_mask(n));
    w.U64(cs.busy_mask(n));
  }
  // Allocations.
  const Allocations& a = c.alloc_;
  for (NodeId n : order) {
    if (n < 0) {
      w.U64(0);
      w.I64(0);
      continue;
    }
    w.Each(a.node_jobs_[n], [&](JobId j) { w.I64(j); });
    w.I64(a.spare_owner_[n]);
  }
  w.Each(a.holders_, i64);
  if (w.version >= 4) {
    for (JobId id : a.holders_) w.U64(a.stamp(id));
    w.U64(a.next_stamp_);
  }

  // Jobs and the queue.
  w.Each(c.jobs_, [&](const auto& kv) { WriteJob(w, kv.second); });
  w.Each(c.waiting_, i64);
  WriteMap(w, c.queue_time_, i64, i64);
  if (w.version >= 5) WriteMap(w, c.eligible_at_, i64, i64);
  w.Each(c.preemptors_, i64);
  WriteMap(w, c.preempted_for_, i64, i64);
  w.Each(c.backoff_, [&](const auto& p) {
    w.I64(p.first);
    w.I64(p.second);
  });
  w.Each(c.feasible_, i64);
  if (w.version >= 7) {
    WriteMap(w, c.held_exits_, i64, [&](const SchedulerCore::Impl::HeldExit& h) {
      w.I64(h.rank);
      w.I64(h.exit_code);
      w.I64(h.until);
      w.I64(h.restarts);
    });
  }

  // Node health timers and drains.
  w.U64(static_cast<uint64_t>(order.size()));
  for (NodeId n : order) w.I64(n < 0 ? -1 : c.liveness_.last_heard(n));
  w.U64(static_cast<uint64_t>(order.size()));
  for (NodeId n : order) w.Str(n < 0 ? std::string() : c.drain_reason_[n]);

  // The pass's memos: onto another topology, every memo is stale.
  w.U64(c.generation_ + (onto != nullptr ? 1 : 0));
  WriteMap(w, c.blocked_at_, i64, [&](const SchedulerCore::Impl::Blocked& b) {
    w.U64(b.generation);
    w.Bool(b.masked);
    w.I64(b.reservation_job);
    w.Str(b.reason);
  });
  WriteMap(w, c.preempt_failed_at_, i64, [&](const SchedulerCore::Impl::PreemptTried& p) {
    w.U64(p.generation);
    w.Str(p.reason);
    if (w.version >= 3) w.I64(p.retry_at);
  });
  WriteMap(w, c.faster_tried_, i64, [&](const SchedulerCore::Impl::FasterTried& f) {
    w.U64(f.generation);
    w.Str(f.reason);
    w.I64(f.at);
  });
  w.I64(c.wait_bound_at_);
  if (w.version >= 5) w.I64(c.overdue_wake_);
  for (uint64_t v : {c.queue_epoch_, c.last_pass_generation_, c.last_pass_epoch_}) w.U64(v);
  for (JobId v : {c.pass_head_, c.just_submitted_, c.reservation_job_}) w.I64(v);
  w.U64(c.reservation_generation_);
  w.I64(c.estimate_job_);
  w.I64(c.estimate_start_);
  // A cached reservation and a kept plan are of this topology's nodes: not
  // carried onto another one.
  const SchedulerCore::Impl::Reservation none;
  const SchedulerCore::Impl::Reservation& cached = onto != nullptr ? none : c.cached_reservation_;
  w.I64(cached.job);
  w.I64(cached.start);
  WriteSlots(w, cached.gpus);
  if (w.version >= 4) {
    // The kept plan, when a pass could still keep it (health unchanged).
    const SchedulerCore::Impl::KeptPlan& k = c.kept_plan_;
    const bool live = onto == nullptr && k.job != 0 && k.health == c.cluster().health_changes();
    w.Bool(live);
    if (live) {
      auto holding = [&](const SchedulerCore::Impl::Holding& h) {
        w.I64(h.end);
        w.I64(h.id);
        w.U64(h.stamp);
      };
      w.I64(k.job);
      w.Each(k.holdings, holding);
      w.U64(k.answer_at);
      w.I64(k.free_before);
      w.Each(k.usable, [&](int u) { w.I64(u); });
      w.I64(k.reservation.start);
      WriteSlots(w, k.reservation.gpus);
    }
  }

  // Timers of running jobs, master ports.
  WriteMap(w, c.checkpoint_asked_, i64, i64);
  w.I64(c.next_timer_);
  w.Bool(c.timers_dirty_);
  w.I64(c.ports_.cursor_);
  w.U64(static_cast<uint64_t>(order.size()));
  for (NodeId n : order) {
    static const std::map<int, int64_t> kNone;
    WriteMap(w, n < 0 ? kNone : c.ports_.held_by_port_[n], i64, i64);
  }
  if (w.version >= 9) {
    WriteNodeSets(w, c.sets_, c.maintenance_asked_, onto != nullptr ? onto->next : nullptr);
    // Failed nodes of ended jobs by name, oldest first.
    w.Each(c.failed_name_order_, [&](const std::string& key) {
      w.Str(key);
      w.Each(c.failed_by_name_.at(key), [&](const std::string& n) { w.Str(n); });
    });
  }

  w.U64(Fnv1a(w.out));
  return std::move(w.out);
}

Status SnapshotAccess::Read(SchedulerCore::Impl& c, std::string_view bytes) {
  if (bytes.size() < kMagic.size() + 4 + 8 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Status::Error("not a scheduler snapshot (no TOPOSNAP header)");
  }
  Reader head(bytes.substr(kMagic.size(), 4));
  const uint32_t version = head.U32();
  if (version < 1 || version > SchedulerCore::kSnapshotVersion) {
    return Status::Error("snapshot format version " + std::to_string(version) +
                         " is not the one this build reads (" +
                         std::to_string(SchedulerCore::kSnapshotVersion) +
                         "): another release wrote it; replay the log instead");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader tail(bytes.substr(bytes.size() - 8));
  if (tail.U64() != Fnv1a(body)) {
    return Status::Error("snapshot checksum mismatch: the snapshot is corrupt");
  }
  Reader r(body.substr(kMagic.size() + 4));
  const Topology& topo = c.topo_;
  const Bounds b{topo, version};
  const int64_t nodes = r.I64();
  const uint64_t fingerprint = r.U64();
  if (nodes != topo.node_count() || fingerprint != TopologyFingerprint(topo)) {
    return Status::Error("the snapshot was written over another topology (" +
                         std::to_string(nodes) + " nodes; this one has " +
                         std::to_string(topo.node_count()) + ")");
  }
  // The config: this core's, but for the live policy, which the snapshot's
  // replaces (PolicyChanged events before it are in effect).
  Writer mine;
  mine.version = version;
  WriteConfig(mine, c.config_);
  const size_t fixed = mine.out.size() - PolicyBytes(mine.version);
  std::string theirs(r.Bytes(fixed));
  int old_depth = 0;  // a version 6 or older snapshot's backfill_depth
  if (mine.backfill_depth_at != std::string::npos && theirs.size() == fixed) {
    // Part of the policy now: not compared, restored as it was.
    Reader depth(std::string_view(theirs).substr(mine.backfill_depth_at, 8));
    old_depth = depth.Int("backfill_depth", 1, 1 << 30);
    theirs.replace(mine.backfill_depth_at, 8, mine.out, mine.backfill_depth_at, 8);
    if (old_depth == 0) r.Fail("backfill_depth out of range");
  }
  if (theirs != std::string_view(mine.out).substr(0, fixed) && r.ok()) {
    return Status::Error(
        "the snapshot was written under another scheduler config (placer, queue order, "
        "heartbeats, master ports or fairshare half-life differ)");
  }
  SchedulingPolicy policy = ReadPolicy(r, version);
  if (version <= 6) policy.backfill_depth = old_depth;
  policy.ApplyTo(c.config_);
  c.failures_ = FailurePolicy(c.config_.max_app_failures, c.config_.restart_backoff_initial,
                              c.config_.restart_backoff_max);
  c.now_ = r.I64();

  QuotaLedger& q = c.quotas_;
  q.tenants_.clear();
  {
    const size_t n = r.Count();
    for (size_t i = 0; i < n && r.ok(); ++i) {
      TenantConfig t = ReadTenant(r, version);
      q.tenants_[t.name] = t;
    }
  }
  auto str = [&] { return r.Str(); };
  auto i64 = [&] { return r.I64(); };
  auto count = [&] { return r.Int("tenant count", 0); };
  q.gpus_.clear();
  q.running_.clear();
  q.usage_.clear();
  ReadMap(r, q.gpus_, str, count);
  ReadMap(r, q.running_, str, count);
  ReadMap(r, q.usage_, str, [&] { return r.F64("usage"); });
  q.usage_time_ = r.I64();

  ClusterState& cs = c.alloc_.cluster();
  std::vector<uint64_t> busy(topo.node_count());
  for (NodeId n = 0; n < topo.node_count() && r.ok(); ++n) {
    const NodeState state = r.Enum("node state", NodeState::kSuspect);
    const uint64_t failed = r.U64(), degraded = r.U64();
    busy[n] = r.U64();
    const uint64_t all = cs.all_mask(n);
    if (((failed | degraded | busy[n]) & ~all) != 0 || (failed & degraded) != 0) {
      r.Fail("GPU masks of node " + topo.node(n).name + " do not fit its GPUs");
      break;
    }
    cs.SetNodeState(n, state);
    for (int g = 0; g < cs.node_gpus(n); ++g) {
      const uint64_t bit = uint64_t{1} << g;
      cs.SetGpuHealth(n, g,
                      (failed & bit)     ? GpuHealth::kFailed
                      : (degraded & bit) ? GpuHealth::kDegraded
                                         : GpuHealth::kHealthy);
    }
  }
  Allocations& a = c.alloc_;
  for (NodeId n = 0; n < topo.node_count() && r.ok(); ++n) {
    a.node_jobs_[n].resize(r.Count(8));
    for (JobId& j : a.node_jobs_[n]) j = b.Job(r);
    a.spare_owner_[n] = b.Job(r);
  }
  ReadSet(r, a.holders_, [&] { return b.Job(r); });
  a.stamps_.clear();
  a.next_stamp_ = 0;
  if (b.version >= 4) {
    for (JobId id : a.holders_) a.stamps_[id] = r.U64();
    a.next_stamp_ = r.U64();
    for (const auto& [id, stamp] : a.stamps_) {
      if (stamp > a.next_stamp_) r.Fail("allocation stamp of job " + std::to_string(id));
    }
  }

  {
    const size_t n = r.Count();
    for (size_t i = 0; i < n && r.ok(); ++i) {
      JobRecord j = ReadJob(r, b);
      const JobId id = j.id;
      if (IsTerminal(j.state)) c.finished_.push_back(id);  // not taken before the snapshot
      if (!c.jobs_.emplace(id, std::move(j)).second) r.Fail("job " + std::to_string(id) + " twice");
    }
  }
  auto job = [&] { return b.Job(r); };
  ReadSet(r, c.waiting_, job);
  ReadMap(r, c.queue_time_, job, i64);
  c.eligible_at_.clear();
  if (b.version >= 5) ReadMap(r, c.eligible_at_, job, i64);
  ReadSet(r, c.preemptors_, job);
  ReadMap(r, c.preempted_for_, job, job);
  ReadSet(r, c.backoff_, [&] {
    const TimeMs t = r.I64();
    return std::pair<TimeMs, JobId>(t, b.Job(r));
  });
  ReadSet(r, c.feasible_, job);
  c.held_exits_.clear();
  if (b.version >= 7) {
    ReadMap(r, c.held_exits_, job, [&] {
      SchedulerCore::Impl::HeldExit h;
      h.rank = r.Int("held exit rank", 0, 1 << 20);
      h.exit_code = r.Int("held exit status", -1, 255 + 128);
      h.until = r.I64();
      h.restarts = r.Int("held exit restarts", 0, 1 << 30);
      return h;
    });
  }

  if (r.Count(8) != static_cast<size_t>(topo.node_count())) r.Fail("heartbeats per node");
  for (NodeId n = 0; n < topo.node_count(); ++n) c.liveness_.Heard(n, r.I64());
  if (r.Count(8) != static_cast<size_t>(topo.node_count())) r.Fail("drain reasons per node");
  for (std::string& s : c.drain_reason_) s = r.Str();

  c.generation_ = r.U64();
  ReadMap(r, c.blocked_at_, job, [&] {
    SchedulerCore::Impl::Blocked x;
    x.generation = r.U64();
    x.masked = r.Bool();
    x.reservation_job = b.Job(r);
    x.reason = r.Str();
    return x;
  });
  ReadMap(r, c.preempt_failed_at_, job, [&] {
    SchedulerCore::Impl::PreemptTried x;
    x.generation = r.U64();
    x.reason = r.Str();
    if (b.version >= 3) x.retry_at = r.I64();
    return x;
  });
  ReadMap(r, c.faster_tried_, job, [&] {
    SchedulerCore::Impl::FasterTried x;
    x.generation = r.U64();
    x.reason = r.Str();
    x.at = r.I64();
    return x;
  });
  c.wait_bound_at_ = r.I64();
  c.overdue_wake_ = b.version >= 5 ? r.I64() : kNever;
  for (uint64_t* v : {&c.queue_epoch_, &c.last_pass_generation_, &c.last_pass_epoch_}) *v = r.U64();
  for (JobId* v : {&c.pass_head_, &c.just_submitted_, &c.reservation_job_}) *v = b.Job(r);
  c.reservation_generation_ = r.U64();
  c.estimate_job_ = b.Job(r);
  c.estimate_start_ = r.I64();
  c.cached_reservation_.job = b.Job(r);
  c.cached_reservation_.start = r.I64();
  c.cached_reservation_.gpus = ReadSlots(r, b);
  c.kept_plan_ = {};
  if (b.version >= 4 && r.Bool()) {
    auto holding = [&] {
      SchedulerCore::Impl::Holding h;
      h.end = r.I64();
      h.id = b.Job(r);
      h.stamp = r.U64();
      return h;
    };
    SchedulerCore::Impl::KeptPlan& k = c.kept_plan_;
    k.job = b.Job(r);
    const size_t n = r.Count(24);
    for (size_t i = 0; i < n && r.ok(); ++i) k.holdings.push_back(holding());
    k.answer_at = r.U64();
    if (k.answer_at >= k.holdings.size()) r.Fail("kept plan's answer");
    k.free_before = r.Int("kept plan's free GPUs", 0, topo.total_gpus());
    const size_t u = r.Count(8);
    if (r.ok() && u != k.holdings.size() - k.answer_at) r.Fail("kept plan's usable GPUs");
    for (size_t i = 0; i < u && r.ok(); ++i)
      k.usable.push_back(r.Int("usable GPUs", 0, topo.total_gpus()));
    SchedulerCore::Impl::Reservation kept;
    kept.job = k.job;
    kept.start = r.I64();
    kept.gpus = ReadSlots(r, b);
    k.Keep(std::move(kept));
    // Health was unchanged since the plan when it was written; the restored
    // cluster's count stands for that health now.
    k.health = cs.health_changes();
    if (!std::is_sorted(k.holdings.begin(), k.holdings.end())) r.Fail("kept plan's holders");
  }

  ReadMap(r, c.checkpoint_asked_, job, i64);
  c.next_timer_ = r.I64();
  c.timers_dirty_ = r.Bool();
  // The queue of timers follows from the jobs: built again on first use.
  c.all_timers_changed_ = true;
  c.timers_changed_.clear();
  c.ports_.cursor_ = r.Int("master port cursor", 0, std::max(0, c.config_.master_ports.count - 1));
  if (r.Count(8) != static_cast<size_t>(topo.node_count())) r.Fail("master ports per node");
  for (auto& held : c.ports_.held_by_port_) {
    ReadMap(
        r, held, [&] { return r.Int("master port", 0, 65535); }, job);
  }
  if (b.version >= 9) {
    auto strs = [&](std::vector<std::string>& out) {
      out.resize(r.Count(8));
      for (std::string& v : out) v = r.Str();
    };
    const size_t parts = r.Count(8);
    for (size_t i = 0; i < parts && r.ok(); ++i) {
      PartitionConfig p;
      p.name = r.Str();
      strs(p.nodes);
      p.default_time = r.I64();
      p.max_time = r.I64();
      p.max_gpus = r.Int("partition max_gpus", 0);
      strs(p.tenants);
      p.priority_tier = r.Int("partition priority_tier", -1000, 1000);
      p.preemptible = r.Bool();
      p.is_default = r.Bool();
      if (!r.ok()) break;
      if (Status s = c.sets_.ConfigurePartition(std::move(p)); !s.ok()) {
        r.Fail("partition: " + s.message());
      }
    }
    const size_t res = r.Count(8);
    for (size_t i = 0; i < res && r.ok(); ++i) {
      ReservationConfig q;
      q.name = r.Str();
      strs(q.nodes);
      q.start = r.I64();
      q.end = r.I64();
      strs(q.tenants);
      q.maintenance = r.Bool();
      if (!r.ok()) break;
      if (Status s = c.sets_.ConfigureReservation(std::move(q)); !s.ok()) {
        r.Fail("reservation: " + s.message());
      }
    }
    std::vector<std::string> asked;
    strs(asked);
    c.maintenance_asked_ = std::set<std::string>(asked.begin(), asked.end());
    const size_t names = r.Count(16);
    if (names > SchedulerCore::Impl::kMaxRememberedNames) r.Fail("remembered job names");
    for (size_t i = 0; i < names && r.ok(); ++i) {
      std::string key = r.Str();
      std::vector<std::string> nodes;
      strs(nodes);
      if (!r.ok()) break;
      if (!c.failed_by_name_.emplace(key, std::move(nodes)).second) r.Fail("a job name twice");
      c.failed_name_order_.push_back(std::move(key));
    }
    c.sets_wake_ = c.sets_.NextChange(c.now_, c.config_.preempt_grace);
  }
  if (r.ok() && !r.done()) r.Fail("bytes after the end");
  if (!r.ok()) return Status::Error("corrupt snapshot: " + r.error());

  // Consistency: the GPUs the allocations hold are exactly the busy ones,
  // and every holder is a job that holds GPUs.
  std::vector<uint64_t> held(topo.node_count(), 0);
  for (JobId id : a.holders_) {
    auto it = c.jobs_.find(id);
    if (it == c.jobs_.end() || it->second.ranks.empty()) {
      return Status::Error("corrupt snapshot: job " + std::to_string(id) +
                           " holds GPUs but is not running");
    }
    for (const GpuSlot& s : a.Held(it->second.ranks, it->second.spares)) {
      const uint64_t bit = uint64_t{1} << s.gpu;
      if (held[s.node] & bit) {
        return Status::Error("corrupt snapshot: a GPU of node " + topo.node(s.node).name +
                             " is held twice");
      }
      held[s.node] |= bit;
    }
  }
  if (held != busy) return Status::Error("corrupt snapshot: busy GPUs differ from allocations");
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    std::vector<GpuSlot> slots;
    for (int g = 0; g < cs.node_gpus(n); ++g) {
      if (busy[n] & (uint64_t{1} << g)) slots.push_back({n, g});
    }
    if (Status s = cs.Allocate(slots); !s.ok())
      return Status::Error("corrupt snapshot: " + s.message());
  }
  c.nodes_in_state_ = {};
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    ++c.nodes_in_state_[static_cast<size_t>(cs.node_state(n))];
    c.WatchNode(n);  // derived from the last heartbeat and the state
  }
  // Derived from the jobs: who waits on whom, running tasks per array.
  for (const auto& [id, j] : c.jobs_) {
    for (const Dependency& d : j.waiting_on) c.dependents_[d.job].push_back(id);
    if (j.request.array_job != 0 && !j.ranks.empty()) ++c.array_running_[j.request.array_job];
  }
  // What each tenant holds per partition, from the jobs that hold GPUs and
  // the partition each counts in; before version 10 that is its partition
  // now (the sets as the snapshot has them).
  q.partition_use_.clear();
  for (JobId id : a.holders_) {
    JobRecord& j = c.jobs_.at(id);
    if (version < 10) j.quota_partition = c.QuotaPartition(j);
    if (j.quota_partition.empty()) continue;
    QuotaLedger::PartitionUse& u = q.partition_use_[j.request.tenant][j.quota_partition];
    u.gpus += static_cast<int>(j.ranks.size() + a.SpareSlots(j.spares).size());
    u.running += 1;
  }
  return Status::Ok();
}

std::string SchedulerCore::Snapshot() const {
  return SnapshotAccess::Write(*impl_, kSnapshotVersion);
}

Result<std::string> SchedulerCore::SnapshotOnto(const Topology& next) const {
  const Impl& c = *impl_;
  TopologyDiff d = DiffTopologies(c.topo_, next);
  std::string held;
  int jobs = 0;
  for (const auto& [id, job] : c.jobs_) {
    std::vector<std::string> gone;
    for (const GpuSlot& s : c.alloc_.Held(job.ranks, job.spares)) {
      const std::string& name = c.topo_.node(s.node).name;
      if (d.to_new[s.node] < 0 && (gone.empty() || gone.back() != name)) gone.push_back(name);
    }
    if (gone.empty()) continue;
    if (++jobs <= 20) {
      std::string nodes;
      for (size_t i = 0; i < gone.size() && i < 8; ++i) nodes += (i ? "," : "") + gone[i];
      if (gone.size() > 8) nodes += ",...";
      held += (held.empty() ? "" : "; ") + ("job " + std::to_string(id) + " on " + nodes);
    }
  }
  if (jobs > 0) {
    return Status::Error(std::to_string(jobs) + " job(s) hold nodes the new topology removes or " +
                             "gives another GPU count (" + held +
                             "): drain those nodes first (topo drain HOSTLIST --reason ...), "
                             "and import once their jobs have moved",
                         ErrorCode::kConflict);
  }
  const Onto onto{&next, std::move(d.to_new), std::move(d.old_of)};
  return SnapshotAccess::Write(c, kSnapshotVersion, &onto);
}

std::string SchedulerCore::Snapshot(uint32_t version) const {
  return SnapshotAccess::Write(*impl_, std::clamp<uint32_t>(version, 1, kSnapshotVersion));
}

Status SchedulerCore::Restore(std::string_view snapshot) {
  auto fresh = std::make_unique<Impl>(impl_->topo_, impl_->config_);
  if (Status s = SnapshotAccess::Read(*fresh, snapshot); !s.ok()) return s;
  impl_ = std::move(fresh);
  return Status::Ok();
}

}  // namespace topo::core
