// The trace-replay simulator (see sim.hpp for the event loop and its rules).

#include "topo/core/sim.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <queue>
#include <set>
#include <unordered_map>

#include "sim_speed.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/sim_workload.hpp"
#include "topo/core/topology_diff.hpp"

namespace topo::core {

std::optional<FailureModel> FailureModel::ByName(std::string_view name) {
  FailureModel m;
  if (name == "none") return m;
  if (name == "llama3") {
    m.kind = FailureKind::kLlama3;
    return m;
  }
  return std::nullopt;
}

std::vector<std::string> FailureModel::Names() { return {"none", "llama3"}; }

namespace {

// Event classes in their tie order (sim.hpp).
enum EventClass : uint8_t {
  kComplete = 0,
  kCheckpoint = 1,
  kRepair = 2,
  kFailure = 3,
  kSubmit = 4,
  kWakeup = 5,
  kTick = 6,
  kTopology = 7,
};
enum TopologyWhat : uint8_t { kChangeBegin, kChangeEvacuate, kChangeApply };
enum RepairWhat : uint8_t { kRepairGpu, kRepairNode };
enum FailureWhat : uint8_t { kFailureModel, kFailureFirst, kFailureScripted };

struct SimEvent {
  TimeMs time = 0;
  uint64_t seq = 0;
  int64_t value = 0;  // checkpoint progress (-1: as of the event time)
  int32_t a = 0;      // job position, or node
  int32_t b = 0;      // GPU
  uint32_t epoch = 0;
  uint8_t cls = 0;
  uint8_t what = 0;
};

struct Later {
  bool operator()(const SimEvent& x, const SimEvent& y) const {
    if (x.time != y.time) return x.time > y.time;
    if (x.cls != y.cls) return x.cls > y.cls;
    return x.seq > y.seq;
  }
};

// Run state of one job, simulator side.
struct JobRun {
  TimeMs run_start = -1;
  TimeMs kept = 0;       // progress when the current run started
  TimeMs mark_time = 0;  // progress is mark_progress + (now - mark_time) x speed
  TimeMs mark_progress = 0;
  double speed = 1;
  uint32_t speed_version = 0;   // completions carry it; a speed change makes them stale
  TimeMs checkpoint = 0;        // progress saved by the newest complete checkpoint
  TimeMs progress_at_stop = 0;  // progress when the last run ended
  uint32_t epoch = 0;           // bumped at every start and stop; stale events carry old ones
  bool running = false;
  bool ever_started = false;
  bool hit = false;  // a failure hit the current run
  bool stopped_by_failure = false;
  bool terminal = false;
  bool preempted = false;  // told to stop for another job (kPreempting); cleared at its restart
  TimeMs stopped_at = -1;  // when the last run ended
  int32_t moved_by = -1;   // the last topology change that evacuated it
  uint32_t moved_epoch =
      0;  // the run it evacuated (one job over several removed nodes counts once)
};

// Standard normal from two uniforms (Box-Muller), platform independent.
double StandardNormal(Rng& rng) {
  const double u1 = 1.0 - rng.Uniform();  // (0, 1]
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

constexpr double kMsPerHour = 3600.0 * 1000.0;
constexpr int kTakeFinishedEvery = 32;
// A periodic checkpoint whose progress is taken when it fires (speed model).
constexpr int64_t kPeriodicNow = -2;

class Simulator {
 public:
  Simulator(const Topology& topology, SchedulerConfig config, const SimWorkload& workload,
            const SimOptions& options)
      : topo_(&topology),
        config_(std::move(config)),
        workload_(workload),
        options_(options),
        core_(std::make_unique<SchedulerCore>(topology, config_)),
        models_(topology.gpu_models()),
        scripted_(options.scripted_failures),
        failure_rng_(options.seed * 0x9E3779B97F4A7C15ULL + 0xF417),
        runs_(workload.jobs.size()),
        results_(workload.jobs.size()) {
    scorer_.emplace(topology);
    if (options.speed_model) speed_.emplace(topology, options.cross_hbd_scale);
    IndexTopology();
    owner_.assign(gpu_base_.back(), -1);
    gpu_failed_.assign(gpu_base_.back(), 0);
    node_down_.assign(topology.node_count(), 0);
    node_broken_.assign(topology.node_count(), 0);
    changes_.resize(options.topology_changes.size());
  }

  SimReport Run();

 private:
  const JobSpec& Spec(int32_t pos) const { return workload_.jobs[pos].request.spec; }
  JobId IdOf(int32_t pos) const { return static_cast<JobId>(pos) + 1; }
  // -1 (and an anomaly) for an id the workload does not have.
  int32_t PosOf(JobId id, const char* what) {
    if (id < 1 || id > static_cast<JobId>(workload_.jobs.size())) {
      Anomaly(std::string(what) + " for an unknown job id");
      return -1;
    }
    return static_cast<int32_t>(id - 1);
  }
  void Anomaly(const std::string& what) { ++report_.anomalies[what]; }

  void Push(TimeMs time, EventClass cls, int32_t a, int32_t b = 0, uint32_t epoch = 0,
            int64_t value = 0, uint8_t what = 0) {
    queue_.push(SimEvent{time, seq_++, value, a, b, epoch, static_cast<uint8_t>(cls), what});
  }
  void Advance(TimeMs t);
  void StepCore(const Event& event);
  void Handle(std::vector<Command>& commands);
  void OnStart(int32_t pos, const std::vector<GpuSlot>& ranks, std::optional<int64_t> step);
  void BeginRun(int32_t pos, const std::vector<GpuSlot>& ranks, TimeMs kept);
  void EndRun(int32_t pos, TimeMs progress);
  // The speed model moved pos's speed: keep its progress, reschedule its end.
  void Respeed(int32_t pos);
  void RespeedChanged();
  void PushCompletion(int32_t pos);
  TimeMs Progress(int32_t pos) const;
  void OnStateChanged(const JobStateChanged& c);
  void OnModelFailure();
  // gpu >= 0: that GPU fails; -1: the node goes down (network or host).
  void Inject(NodeId node, int gpu, bool network, TimeMs repair);
  double MeanFailureGapMs() const {
    return options_.failures.gpu_hours_per_interruption / static_cast<double>(topo_->total_gpus()) *
           kMsPerHour;
  }
  void OnRepair(const SimEvent& ev);
  void OnCheckpoint(const SimEvent& ev);
  void OnComplete(const SimEvent& ev);
  void TakeFinished();
  TimeMs CheckpointInterval(int32_t pos) const {
    TimeMs i = workload_.jobs[pos].request.checkpoint_interval;
    return i == 0 ? config_.default_checkpoint_interval : i;
  }
  void Finish();
  // gpu_base_ and node_model_ of *topo_.
  void IndexTopology();
  // Topology changes (sim.hpp): drain the removed nodes, evacuate one, move
  // onto the new version once they are empty.
  void OnTopology(const SimEvent& ev);
  void BeginChange(int32_t i);
  void Evacuate(NodeId node, int32_t i);
  void ApplyChange(int32_t i);
  // True once jobs have waited stall_limit with nothing running, submitted
  // or pending (the core will never start them).
  bool Stalled() {
    if (next_submit_ < workload_.jobs.size() || running_jobs_ > 0 || pending_repairs_ > 0 ||
        !wakeups_.empty() || changes_pending_ > 0) {
      stall_since_ = -1;
      return false;
    }
    if (stall_since_ < 0) stall_since_ = now_;
    return now_ - stall_since_ >= options_.stall_limit;
  }

  const Topology* topo_;  // the version in use
  SchedulerConfig config_;
  const SimWorkload& workload_;
  SimOptions options_;
  std::unique_ptr<SchedulerCore> core_;
  std::optional<PlacementScorer> scorer_;
  std::vector<std::string> models_;        // the first version's gpu_models(), then new ones
  std::vector<int> node_model_;            // index into models_, by node
  std::vector<ScriptedFailure> scripted_;  // node ids of the version in use (-1: removed)
  std::optional<internal::SpeedModel> speed_;
  std::vector<int32_t> changed_;  // scratch: jobs whose speed moved
  Rng failure_rng_;
  SimReport report_;

  std::priority_queue<SimEvent, std::vector<SimEvent>, Later> queue_;
  uint64_t seq_ = 0;
  TimeMs now_ = 0;
  std::set<TimeMs> wakeups_;  // core wakeups already queued

  std::vector<JobRun> runs_;
  std::vector<SimJobResult> results_;
  std::unordered_map<int32_t, std::vector<GpuSlot>> ranks_;  // running jobs only
  std::vector<int> gpu_base_;                                // first global GPU index of each node
  std::vector<int32_t> owner_;  // global GPU -> running job position, or -1
  std::vector<uint8_t> gpu_failed_;
  std::vector<uint8_t> node_down_;
  std::vector<int32_t> node_broken_;  // failures on the node not yet repaired
  int64_t busy_gpus_ = 0;
  int64_t running_jobs_ = 0;
  int64_t pending_repairs_ = 0;
  int64_t done_ = 0;
  int64_t finished_since_take_ = 0;
  size_t next_submit_ = 0;
  TimeMs stall_since_ = -1;
  double alloc_gpu_ms_ = 0;
  int64_t submitted_ = 0;
  double backlog_ms_ = 0;      // time with a job waiting
  double backlog_gpu_ms_ = 0;  // GPU-ms allocated meanwhile
  double core_busy_gpu_ms_ = 0;
  double backlog_capacity_gpu_ms_ = 0;  // capacity while a job waits, integrated
  // (from, GPUs): the capacity over time, one entry per topology version.
  std::vector<std::pair<TimeMs, int>> capacity_;

  // Topology changes, by SimOptions::topology_changes position.
  struct ChangeRun {
    std::vector<NodeId> drain;  // nodes it removes or resizes (ids of the version before)
  };
  std::vector<ChangeRun> changes_;
  int32_t changes_begun_ = 0;  // changes begin in order
  int64_t changes_pending_ = 0;

  // Placement aggregates.
  int64_t placements_met_ = 0;
  double leaf_sum_ = 0;
  int64_t leaf_n_ = 0;
  double comm_sum_ = 0;
  int64_t comm_n_ = 0;
};

void Simulator::IndexTopology() {
  const Topology& t = *topo_;
  gpu_base_.clear();
  gpu_base_.reserve(t.node_count() + 1);
  int base = 0;
  for (NodeId n = 0; n < t.node_count(); ++n) {
    gpu_base_.push_back(base);
    base += t.node(n).gpus;
  }
  gpu_base_.push_back(base);
  node_model_.clear();
  node_model_.reserve(t.node_count());
  for (NodeId n = 0; n < t.node_count(); ++n) {
    const std::string& model = t.node(n).gpu_model;
    auto it = std::find(models_.begin(), models_.end(), model);
    if (it == models_.end()) it = models_.insert(models_.end(), model);
    node_model_.push_back(static_cast<int>(it - models_.begin()));
  }
}

void Simulator::Advance(TimeMs t) {
  if (t > now_) {
    const double dt = static_cast<double>(t - now_);
    alloc_gpu_ms_ += static_cast<double>(busy_gpus_) * dt;
    if (submitted_ - running_jobs_ - done_ > 0) {
      backlog_ms_ += dt;
      backlog_gpu_ms_ += static_cast<double>(busy_gpus_) * dt;
      backlog_capacity_gpu_ms_ += static_cast<double>(topo_->total_gpus()) * dt;
    }
    core_busy_gpu_ms_ += static_cast<double>(core_->cluster().total_busy_gpus()) * dt;
    now_ = t;
  }
}

void Simulator::StepCore(const Event& event) {
  ++report_.events;
  std::vector<Command> commands = core_->Step(event, now_);
  Handle(commands);
  TimeMs wake = core_->NextWakeup();
  if (wake != kNever) {
    if (wake <= now_) {
      Anomaly("NextWakeup() is not in the future after a Step");
      wake = now_ + kSecond;
    }
    if (wakeups_.insert(wake).second) Push(wake, kWakeup, 0);
  }
  if (finished_since_take_ >= kTakeFinishedEvery) TakeFinished();
}

void Simulator::Handle(std::vector<Command>& commands) {
  for (Command& command : commands) {
    std::visit(
        [&](auto& c) {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, StartJob>) {
            const int32_t pos = PosOf(c.id, "StartJob");
            if (pos >= 0) OnStart(pos, c.ranks, std::nullopt);
          } else if constexpr (std::is_same_v<T, RestartJob>) {
            const int32_t pos = PosOf(c.id, "RestartJob");
            if (pos >= 0) OnStart(pos, c.ranks, c.launch.checkpoint_step);
          } else if constexpr (std::is_same_v<T, StopJob>) {
            const int32_t pos = PosOf(c.id, "StopJob");
            if (pos < 0) return;
            if (!runs_[pos].running) {
              Anomaly("StopJob for a job that is not running");
              return;
            }
            ++report_.stops;
            EndRun(pos, Progress(pos));
          } else if constexpr (std::is_same_v<T, RequestCheckpoint>) {
            const int32_t pos = PosOf(c.id, "RequestCheckpoint");
            if (pos < 0) return;
            if (!runs_[pos].running) {
              Anomaly("RequestCheckpoint for a job that is not running");
              return;
            }
            Push(now_ + options_.checkpoint_latency, kCheckpoint, pos, 0, runs_[pos].epoch, -1);
          } else if constexpr (std::is_same_v<T, JobStateChanged>) {
            OnStateChanged(c);
          }
          // DrainNode, NodeStateChanged, GpuHealthChanged: nothing to do.
        },
        command);
  }
}

TimeMs Simulator::Progress(int32_t pos) const {
  const JobRun& r = runs_[pos];
  if (!r.running) return r.progress_at_stop;
  const TimeMs wall = now_ - r.mark_time;
  const TimeMs done =
      r.speed == 1 ? wall : static_cast<TimeMs>(static_cast<double>(wall) * r.speed);
  return std::min(r.mark_progress + done, workload_.jobs[pos].duration);
}

void Simulator::PushCompletion(int32_t pos) {
  const JobRun& r = runs_[pos];
  const TimeMs remaining = workload_.jobs[pos].duration - r.mark_progress;
  const TimeMs wall =
      r.speed == 1 ? remaining
                   : static_cast<TimeMs>(std::ceil(static_cast<double>(remaining) / r.speed));
  Push(now_ + std::max<TimeMs>(0, wall), kComplete, pos, 0, r.epoch, r.speed_version);
}

void Simulator::Respeed(int32_t pos) {
  JobRun& r = runs_[pos];
  if (!r.running) return;
  const double speed = speed_->Speed(pos);
  if (speed == r.speed) return;
  r.mark_progress = Progress(pos);
  r.mark_time = now_;
  r.speed = speed;
  ++r.speed_version;
  PushCompletion(pos);
}

void Simulator::RespeedChanged() {
  for (int32_t other : changed_) Respeed(other);
  changed_.clear();
}

// StartJob (step nullopt) or RestartJob (step given).
void Simulator::OnStart(int32_t pos, const std::vector<GpuSlot>& ranks,
                        std::optional<int64_t> step) {
  JobRun& r = runs_[pos];
  if (r.terminal) {
    Anomaly("StartJob/RestartJob for a job that already ended");
    return;
  }
  if (!step && r.running) {
    Anomaly("StartJob for a job that is already running");
  }
  if (step && !r.ever_started) Anomaly("RestartJob for a job that never started");
  if (r.running) EndRun(pos, Progress(pos));
  TimeMs kept = 0;
  if (r.ever_started) {
    int64_t from = -1;
    if (step) {
      from = *step;
    } else if (const JobRecord* rec = core_->job(IdOf(pos)); rec != nullptr) {
      from = rec->checkpoint_step;
    }
    if (from > r.checkpoint) {
      Anomaly("restart from a checkpoint step the job never completed");
      from = r.checkpoint;
    }
    kept = std::max<int64_t>(from, 0);
  }
  BeginRun(pos, ranks, kept);
}

void Simulator::BeginRun(int32_t pos, const std::vector<GpuSlot>& ranks, TimeMs kept) {
  JobRun& r = runs_[pos];
  SimJobResult& res = results_[pos];
  const JobSpec& spec = Spec(pos);
  if (r.ever_started && r.preempted) {
    ++report_.preemption_restarts;
    report_.preempted_wait_gpu_ms += static_cast<double>(now_ - r.stopped_at) * spec.gpus;
    r.preempted = false;
  }
  if (r.ever_started) {
    const double lost = static_cast<double>(r.progress_at_stop - kept) * spec.gpus;
    if (lost > 0) {
      (r.stopped_by_failure ? res.lost_failure_gpu_ms : res.lost_other_gpu_ms) += lost;
    }
    ++res.restarts;
    ++report_.restarts;
  }
  r.ever_started = true;
  r.running = true;
  r.run_start = now_;
  r.kept = kept;
  r.checkpoint = kept;
  r.hit = false;
  r.mark_time = now_;
  r.mark_progress = kept;
  r.speed = 1;
  ++r.epoch;
  ++running_jobs_;
  stall_since_ = -1;
  busy_gpus_ += spec.gpus;
  if (res.first_start < 0) res.first_start = now_;

  bool valid = static_cast<int>(ranks.size()) == spec.gpus;
  for (const GpuSlot& s : ranks) {
    if (s.node < 0 || s.node >= topo_->node_count() || s.gpu < 0 ||
        s.gpu >= topo_->node(s.node).gpus) {
      valid = false;
      continue;
    }
    int32_t& owner = owner_[gpu_base_[s.node] + s.gpu];
    if (owner >= 0 && owner != pos) Anomaly("ranks on a GPU another running job holds");
    owner = pos;
  }
  ranks_[pos] = ranks;

  ++res.placements;
  ++report_.placements;
  if (!valid) {
    Anomaly("StartJob/RestartJob with a rank map of the wrong size or a bad slot");
    res.required_met = false;
  } else {
    PlacementScorer::Score s = scorer_->Evaluate(spec, ranks);
    if (s.required_met) ++placements_met_;
    bool cross_part = false;
    for (const GpuSlot& slot : ranks) {
      const int m = node_model_[slot.node];
      if (m < 64) res.gpu_models |= uint64_t{1} << m;
      cross_part = cross_part || topo_->part_of(slot.node) != topo_->part_of(ranks[0].node);
    }
    if (cross_part) ++report_.cross_part_placements;
    res.required_met = res.required_met && s.required_met;
    if (s.leaf_span_ratio) {
      leaf_sum_ += *s.leaf_span_ratio;
      ++leaf_n_;
    }
    if (s.comm_cost_ratio) {
      comm_sum_ += *s.comm_cost_ratio;
      ++comm_n_;
    }
    if (res.placements == 1) {
      res.leaf_span_ratio = s.leaf_span_ratio.value_or(std::nan(""));
      res.comm_cost_ratio = s.comm_cost_ratio.value_or(std::nan(""));
    }
  }

  if (speed_ && valid) {
    changed_.clear();
    speed_->Start(pos, spec, ranks, &changed_);
    r.speed = speed_->Speed(pos);
    RespeedChanged();
  }
  const TimeMs remaining = workload_.jobs[pos].duration - kept;
  PushCompletion(pos);
  const TimeMs interval = CheckpointInterval(pos);
  if (options_.checkpoints == CheckpointMode::kPeriodic && interval > 0 &&
      (speed_ || interval < remaining)) {
    Push(now_ + interval, kCheckpoint, pos, 0, r.epoch, speed_ ? kPeriodicNow : kept + interval);
  }
}

void Simulator::EndRun(int32_t pos, TimeMs progress) {
  JobRun& r = runs_[pos];
  {
    SimJobResult& res = results_[pos];
    const double wall = static_cast<double>(now_ - r.run_start);
    const double work = static_cast<double>(progress - r.kept);
    res.run_ms += wall;
    res.work_ms += work;
    res.slow_gpu_ms += std::max(0.0, wall - work) * Spec(pos).gpus;
  }
  r.running = false;
  r.progress_at_stop = progress;
  r.stopped_at = now_;
  r.stopped_by_failure = r.hit;
  ++r.epoch;
  --running_jobs_;
  busy_gpus_ -= Spec(pos).gpus;
  auto it = ranks_.find(pos);
  if (it != ranks_.end()) {
    for (const GpuSlot& s : it->second) {
      if (s.node < 0 || s.node >= topo_->node_count() || s.gpu < 0 ||
          s.gpu >= topo_->node(s.node).gpus) {
        continue;
      }
      int32_t& owner = owner_[gpu_base_[s.node] + s.gpu];
      if (owner == pos) owner = -1;
    }
    ranks_.erase(it);
  }
  if (speed_) {
    changed_.clear();
    speed_->Stop(pos, &changed_);
    RespeedChanged();
  }
}

void Simulator::OnStateChanged(const JobStateChanged& c) {
  const int32_t pos = PosOf(c.id, "JobStateChanged");
  if (pos < 0) return;
  JobRun& r = runs_[pos];
  SimJobResult& res = results_[pos];
  if (r.terminal) {
    Anomaly("state change after a terminal state");
    return;
  }
  res.state = c.state;
  if (c.state == JobState::kPreempting && r.running && !r.preempted) {
    r.preempted = true;
    ++report_.preemptions;
    report_.preempted_gpus += Spec(pos).gpus;
    if (const JobRecord* rec = core_->job(c.id); rec != nullptr && rec->borrowed) {
      ++report_.preempted_borrowed;
    }
  }
  if (!IsTerminal(c.state)) return;
  if (r.running) {
    Anomaly("terminal state for a job that still runs (no StopJob first)");
    EndRun(pos, Progress(pos));
  }
  r.terminal = true;
  res.end = now_;
  res.productive_ms = r.ever_started ? r.progress_at_stop : 0;
  if (c.state == JobState::kCompleted && r.progress_at_stop < workload_.jobs[pos].duration) {
    Anomaly("completed before its work was done");
  }
  ++done_;
  ++finished_since_take_;
}

void Simulator::OnComplete(const SimEvent& ev) {
  JobRun& r = runs_[ev.a];
  // Stopped meanwhile, or its speed changed since this was due.
  if (!r.running || r.epoch != ev.epoch || ev.value != r.speed_version) return;
  EndRun(ev.a, workload_.jobs[ev.a].duration);
  StepCore(JobFinished{IdOf(ev.a), 0});
  if (!runs_[ev.a].terminal) Anomaly("JobFinished did not end the job");
}

void Simulator::OnCheckpoint(const SimEvent& ev) {
  JobRun& r = runs_[ev.a];
  if (!r.running || r.epoch != ev.epoch) return;
  const bool periodic = ev.value >= 0;
  const TimeMs progress = periodic ? ev.value : Progress(ev.a);
  if (periodic) {
    const TimeMs next = progress + CheckpointInterval(ev.a);
    if (next < workload_.jobs[ev.a].duration) {
      Push(now_ + CheckpointInterval(ev.a), kCheckpoint, ev.a, 0, r.epoch, next);
    }
  } else if (ev.value == kPeriodicNow) {
    // Every interval of run time; a job that ends first makes it stale.
    Push(now_ + CheckpointInterval(ev.a), kCheckpoint, ev.a, 0, r.epoch, kPeriodicNow);
  }
  if (progress <= r.checkpoint) return;
  r.checkpoint = progress;
  ++report_.checkpoints;
  StepCore(CheckpointCompleted{IdOf(ev.a), progress});
}

void Simulator::OnModelFailure() {
  const FailureModel& m = options_.failures;
  // Every draw happens whatever the state, so the sequence is the same for
  // every policy.
  const double gap = -std::log(1.0 - failure_rng_.Uniform()) * MeanFailureGapMs();
  const int gpu_index = static_cast<int>(failure_rng_.Below(topo_->total_gpus()));
  const double category = failure_rng_.Uniform();
  const double repair = static_cast<double>(m.repair_median) *
                        std::exp(m.repair_sigma * StandardNormal(failure_rng_));
  Push(now_ + std::max<TimeMs>(1, static_cast<TimeMs>(gap)), kFailure, 0);
  const NodeId node = static_cast<NodeId>(
      std::upper_bound(gpu_base_.begin(), gpu_base_.end(), gpu_index) - gpu_base_.begin() - 1);
  const bool gpu_fault = category < m.share_gpu;
  const bool network = !gpu_fault && category < m.share_gpu + m.share_network;
  Inject(node, gpu_fault ? gpu_index - gpu_base_[node] : -1, network,
         std::max<TimeMs>(kSecond, static_cast<TimeMs>(repair)));
}

void Simulator::Inject(NodeId node, int gpu, bool network, TimeMs repair) {
  ++report_.failures_injected;
  const bool gpu_fault = gpu >= 0;
  const int gpu_index = gpu_fault ? gpu_base_[node] + gpu : -1;
  const TimeMs repair_at = now_ + repair;
  if (node_down_[node] || (gpu_fault && gpu_failed_[gpu_index])) {
    ++report_.failures_absorbed;
    return;
  }
  // The running jobs the failure kills, with one of their ranks on it.
  std::vector<std::pair<int32_t, int>> hit;
  auto note_hit = [&](int32_t pos, int g) {
    for (const auto& h : hit) {
      if (h.first == pos) return;
    }
    const std::vector<GpuSlot>& ranks = ranks_[pos];
    int rank = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].node == node && ranks[i].gpu == g) rank = static_cast<int>(i);
    }
    hit.emplace_back(pos, rank);
  };
  if (gpu_fault) {
    if (owner_[gpu_index] >= 0) note_hit(owner_[gpu_index], gpu);
  } else {
    for (int g = 0; g < topo_->node(node).gpus; ++g) {
      if (owner_[gpu_base_[node] + g] >= 0) note_hit(owner_[gpu_base_[node] + g], g);
    }
  }
  std::vector<uint32_t> epochs;
  for (const auto& [pos, rank] : hit) {
    runs_[pos].hit = true;
    ++results_[pos].interruptions;
    ++report_.failures_hit_jobs;
    epochs.push_back(runs_[pos].epoch);
  }
  ++node_broken_[node];
  ++pending_repairs_;
  if (gpu_fault) {
    gpu_failed_[gpu_index] = 1;
    Push(repair_at, kRepair, node, gpu, 0, 0, kRepairGpu);
    StepCore(GpuEvent{node, gpu, GpuEventKind::kXid, 79});
  } else {
    node_down_[node] = 1;
    Push(repair_at, kRepair, node, 0, 0, 0, kRepairNode);
    StepCore(
        NodeStateRequested{node, NodeState::kDown,
                           network ? "network failure (simulated)" : "host failure (simulated)"});
  }
  // A job the core left running on the broken hardware: its rank died.
  for (size_t i = 0; i < hit.size(); ++i) {
    const auto [pos, rank] = hit[i];
    if (runs_[pos].running && runs_[pos].epoch == epochs[i]) {
      Anomaly("a failure under a running job did not stop or restart it");
      ++report_.rank_exit_fallbacks;
      StepCore(RankExited{IdOf(pos), rank, 134});
    }
  }
}

