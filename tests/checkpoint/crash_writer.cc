// Test helper for crash_test: checkpoints versions 1, 2, ... of a state whose bytes are a
// function of the version, and prints "persisted V" after each durable commit, until killed.
// Usage: crash_writer DIR FIRST_VERSION
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "crash_state.h"
#include "rtft/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_writer DIR FIRST_VERSION\n");
    return 2;
  }
  rtft::CheckpointOptions o;
  o.dir = argv[1];
  o.pool_bytes = 4 << 20;
  o.chunk_bytes = 256 << 10;
  o.keep_versions = 2;
  auto engine = rtft::CheckpointEngine::Create(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  rtft::CrashState state;
  for (uint64_t v = std::strtoull(argv[2], nullptr, 10);; ++v) {
    state.Fill(v);
    rtft::Status s = (*engine)->Checkpoint(v, state.provider);
    if (s.ok()) s = (*engine)->WaitCaptured(v);
    if (s.ok()) s = (*engine)->WaitPersisted(v);
    if (!s.ok()) {
      std::fprintf(stderr, "crash_writer: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("persisted %llu\n", static_cast<unsigned long long>(v));
    std::fflush(stdout);
  }
}
