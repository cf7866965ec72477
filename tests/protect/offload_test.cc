// An OffloadOptimizer's state protected through its own state provider (include/rtft/offload.h):
// the provider describes the master weights and moments with the parameter's shard coordinates
// (sharded, not replicated), and after a restore its Restored() writes the master weights back
// into the parameters (SyncParamsFromMaster). Here the parameters themselves are not protected:
// a process restarted in place gets them from the master weights alone, or ends wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "core/checksum.h"
#include "core/params.h"
#include "protect/fake_runtime.h"
#include "rtft/offload.h"
#include "rtft/protect.h"

namespace rtft::protect::test {
namespace {

constexpr int64_t kParams = 2048;
constexpr uint64_t kSteps = 10;

struct Result {
  Status status;
  uint64_t digest = 0;
};

// One rank of `job` in `dir`: fp32 parameters updated by an OffloadOptimizer whose state alone is
// protected. The process "dies" in the compute of step `die_at` (its Run ends with kInternal).
Result RunRank(FakeJob* job, RuntimeRole role, const std::string& dir, uint64_t die_at) {
  auto rt = job->Rank(0, role);
  std::vector<float> params(kParams, 0.25f), grad(kParams);
  OffloadParam p;
  p.name = "params";
  p.data = params.data();
  p.elements = kParams;
  p.shard = EvenShard("params", DType::kFloat32, {kParams}, 1, 0).shard;
  OffloadOptions oo;
  oo.mode = OffloadMode::kCpu;
  auto optimizer = OffloadOptimizer::Create({p}, oo);
  if (!optimizer.ok()) return {optimizer.status()};
  ProtectOptions po;
  po.shm_dir = dir;
  auto protector = Protector::Create(rt.get(), po);
  if (!protector.ok()) return {protector.status()};
  Status s = (*protector)->Protect((*optimizer)->state_provider());
  if (!s.ok()) return {s};
  auto run = (*protector)
                 ->Run(kSteps, {[&](StepContext& c) -> Status {
                                  if (c.step == die_at) return Status::Internal("killed");
                                  for (int64_t i = 0; i < kParams; ++i)
                                    grad[i] = params[i] - 0.001f * i + c.step;
                                  return Status::Ok();
                                },
                                [&](StepContext&) { return (*optimizer)->Step({grad.data()}); }});
  Result r{run.status()};
  r.digest = Xxh3(params.data(), params.size() * 4) ^ uint64_t((*optimizer)->step_count());
  return r;
}

TEST(OffloadProtectTest, TheOptimizersShardIsShardedAndARestoreWritesItsMasterBack) {
  setenv("RTFT_COMM_GLOO_HOST", "127.0.0.1", 1);
  ReloadParams();
  char tmpl[] = "/dev/shm/rtft-offload-protect-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  std::filesystem::create_directories(root + "/ref");
  std::filesystem::create_directories(root + "/run");

  // The provider says which tensors are shards.
  std::vector<float> params(kParams, 1.0f);
  OffloadParam p;
  p.name = "params";
  p.data = params.data();
  p.elements = kParams;
  p.shard = EvenShard("params", DType::kFloat32, {kParams}, 1, 0).shard;
  auto optimizer = OffloadOptimizer::Create({p}, {});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  StateDescription d;
  ASSERT_TRUE((*optimizer)->state_provider()->Describe(&d).ok());
  ASSERT_EQ(d.tensors.size(), 3u);
  for (const TensorDesc& t : d.tensors) {
    EXPECT_TRUE(t.shard.sharded()) << t.name;
    EXPECT_EQ(t.shard.global_shape, std::vector<int64_t>{kParams}) << t.name;
  }
  // A provider that outlives its optimizer says so instead of touching freed memory.
  auto provider = (*optimizer)->state_provider();
  optimizer->reset();
  EXPECT_EQ(provider->Restored().code(), StatusCode::kFailedPrecondition);

  FakeJob ref_job(1);
  const Result want = RunRank(&ref_job, RuntimeRole::kInitial, root + "/ref", ~uint64_t{0});
  ASSERT_TRUE(want.status.ok()) << want.status;
  FakeJob job(1);
  const Result died = RunRank(&job, RuntimeRole::kInitial, root + "/run", 6);
  EXPECT_EQ(died.status.code(), StatusCode::kInternal);
  job.Fail({0});
  // Restarted in place with the parameters' initial values: only the restore can give them back.
  const Result got = RunRank(&job, RuntimeRole::kRestarted, root + "/run", ~uint64_t{0});
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.digest, want.digest);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace rtft::protect::test