void Simulator::OnRepair(const SimEvent& ev) {
  const NodeId node = ev.a;
  --pending_repairs_;
  if (ev.what == kRepairGpu) {
    gpu_failed_[gpu_base_[node] + ev.b] = 0;
    StepCore(GpuEvent{node, ev.b, GpuEventKind::kCleared, 0});
  } else {
    node_down_[node] = 0;
  }
  if (--node_broken_[node] == 0) {
    StepCore(NodeStateRequested{node, NodeState::kUp, "repaired (simulated)"});
  }
}

void Simulator::OnTopology(const SimEvent& ev) {
  switch (ev.what) {
    case kChangeBegin:
      if (ev.a != changes_begun_) {
        // The change before still drains: try again in a minute.
        Push(now_ + kMinute, kTopology, ev.a, 0, 0, 0, kChangeBegin);
      } else {
        BeginChange(ev.a);
      }
      break;
    case kChangeEvacuate:
      Evacuate(ev.b, ev.a);
      break;
    case kChangeApply:
      ApplyChange(ev.a);
      break;
    default:
      break;
  }
}

void Simulator::BeginChange(int32_t i) {
  ChangeRun& change = changes_[i];
  ++changes_begun_;
  const Topology& next = *options_.topology_changes[i].next;
  const TopologyDiff diff = DiffTopologies(*topo_, next);
  NodeStatesRequested drain;
  for (NodeId n = 0; n < topo_->node_count(); ++n) {
    if (diff.to_new[n] >= 0) continue;
    change.drain.push_back(n);
    drain.requests.push_back(
        NodeStateRequested{n, NodeState::kDraining, "removed by a topology change (simulated)"});
  }
  if (!drain.requests.empty()) StepCore(drain);
  // The agents of the drained nodes checkpoint their jobs and stop them.
  for (NodeId n : change.drain) {
    if (core_->cluster().busy_mask(n) != 0) {
      Push(now_ + options_.checkpoint_latency, kTopology, i, n, 0, 0, kChangeEvacuate);
    }
  }
  Push(now_ + options_.checkpoint_latency, kTopology, i, 0, 0, 0, kChangeApply);
}

