#include "core/progress.h"

namespace rtft {

ProgressMonitor& ProgressMonitor::Get() {
  static ProgressMonitor monitor;
  return monitor;
}

ProgressSample ProgressMonitor::Sample() const {
  ProgressSample s;
  s.calls = calls_.load(std::memory_order_relaxed);
  s.in_call = depth_.load(std::memory_order_relaxed) > 0;
  s.peer = s.in_call ? peer_.load(std::memory_order_relaxed) : -1;
  s.long_phase = long_.load(std::memory_order_relaxed) > 0;
  return s;
}

}  // namespace rtft
