// The share controller over whole steps: calibration probes, the search starting at the model's
// choice and settling near the measured curve's minimum within its bound, the settled share held
// through noise, a drift (the curve changes) starting a new search, static splits, a search
// turned off, and a budget that leaves the GPU out.
#include "offload/share_controller.h"

#include <gtest/gtest.h>

#include "share_curves.h"

namespace rtft::offload {
namespace {

constexpr uint64_t kSubgroups = 128;
constexpr uint64_t kSubgroupElements = 8u << 20;  // 1 Gi parameters, as on the GPU machine
constexpr int kThreads = 16;

OffloadShape Shape(uint64_t budget = 2ull << 30) {
  OffloadShape s;
  s.subgroups = kSubgroups;
  s.subgroup_elements = kSubgroupElements;
  s.elements = kSubgroups * kSubgroupElements;
  s.param_bytes = 2;
  s.gpu_budget_bytes = budget;
  return s;
}

// Component rates as the engine measured them on the GPU machine before the copy-time fix: the
// model then chose about 18% on the GPU.
OffloadRates Measured() {
  OffloadRates r;
  r.cpu_elems_per_s = 3.4e9;
  r.gpu_elems_per_s = 121e9;
  r.h2d_bytes_per_s = 50e9;
  r.d2h_bytes_per_s = 23e9;
  return r;
}

StepTiming TimingFor(const OffloadShape& shape, const OffloadRates& r, uint64_t g) {
  StepTiming t;
  t.gpu_elements = g * shape.subgroup_elements;
  t.cpu_elements = shape.elements - t.gpu_elements;
  t.cpu_busy_seconds = static_cast<double>(t.cpu_elements) / r.cpu_elems_per_s * kThreads;
  t.gpu_seconds = static_cast<double>(t.gpu_elements) / r.gpu_elems_per_s;
  t.h2d_bytes = t.gpu_elements * kStateBytesPerElem;
  t.h2d_seconds = static_cast<double>(t.h2d_bytes) / r.h2d_bytes_per_s;
  t.d2h_bytes = t.gpu_elements * kStateBytesPerElem + t.cpu_elements * kGradBytesPerElem;
  t.d2h_seconds = static_cast<double>(t.d2h_bytes) / r.d2h_bytes_per_s;
  return t;
}

ShareControllerOptions Options() {
  ShareControllerOptions o;
  o.cpu_threads = kThreads;
  o.calibration_steps = 3;
  o.drift_fraction = 0.25;
  return o;
}

// Runs steps until the controller leaves `phase` (or `limit` steps); returns how many it ran.
int RunWhile(ShareController* c, SharePhase phase, const Curve& curve, Noise* noise, int limit) {
  int steps = 0;
  while (c->phase() == phase && steps < limit) {
    const ShareChoice choice = c->Next();
    c->Observe(TimingFor(c->shape(), Measured(), choice.gpu_subgroups),
               (*noise)(curve.At(choice.gpu_subgroups, kSubgroups)));
    ++steps;
  }
  return steps;
}

TEST(ShareController, CalibratesSearchesFromTheModelsChoiceAndSettles) {
  const Curve curve = MeasuredH200();
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Noise noise(seed, 0.03);
    ShareController c(Shape(), Options());
    EXPECT_EQ(c.phase(), SharePhase::kCalibrating);
    EXPECT_EQ(c.Next().gpu_subgroups, kSubgroups / 2);  // the probe: half and half
    c.Observe(TimingFor(c.shape(), Measured(), kSubgroups / 2), noise(2 * curve.At(64, 128)));
    EXPECT_EQ(RunWhile(&c, SharePhase::kCalibrating, curve, &noise, 10), 2);

    // The search starts where the model points, which is not where the curve's minimum is.
    const ShareChoice model = ChooseShare(c.shape(), Measured());
    EXPECT_EQ(c.model_choice().gpu_subgroups, model.gpu_subgroups);
    EXPECT_GT(curve.At(model.gpu_subgroups, kSubgroups), 1.05 * curve.Min(kSubgroups));
    ASSERT_EQ(c.phase(), SharePhase::kSearching);
    const int search = RunWhile(&c, SharePhase::kSearching, curve, &noise, 100);
    EXPECT_LE(search, 12);
    ASSERT_EQ(c.phase(), SharePhase::kSettled);
    EXPECT_EQ(c.search_steps(), search);
    const uint64_t settled = c.Next().gpu_subgroups;
    EXPECT_LE(curve.At(settled, kSubgroups), 1.05 * curve.Min(kSubgroups)) << settled;
    EXPECT_NEAR(c.settled_seconds(), curve.At(settled, kSubgroups), 0.03 * c.settled_seconds());

    // Held through +-3% noise: no drift, no new search.
    for (int i = 0; i < 30; ++i) {
      EXPECT_EQ(c.Next().gpu_subgroups, settled);
      c.Observe(TimingFor(c.shape(), Measured(), settled), noise(curve.At(settled, kSubgroups)));
    }
    EXPECT_EQ(c.phase(), SharePhase::kSettled);
    EXPECT_EQ(c.recalibrations(), 0);
  }
}

TEST(ShareController, ADriftStartsANewSearch) {
  const Curve before = MeasuredH200();
  // Another job takes CPU time: everything is slower and the GPU should take 90%.
  const Curve after{"slower_cpu", [](double f) { return 1.6 * ConvexAt09().seconds(f); }};
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Noise noise(seed, 0.03);
    ShareController c(Shape(), Options());
    RunWhile(&c, SharePhase::kCalibrating, before, &noise, 10);
    RunWhile(&c, SharePhase::kSearching, before, &noise, 100);
    ASSERT_EQ(c.phase(), SharePhase::kSettled);
    const uint64_t held = c.Next().gpu_subgroups;
    ASSERT_GT(after.At(held, kSubgroups), 1.25 * 1.03 * c.settled_seconds());

    // Two drifted steps are not enough; the third starts a search from the held share.
    EXPECT_EQ(RunWhile(&c, SharePhase::kSettled, after, &noise, 10), 3);
    EXPECT_EQ(c.phase(), SharePhase::kSearching);
    EXPECT_EQ(c.recalibrations(), 1);
    EXPECT_LE(RunWhile(&c, SharePhase::kSearching, after, &noise, 100), 12);
    ASSERT_EQ(c.phase(), SharePhase::kSettled);
    const uint64_t settled = c.Next().gpu_subgroups;
    EXPECT_LE(after.At(settled, kSubgroups), 1.05 * after.Min(kSubgroups)) << settled;
    EXPECT_GT(settled, held);
  }
}

