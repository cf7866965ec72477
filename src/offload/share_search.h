// The measured search over the interleaved offload's GPU share. The performance model's choice is
// only a starting guess: host memory bandwidth is shared by the CPU update threads and the PCIe
// copies, which the component rates do not capture. This unit hill-climbs over the number of GPU
// subgroups on each step's measured update time and settles on the best measured share within a
// bounded number of steps. Pure logic: ShareController feeds it step times, tests feed it curves.
#pragma once

#include <cstdint>
#include <map>

namespace rtft::offload {

struct ShareSearchOptions {
  int max_steps = 12;         // measured steps before the search settles, re-measurements included
  int confirm_steps = 2;      // of max_steps, kept to re-measure the best shares before settling
  double margin = 0.015;      // a share replaces the incumbent only when faster by this fraction
  int min_step_divisor = 32;  // the climb stops refining below max_gpu / this many subgroups
};

class ShareSearch {
 public:
  // Searches gpu_subgroups in [0, max_gpu], starting from `start` (the model's choice).
  ShareSearch(uint64_t max_gpu, uint64_t start, const ShareSearchOptions& options);

  // A step time measured before the search began (a calibration step at share g); it counts as a
  // sample but spends none of the search's steps.
  void Seed(uint64_t g, double seconds);
  // The share to run next; once done(), the settled share.
  uint64_t Next() const { return done() ? best_ : next_; }
  // The measured update time of a step run at share g (normally the last Next()).
  void Report(uint64_t g, double seconds);

  bool done() const { return phase_ == Phase::kDone; }
  int steps() const { return steps_; }  // Report() calls so far
  uint64_t start() const { return start_; }
  // The incumbent while climbing, then the best mean; the settled share once done().
  uint64_t best() const { return best_; }
  double best_seconds() const { return Mean(best_); }
  int best_samples() const;
  // Mean measured time at share g (0 when never measured).
  double Mean(uint64_t g) const;

 private:
  enum class Phase { kClimb, kConfirm, kDone };
  struct Samples {
    double sum = 0;
    int count = 0;
  };

  bool Measured(uint64_t g) const { return samples_.count(g) != 0; }
  bool Faster(uint64_t a, uint64_t b) const;  // a beats b by the margin
  void Advance();
  void AdvanceClimb();
  void AdvanceConfirm();
  uint64_t BestMean() const;

  uint64_t max_gpu_;
  uint64_t start_;
  ShareSearchOptions options_;
  std::map<uint64_t, Samples> samples_;
  Phase phase_ = Phase::kClimb;
  uint64_t best_;  // the climb's incumbent; afterwards the best mean
  uint64_t next_ = 0;
  uint64_t step_ = 1;
  uint64_t min_step_ = 1;
  int dir_ = 1;    // the direction tried first: the last one that improved
  int probe_ = 0;  // 0: trying best_ + dir_ * step_, 1: the other side, 2: both failed
  int steps_ = 0;
  int confirm_left_ = 0;
};

}  // namespace rtft::offload