void Simulator::Evacuate(NodeId node, int32_t i) {
  if (core_->cluster().busy_mask(node) == 0) return;
  // The jobs with ranks on it (a spare on it was given back at the drain).
  std::vector<int32_t> jobs;
  for (int g = 0; g < topo_->node(node).gpus; ++g) {
    const int32_t pos = owner_[gpu_base_[node] + g];
    if (pos >= 0) jobs.push_back(pos);
  }
  std::sort(jobs.begin(), jobs.end());
  jobs.erase(std::unique(jobs.begin(), jobs.end()), jobs.end());
  for (int32_t pos : jobs) {
    JobRun& r = runs_[pos];
    if (!r.running) continue;
    if (r.moved_by != i || r.moved_epoch != r.epoch) {
      r.moved_by = i;
      r.moved_epoch = r.epoch;
      ++results_[pos].topology_moves;
      ++report_.topology_changes[i].jobs_moved;
    }
    const TimeMs progress = Progress(pos);
    if (progress > r.checkpoint) {
      r.checkpoint = progress;
      ++report_.checkpoints;
      StepCore(CheckpointCompleted{IdOf(pos), progress});
    }
  }
  StepCore(NodeEvacuated{node, "topology change (simulated)"});
}

void Simulator::ApplyChange(int32_t i) {
  ChangeRun& change = changes_[i];
  for (NodeId n : change.drain) {
    if (core_->cluster().busy_mask(n) != 0) {
      // A job still holds it (evacuated jobs restart elsewhere as capacity
      // allows; a job the core could not move keeps it): look again later.
      Push(now_ + kMinute, kTopology, i, n, 0, 0, kChangeEvacuate);
      Push(now_ + kMinute, kTopology, i, 0, 0, 0, kChangeApply);
      return;
    }
  }
  const Topology& next = *options_.topology_changes[i].next;
  Result<std::string> snapshot = core_->SnapshotOnto(next);
  if (!snapshot.ok()) {
    Anomaly("topology change refused: " + snapshot.message());
    Push(now_ + kMinute, kTopology, i, 0, 0, 0, kChangeApply);
    return;
  }
  auto fresh = std::make_unique<SchedulerCore>(next, config_);
  if (Status restored = fresh->Restore(snapshot.value()); !restored.ok()) {
    Anomaly("topology change: the new core refused the snapshot: " + restored.message());
    --changes_pending_;
    return;
  }
  SimTopologyChangeResult& result = report_.topology_changes[i];
  result.fairshare_kept = true;
  for (const std::string& tenant : report_.tenants) {
    if (fresh->FairshareUsage(tenant, now_) != core_->FairshareUsage(tenant, now_) ||
        fresh->TenantUsage(tenant) != core_->TenantUsage(tenant)) {
      result.fairshare_kept = false;
    }
  }
  const TopologyDiff diff = DiffTopologies(*topo_, next);
  result.applied = now_;
  result.capacity_before = topo_->total_gpus();
  result.capacity_after = next.total_gpus();
  result.nodes_added = static_cast<int>(diff.added.size() + diff.resized.size());
  result.nodes_removed = static_cast<int>(diff.removed.size() + diff.resized.size());

  // The simulator's own state, onto the new node ids.
  const std::vector<int> old_base = gpu_base_;
  const std::vector<uint8_t> old_failed = gpu_failed_, old_down = node_down_;
  const std::vector<int32_t> old_broken = node_broken_;
  core_ = std::move(fresh);
  topo_ = &next;
  IndexTopology();
  owner_.assign(gpu_base_.back(), -1);
  gpu_failed_.assign(gpu_base_.back(), 0);
  node_down_.assign(next.node_count(), 0);
  node_broken_.assign(next.node_count(), 0);
  for (NodeId n = 0; n < static_cast<NodeId>(diff.to_new.size()); ++n) {
    const NodeId to = diff.to_new[n];
    if (to < 0) continue;
    node_down_[to] = old_down[n];
    node_broken_[to] = old_broken[n];
    for (int g = 0; g < next.node(to).gpus; ++g) {
      gpu_failed_[gpu_base_[to] + g] = old_failed[old_base[n] + g];
    }
  }
  std::vector<int32_t> running;
  for (auto& [pos, ranks] : ranks_) {
    running.push_back(pos);
    for (GpuSlot& slot : ranks) {
      const NodeId to = slot.node >= 0 && slot.node < static_cast<NodeId>(diff.to_new.size())
                            ? diff.to_new[slot.node]
                            : -1;
      if (to < 0) {
        Anomaly("topology change: a running job's rank on a removed node");
        continue;
      }
      slot.node = to;
      owner_[gpu_base_[to] + slot.gpu] = pos;
    }
  }
  std::sort(running.begin(), running.end());
  for (ScriptedFailure& f : scripted_) {
    if (f.node >= 0) f.node = diff.to_new[f.node];
  }
  // Pending repairs name nodes: map them, drop those of removed nodes.
  std::vector<SimEvent> events;
  events.reserve(queue_.size());
  while (!queue_.empty()) {
    events.push_back(queue_.top());
    queue_.pop();
  }
  for (SimEvent& e : events) {
    if (e.cls == kRepair) {
      e.a = diff.to_new[e.a];
      if (e.a < 0) {
        --pending_repairs_;
        continue;
      }
    }
    queue_.push(e);
  }
  scorer_.emplace(next);
  if (speed_) {
    speed_.emplace(next, options_.cross_hbd_scale);
    for (int32_t pos : running) {
      speed_->Start(pos, Spec(pos), ranks_[pos], &changed_);
    }
    changed_.clear();
    for (int32_t pos : running) Respeed(pos);
  }
  capacity_.emplace_back(now_, next.total_gpus());
  --changes_pending_;
  // The added nodes' agents register.
  NodeStatesRequested up;
  for (NodeId n = 0; n < next.node_count(); ++n) {
    if (diff.old_of[n] < 0) {
      up.requests.push_back(NodeStateRequested{n, NodeState::kUp, "registered (simulated)"});
    }
  }
  StepCore(up.requests.empty() ? Event{Tick{}} : Event{std::move(up)});
}

