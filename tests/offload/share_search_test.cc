// The measured share search against synthetic update-time curves with +-3% noise: it settles
// within 5% of each curve's minimum (the GPU machine's measured curve, a convex one with its
// optimum at 0.9, a flat one) from any starting guess, within its step bound; seeds spend no
// steps; an empty range is settled at once.
#include "offload/share_search.h"

#include <gtest/gtest.h>

#include "share_curves.h"

namespace rtft::offload {
namespace {

constexpr uint64_t kSubgroups = 128;

struct Outcome {
  uint64_t share = 0;
  int steps = 0;
  double ratio = 0;  // the true time at the settled share over the curve's minimum
};

// Like the controller: two calibration steps at the start seed the search, then it runs alone.
Outcome Search(const Curve& curve, uint64_t start, uint32_t seed,
               const ShareSearchOptions& options) {
  Noise noise(seed, 0.03);
  ShareSearch s(kSubgroups, start, options);
  s.Seed(start, noise(curve.At(start, kSubgroups)));
  s.Seed(start, noise(curve.At(start, kSubgroups)));
  for (int guard = 0; !s.done() && guard < 100; ++guard) {
    const uint64_t g = s.Next();
    EXPECT_LE(g, kSubgroups);
    s.Report(g, noise(curve.At(g, kSubgroups)));
  }
  EXPECT_TRUE(s.done());
  return {s.best(), s.steps(), curve.At(s.best(), kSubgroups) / curve.Min(kSubgroups)};
}

TEST(ShareSearch, SettlesNearTheMinimumOfEachCurve) {
  const ShareSearchOptions options;
  for (const Curve& curve : {MeasuredH200(), ConvexAt09(), Flat()}) {
    // 23 is the model's choice on the GPU machine (18%); the others are the range's corners.
    for (uint64_t start : {uint64_t{0}, uint64_t{23}, uint64_t{64}, uint64_t{128}}) {
      for (uint32_t seed = 1; seed <= 8; ++seed) {
        const Outcome o = Search(curve, start, seed, options);
        SCOPED_TRACE(curve.name + " from " + std::to_string(start) + ", seed " +
                     std::to_string(seed) + ": settled at " + std::to_string(o.share));
        EXPECT_LE(o.steps, options.max_steps);
        EXPECT_LE(o.ratio, 1.05);
      }
    }
  }
}

TEST(ShareSearch, FindsTheMeasuredOptimumFromTheModelsGuess) {
  // On the GPU machine the model chose 18%, 12% slower than one half; the search must leave it.
  const Curve curve = MeasuredH200();
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const Outcome o = Search(curve, 23, seed, ShareSearchOptions());
    EXPECT_GE(o.share, 45u) << "seed " << seed;  // 35% .. 60% is within 5% of 0.222 s
    EXPECT_LE(o.share, 77u) << "seed " << seed;
  }
}

TEST(ShareSearch, KeepsToASmallerStepBound) {
  ShareSearchOptions options;
  options.max_steps = 6;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const Outcome o = Search(ConvexAt09(), 0, seed, options);
    EXPECT_LE(o.steps, 6);
    EXPECT_LT(o.ratio, ConvexAt09().At(0, kSubgroups) / ConvexAt09().Min(kSubgroups));
  }
}

TEST(ShareSearch, WithoutNoiseClimbsToTheOptimum) {
  const Curve curve = ConvexAt09();
  ShareSearch s(kSubgroups, 10, ShareSearchOptions());
  EXPECT_FALSE(s.done());
  EXPECT_EQ(s.Next(), 10u);  // nothing seeded: the start is measured first
  while (!s.done()) s.Report(s.Next(), curve.At(s.Next(), kSubgroups));
  EXPECT_NEAR(static_cast<double>(s.best()) / kSubgroups, 0.9, 0.05);
  EXPECT_EQ(s.best_samples(), 2);  // re-measured before settling
  EXPECT_DOUBLE_EQ(s.best_seconds(), curve.At(s.best(), kSubgroups));
}

TEST(ShareSearch, SeedsSpendNoSteps) {
  ShareSearch s(kSubgroups, 64, ShareSearchOptions());
  s.Seed(64, 1.0);
  s.Seed(64, 3.0);
  EXPECT_EQ(s.steps(), 0);
  EXPECT_DOUBLE_EQ(s.Mean(64), 2.0);
  EXPECT_NE(s.Next(), 64u);  // the start is measured: a neighbour is next
}

TEST(ShareSearch, AnEmptyRangeIsSettledAtOnce) {
  ShareSearch s(0, 5, ShareSearchOptions());
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.Next(), 0u);
  EXPECT_EQ(s.steps(), 0);
}

}  // namespace
}  // namespace rtft::offload
