// rtft-bench: the benchmarks behind the performance claims in docs/benchmarks.md. Each
// subcommand prints one JSON object per line on stdout and human-readable progress on stderr.
#include <exception>
#include <iostream>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/ckpt_e2e/ckpt_e2e_bench.h"
#include "bench/comm/comm_bench.h"
#include "bench/common/bench_command.h"
#include "bench/detect/detect_bench.h"
#include "bench/goodput/goodput_bench.h"
#include "bench/heatdis/heatdis_bench.h"
#include "bench/offload/offload_bench.h"
#include "bench/offload_e2e/offload_e2e_bench.h"
#include "bench/protect/protect_bench.h"
#include "bench/recovery/recovery_bench.h"
#include "core/logging.h"

namespace {

int Main(int argc, char** argv) {
  using rtft::bench::BenchCommand;
  // The explicit list of subcommands; a new benchmark adds one line here.
  std::vector<std::unique_ptr<BenchCommand>> commands;
  commands.push_back(rtft::bench::NewCkptCommand());
  commands.push_back(rtft::bench::NewOffloadCommand());
  commands.push_back(rtft::bench::NewDetectCommand());
  commands.push_back(rtft::bench::NewCommCommand());
  commands.push_back(rtft::bench::NewProtectCommand());
  commands.push_back(rtft::bench::NewCkptE2eCommand());
  commands.push_back(rtft::bench::NewOffloadE2eCommand());
  commands.push_back(rtft::bench::NewRecoveryCommand());
  commands.push_back(rtft::bench::NewGoodputCommand());
  commands.push_back(rtft::bench::NewHeatdisCommand());
  commands.push_back(rtft::bench::NewStragglerCommand());
  commands.push_back(rtft::bench::NewSdcCommand());

  CLI::App app{"rtft-bench: rt-ft performance benchmarks (JSON lines on stdout)"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "rt-ft log level: error|warn|info|debug|trace");
  std::vector<CLI::App*> subs;
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c->name(), c->help());
    c->AddFlags(sub);
    subs.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? rtft::bench::kExitOk : rtft::bench::kExitUsage;
  }
  if (!log_level.empty()) {
    rtft::LogLevel level;
    if (!rtft::ParseLogLevel(log_level, &level)) {
      std::cerr << "rtft-bench: unknown --log-level '" << log_level << "'\n";
      return rtft::bench::kExitUsage;
    }
    rtft::SetLogLevel(level);
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    if (subs[i]->parsed()) return commands[i]->Run();
  }
  return rtft::bench::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing may escape as an exception: the standard library's (bad_alloc) end here.
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rtft-bench: " << e.what() << "\n";
    return rtft::bench::kExitFailed;
  }
}
