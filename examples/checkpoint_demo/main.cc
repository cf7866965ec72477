// rtft-demo-ckpt: trains a training-like state (bf16 weights, fp32 master, AdamW moments, step,
// RNG, LR schedule) and checkpoints it lazily every few steps: Checkpoint() right after the
// update, WaitCaptured() only before the next update, so the copies overlap forward/backward.
// Then it "loses" the process state, restores an earlier version, replays the lost steps and
// checks that the result is bitwise identical to the uninterrupted run.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <CLI/CLI.hpp>

#include "rtft/checkpoint.h"
#include "train_state.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const char* what, const rtft::Status& s) {
  std::fprintf(stderr, "rtft-demo-ckpt: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rt-ft checkpoint demo: lazy checkpoints of a training-like state, then restore"};
  std::string dir = "/var/tmp/rtft-demo";
  int steps = 20, every = 5, layers = 8;
  uint64_t params_per_layer = 2u << 20;
  app.add_option("--dir", dir, "checkpoint directory (emptied first)");
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(2, 100000));
  app.add_option("--every", every, "checkpoint every N steps")->check(CLI::Range(1, 100000));
  app.add_option("--layers", layers, "layers")->check(CLI::Range(1, 4096));
  app.add_option("--params-per-layer", params_per_layer, "parameters per layer")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  CLI11_PARSE(app, argc, argv);

  // No shell: a --dir holding a quote once turned "rm -rf '<dir>'" into other commands.
  std::error_code removed;
  std::filesystem::remove_all(dir, removed);
  if (removed)
    std::fprintf(stderr, "warning: could not empty %s: %s\n", dir.c_str(),
                 removed.message().c_str());

  rtft::CheckpointOptions options;
  options.dir = dir;
  options.keep_versions = 0;  // keep every version: the demo restores an earlier one
  auto engine = rtft::CheckpointEngine::Create(options);
  if (!engine.ok()) return Fail("creating the engine", engine.status());

  demo::TrainState state(layers, params_per_layer, /*seed=*/2024);
  std::printf(
      "state: %d layers, %.1f MB (bf16 weights, fp32 master, AdamW m and v) + step, RNG, LR\n",
      layers, state.bytes() / 1e6);
  uint64_t pending = 0;  // version whose capture must finish before the next update
  uint64_t restore_from = 0;
  for (int s = 0; s < steps; ++s) {
    state.ForwardBackward();  // overlaps the capture of the last checkpoint
    if (pending) {
      double t0 = Now();
      rtft::Status captured = (*engine)->WaitCaptured(pending);
      if (!captured.ok()) return Fail("capture", captured);
      auto st = (*engine)->Stats(pending);
      std::printf("  step %3d: version %" PRIu64
                  " captured; update held %.2f ms (Checkpoint call %.2f ms)\n",
                  s, pending, (Now() - t0) * 1e3, st.ok() ? st->checkpoint_call_s * 1e3 : 0.0);
      pending = 0;
    }
    state.Update();
    if (state.step() % every == 0) {
      rtft::Status started = (*engine)->Checkpoint(state.step(), state.provider());
      if (!started.ok()) return Fail("checkpoint", started);
      pending = state.step();
      if (restore_from == 0 && state.step() * 2 >= static_cast<uint64_t>(steps))
        restore_from = state.step();
    }
  }
  if (pending) {
    rtft::Status persisted = (*engine)->WaitPersisted(pending);
    if (!persisted.ok()) return Fail("persist", persisted);
    auto st = (*engine)->Stats(pending);
    if (st.ok())
      std::printf("version %" PRIu64
                  ": %.1f MB captured in %.3f s, durable after %.3f s (%.2f GB/s), io %s%s\n",
                  pending, st->tensor_bytes / 1e6, st->capture_s, st->persist_s,
                  st->tensor_bytes / st->persist_s / 1e9, st->io_backend.c_str(),
                  st->direct_io ? " O_DIRECT" : "");
  }
  engine->reset();  // waits for every version in flight
  const uint64_t digest = state.Digest();
  std::printf("trained %d steps; state digest %016" PRIx64 "\n", steps, digest);
  if (restore_from == 0) {
    std::printf("no checkpoint to restore from (use --every <= --steps/2)\n");
    return 0;
  }

  // The process "dies": a fresh state (different seed, so nothing is left over) restores
  // version `restore_from` and replays the steps after it.
  demo::TrainState fresh(layers, params_per_layer, /*seed=*/777);
  rtft::RestoreOptions ro;
  ro.version = restore_from;
  double t0 = Now();
  rtft::Status restored = rtft::Restore(dir, ro, fresh.provider());
  if (!restored.ok()) return Fail("restore", restored);
  std::printf("restored version %" PRIu64 " (step %" PRIu64
              ") in %.3f s, checksums verified; replaying %d steps\n",
              restore_from, fresh.step(), Now() - t0, steps - static_cast<int>(fresh.step()));
  while (fresh.step() < static_cast<uint64_t>(steps)) {
    fresh.ForwardBackward();
    fresh.Update();
  }
  const uint64_t replayed = fresh.Digest();
  std::printf("replayed state digest %016" PRIx64 ": %s\n", replayed,
              replayed == digest ? "IDENTICAL to the uninterrupted run" : "DIFFERENT");
  return replayed == digest ? 0 : 1;
}
