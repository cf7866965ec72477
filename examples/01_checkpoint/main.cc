// 01_checkpoint: the checkpoint engine alone (docs/format.md, docs/checkpoint.md). A
// training-like state (per layer bf16 weights, fp32 master weights and AdamW moments; step, RNG
// and learning-rate schedule as objects) is trained and checkpointed lazily every few steps:
// Checkpoint() right after the update, WaitCaptured() only before the next update, so the copies
// overlap forward/backward. Then the process "dies": a fresh state restores an earlier version,
// replays the lost steps and must end bitwise identical to the uninterrupted run.
//
//   build/bin/example-01-checkpoint --dir /var/tmp/demo --steps 20 --every 5
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rtft/checkpoint.h"
#include "rtft/state.h"

namespace {

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
rtft::TensorDesc Tensor(const std::string& name, std::vector<T>* v, rtft::DType dtype) {
  rtft::TensorDesc t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {static_cast<int64_t>(v->size())};
  t.data = v->data();
  return t;
}

struct Layer {
  std::vector<uint16_t> weights_bf16;
  std::vector<float> master, adam_m, adam_v;
};

// Gradients come from a seeded RNG, so a run is deterministic and two runs compare bit for bit.
class TrainState {
 public:
  TrainState(int layers, uint64_t params_per_layer, uint64_t seed);
  void ForwardBackward();  // gradients from the RNG
  void Update();           // AdamW as torch.optim.AdamW
  uint64_t step() const { return step_; }
  uint64_t Digest() const;  // FNV-1a of every byte of state
  // Every tensor and object, for saving and for restoring into this state: the rt-ft part.
  const rtft::StateProvider& provider() const { return provider_; }
  uint64_t bytes() const;

 private:
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> grads_;
  uint64_t step_ = 0;
  std::mt19937_64 rng_;
  double lr_ = 1e-3;
  rtft::CompositeProvider provider_;
};

TrainState::TrainState(int layers, uint64_t params_per_layer, uint64_t seed)
    : layers_(layers), grads_(layers), rng_(seed) {
  std::normal_distribution<float> init(0.0f, 0.02f);
  for (int l = 0; l < layers; ++l) {
    Layer& L = layers_[l];
    L.master.resize(params_per_layer);
    for (float& x : L.master) x = init(rng_);
    L.adam_m.assign(params_per_layer, 0.0f);
    L.adam_v.assign(params_per_layer, 0.0f);
    L.weights_bf16.resize(params_per_layer);
    for (size_t i = 0; i < params_per_layer; ++i) L.weights_bf16[i] = ToBf16(L.master[i]);
    grads_[l].resize(params_per_layer);
    const std::string p = "layer" + std::to_string(l) + "/";
    provider_.AddTensor(Tensor(p + "weights", &L.weights_bf16, rtft::DType::kBFloat16));
    provider_.AddTensor(Tensor(p + "master", &L.master, rtft::DType::kFloat32));
    provider_.AddTensor(Tensor(p + "adam_m", &L.adam_m, rtft::DType::kFloat32));
    provider_.AddTensor(Tensor(p + "adam_v", &L.adam_v, rtft::DType::kFloat32));
  }
  provider_.AddObject({"step",
                       [this] { return rtft::StatusOr<std::string>(std::to_string(step_)); },
                       [this](const std::string& s) {
                         step_ = std::stoull(s);
                         return rtft::Status::Ok();
                       }});
  provider_.AddObject({"rng",
                       [this] {
                         std::ostringstream out;
                         out << rng_;
                         return rtft::StatusOr<std::string>(out.str());
                       },
                       [this](const std::string& s) {
                         std::istringstream in(s);
                         in >> rng_;
                         return in ? rtft::Status::Ok() : rtft::Status::DataLoss("bad RNG state");
                       }});
  provider_.AddObject({"lr_schedule",
                       [this] {
                         std::ostringstream out;
                         out.precision(17);
                         out << lr_;
                         return rtft::StatusOr<std::string>(out.str());
                       },
                       [this](const std::string& s) {
                         lr_ = std::stod(s);
                         return rtft::Status::Ok();
                       }});
}

void TrainState::ForwardBackward() {
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& grad : grads_)
    for (float& x : grad) x = g(rng_);
}

void TrainState::Update() {
  // AdamW as torch.optim.AdamW: decoupled weight decay, bias correction.
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  ++step_;
  const float c1 = 1.0f - std::pow(b1, static_cast<float>(step_));
  const float c2 = 1.0f - std::pow(b2, static_cast<float>(step_));
  const float lr = static_cast<float>(lr_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const std::vector<float>& grad = grads_[l];
    for (size_t i = 0; i < L.master.size(); ++i) {
      L.master[i] *= 1.0f - lr * wd;
      L.adam_m[i] = b1 * L.adam_m[i] + (1 - b1) * grad[i];
      L.adam_v[i] = b2 * L.adam_v[i] + (1 - b2) * grad[i] * grad[i];
      L.master[i] -= lr * (L.adam_m[i] / c1) / (std::sqrt(L.adam_v[i] / c2) + eps);
      L.weights_bf16[i] = ToBf16(L.master[i]);
    }
  }
  lr_ *= 0.999;  // a decaying schedule, so it is real state
}

uint64_t TrainState::Digest() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const Layer& L : layers_) {
    mix(L.weights_bf16.data(), L.weights_bf16.size() * 2);
    mix(L.master.data(), L.master.size() * 4);
    mix(L.adam_m.data(), L.adam_m.size() * 4);
    mix(L.adam_v.data(), L.adam_v.size() * 4);
  }
  mix(&step_, sizeof(step_));
  std::ostringstream rng;
  rng << rng_;
  mix(rng.str().data(), rng.str().size());
  mix(&lr_, sizeof(lr_));
  return h;
}

uint64_t TrainState::bytes() const {
  uint64_t n = 0;
  for (const Layer& L : layers_) n += L.master.size() * (2 + 4 * 3);
  return n;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const char* what, const rtft::Status& s) {
  std::fprintf(stderr, "example-01-checkpoint: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"example-01-checkpoint: lazy checkpoints of a training-like state, then restore"};
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

  TrainState state(layers, params_per_layer, /*seed=*/2024);
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
  TrainState fresh(layers, params_per_layer, /*seed=*/777);
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
