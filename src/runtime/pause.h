// A planned swap's pause (docs/protect.md, "Stragglers"): the coordinator asks every rank of an
// epoch to stop at the start of one step, once that step's snapshot is copied and replicated,
// and to wait there for the epoch that swaps a slow rank out, so that nothing runs again. The
// agent's runtime keeps the newest notice (a cancel clears it); the Protector asks at each
// BeginStep and says when it stands paused. Other runtimes (standalone, tests) never pause.
#pragma once

#include <cstdint>
#include <optional>

#include "rtft/runtime.h"

namespace rtft {

struct PauseRequest {
  uint64_t epoch = 0;
  uint64_t step = 0;
};

// What a runtime that reaches the coordinator implements for the Protector's repair of a corrupt
// copy (docs/protect.md, "Silent data corruption"): the coordinator answers with a new epoch,
// membership unchanged, into which every rank recovers.
class RepairService {
 public:
  virtual ~RepairService() = default;
  virtual void ReportCorruption(uint64_t step) = 0;
};
inline void ReportCorruption(Runtime* rt, uint64_t step) {
  if (auto* s = dynamic_cast<RepairService*>(rt)) s->ReportCorruption(step);
}

// What a runtime that hears the coordinator's pauses implements (agent_runtime.cc).
class PauseService {
 public:
  virtual ~PauseService() = default;
  // The pause asked for and not cancelled, if any.
  virtual std::optional<PauseRequest> PauseWanted() const = 0;
  // This rank stands paused at `at` (its agent's heartbeats say so).
  virtual void ReportPaused(const PauseRequest& at) = 0;
};

// The runtime's PauseService's, or nothing for a runtime without one.
inline std::optional<PauseRequest> PauseWanted(Runtime* rt) {
  auto* s = dynamic_cast<PauseService*>(rt);
  return s ? s->PauseWanted() : std::nullopt;
}
inline void ReportPaused(Runtime* rt, const PauseRequest& at) {
  if (auto* s = dynamic_cast<PauseService*>(rt)) s->ReportPaused(at);
}

}  // namespace rtft
