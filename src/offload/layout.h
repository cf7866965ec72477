// How the offloaded optimizer lays out a model: all parameters concatenated into one flat fp32
// space (master, m, v each one host array), cut into subgroups of a fixed number of elements
// that may span parameters. A subgroup is a list of segments (pieces of one parameter) and, for
// the CPU threads, a list of tasks of bounded size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rtft/offload.h"

namespace rtft::offload {

struct Segment {
  size_t param = 0;
  uint64_t param_offset = 0;  // elements into the parameter
  uint64_t flat_offset = 0;   // elements into the flat state
  uint64_t n = 0;
};

struct CpuTask {
  size_t subgroup = 0;
  Segment segment;  // a piece of one of the subgroup's segments
};

struct Subgroup {
  uint64_t flat_begin = 0;
  uint64_t n = 0;
  std::vector<Segment> segments;
  std::vector<CpuTask> tasks;
};

struct Layout {
  std::vector<OffloadParam> params;
  std::vector<uint64_t> param_flat_offset;  // first element of each parameter in the flat space
  std::vector<uint64_t> param_low_offset;   // first byte of each parameter in a packed copy
  uint64_t elements = 0;
  uint64_t low_bytes = 0;  // all parameters in their own dtypes, packed
  uint64_t subgroup_elements = 0;
  std::vector<Subgroup> subgroups;
};

// CPU tasks are at most task_elements long so that a few large subgroups still keep every
// thread busy.
Layout BuildLayout(std::vector<OffloadParam> params, uint64_t subgroup_elements,
                   uint64_t task_elements);

}  // namespace rtft::offload