void Simulator::TakeFinished() {
  finished_since_take_ = 0;
  for (const JobRecord& rec : core_->TakeFinishedJobs()) {
    if (rec.id < 1 || rec.id > static_cast<JobId>(workload_.jobs.size())) continue;
    const SimJobResult& res = results_[rec.id - 1];
    // The core counts wall time; with the speed model the simulator counts work.
    if (!speed_ && rec.first_start >= 0 && res.state == JobState::kCompleted &&
        std::llabs(rec.productive_ms - res.productive_ms) > kSecond) {
      Anomaly("the core's productive_ms differs from the simulator's by more than 1 s");
    }
  }
}

SimReport Simulator::Run() {
  const std::vector<SimJob>& jobs = workload_.jobs;
  report_.workload = workload_.name;
  report_.topology = topo_->name();
  report_.capacity_gpus = topo_->total_gpus();
  report_.topology_changes.resize(changes_.size());
  for (size_t i = 0; i < changes_.size(); ++i) {
    report_.topology_changes[i].at = options_.topology_changes[i].at;
  }
  report_.jobs = static_cast<int64_t>(jobs.size());

  // Tenant indexes for the per-job results.
  std::unordered_map<std::string, int32_t> tenant_index;
  auto tenant_of = [&](const std::string& name) {
    auto [it, added] = tenant_index.emplace(name, static_cast<int32_t>(report_.tenants.size()));
    if (added) report_.tenants.push_back(name);
    return it->second;
  };
  for (const TenantConfig& t : workload_.tenants) tenant_of(t.name);
  std::vector<int32_t> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    order[i] = static_cast<int32_t>(i);
    SimJobResult& res = results_[i];
    res.index = jobs[i].index;
    res.id = IdOf(static_cast<int32_t>(i));
    res.tenant = tenant_of(jobs[i].request.tenant.empty() ? "default" : jobs[i].request.tenant);
    res.gpus = jobs[i].request.spec.gpus;
    res.submit = jobs[i].submit;
    if (res.gpus >= options_.large_gpus) ++report_.large_jobs;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return jobs[x].submit < jobs[y].submit; });

  if (!jobs.empty()) {
    now_ = jobs[order.front()].submit;
    report_.first_submit = now_;
    capacity_.emplace_back(now_, topo_->total_gpus());
    for (const TenantConfig& t : workload_.tenants) StepCore(TenantConfigured{t});
    if (options_.tick_interval > 0) Push(now_ + options_.tick_interval, kTick, 0);
    if (options_.failures.kind == FailureKind::kLlama3 && topo_->total_gpus() > 0) {
      // The first arrival is drawn like the others, from the first submit.
      Push(now_, kFailure, 0, 0, 0, 0, kFailureFirst);
    }
    for (size_t i = 0; i < scripted_.size(); ++i) {
      Push(std::max(now_, scripted_[i].at), kFailure, static_cast<int32_t>(i), 0, 0, 0,
           kFailureScripted);
    }
    for (size_t i = 0; i < changes_.size(); ++i) {
      ++changes_pending_;
      Push(std::max(now_, options_.topology_changes[i].at), kTopology, static_cast<int32_t>(i), 0,
           0, 0, kChangeBegin);
    }
  }
  const TimeMs last_submit = jobs.empty() ? 0 : jobs[order.back()].submit;
  const TimeMs horizon = last_submit > kNever - options_.horizon_after_last_submit
                             ? kNever
                             : last_submit + options_.horizon_after_last_submit;
  bool stop = false;
  while (!stop && done_ < static_cast<int64_t>(jobs.size())) {
    const bool have_submit = next_submit_ < order.size();
    const TimeMs submit_time = have_submit ? jobs[order[next_submit_]].submit : kNever;
    bool submit_first = have_submit;
    if (!queue_.empty()) {
      const SimEvent& top = queue_.top();
      if (!have_submit || top.time < submit_time ||
          (top.time == submit_time && top.cls < kSubmit)) {
        submit_first = false;
      }
    } else if (!have_submit) {
      break;  // nothing left to happen
    }
    if (submit_first) {
      const int32_t pos = order[next_submit_++];
      stall_since_ = -1;
      ++submitted_;
      Advance(submit_time);
      if (speed_) {
        // The user's time limit allows the slowest placement the job could
        // get alone (sim.hpp, "Speed").
        JobRequest request = jobs[pos].request;
        const double worst = speed_->WorstSlowdown(request.spec);
        if (request.time_limit > 0 && worst > 1) {
          request.time_limit = static_cast<TimeMs>(
              std::ceil(static_cast<double>(request.time_limit) * worst / kMinute) * kMinute);
        }
        StepCore(JobSubmitted{IdOf(pos), std::move(request)});
      } else {
        StepCore(JobSubmitted{IdOf(pos), jobs[pos].request});
      }
      continue;
    }
    const SimEvent ev = queue_.top();
    if (ev.time > horizon) {
      Anomaly("replay stopped at the horizon with jobs unfinished");
      break;
    }
    queue_.pop();
    Advance(ev.time);
    switch (ev.cls) {
      case kComplete:
        OnComplete(ev);
        break;
      case kCheckpoint:
        OnCheckpoint(ev);
        break;
      case kRepair:
        OnRepair(ev);
        break;
      case kFailure:
        stop = Stalled();
        if (stop) break;
        if (ev.what == kFailureFirst) {
          // Draw the first arrival of the model.
          const double gap = -std::log(1.0 - failure_rng_.Uniform()) * MeanFailureGapMs();
          Push(now_ + std::max<TimeMs>(1, static_cast<TimeMs>(gap)), kFailure, 0);
        } else if (ev.what == kFailureScripted) {
          const ScriptedFailure& f = scripted_[ev.a];
          if (f.node >= 0) Inject(f.node, f.gpu, false, std::max<TimeMs>(1, f.repair));
        } else {
          OnModelFailure();
        }
        break;
      case kWakeup:
        wakeups_.erase(ev.time);
        // A wakeup the core no longer wants (a checkpoint came first, the
        // job ended) would only be an idle pass.
        if (core_->NextWakeup() <= now_) StepCore(Tick{});
        break;
      case kTick:
        StepCore(Tick{});
        stop = Stalled();
        Push(now_ + options_.tick_interval, kTick, 0);
        break;
      case kTopology:
        OnTopology(ev);
        break;
      default:
        break;
    }
  }
  if (stop) Anomaly("jobs left waiting with nothing running and nothing pending");
  TakeFinished();
  Finish();
  return std::move(report_);
}

