// The top-level guard of every background thread of the control plane and of dp-launch (the
// coordinator, the agent client, the local link's socket pumps, the agent's listeners and
// reaper): an exception that escapes the thread's body would call std::terminate and take the
// whole slot down; RunGuarded turns it into a Status, logged once, that the thread's owner
// records and reports from its next call.
#pragma once

#include <functional>
#include <string>

#include "rtft/status.h"

namespace rtft::control {

// Runs `body`; Ok when it returns, kInternal naming `what` and the exception when one escapes.
Status RunGuarded(const std::string& what, const std::function<void()>& body) noexcept;

}  // namespace rtft::control
