// The tensor x pipeline x data layout of a job's ranks (include/rtft/protect.h, Grid), resolved
// for one world size: each rank's place, the rank at each place, and the groups whose ranks share
// two of the three coordinates. Recovery works per data-parallel group (docs/protect.md, "3D
// layouts").
#pragma once

#include <string>
#include <vector>

#include "rtft/protect.h"

namespace rtft::protect {

class GridMap {
 public:
  static StatusOr<GridMap> Make(const Grid& grid, int world);

  int world() const { return static_cast<int>(place_.size()); }
  bool flat() const { return t_ == 1 && p_ == 1; }
  int tensor() const { return t_; }
  int pipeline() const { return p_; }
  int data() const { return d_; }
  const GridPlace& of(int rank) const { return place_[rank]; }
  int At(int t, int p, int d) const { return rank_at_[t + t_ * (d + d_ * p)]; }
  // The ranks of (t, p)'s data-parallel group, in ring (d) order.
  std::vector<int> DataGroup(int t, int p) const;
  std::vector<std::vector<int>> DataGroups() const;
  // The ranks of (p, d)'s tensor group (by t) and of (t, d)'s pipeline group (by p).
  std::vector<int> TensorGroup(int p, int d) const;
  std::vector<int> PipelineGroup(int t, int d) const;
  // "T x P x D".
  std::string ToString() const;

 private:
  int t_ = 1, p_ = 1, d_ = 1;
  std::vector<int> rank_at_;
  std::vector<GridPlace> place_;
};

}  // namespace rtft::protect
