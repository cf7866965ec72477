// The Protector and its step driver in one process: ranks are threads over a fake runtime
// (fake_runtime.h) and Gloo communicators on loopback. A small ZeRO-1 model (replicated
// parameters, a sharded moment, a counter object) runs through Protector::Run; a rank that dies
// in the middle of a step is replaced by a spare (fed from its neighbours' L1 and L2) or by a
// restarted process (its own L1), and every rank ends with the state of a run without the
// failure, bit for bit. Also what the driver returns: errors as they are, a shutdown as an
// outcome, a lost device reported.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/build_config.h"
#include "core/checksum.h"
#include "core/params.h"
#include "protect/fake_runtime.h"
#include "rtft/protect.h"

namespace rtft::protect::test {
namespace {

constexpr int64_t kParams = 3001;
constexpr uint64_t kSteps = 12;

// One rank's model: parameters (replicated), a moment of its shard, the steps it took.
class Model {
 public:
  std::shared_ptr<StateProvider> Describe(int world, int rank) {
    split_ = SplitEvenly(kParams, world, rank);
    moment_.assign(split_.count, 0.0f);
    auto state = std::make_shared<CompositeProvider>();
    state->AddTensor({"params", DType::kFloat32, {kParams}, params_.data()});
    TensorDesc m = EvenShard("moment", DType::kFloat32, {kParams}, world, rank);
    m.data = moment_.data();
    state->AddTensor(m);
    state->AddObject({"taken", [this] { return StatusOr<std::string>(std::to_string(taken_)); },
                      [this](const std::string& s) {
                        taken_ = std::stoll(s);
                        return Status::Ok();
                      }});
    return state;
  }
  // The gradient: every rank's contribution of (step, rank), summed in the ring's fixed order.
  Status Compute(StepContext& c) {
    std::vector<float> mine(kParams);
    for (int64_t i = 0; i < kParams; ++i)
      mine[i] = std::sin(0.001f * i + c.step) * (c.rank + 1) + params_[i] * 0.01f;
    grad_.resize(kParams);
    return c.comm->AllReduce(mine.data(), grad_.data(), kParams, DType::kFloat32, ReduceOp::kSum);
  }
  Status Update(StepContext& c) {
    for (int64_t i = 0; i < split_.count; ++i) {
      moment_[i] = 0.9f * moment_[i] + grad_[split_.offset + i];
      params_[split_.offset + i] -= 0.001f * moment_[i];
    }
    ++taken_;
    std::vector<size_t> counts(c.world_size);
    for (int r = 0; r < c.world_size; ++r) counts[r] = SplitEvenly(kParams, c.world_size, r).count;
    return c.comm->AllGatherV(params_.data() + split_.offset, params_.data(), counts,
                              DType::kFloat32);
  }
  uint64_t Digest() const {
    return Xxh3(params_.data(), params_.size() * 4) ^
           (Xxh3(moment_.data(), moment_.size() * 4) * 31) ^ static_cast<uint64_t>(taken_);
  }

 private:
  std::vector<float> params_ = std::vector<float>(kParams, 0.5f);
  std::vector<float> moment_, grad_;
  EvenSplit split_;
  int64_t taken_ = 0;
};

struct RankResult {
  StatusOr<RunResult> run = Status::Unavailable("not run");
  uint64_t digest = 0;
  int recovered = 0;  // steps that began after a recovery
};

class ProtectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RTFT_COMM_GLOO_HOST", "127.0.0.1", 1);
    setenv("RTFT_COMM_CREATE_TIMEOUT_MS", "20000", 1);
    ReloadParams();
    char tmpl[] = "/dev/shm/rtft-protector-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Runs rank `rank` of `job` to kSteps in `dir`; `hook` may end a step its own way.
  RankResult RunRank(FakeJob* job, int rank, RuntimeRole role, const std::string& dir,
                     std::function<Status(StepContext&)> hook = nullptr) {
    RankResult out;
    auto rt = job->Rank(rank, role);
    ProtectOptions o;
    o.shm_dir = dir;
    std::filesystem::create_directories(dir);
    auto p = Protector::Create(rt.get(), o);
    if (!p.ok()) return {p.status()};
    Model model;
    Status s = (*p)->Protect(model.Describe(rt->current().world_size, rank));
    if (!s.ok()) return {s};
    StepFns fns;
    fns.compute = [&](StepContext& c) -> Status {
      if (c.recovered) ++out.recovered;
      if (hook) RTFT_RETURN_IF_ERROR(hook(c));
      return model.Compute(c);
    };
    fns.update = [&](StepContext& c) { return model.Update(c); };
    out.run = (*p)->Run(kSteps, fns);
    out.digest = model.Digest();
    return out;
  }

