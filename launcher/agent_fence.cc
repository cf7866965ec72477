// Fencing: a retired slot whose dp-launch still runs on this host (stopped, or cut off from the
// coordinator) would keep a rank's application alive next to its replacement; the agents on its
// host SIGKILL it once it had time to go by itself, or at the job's end.
#include <signal.h>

#include <fstream>

#include "core/logging.h"
#include "launcher/agent.h"

namespace rtft::launch {

void Agent::ScheduleFencing(const control::Membership& m) {
  // A retired slot whose agent still runs on this host (stopped, or cut off) would keep a rank's
  // application alive next to its replacement: kill it once it had time to go by itself.
  for (control::SlotId s : m.retired) {
    if (s == config_.slot || s < 0 || static_cast<size_t>(s) >= config_.peers.size()) continue;
    if (config_.peers[s].host != config_.host || fence_at_.count(s)) continue;
    fence_at_[s] = Clock::now() + config_.options.heartbeat_timeout;
  }
}

void Agent::Fence() {
  const auto now = Clock::now();
  for (auto& [slot, at] : fence_at_) {
    if (at == Clock::time_point::max() || now < at) continue;
    at = Clock::time_point::max();
    // A retired slot's dp-launch that hosts the primary coordinator stays until the job's end.
    if (slot != client_->primary_slot()) KillPeer(slot, "was retired");
  }
}

void Agent::KillPeer(int slot, const char* why) {
  if (slot < 0 || static_cast<size_t>(slot) >= config_.peers.size() || slot == config_.slot ||
      config_.peers[slot].host != config_.host)
    return;
  const int pid = config_.peers[slot].pid;
  // Still a dp-launch (named as this one is), not a process that took the pid since.
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm"), own("/proc/self/comm");
  std::string name, own_name;
  if (!(comm >> name) || !(own >> own_name) || name != own_name) return;
  RTFT_LOG(kWarn, kLogLaunch) << "slot " << slot << " " << why << " but its dp-launch (pid " << pid
                              << ") still runs here: killing it and its application";
  kill(pid, SIGKILL);
}

}  // namespace rtft::launch
