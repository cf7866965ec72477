#include "offload/perf_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace rtft::offload {

uint64_t GpuBytesForSlots(const OffloadShape& shape, int slots) {
  const uint64_t s = shape.subgroup_elements;
  return static_cast<uint64_t>(slots) * s * kStateBytesPerElem + 2 * s * kGradBytesPerElem;
}

int SlotsWithinBudget(const OffloadShape& shape) {
  int slots = 0;
  while (slots < kMaxSlots && GpuBytesForSlots(shape, slots + 1) <= shape.gpu_budget_bytes) ++slots;
  return slots;
}

std::string ShareChoice::ToString() const {
  std::ostringstream os;
  os << gpu_subgroups << " subgroups on the GPU (" << slots << " slots), predicted "
     << predicted_seconds * 1e3 << " ms";
  return os.str();
}

double PredictSeconds(const OffloadShape& shape, const OffloadRates& r, uint64_t gpu_subgroups,
                      int slots) {
  if (!r.valid() || shape.subgroups == 0) return 0;
  gpu_subgroups = std::min(gpu_subgroups, shape.subgroups);
  if (slots <= 0) gpu_subgroups = 0;
  const double s = static_cast<double>(shape.subgroup_elements);
  const double e_gpu =
      std::min(static_cast<double>(shape.elements), static_cast<double>(gpu_subgroups) * s);
  const double e_cpu = static_cast<double>(shape.elements) - e_gpu;
  const double pb = static_cast<double>(shape.param_bytes);

  // Each copy direction carries both shares' traffic.
  const double up_bytes = kStateBytesPerElem * e_gpu + pb * e_cpu;
  const double down_bytes = kStateBytesPerElem * e_gpu + kGradBytesPerElem * e_cpu;
  double links = std::max(up_bytes / r.h2d_bytes_per_s, down_bytes / r.d2h_bytes_per_s);
  if (r.duplex_bytes_per_s > 0)
    links = std::max(links, (up_bytes + down_bytes) / r.duplex_bytes_per_s);

  // CPU share: waits for its first gradients, updates, and uploads its last parameters.
  double cpu = 0;
  if (e_cpu > 0) {
    const double first = std::min(s, e_cpu);
    cpu = first * kGradBytesPerElem / r.d2h_bytes_per_s + e_cpu / r.cpu_elems_per_s +
          first * pb / r.h2d_bytes_per_s;
  }

  // GPU share: a pipeline of copy in, update, copy out. With three buffers the stages overlap
  // fully; with two a buffer is refilled only after its copy out; with one nothing overlaps.
  double gpu = 0;
  if (gpu_subgroups > 0) {
    const double in = s * kStateBytesPerElem / r.h2d_bytes_per_s;
    const double run = s / r.gpu_elems_per_s;
    const double out = s * kStateBytesPerElem / r.d2h_bytes_per_s;
    const double sum = in + run + out;
    double beat = std::max({in, run, out});
    if (slots == 2) beat = std::max(beat, sum / 2);
    if (slots == 1) beat = sum;
    gpu = sum + static_cast<double>(gpu_subgroups - 1) * beat;
  }
  return std::max({cpu, gpu, links});
}

ShareChoice ChooseShare(const OffloadShape& shape, const OffloadRates& rates) {
  ShareChoice best;
  best.slots = SlotsWithinBudget(shape);
  best.predicted_seconds = PredictSeconds(shape, rates, 0, best.slots);
  if (best.slots == 0) return best;
  for (uint64_t g = 1; g <= shape.subgroups; ++g) {
    const double t = PredictSeconds(shape, rates, g, best.slots);
    if (t < best.predicted_seconds) {
      best.predicted_seconds = t;
      best.gpu_subgroups = g;
    }
  }
  return best;
}

ShareChoice FixedShare(const OffloadShape& shape, const OffloadRates& rates, double fraction) {
  ShareChoice c;
  c.slots = SlotsWithinBudget(shape);
  fraction = std::clamp(fraction, 0.0, 1.0);
  c.gpu_subgroups =
      c.slots == 0
          ? 0
          : static_cast<uint64_t>(std::llround(fraction * static_cast<double>(shape.subgroups)));
  c.predicted_seconds = PredictSeconds(shape, rates, c.gpu_subgroups, c.slots);
  return c;
}

double UnionSeconds(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  double total = 0;
  double covered_to = -std::numeric_limits<double>::infinity();
  for (const Interval& i : intervals) {
    if (i.end <= i.begin) continue;
    const double from = std::max(i.begin, covered_to);
    if (i.end > from) total += i.end - from;
    covered_to = std::max(covered_to, i.end);
  }
  return total;
}

}  // namespace rtft::offload