  // A failure-free job of `world` ranks: each rank's digest.
  std::vector<uint64_t> Reference(int world) {
    FakeJob job(world);
    std::vector<RankResult> results(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back(
          [&, r] { results[r] = RunRank(&job, r, RuntimeRole::kInitial, Dir("ref", r)); });
    for (auto& t : threads) t.join();
    std::vector<uint64_t> digests;
    for (auto& res : results) {
      EXPECT_TRUE(res.run.ok()) << res.run.status();
      digests.push_back(res.digest);
    }
    return digests;
  }

  std::string Dir(const std::string& run, int slot) {
    return root_ + "/" + run + "-slot" + std::to_string(slot);
  }

  // Rank `victim` dies in the compute of step `at` (its thread returns); the job fails it, and
  // `replacement` (a spare in a directory of its own, or a process restarted in the victim's)
  // takes its rank.
  std::vector<RankResult> RunWithFailure(int world, int victim, uint64_t at,
                                         RuntimeRole replacement) {
    FakeJob job(world);
    std::vector<RankResult> results(world);
    std::mutex mu;
    std::condition_variable cv;
    bool reached = false, dead = false;
    auto die = [&](StepContext& c) -> Status {
      if (c.step != at) return Status::Ok();
      std::unique_lock<std::mutex> lock(mu);
      reached = true;
      cv.notify_all();
      cv.wait(lock, [&] { return dead; });
      return Status::Internal("killed by the test");
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        results[r] = RunRank(&job, r, RuntimeRole::kInitial, Dir("run", r),
                             r == victim ? std::function<Status(StepContext&)>(die) : nullptr);
      });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return reached; });
    }
    job.Fail({victim});
    {
      std::lock_guard<std::mutex> lock(mu);
      dead = true;
    }
    cv.notify_all();
    threads[victim].join();
    EXPECT_EQ(results[victim].run.status().code(), StatusCode::kInternal);
    const std::string dir =
        replacement == RuntimeRole::kRestarted ? Dir("run", victim) : Dir("spare", victim);
    threads[victim] =
        std::thread([&] { results[victim] = RunRank(&job, victim, replacement, dir); });
    for (auto& t : threads) t.join();
    return results;
  }

  std::string root_;
};

TEST_F(ProtectorTest, ASingleRankRunsEveryStepAndReportsEach) {
  FakeJob job(1);
  RankResult r = RunRank(&job, 0, RuntimeRole::kInitial, Dir("one", 0));
  ASSERT_TRUE(r.run.ok()) << r.run.status();
  EXPECT_EQ(r.run->outcome, RunOutcome::kDone);
  EXPECT_EQ(r.run->next_step, kSteps);
  EXPECT_FALSE(r.run->checkpointed);
  EXPECT_EQ(r.recovered, 0);
}

TEST_F(ProtectorTest, ASpareFedByItsPeersEndsWithTheBitsOfARunWithoutTheFailure) {
  const std::vector<uint64_t> want = Reference(3);
  std::vector<RankResult> got = RunWithFailure(3, 1, 7, RuntimeRole::kSpareActivated);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].run.ok()) << r << ": " << got[r].run.status();
    EXPECT_EQ(got[r].run->outcome, RunOutcome::kDone);
    EXPECT_EQ(got[r].digest, want[r]) << "rank " << r;
    EXPECT_EQ(got[r].recovered, 1) << "rank " << r;
  }
}

TEST_F(ProtectorTest, AProcessRestartedOnItsSlotRestoresItsOwnSnapshot) {
  const std::vector<uint64_t> want = Reference(3);
  std::vector<RankResult> got = RunWithFailure(3, 2, 5, RuntimeRole::kRestarted);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].run.ok()) << r << ": " << got[r].run.status();
    EXPECT_EQ(got[r].digest, want[r]) << "rank " << r;
  }
}

TEST_F(ProtectorTest, AOneRankJobRestartedInPlaceRestoresItsOwnSnapshot) {
  const std::vector<uint64_t> want = Reference(1);
  std::vector<RankResult> got = RunWithFailure(1, 0, 6, RuntimeRole::kRestarted);
  ASSERT_TRUE(got[0].run.ok()) << got[0].run.status();
  EXPECT_EQ(got[0].digest, want[0]);
  EXPECT_EQ(got[0].recovered, 1);
}