void Simulator::Finish() {
  SimReport& r = report_;
  const double ms_per_s = 1000.0;
  std::vector<double> jcts;
  std::array<std::vector<double>, 3> class_jcts;
  std::array<double, 3> class_ideal_s{};  // sum of the completed jobs' durations
  double useful_gpu_ms = 0, slow_gpu_ms = 0, slowdown_sum = 0;
  int64_t slowdown_n = 0;
  double queue_sum = 0, queue_large_sum = 0;
  int64_t queue_n = 0, queue_large_n = 0;
  double ettr_productive = 0, ettr_work = 0, ettr_wall = 0;
  double lost_failure = 0, lost_other = 0;
  TimeMs last_end = r.first_submit;
  bool any_ran = false;
  for (size_t i = 0; i < results_.size(); ++i) {
    SimJobResult& res = results_[i];
    const JobRun& run = runs_[i];
    if (!run.terminal) {
      ++r.unfinished;
      res.productive_ms = Progress(static_cast<int32_t>(i));
    }
    switch (res.state) {
      case JobState::kCompleted:
        ++r.completed;
        break;
      case JobState::kFailed:
        ++r.failed;
        break;
      case JobState::kCancelled:
        ++r.cancelled;
        break;
      case JobState::kRejected:
        ++r.rejected;
        break;
      default:
        break;
    }
    lost_failure += res.lost_failure_gpu_ms;
    lost_other += res.lost_other_gpu_ms;
    useful_gpu_ms += static_cast<double>(res.productive_ms) * res.gpus;
    slow_gpu_ms += res.slow_gpu_ms;
    if (res.work_ms > 0) {
      slowdown_sum += res.run_ms / res.work_ms;
      ++slowdown_n;
    }
    if (res.first_start >= 0) {
      any_ran = true;
      const double delay = static_cast<double>(res.first_start - res.submit) / ms_per_s;
      queue_sum += delay;
      ++queue_n;
      if (res.gpus >= options_.large_gpus) {
        queue_large_sum += delay;
        ++queue_large_n;
      }
      if (run.terminal) last_end = std::max(last_end, res.end);
      if (run.terminal && res.gpus >= options_.ettr_gpus && res.end > res.first_start) {
        // The wall time whose work was kept: run time x work kept / work
        // done (lost work re-done at the job's mean speed).
        const double kept =
            res.work_ms > 0 ? std::min(1.0, static_cast<double>(res.productive_ms) / res.work_ms)
                            : 0.0;
        ettr_productive += res.run_ms * kept;
        ettr_work += static_cast<double>(res.productive_ms);
        ettr_wall += static_cast<double>(res.end - res.first_start);
        ++r.ettr_jobs;
      }
    }
    if (res.state == JobState::kCompleted) {
      const double jct = static_cast<double>(res.end - res.submit) / ms_per_s;
      jcts.push_back(jct);
      const size_t size_class = res.gpus < 64 ? 0 : res.gpus < options_.large_gpus ? 1 : 2;
      class_jcts[size_class].push_back(jct);
      class_ideal_s[size_class] += static_cast<double>(res.productive_ms) / ms_per_s;
    }
  }
  if (r.unfinished > 0) last_end = std::max(last_end, now_);
  r.last_end = last_end;
  const TimeMs span = last_end - r.first_submit;
  r.span_days = static_cast<double>(span) / (24.0 * kMsPerHour);
  r.allocated_gpu_hours = alloc_gpu_ms_ / kMsPerHour;
  r.core_busy_gpu_hours = core_busy_gpu_ms_ / kMsPerHour;
  r.lost_gpu_hours = lost_failure / kMsPerHour;
  r.lost_other_gpu_hours = lost_other / kMsPerHour;
  // The capacity integrated over [first submit, last end] (one version: the
  // capacity x the span).
  double capacity_gpu_ms = static_cast<double>(r.capacity_gpus) * static_cast<double>(span);
  if (capacity_.size() > 1) {
    capacity_gpu_ms = 0;
    for (size_t i = 0; i < capacity_.size(); ++i) {
      const TimeMs from = std::max(capacity_[i].first, r.first_submit);
      const TimeMs to =
          i + 1 < capacity_.size() ? std::min(capacity_[i + 1].first, last_end) : last_end;
      if (to > from) capacity_gpu_ms += static_cast<double>(capacity_[i].second) * (to - from);
    }
  }
  if (any_ran && span > 0 && capacity_gpu_ms > 0) {
    r.utilization = alloc_gpu_ms_ / capacity_gpu_ms;
  }
  if (backlog_ms_ > 0 && r.capacity_gpus > 0) {
    r.utilization_backlogged =
        capacity_.size() > 1
            ? backlog_gpu_ms_ / backlog_capacity_gpu_ms_
            : backlog_gpu_ms_ / (static_cast<double>(r.capacity_gpus) * backlog_ms_);
    r.backlog_days = backlog_ms_ / (24.0 * kMsPerHour);
  }
  // A job moved by several changes counts under the last.
  for (size_t i = 0; i < results_.size(); ++i) {
    if (runs_[i].moved_by < 0) continue;
    SimTopologyChangeResult& c = r.topology_changes[runs_[i].moved_by];
    if (results_[i].state == JobState::kFailed) ++c.moved_failed;
    if (results_[i].state == JobState::kCompleted) ++c.moved_completed;
  }
  auto mean_p95 = [](std::vector<double>& v, std::optional<double>& mean,
                     std::optional<double>& p95) {
    if (v.empty()) return;
    double sum = 0;
    for (double j : v) sum += j;
    mean = sum / static_cast<double>(v.size());
    const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(v.size()))) - 1;
    std::nth_element(v.begin(), v.begin() + rank, v.end());
    p95 = v[rank];
  };
  mean_p95(jcts, r.mean_jct_s, r.p95_jct_s);
  for (size_t c = 0; c < class_jcts.size(); ++c) {
    r.jct_by_size[c].jobs = static_cast<int64_t>(class_jcts[c].size());
    mean_p95(class_jcts[c], r.jct_by_size[c].mean_jct_s, r.jct_by_size[c].p95_jct_s);
    if (!class_jcts[c].empty()) {
      r.jct_by_size[c].bound_jct_s = class_ideal_s[c] / static_cast<double>(class_jcts[c].size());
    }
  }
  if (alloc_gpu_ms_ > 0) r.goodput = useful_gpu_ms / alloc_gpu_ms_;
  if (slowdown_n > 0) r.mean_slowdown = slowdown_sum / static_cast<double>(slowdown_n);
  r.slow_gpu_hours = slow_gpu_ms / kMsPerHour;
  r.speed_model = options_.speed_model;
  r.cross_hbd_scale = options_.cross_hbd_scale;
  if (queue_n > 0) r.mean_queue_delay_s = queue_sum / static_cast<double>(queue_n);
  if (queue_large_n > 0) r.mean_queue_delay_large_s = queue_large_sum / queue_large_n;
  if (ettr_wall > 0) {
    r.ettr_large = ettr_productive / ettr_wall;
    r.work_ratio_large = ettr_work / ettr_wall;
  }
  if (r.placements > 0) {
    r.required_met = static_cast<double>(placements_met_) / static_cast<double>(r.placements);
  }
  if (leaf_n_ > 0) r.leaf_span_ratio_mean = leaf_sum_ / static_cast<double>(leaf_n_);
  if (comm_n_ > 0) r.comm_cost_ratio_mean = comm_sum_ / static_cast<double>(comm_n_);
  if (options_.keep_job_results) {
    r.job_results = std::move(results_);
  }
}

}  // namespace

