// Runs a command that reads files rtft-ckpt does not trust (verify, dump, cat) in a child
// process with a memory limit and a deadline. rt-ft's own reader checks everything it reads,
// but libhdf5 parses a file's metadata first, and a crafted file can crash libhdf5 itself: such a
// crash, a blown memory limit or a hang then ends only the child, and is reported as what it
// is, a file that cannot be trusted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace rtft::tools {

struct SandboxLimits {
  uint64_t memory_bytes = 0;  // address space of the child (RLIMIT_AS); 0: unlimited
  uint64_t seconds = 0;       // wall-clock deadline; 0: none
};

// Runs `command` in a child process under `limits` and returns its exit code. A child killed by a
// signal or the deadline is reported on stderr as damage to `what` and returns 1.
int RunSandboxed(const SandboxLimits& limits, const std::string& what,
                 const std::function<int()>& command);

}  // namespace rtft::tools