TEST_F(ProtectorTest, AStepErrorThatIsNotAnAbortComesBackAsItIs) {
  FakeJob job(1);
  RankResult r = RunRank(&job, 0, RuntimeRole::kInitial, Dir("error", 0), [](StepContext& c) {
    return c.step == 3 ? Status::DataLoss("the input is gone") : Status::Ok();
  });
  EXPECT_EQ(r.run.status().code(), StatusCode::kDataLoss) << r.run.status();
}

TEST_F(ProtectorTest, ALostDeviceIsReportedAndReturned) {
  FakeJob job(1);
  auto rt = job.Rank(0);
  ProtectOptions o;
  o.shm_dir = Dir("device", 0);
  std::filesystem::create_directories(o.shm_dir);
  auto p = Protector::Create(rt.get(), o);
  ASSERT_TRUE(p.ok());
  Model model;
  ASSERT_TRUE((*p)->Protect(model.Describe(1, 0)).ok());
  auto run = (*p)->Run(kSteps, {[](StepContext& c) {
                                  return c.step == 2 ? Status::DeviceLost("Xid 79") : Status::Ok();
                                },
                                [](StepContext&) { return Status::Ok(); }});
  EXPECT_EQ(run.status().code(), StatusCode::kDeviceLost);
  ASSERT_EQ(rt->device_errors().size(), 1u);
  EXPECT_NE(rt->device_errors()[0].find("Xid 79"), std::string::npos);
  EXPECT_EQ(rt->steps_reported(), 2u);  // steps 0 and 1 ended
}

TEST_F(ProtectorTest, AShutdownIsAnOutcomeNotAnError) {
  FakeJob job(2);
  std::atomic<bool> once{false};
  std::vector<RankResult> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      results[r] = RunRank(&job, r, RuntimeRole::kInitial, Dir("shutdown", r),
                           [&](StepContext& c) -> Status {
                             if (c.step == 4 && !once.exchange(true)) job.Shutdown({}, false);
                             return Status::Ok();
                           });
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].run.ok()) << results[r].run.status();
    EXPECT_EQ(results[r].run->outcome, RunOutcome::kShutdown);
    EXPECT_FALSE(results[r].run->checkpointed);
    EXPECT_LE(results[r].run->next_step, 5u);
  }
}

TEST_F(ProtectorTest, TheBracketRefusesCallsOutOfOrder) {
  FakeJob job(1);
  auto rt = job.Rank(0);
  ProtectOptions o;
  o.shm_dir = Dir("order", 0);
  std::filesystem::create_directories(o.shm_dir);
  auto p = Protector::Create(rt.get(), o);
  ASSERT_TRUE(p.ok());
  Protector& pr = **p;
  EXPECT_EQ(pr.BeginStep(0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pr.Start().status().code(), StatusCode::kFailedPrecondition);  // nothing described
  Model model;
  ASSERT_TRUE(pr.Protect(model.Describe(1, 0)).ok());
  EXPECT_EQ(pr.Protect(model.Describe(1, 0)).code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(*pr.Start(), 0u);
  EXPECT_EQ(pr.BeforeUpdate().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pr.EndStep().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pr.BeginStep(0).ok());
  EXPECT_EQ(pr.BeginStep(1).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pr.BeforeUpdate().ok());
  ASSERT_TRUE(pr.EndStep().ok());
  EXPECT_EQ(*pr.Start(), 1u);  // once begun, the step to run next
  // Run goes on from there.
  auto run = pr.Run(
      3, {[](StepContext&) { return Status::Ok(); }, [](StepContext&) { return Status::Ok(); }});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->next_step, 3u);
  EXPECT_EQ(pr.Run(5, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ProtectorTest, HostMemoryDescribedAsDeviceMemoryAndNoStateAreRefused) {
  FakeJob job(1);
  auto rt = job.Rank(0);
  auto p = Protector::Create(rt.get());
  ASSERT_TRUE(p.ok());
  float x[4];
  auto state = std::make_shared<CompositeProvider>();
  TensorDesc t{"x", DType::kFloat32, {4}, x};
  t.memory = MemoryKind::kDevice;
  state->AddTensor(t);
  EXPECT_EQ((*p)->Protect(state).code(),
            RTFT_WITH_CUDA ? StatusCode::kInvalidArgument : StatusCode::kUnimplemented);
  EXPECT_EQ((*p)->Protect(nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rtft::protect::test
