#include "train_state.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace demo {
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

}  // namespace

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

}  // namespace demo
