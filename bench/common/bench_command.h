// One `rtft-bench` subcommand (ckpt, and later detect, offload, protect, recovery). main.cc keeps
// the explicit list of subcommands; each lives in its own files and only fills in this interface.
#pragma once

#include <memory>

namespace CLI {  // CLI11: only the .cc files that add flags include it
class App;
}  // namespace CLI

namespace rtft::bench {

class BenchCommand {
 public:
  virtual ~BenchCommand() = default;
  virtual const char* name() const = 0;
  virtual const char* help() const = 0;
  // Declares the subcommand's flags; values land in members read later by Run().
  virtual void AddFlags(CLI::App* cmd) = 0;
  // Runs after a successful parse. Returns the process exit code: 0 success, 1 a failure while
  // measuring, 2 a configuration that cannot run here (bad flag value, no GPU).
  virtual int Run() = 0;
};

std::unique_ptr<BenchCommand> NewCkptCommand();
// `rtft-bench straggler` (straggler/straggler_bench.cc).
std::unique_ptr<BenchCommand> NewStragglerCommand();
// `rtft-bench sdc` (sdc/sdc_bench.cc).
std::unique_ptr<BenchCommand> NewSdcCommand();

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

}  // namespace rtft::bench
