// The offloaded AdamW on its CPU path (host parameters, any build): equal to a double-precision
// AdamW within a stated tolerance over many steps for fp32, fp16 and bf16 parameters, with
// subgroups that cut across parameters and several threads; a model really learns; the state
// provider names the tensors and a checkpoint restores a run that then continues bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "offload/cpu/adamw_scalar.h"
#include "offload_test_util.h"
#include "rtft/checkpoint.h"
#include "rtft/offload.h"
#include "test_util.h"

namespace rtft::offload {
namespace {

struct Model {
  std::vector<std::vector<char>> data;
  std::vector<OffloadParam> params;
};

// Parameter sizes chosen so that 1000-element subgroups start and end inside parameters.
Model MakeModel(DType dtype, DType grad_dtype, std::mt19937* rng,
                std::vector<std::vector<double>>* init) {
  const size_t sizes[] = {1500, 7, 1, 2333, 64};
  Model model;
  init->clear();
  for (size_t i = 0; i < std::size(sizes); ++i) {
    init->emplace_back();
    model.data.push_back(RandomValues(sizes[i], dtype, 1.0f, rng, &init->back()));
  }
  for (size_t i = 0; i < model.data.size(); ++i) {
    OffloadParam p;
    p.name = "layer" + std::to_string(i) + "/weight";
    p.dtype = dtype;
    p.grad_dtype = grad_dtype;
    p.data = model.data[i].data();
    p.elements = sizes[i];
    model.params.push_back(p);
  }
  return model;
}

OffloadOptions SmallOptions(int threads, const char* kernel = "auto") {
  OffloadOptions o;
  o.mode = OffloadMode::kCpu;
  o.subgroup_elements = 1000;
  o.cpu_threads = threads;
  o.cpu_kernel = kernel;
  o.adamw.lr = 1e-2;
  o.adamw.weight_decay = 0.05;
  return o;
}

// The fp32 master against the double reference after 300 steps at lr 1e-2 (then 3e-3): each
// step rounds the decayed weight and the update (about one fp32 ulp), a random walk of ~sqrt(300)
// ulps that reaches ~100 ulps at worst over 4000 elements. The tolerance is 4e-5 relative
// (about 300 ulps) with an absolute floor of 4e-6 for weights near zero; measured worst cases are
// printed (about 1e-5 relative).
constexpr double kMasterRel = 4e-5;
constexpr double kMasterAbsFloor = 4e-6;
void CheckAgainstReference(DType dtype, DType grad_dtype, int threads, const char* kernel) {
  std::mt19937 rng(42);
  std::vector<std::vector<double>> init;
  Model model = MakeModel(dtype, grad_dtype, &rng, &init);
  OffloadOptions o = SmallOptions(threads, kernel);
  auto opt = OffloadOptimizer::Create(model.params, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<ReferenceAdamW> ref;
  for (auto& v : init) ref.emplace_back(v);
  const int kSteps = 300;
  for (int step = 1; step <= kSteps; ++step) {
    if (step == 150) (*opt)->set_lr(3e-3);  // a schedule: the new lr applies from this step
    AdamWConfig c = (*opt)->config();
    std::vector<std::vector<char>> grads(model.params.size());
    std::vector<const void*> ptrs;
    for (size_t i = 0; i < model.params.size(); ++i) {
      std::vector<double> g;
      grads[i] = RandomValues(model.params[i].elements, grad_dtype, 0.5f, &rng, &g);
      ptrs.push_back(grads[i].data());
      ref[i].Step(c, g);
    }
    ASSERT_TRUE((*opt)->Step(ptrs).ok());
  }
  EXPECT_EQ((*opt)->step_count(), kSteps);
  double worst_master = 0, worst_rel = 0, worst_param_ulps = 0;
  for (size_t i = 0; i < model.params.size(); ++i) {
    std::vector<float> master(model.params[i].elements);
    ASSERT_TRUE((*opt)->ReadMaster(i, master.data()).ok());
    for (size_t k = 0; k < master.size(); ++k) {
      const double want = ref[i].p[k];
      const double err = std::abs(master[k] - want);
      worst_master = std::max(worst_master, err);
      worst_rel = std::max(worst_rel, err / std::max(std::abs(want), 1e-1));
      ASSERT_LE(err, std::max(kMasterAbsFloor, kMasterRel * std::abs(want)))
          << model.params[i].name << "[" << k << "] want " << want;
      // The model's copy is the master rounded to its dtype, exactly...
      const float low = LoadAsFloat(model.data[i].data(), dtype, k);
      float rounded = master[k];
      if (dtype == DType::kFloat16) rounded = HalfToFloat(FloatToHalf(master[k]));
      if (dtype == DType::kBFloat16) rounded = Bf16ToFloat(FloatToBf16(master[k]));
      ASSERT_EQ(FloatBits(low), FloatBits(rounded)) << model.params[i].name << "[" << k << "]";
      // ...so it is within one of its ulps (plus the master's error) of the reference.
      const double master_tol = std::max(kMasterAbsFloor, kMasterRel * std::abs(want));
      ASSERT_LE(std::abs(low - want), Ulp(dtype, want) + master_tol)
          << model.params[i].name << "[" << k << "] want " << want;
      if (dtype != DType::kFloat32)
        worst_param_ulps = std::max(worst_param_ulps, std::abs(low - want) / Ulp(dtype, want));
    }
  }
  std::printf(
      "%s params, %s grads, %d threads, %s: worst |master - ref| = %.3g, worst param "
      "error = %.3g ulp, worst relative %.3g\n",
      DTypeName(dtype), DTypeName(grad_dtype), threads, (*opt)->cpu_kernel(), worst_master,
      worst_param_ulps, worst_rel);
}

TEST(OffloadCpu, Fp32MatchesReference) {
  CheckAgainstReference(DType::kFloat32, DType::kFloat32, 3, "auto");
}
TEST(OffloadCpu, Fp16MatchesReference) {
  CheckAgainstReference(DType::kFloat16, DType::kFloat16, 2, "auto");
}
TEST(OffloadCpu, Bf16MatchesReference) {
  CheckAgainstReference(DType::kBFloat16, DType::kBFloat16, 4, "auto");
}
TEST(OffloadCpu, Bf16ParamsFp32GradsScalarKernel) {
  CheckAgainstReference(DType::kBFloat16, DType::kFloat32, 1, "scalar");
}

// Linear regression y = X w* + b*, trained with bf16 weights and offloaded AdamW: the loss falls
// by orders of magnitude and the weights approach the truth.
TEST(OffloadCpu, LinearRegressionLearns) {
  const int kIn = 16, kBatch = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kIn);
  for (float& w : w_true) w = normal(rng);
  const float b_true = 0.5f;
  std::vector<uint16_t> w(kIn, 0), b(1, 0);  // bf16, start at zero
  std::vector<OffloadParam> params(2);
  params[0] = {"w", DType::kBFloat16, DType::kFloat32, w.data(), kIn, {}, MemoryKind::kHost, 0};
  params[1] = {"b", DType::kBFloat16, DType::kFloat32, b.data(), 1, {}, MemoryKind::kHost, 0};
  OffloadOptions o = SmallOptions(2);
  o.subgroup_elements = 5;
  o.adamw.lr = 0.05;
  o.adamw.weight_decay = 0.0;
  auto opt = OffloadOptimizer::Create(params, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  auto loss_and_grads = [&](std::vector<float>* gw, float* gb) {
    gw->assign(kIn, 0.0f);
    *gb = 0;
    double loss = 0;
    for (int s = 0; s < kBatch; ++s) {
      std::vector<float> x(kIn);
      float y = b_true, pred = Bf16ToFloat(b[0]);
      for (int j = 0; j < kIn; ++j) {
        x[j] = normal(rng);
        y += w_true[j] * x[j];
        pred += Bf16ToFloat(w[j]) * x[j];
      }
      const float err = pred - y;
      loss += 0.5 * err * err / kBatch;
      for (int j = 0; j < kIn; ++j) (*gw)[j] += err * x[j] / kBatch;
      *gb += err / kBatch;
    }
    return loss;
  };
  std::vector<float> gw;
  float gb;
  const double first = loss_and_grads(&gw, &gb);
  double last = first;
  for (int step = 0; step < 400; ++step) {
    last = loss_and_grads(&gw, &gb);
    ASSERT_TRUE((*opt)->Step({gw.data(), &gb}).ok());
  }
  EXPECT_LT(last, first * 1e-3) << "first " << first << " last " << last;
  for (int j = 0; j < kIn; ++j) EXPECT_NEAR(Bf16ToFloat(w[j]), w_true[j], 0.05) << j;
  EXPECT_NEAR(Bf16ToFloat(b[0]), b_true, 0.05);
}

TEST(OffloadCpu, RejectsBadInput) {
  float x = 0;
  OffloadParam p{"x", DType::kFloat32, DType::kFloat32, &x, 1, {}, MemoryKind::kHost, 0};
  OffloadOptions o = SmallOptions(1);
  EXPECT_EQ(OffloadOptimizer::Create({}, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OffloadOptimizer::Create({p, p}, o).status().code(), StatusCode::kInvalidArgument);
  OffloadParam bad = p;
  bad.dtype = DType::kInt32;
  EXPECT_EQ(OffloadOptimizer::Create({bad}, o).status().code(), StatusCode::kInvalidArgument);
  bad = p;
  bad.shape = {2};
  EXPECT_EQ(OffloadOptimizer::Create({bad}, o).status().code(), StatusCode::kInvalidArgument);
  o.cpu_kernel = "sse9";
  EXPECT_EQ(OffloadOptimizer::Create({p}, o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(1);
  o.mode = OffloadMode::kGpu;  // host parameters cannot be resident on a GPU
  EXPECT_EQ(OffloadOptimizer::Create({p}, o).status().code(), StatusCode::kInvalidArgument);
  o.mode = OffloadMode::kInterleaved;  // falls back to the CPU for host parameters
  auto opt = OffloadOptimizer::Create({p}, o);
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ((*opt)->mode(), OffloadMode::kCpu);
  EXPECT_EQ((*opt)->Step({}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->Step({nullptr}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->step_count(), 0);
}

// float64 parameters or gradients are refused by name, in every mode, before anything is
// allocated: the float32 master copy would round them at every step.
TEST(OffloadCpu, RefusesFloat64ParametersAndGradients) {
  double x = 0;
  OffloadParam p{"field", DType::kFloat64, DType::kFloat64, &x, 1, {}, MemoryKind::kHost, 0};
  for (OffloadMode mode : {OffloadMode::kCpu, OffloadMode::kGpu, OffloadMode::kInterleaved}) {
    OffloadOptions o = SmallOptions(1);
    o.mode = mode;
    for (auto [dtype, grad] :
         {std::pair{DType::kFloat64, DType::kFloat64}, std::pair{DType::kFloat64, DType::kFloat32},
          std::pair{DType::kFloat32, DType::kFloat64}}) {
      p.dtype = dtype;
      p.grad_dtype = grad;
      const Status s = OffloadOptimizer::Create({p}, o).status();
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("'field': float64 is not supported"), std::string::npos) << s;
    }
  }
}

TEST(OffloadCpu, StateProviderDescribesMasterMomentsAndStep) {
  std::vector<float> a(10, 1.0f), b(6, 2.0f);
  std::vector<OffloadParam> params(2);
  params[0] = {"a", DType::kFloat32, DType::kFloat32, a.data(), 10, {2, 5}, MemoryKind::kHost, 0};
  params[1] = {"b", DType::kFloat32, DType::kFloat32, b.data(), 6, {}, MemoryKind::kHost, 0};
  OffloadOptions o = SmallOptions(1);
  o.state_prefix = "opt";
  auto opt = OffloadOptimizer::Create(params, o);
  ASSERT_TRUE(opt.ok());
  StateDescription d;
  ASSERT_TRUE((*opt)->state_provider()->Describe(&d).ok());
  ASSERT_TRUE(ValidateDescription(d).ok());
  ASSERT_EQ(d.tensors.size(), 6u);
  EXPECT_EQ(d.tensors[0].name, "opt/master/a");
  EXPECT_EQ(d.tensors[0].shape, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(d.tensors[1].name, "opt/master/b");
  EXPECT_EQ(d.tensors[2].name, "opt/exp_avg/a");
  EXPECT_EQ(d.tensors[5].name, "opt/exp_avg_sq/b");
  EXPECT_EQ(static_cast<float*>(d.tensors[1].data)[0], 2.0f);
  ASSERT_EQ(d.objects.size(), 1u);
  EXPECT_EQ(d.objects[0].name, "opt/step");
  std::vector<float> g(10, 0.1f);
  ASSERT_TRUE((*opt)->Step({g.data(), g.data()}).ok());
  EXPECT_EQ(*d.objects[0].serialize(), "1");
  EXPECT_TRUE(d.objects[0].deserialize("17").ok());
  EXPECT_EQ((*opt)->step_count(), 17);
  EXPECT_EQ(d.objects[0].deserialize("x1").code(), StatusCode::kDataLoss);
}

// Checkpoint after 5 steps with the real engine, run 5 more; a fresh optimizer restored from the
// checkpoint and given the same 5 gradients ends bitwise identical.
TEST(OffloadCpu, CheckpointRestoreContinuesBitwise) {
  TempDir dir;
  std::mt19937 rng(11);
  std::vector<std::vector<double>> init;
  Model model = MakeModel(DType::kBFloat16, DType::kBFloat16, &rng, &init);
  std::vector<std::vector<std::vector<char>>> grads(10);
  for (auto& step : grads)
    for (const OffloadParam& p : model.params) {
      std::vector<double> unused;
      step.push_back(RandomValues(p.elements, p.grad_dtype, 1.0f, &rng, &unused));
    }
  auto step_with = [](OffloadOptimizer* opt, const std::vector<std::vector<char>>& g) {
    std::vector<const void*> ptrs;
    for (const auto& x : g) ptrs.push_back(x.data());
    return opt->Step(ptrs);
  };
  auto opt = OffloadOptimizer::Create(model.params, SmallOptions(2));
  ASSERT_TRUE(opt.ok());
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(step_with(opt->get(), grads[s]).ok());
  {
    CheckpointOptions co;
    co.dir = dir.path();
    co.pool_bytes = 4 << 20;
    co.chunk_bytes = 1 << 20;
    auto engine = CheckpointEngine::Create(co);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto provider = (*opt)->state_provider();
    ASSERT_TRUE((*engine)->Checkpoint(5, *provider).ok());
    ASSERT_TRUE((*engine)->WaitPersisted(5).ok());
  }
  for (int s = 5; s < 10; ++s) ASSERT_TRUE(step_with(opt->get(), grads[s]).ok());

  // A different starting point entirely: the restore must bring back master, moments and step.
  Model fresh = MakeModel(DType::kBFloat16, DType::kBFloat16, &rng, &init);
  auto again = OffloadOptimizer::Create(fresh.params, SmallOptions(3));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(Restore(dir.path(), RestoreOptions{}, *(*again)->state_provider()).ok());
  EXPECT_EQ((*again)->step_count(), 5);
  ASSERT_TRUE((*again)->SyncParamsFromMaster().ok());
  for (int s = 5; s < 10; ++s) ASSERT_TRUE(step_with(again->get(), grads[s]).ok());
  for (size_t i = 0; i < model.params.size(); ++i) {
    std::vector<float> x(model.params[i].elements), y(model.params[i].elements);
    ASSERT_TRUE((*opt)->ReadMaster(i, x.data()).ok());
    ASSERT_TRUE((*again)->ReadMaster(i, y.data()).ok());
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * 4)) << model.params[i].name;
    EXPECT_EQ(model.data[i], fresh.data[i]) << model.params[i].name;
  }
}

}  // namespace
}  // namespace rtft::offload
