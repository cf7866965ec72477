#include "control/wire/types.h"

#include <algorithm>

namespace rtft::control {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kActive:
      return "active";
    case Role::kSpare:
      return "spare";
    case Role::kActivated:
      return "activated";
    case Role::kRestarted:
      return "restarted";
    case Role::kRetired:
      return "retired";
    case Role::kCoordinator:
      return "coordinator";
  }
  return "unknown";
}

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kProcessCrash:
      return "process crash";
    case FailureKind::kHang:
      return "hang";
    case FailureKind::kDeviceError:
      return "device error";
    case FailureKind::kSlotLost:
      return "slot lost";
    case FailureKind::kRepeated:
      return "repeated failures";
    case FailureKind::kStraggler:
      return "straggler";
    case FailureKind::kUnhealthy:
      return "health check failed";
    case FailureKind::kCorrupt:
      return "silent data corruption";
  }
  return "unknown";
}

const char* PolicyName(SparesExhaustedPolicy policy) {
  switch (policy) {
    case SparesExhaustedPolicy::kShrink:
      return "shrink";
    case SparesExhaustedPolicy::kCheckpointAndExit:
      return "checkpoint-and-exit";
    case SparesExhaustedPolicy::kFail:
      return "fail";
  }
  return "unknown";
}

bool ParsePolicy(const std::string& text, SparesExhaustedPolicy* policy) {
  for (auto p : {SparesExhaustedPolicy::kShrink, SparesExhaustedPolicy::kCheckpointAndExit,
                 SparesExhaustedPolicy::kFail}) {
    if (text == PolicyName(p)) {
      *policy = p;
      return true;
    }
  }
  return false;
}

LogicalRank RankOfSlot(const Membership& m, SlotId slot) {
  auto it = std::find(m.rank_to_slot.begin(), m.rank_to_slot.end(), slot);
  if (it == m.rank_to_slot.end()) return kNoRank;
  return static_cast<LogicalRank>(it - m.rank_to_slot.begin());
}

Role RoleOfSlot(const Membership& m, SlotId slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= m.slot_roles.size()) return Role::kRetired;
  return m.slot_roles[slot];
}

}  // namespace rtft::control
