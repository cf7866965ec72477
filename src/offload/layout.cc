#include "offload/layout.h"

#include <algorithm>
#include <utility>

#include "rtft/state.h"

namespace rtft::offload {

Layout BuildLayout(std::vector<OffloadParam> params, uint64_t subgroup_elements,
                   uint64_t task_elements) {
  Layout l;
  l.params = std::move(params);
  l.subgroup_elements = subgroup_elements;
  for (const OffloadParam& p : l.params) {
    l.param_flat_offset.push_back(l.elements);
    l.param_low_offset.push_back(l.low_bytes);
    l.elements += p.elements;
    l.low_bytes += p.elements * DTypeSize(p.dtype);
  }
  size_t param = 0;
  uint64_t in_param = 0;
  for (uint64_t begin = 0; begin < l.elements; begin += subgroup_elements) {
    Subgroup g;
    g.flat_begin = begin;
    g.n = std::min(subgroup_elements, l.elements - begin);
    uint64_t left = g.n;
    while (left > 0) {
      while (in_param == l.params[param].elements) {  // skips empty parameters too
        ++param;
        in_param = 0;
      }
      Segment s;
      s.param = param;
      s.param_offset = in_param;
      s.flat_offset = l.param_flat_offset[param] + in_param;
      s.n = std::min(left, l.params[param].elements - in_param);
      g.segments.push_back(s);
      in_param += s.n;
      left -= s.n;
    }
    for (const Segment& s : g.segments) {
      for (uint64_t off = 0; off < s.n; off += task_elements) {
        CpuTask t;
        t.subgroup = l.subgroups.size();
        t.segment = s;
        t.segment.param_offset += off;
        t.segment.flat_offset += off;
        t.segment.n = std::min(task_elements, s.n - off);
        g.tasks.push_back(t);
      }
    }
    l.subgroups.push_back(std::move(g));
  }
  return l;
}

}  // namespace rtft::offload
