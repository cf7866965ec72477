#include "protect/grid.h"

#include <set>

namespace rtft::protect {

StatusOr<GridMap> GridMap::Make(const Grid& grid, int world) {
  const std::string what = "a grid of tensor " + std::to_string(grid.tensor) + " x pipeline " +
                           std::to_string(grid.pipeline) + " over " + std::to_string(world) +
                           " ranks";
  if (grid.tensor < 1 || grid.pipeline < 1 || world < 1 ||
      world % (static_cast<int64_t>(grid.tensor) * grid.pipeline) != 0)
    return Status::InvalidArgument(what + ": the degrees must be positive and divide the world");
  GridMap m;
  m.t_ = grid.tensor;
  m.p_ = grid.pipeline;
  m.d_ = world / (grid.tensor * grid.pipeline);
  m.rank_at_.resize(world);
  if (grid.ranks.empty()) {
    for (int i = 0; i < world; ++i) m.rank_at_[i] = i;
  } else {
    std::set<int> seen(grid.ranks.begin(), grid.ranks.end());
    if (static_cast<int>(grid.ranks.size()) != world || static_cast<int>(seen.size()) != world ||
        *seen.begin() != 0 || *seen.rbegin() != world - 1)
      return Status::InvalidArgument(what + ": its rank map is no permutation of the world");
    m.rank_at_ = grid.ranks;
  }
  m.place_.resize(world);
  for (int p = 0; p < m.p_; ++p)
    for (int d = 0; d < m.d_; ++d)
      for (int t = 0; t < m.t_; ++t) m.place_[m.At(t, p, d)] = {t, p, d, m.t_, m.p_, m.d_};
  return m;
}

std::vector<int> GridMap::DataGroup(int t, int p) const {
  std::vector<int> g;
  for (int d = 0; d < d_; ++d) g.push_back(At(t, p, d));
  return g;
}

std::vector<std::vector<int>> GridMap::DataGroups() const {
  std::vector<std::vector<int>> groups;
  for (int p = 0; p < p_; ++p)
    for (int t = 0; t < t_; ++t) groups.push_back(DataGroup(t, p));
  return groups;
}

std::vector<int> GridMap::TensorGroup(int p, int d) const {
  std::vector<int> g;
  for (int t = 0; t < t_; ++t) g.push_back(At(t, p, d));
  return g;
}

std::vector<int> GridMap::PipelineGroup(int t, int d) const {
  std::vector<int> g;
  for (int p = 0; p < p_; ++p) g.push_back(At(t, p, d));
  return g;
}

std::string GridMap::ToString() const {
  return std::to_string(t_) + " x " + std::to_string(p_) + " x " + std::to_string(d_);
}

}  // namespace rtft::protect

namespace rtft {

StatusOr<GridPlace> PlaceInGrid(const Grid& grid, int world, int rank) {
  RTFT_ASSIGN_OR_RETURN(protect::GridMap m, protect::GridMap::Make(grid, world));
  if (rank < 0 || rank >= world)
    return Status::InvalidArgument("rank " + std::to_string(rank) + " outside a world of " +
                                   std::to_string(world));
  return m.of(rank);
}

StatusOr<int> RankInGrid(const Grid& grid, int world, int t, int p, int d) {
  RTFT_ASSIGN_OR_RETURN(protect::GridMap m, protect::GridMap::Make(grid, world));
  if (t < 0 || t >= m.tensor() || p < 0 || p >= m.pipeline() || d < 0 || d >= m.data())
    return Status::InvalidArgument("(t " + std::to_string(t) + ", p " + std::to_string(p) + ", d " +
                                   std::to_string(d) + ") outside a grid of " + m.ToString());
  return m.At(t, p, d);
}

}  // namespace rtft