Result<SimReport> RunSimulation(const Topology& topology, SchedulerConfig config,
                                const SimWorkload& workload, const SimOptions& options) {
  for (const SimJob& j : workload.jobs) {
    if (j.submit < 0) {
      return Status::Error("job " + std::to_string(j.index) + ": submit time " +
                           std::to_string(j.submit) + " ms is negative");
    }
    if (j.duration <= 0) {
      return Status::Error("job " + std::to_string(j.index) + ": duration " +
                           std::to_string(j.duration) + " ms must be positive");
    }
  }
  if (options.speed_model && !(options.cross_hbd_scale > 0 && options.cross_hbd_scale < 1e6)) {
    return Status::Error("cross-HBD bandwidth scale must be a positive number");
  }
  if (options.failures.kind != FailureKind::kNone &&
      !(options.failures.gpu_hours_per_interruption > 0)) {
    return Status::Error("failure model: GPU-hours per interruption must be positive");
  }
  for (const ScriptedFailure& f : options.scripted_failures) {
    if (f.node < 0 || f.node >= topology.node_count() || f.gpu < -1 ||
        f.gpu >= topology.node(std::max(0, f.node)).gpus) {
      return Status::Error("scripted failure at " + std::to_string(f.at) + " ms: node " +
                           std::to_string(f.node) + " GPU " + std::to_string(f.gpu) +
                           " is not in the topology");
    }
  }
  for (size_t i = 0; i < options.topology_changes.size(); ++i) {
    const SimTopologyChange& c = options.topology_changes[i];
    const std::string which = "topology change " + std::to_string(i + 1);
    if (c.next == nullptr) return Status::Error(which + ": no topology");
    if (c.at < 0)
      return Status::Error(which + ": time " + std::to_string(c.at) + " ms is negative");
    if (i > 0 && c.at < options.topology_changes[i - 1].at) {
      return Status::Error(which + ": changes must be given in order of time");
    }
  }
  config.heartbeats_required = false;
  const std::string stack = config.placer;
  Simulator sim(topology, std::move(config), workload, options);
  SimReport report = sim.Run();
  report.stack = stack;
  report.offered_load = OfferedLoad(workload.jobs, topology.total_gpus());
  return report;
}

Result<SimReport> RunSimulation(const Topology& topology, std::string_view stack,
                                const SimWorkload& workload, const SimOptions& options) {
  std::optional<SchedulerConfig> config = SchedulerConfig::ForStack(stack);
  if (!config) {
    std::string known;
    for (const std::string& n : SchedulerConfig::StackNames())
      known += (known.empty() ? "" : ", ") + n;
    return Status::Error("unknown policy stack '" + std::string(stack) + "'; known: " + known);
  }
  Result<SimReport> report = RunSimulation(topology, *std::move(config), workload, options);
  if (report.ok()) report.value().stack = std::string(stack);
  return report;
}

}  // namespace topo::core
