// StepTimeModel (step_model.hpp).

#include "topo/core/step_model.hpp"

#include <algorithm>
#include <cstring>

namespace topo::core {

namespace {

// Appends the bytes of v to key: shapes compare by every field that changes
// a prediction.
template <typename T>
void Put(std::string& key, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  key.append(buf, sizeof(T));
}

std::string ShapeKey(const JobSpec& job) {
  std::string key;
  const Parallelism& p = job.parallelism;
  for (int v : {job.gpus, p.tp, p.cp, p.ep, p.pp, p.dp}) Put(key, v);
  for (Dim d : p.order) Put(key, static_cast<uint8_t>(d));
  Put(key, static_cast<uint8_t>(0xff));
  if (job.model) {
    const ModelSpec& m = *job.model;
    Put(key, m.parameters);
    Put(key, m.active_parameters);
    for (int v :
         {m.layers, m.hidden, m.heads, m.kv_heads, m.sequence, m.micro_batch, m.global_batch,
          m.experts, m.top_k, m.bytes_per_element, m.virtual_stages, m.recompute}) {
      Put(key, v);
    }
    key += m.preset;
  }
  return key;
}

}  // namespace

StepTimeModel::StepTimeModel(const Topology& topology) : topo_(topology) {
  saturated_scale_.assign(topology.root_tier() + 1, 1.0);
  for (int t = 0; t <= topology.root_tier(); ++t) {
    const double o = topology.tier(t).link.oversubscription;
    if (o > 1) saturated_scale_[t] = 1.0 / o;
  }
}

double StepTimeModel::DominantRate() {
  // O(nodes): only what needs the ideal step pays for it (a placer ranking
  // candidates does not).
  if (dominant_rate_ <= 0) dominant_rate_ = SustainedFlops(DominantGpuModel(topo_));
  return dominant_rate_;
}

const StepBreakdown& StepTimeModel::IdealOf(Shape& s, LinkLoad load) {
  const int i = static_cast<int>(load);
  if (!s.ideal_done[i]) {
    s.ideal[i] = PredictStep(s.job, s.model, Links(load), s.ideal_spans, DominantRate());
    s.ideal_done[i] = true;
  }
  return s.ideal[i];
}

LinkView StepTimeModel::Links(LinkLoad load) const {
  if (load == LinkLoad::kIdle) return LinkView{&topo_, {}};
  return LinkView{&topo_, saturated_scale_};
}

double StepTimeModel::RateOf(NodeId node) {
  const std::string& model = topo_.node(node).gpu_model;
  auto [it, fresh] = rates_.try_emplace(model, 0.0);
  if (fresh) it->second = SustainedFlops(model);
  return it->second;
}

StepTimeModel::Shape& StepTimeModel::ShapeOf(const JobSpec& job) {
  auto [it, fresh] = shapes_.try_emplace(ShapeKey(job));
  Shape& s = it->second;
  if (!fresh) return s;
  Result<ResolvedModel> model = ResolveModel(job);
  if (!model.ok()) return s;
  s.ok = true;
  s.model = std::move(model).value();
  s.ideal_spans = IdealSpans(job, topo_);
  s.job = job;
  return s;
}

double StepTimeModel::IdealSeconds(const JobSpec& job, LinkLoad load) {
  Shape& s = ShapeOf(job);
  return s.ok ? IdealOf(s, load).total_s : 0.0;
}

double StepTimeModel::StepSeconds(const JobSpec& job, std::span<const GpuSlot> ranks,
                                  LinkLoad load) {
  const Shape& s = ShapeOf(job);
  if (!s.ok || ranks.empty()) return 0.0;
  return PredictStep(job, s.model, Links(load), AnalyzePlacement(job, topo_, ranks),
                     RateOf(ranks[0].node))
      .total_s;
}

std::optional<StepPrediction> StepTimeModel::Predict(const JobSpec& job,
                                                     std::span<const GpuSlot> ranks,
                                                     LinkLoad load) {
  Shape& s = ShapeOf(job);
  if (!s.ok || ranks.empty()) return std::nullopt;
  const double rate = RateOf(ranks[0].node);
  const LinkView links = Links(load);
  StepPrediction out;
  out.step = PredictStep(job, s.model, links, AnalyzePlacement(job, topo_, ranks), rate);
  // The ideal at this placement's GPU model, so a heterogeneous cluster's
  // slowdown compares like with like.
  out.ideal = rate == DominantRate() ? IdealOf(s, load)
                                     : PredictStep(job, s.model, links, s.ideal_spans, rate);
  out.slowdown = out.ideal.total_s > 0 ? std::max(1.0, out.step.total_s / out.ideal.total_s) : 1.0;
  return out;
}

}  // namespace topo::core
