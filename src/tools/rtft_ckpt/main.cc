// rtft-ckpt: inspect and check rt-ft checkpoints (docs/format.md).
//   rtft-ckpt ls DIR                       versions, complete or not, LATEST marked
//   rtft-ckpt verify DIR [--version V]     every checksum; exit 0 only if all verified
//   rtft-ckpt dump FILE                    a rank file's (or MANIFEST.json's) manifest as JSON
//   rtft-ckpt cat FILE TENSOR [--limit N]  a tensor's values
//   rtft-ckpt config                       the RTFT_* settings
// verify, dump and cat read in a child process with --memory-limit and --time-limit: a file that
// crashes the reader (libhdf5 parses it first) is reported as damaged (sandbox.h).
// Exit status: 0 success, 1 failure (corrupt, missing, unreadable), 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "core/logging.h"
#include "core/params.h"
#include "tools/rtft_ckpt/commands.h"
#include "tools/rtft_ckpt/sandbox.h"

int main(int argc, char** argv) {
  CLI::App app("rtft-ckpt: list, verify and inspect rt-ft checkpoints", "rtft-ckpt");
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "error, warn, info, debug or trace");
  std::string memory_limit = "4G";
  app.add_option("--memory-limit", memory_limit,
                 "memory a reader of an untrusted file may use (verify, dump, cat; 0: no limit)")
      ->capture_default_str();
  uint64_t time_limit = 3600;
  app.add_option("--time-limit", time_limit,
                 "seconds a reader of an untrusted file may take (verify, dump, cat; 0: no limit)")
      ->capture_default_str();

  std::string dir, file, tensor;
  uint64_t version = 0;
  uint64_t limit = 1000;

  CLI::App* ls = app.add_subcommand("ls", "list the versions in a checkpoint directory");
  ls->add_option("DIR", dir, "checkpoint directory")->required();

  CLI::App* verify = app.add_subcommand("verify", "check every checksum of a version");
  verify->add_option("DIR", dir, "checkpoint directory")->required();
  CLI::Option* version_opt =
      verify->add_option("--version,-v", version, "version to verify (default: LATEST)");

  CLI::App* dump = app.add_subcommand("dump", "print the manifest of a rank file as JSON");
  dump->add_option("FILE", file, "rank-NNNNN.h5 or MANIFEST.json")->required();

  CLI::App* cat = app.add_subcommand("cat", "print the values of a tensor");
  cat->add_option("FILE", file, "rank-NNNNN.h5")->required();
  cat->add_option("TENSOR", tensor, "tensor name, e.g. model/w")->required();
  cat->add_option("--limit,-n", limit, "print at most N values; 0 prints all")
      ->capture_default_str();

  CLI::App* config = app.add_subcommand("config", "print the RTFT_* settings");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (!log_level.empty()) {
    rtft::LogLevel level;
    if (!rtft::ParseLogLevel(log_level, &level)) {
      std::fprintf(stderr, "rtft-ckpt: unknown log level '%s'\n", log_level.c_str());
      return 2;
    }
    rtft::SetLogLevel(level);
  }

  using namespace rtft::tools;
  SandboxLimits limits;
  limits.seconds = time_limit;
  auto memory = rtft::ParseBytes(memory_limit);
  if (!memory.ok()) {
    std::fprintf(stderr, "rtft-ckpt: --memory-limit: %s\n", memory.status().message().c_str());
    return 2;
  }
  limits.memory_bytes = *memory;
  if (*ls) return ListCommand(dir);
  if (*verify) {
    const auto v = *version_opt ? std::optional<uint64_t>(version) : std::nullopt;
    return RunSandboxed(limits, dir, [&] { return VerifyCommand(dir, v); });
  }
  if (*dump) return RunSandboxed(limits, file, [&] { return DumpCommand(file); });
  if (*cat) return RunSandboxed(limits, file, [&] { return CatCommand(file, tensor, limit); });
  if (*config) return ConfigCommand();
  return 2;
}