TEST(ShareController, AnIsolatedSlowStepIsNotADrift) {
  Noise noise(7, 0.03);
  const Curve curve = Flat();
  ShareController c(Shape(), Options());
  RunWhile(&c, SharePhase::kCalibrating, curve, &noise, 10);
  RunWhile(&c, SharePhase::kSearching, curve, &noise, 100);
  ASSERT_EQ(c.phase(), SharePhase::kSettled);
  for (int i = 0; i < 10; ++i) {
    const uint64_t g = c.Next().gpu_subgroups;
    // Every third step is twice as slow (a checkpoint capture, say): never three running.
    c.Observe(TimingFor(c.shape(), Measured(), g), i % 3 == 2 ? 0.5 : 0.25);
  }
  EXPECT_EQ(c.phase(), SharePhase::kSettled);
  EXPECT_EQ(c.recalibrations(), 0);
}

TEST(ShareController, StaticFractionIsKept) {
  ShareControllerOptions o = Options();
  o.static_fraction = 0.7;
  ShareController c(Shape(), o);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(c.Next().gpu_subgroups, 90u);  // 0.7 * 128, rounded
    EXPECT_EQ(c.phase(), SharePhase::kFixed);
    c.Observe(TimingFor(c.shape(), Measured(), 90), i < 10 ? 0.2 : 1.0);
  }
  EXPECT_EQ(c.recalibrations(), 0);
  EXPECT_GT(c.Next().predicted_seconds, 0.0);  // still measured, still predicted
}

TEST(ShareController, WithoutSearchStepsTheModelsChoiceIsHeld) {
  ShareControllerOptions o = Options();
  o.search.max_steps = 0;
  ShareController c(Shape(), o);
  Noise noise(3, 0.03);
  RunWhile(&c, SharePhase::kCalibrating, MeasuredH200(), &noise, 10);
  ASSERT_EQ(c.phase(), SharePhase::kSettled);
  EXPECT_EQ(c.Next().gpu_subgroups, ChooseShare(c.shape(), Measured()).gpu_subgroups);
  EXPECT_EQ(c.search_steps(), 0);
}

TEST(ShareController, ABudgetWithoutSlotsSettlesOnTheCpuWithoutSearching) {
  ShareController c(Shape(/*budget=*/1000), Options());
  Noise noise(5, 0.03);
  RunWhile(&c, SharePhase::kCalibrating, MeasuredH200(), &noise, 10);
  ASSERT_EQ(c.phase(), SharePhase::kSettled);
  EXPECT_EQ(c.Next().gpu_subgroups, 0u);
  EXPECT_EQ(c.search_steps(), 0);
}

}  // namespace
}  // namespace rtft::offload
