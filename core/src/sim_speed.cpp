// The simulator's speed model and its fair-share contention rule
// (sim_speed.hpp).

#include "sim_speed.hpp"

#include <algorithm>

namespace topo::core::internal {

SpeedModel::SpeedModel(const Topology& topology, double cross_hbd_scale) : topo_(topology) {
  base_scale_.assign(topology.root_tier() + 1, 1.0);
  for (int t = topology.hbd_tier() + 1; t <= topology.root_tier(); ++t) {
    base_scale_[t] = cross_hbd_scale;
    if (topology.tier(t).link.oversubscription > 1) oversubscribed_.push_back(t);
  }
  scale_ = base_scale_;
  rate_ = SustainedFlops(DominantGpuModel(topology));
}

double SpeedModel::IdealStep(const JobSpec& spec) { return IdealStep(spec, topo_); }

double SpeedModel::IdealStep(const JobSpec& spec, const Topology& view) {
  Result<ResolvedModel> model = ResolveModel(spec);
  if (!model.ok()) return 0;
  const LinkView links{&view, base_scale_};
  const double rate = &view == &topo_ ? rate_ : SustainedFlops(DominantGpuModel(view));
  return PredictStep(spec, model.value(), links, IdealSpans(spec, view), rate).total_s;
}

double SpeedModel::WorstSlowdown(const JobSpec& spec) {
  Result<ResolvedModel> model = ResolveModel(spec);
  if (!model.ok()) return 1;
  const LinkView links{&topo_, base_scale_};
  const double rate = rate_;
  // Every group across the whole cluster, one member per child: the slowest
  // placement any placer could give it (constraints are not assumed, since
  // the baselines break them).
  CommSpans worst = IdealSpans(spec, topo_);
  for (KindSpan& k : worst.kind) {
    const bool active = std::any_of(k.min_members_per_child.begin(), k.min_members_per_child.end(),
                                    [](double g) { return g > 0; });
    std::fill(k.min_members_per_child.begin(), k.min_members_per_child.end(), 0.0);
    if (active) k.min_members_per_child.back() = 1;
  }
  const double ideal =
      PredictStep(spec, model.value(), links, IdealSpans(spec, topo_), rate).total_s;
  const double slow = PredictStep(spec, model.value(), links, worst, rate).total_s;
  return ideal > 0 ? std::max(1.0, slow / ideal) : 1.0;
}

double SpeedModel::ScaleOf(const Crossing& c) const {
  auto it = fabrics_.find(c.domain);
  if (it == fabrics_.end() || it->second.demand <= 0) return 1;
  const double capacity_gpus =
      topo_.domain(c.domain).gpus / topo_.tier(c.tier).link.oversubscription;
  return std::min(1.0, capacity_gpus / it->second.demand);
}

void SpeedModel::Recompute(int32_t pos) {
  Running& r = running_.at(pos);
  if (r.ideal <= 0) {
    r.speed = 1;
    return;
  }
  scale_ = base_scale_;
  for (const Crossing& c : r.crossings) {
    scale_[c.tier] = std::min(scale_[c.tier], base_scale_[c.tier] * ScaleOf(c));
  }
  // Most neighbours' shares do not move (their fabric is not full): keep
  // their speed without re-predicting.
  if (r.ideal_done && scale_ == r.scale) return;
  r.scale = scale_;
  r.ideal_done = true;
  const LinkView links{r.view, scale_};
  const double step = PredictStep(*r.spec, r.model, links, r.spans, r.rate).total_s;
  r.speed = step > 0 ? std::clamp(r.ideal / step, 1e-6, 1.0) : 1.0;
}

void SpeedModel::Start(int32_t pos, const JobSpec& spec, std::span<const GpuSlot> ranks,
                       std::vector<int32_t>* changed) {
  Result<ResolvedModel> model = ResolveModel(spec);
  Running& r = running_[pos];
  r = Running{};
  r.spec = &spec;
  if (!model.ok() || ranks.empty()) return;  // speed 1
  r.model = std::move(model).value();
  r.view = &topo_.ViewOf(ranks[0].node);
  r.spans = AnalyzePlacement(spec, *r.view, ranks);
  // A placement over several models runs at the slowest one's rate.
  r.rate = SlowestRankRate(topo_, ranks);
  // Its ideal at the same rate: a job's duration is its time at the ideal
  // on the GPUs it got (as for a job on one part's slower model), so the
  // speed below counts the placement's communication only.
  r.ideal =
      PredictStep(spec, r.model, LinkView{r.view, base_scale_}, IdealSpans(spec, *r.view), r.rate)
          .total_s;
  // The widest tier any of its groups spans.
  int widest = 0;
  for (const KindSpan& k : r.spans.kind) {
    for (size_t t = 0; t < k.min_members_per_child.size(); ++t) {
      if (k.min_members_per_child[t] > 0) widest = std::max(widest, static_cast<int>(t));
    }
  }
  for (int tier : oversubscribed_) {
    if (tier > widest) break;
    // GPUs and distinct children per domain of this tier.
    std::vector<std::pair<DomainId, DomainId>> at;
    at.reserve(ranks.size());
    for (const GpuSlot& s : ranks) {
      at.emplace_back(topo_.Ancestor(s.node, tier), topo_.Ancestor(s.node, tier - 1));
    }
    std::sort(at.begin(), at.end());
    for (size_t i = 0; i < at.size();) {
      size_t j = i;
      int children = 0;
      DomainId last_child = kNoDomain;
      for (; j < at.size() && at[j].first == at[i].first; ++j) {
        if (at[j].second != last_child) ++children;
        last_child = at[j].second;
      }
      if (children >= 2) {
        r.crossings.push_back({at[i].first, tier, static_cast<int>(j - i)});
      }
      i = j;
    }
  }
  for (const Crossing& c : r.crossings) {
    Fabric& f = fabrics_[c.domain];
    f.demand += c.gpus;
    for (int32_t other : f.jobs) changed->push_back(other);
    f.jobs.push_back(pos);
  }
  std::sort(changed->begin(), changed->end());
  changed->erase(std::unique(changed->begin(), changed->end()), changed->end());
  Recompute(pos);
  for (int32_t other : *changed) Recompute(other);
}

void SpeedModel::Stop(int32_t pos, std::vector<int32_t>* changed) {
  auto it = running_.find(pos);
  if (it == running_.end()) return;
  for (const Crossing& c : it->second.crossings) {
    Fabric& f = fabrics_[c.domain];
    f.demand -= c.gpus;
    f.jobs.erase(std::remove(f.jobs.begin(), f.jobs.end(), pos), f.jobs.end());
    for (int32_t other : f.jobs) changed->push_back(other);
    if (f.jobs.empty()) fabrics_.erase(c.domain);
  }
  running_.erase(it);
  std::sort(changed->begin(), changed->end());
  changed->erase(std::unique(changed->begin(), changed->end()), changed->end());
  for (int32_t other : *changed) Recompute(other);
}

double SpeedModel::Speed(int32_t pos) const {
  auto it = running_.find(pos);
  return it == running_.end() ? 1.0 : it->second.speed;
}

}  // namespace topo::core::internal
