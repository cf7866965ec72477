// The Protector on a 2 x 2 x 2 tensor x pipeline x data layout in one process (ranks are threads
// over the fake runtime, Gloo on loopback): each (t, p) partition has its own tensors, the step
// uses the tensor, pipeline and data-parallel communicators of the StepContext, and a lost rank
// (a spare fed within its data-parallel group) or two lost ranks of different groups end every
// rank with the bits of a run without the failure, as do the replay of steps and the check for
// non-finite gradients through a corrupt gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include "core/checksum.h"
#include "core/params.h"
#include "protect/fake_runtime.h"
#include "rtft/protect.h"

namespace rtft::protect::test {
namespace {

constexpr int64_t kParams = 1001;
constexpr uint64_t kSteps = 8;
const Grid kGrid{2, 2, {}};

// One rank's share of a partitioned model: its partition's parameters (the same on its
// data-parallel peers) and its shard of their moment.
class PartitionModel {
 public:
  std::shared_ptr<StateProvider> Describe(const GridPlace& at) {
    const std::string part = ".t" + std::to_string(at.t) + ".p" + std::to_string(at.p);
    split_ = SplitEvenly(kParams, at.data, at.d);
    params_.assign(kParams, 0.25f * (1 + at.t + 2 * at.p));
    moment_.assign(split_.count, 0.0f);
    auto state = std::make_shared<CompositeProvider>();
    state->AddTensor({"w" + part, DType::kFloat32, {kParams}, params_.data()});
    TensorDesc m = EvenShard("m" + part, DType::kFloat32, {kParams}, at.data, at.d);
    m.data = moment_.data();
    state->AddTensor(m);
    return state;
  }
  Status Compute(StepContext& c) {
    RTFT_RETURN_IF_ERROR(Gradients(c, c.place.d));
    return Reduce(c);
  }
  // The compute in two parts, for the replay of steps: the local part (the tensor and pipeline
  // groups' collectives, the data of c.data_rank; with `fault` set, the rank's own run of step
  // 3 flips a bit of its gradients or makes one NaN, once) and the data-parallel reduction.
  Status Local(StepContext& c, char fault) {
    RTFT_RETURN_IF_ERROR(Gradients(c, c.data_rank));
    if (fault && !c.replaying && c.step == 3 && !faulted_) {
      faulted_ = true;
      uint32_t bits;
      std::memcpy(&bits, &local_[7], 4);
      bits = fault == 'n' ? 0x7FC00000u : bits ^ (1u << 20);
      std::memcpy(&local_[7], &bits, 4);
    }
    c.gradients = local_.data();
    c.gradient_bytes = local_.size() * sizeof(float);
    c.gradient_dtype = DType::kFloat32;
    return Status::Ok();
  }
  Status Reduce(StepContext& c) {
    grad_.resize(kParams);
    return c.data->AllReduce(local_.data(), grad_.data(), kParams, DType::kFloat32, ReduceOp::kAvg);
  }
  Status Update(StepContext& c) {
    for (int64_t i = 0; i < split_.count; ++i) {
      moment_[i] = 0.9f * moment_[i] + grad_[split_.offset + i];
      params_[split_.offset + i] -= 0.01f * moment_[i];
    }
    std::vector<size_t> counts;
    for (int d = 0; d < c.place.data; ++d)
      counts.push_back(SplitEvenly(kParams, c.place.data, d).count);
    return c.data->AllGatherV(params_.data() + split_.offset, params_.data(), counts,
                              DType::kFloat32);
  }
  uint64_t Digest() const {
    return Xxh3(params_.data(), params_.size() * 4) ^
           (Xxh3(moment_.data(), moment_.size() * 4) * 7);
  }

 private:
  // This rank's gradients for the data of data-parallel index `d` into local_.
  Status Gradients(StepContext& c, int d) {
    const GridPlace& at = c.place;
    // Stage 0 hands its activation to stage 1; the tensor group sums a partial result.
    float act = std::sin(0.1f * c.step + d) + params_[0];
    if (at.p == 0) RTFT_RETURN_IF_ERROR(c.pipeline->Send(&act, 1, DType::kFloat32, 1));
    float from_stage0 = 0;
    if (at.p == 1) RTFT_RETURN_IF_ERROR(c.pipeline->Recv(&from_stage0, 1, DType::kFloat32, 0));
    float partial = act + from_stage0 + at.t, total = 0;
    RTFT_RETURN_IF_ERROR(c.tensor->AllReduce(&partial, &total, 1, DType::kFloat32, ReduceOp::kSum));
    local_.resize(kParams);
    for (int64_t i = 0; i < kParams; ++i) local_[i] = total * 0.01f + params_[i] * 0.001f * (i % 7);
    return Status::Ok();
  }

  std::vector<float> params_, moment_, grad_, local_;
  EvenSplit split_;
  bool faulted_ = false;
};

struct Result {
  Status status;
  uint64_t digest = 0;
  int recovered = 0;
  bool comms_ok = false;  // the context's groups matched the grid
};

class GridProtectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RTFT_COMM_GLOO_HOST", "127.0.0.1", 1);
    setenv("RTFT_COMM_CREATE_TIMEOUT_MS", "30000", 1);
    ReloadParams();
    char tmpl[] = "/dev/shm/rtft-grid-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string Dir(const std::string& name) {
    std::filesystem::create_directories(root_ + "/" + name);
    return root_ + "/" + name;
  }

  Result RunRank(FakeJob* job, int rank, RuntimeRole role, const std::string& dir,
                 const std::function<Status(StepContext&)>& hook) {
    auto rt = job->Rank(rank, role);
    ProtectOptions o;
    o.shm_dir = dir;
    o.grid = kGrid;
    auto p = Protector::Create(rt.get(), o);
    if (!p.ok()) return {p.status()};
    PartitionModel model;
    Status s = (*p)->Protect(model.Describe(*PlaceInGrid(kGrid, job->world(), rank)));
    if (!s.ok()) return {s};
    Result out;
    out.comms_ok = true;
    auto run = (*p)->Run(kSteps, {[&](StepContext& c) -> Status {
                                    if (c.recovered) ++out.recovered;
                                    out.comms_ok = out.comms_ok && c.tensor && c.pipeline &&
                                                   c.data && c.tensor->rank() == c.place.t &&
                                                   c.pipeline->rank() == c.place.p &&
                                                   c.data->rank() == c.place.d;
                                    if (hook) RTFT_RETURN_IF_ERROR(hook(c));
                                    return model.Compute(c);
                                  },
                                  [&](StepContext& c) { return model.Update(c); }});
    out.status = run.status();
    out.digest = model.Digest();
    return out;
  }

  // 8 ranks; the `victims` die in the compute of step 5 and spares take their ranks.
  std::vector<Result> Job(const std::string& name, const std::set<int>& victims) {
    FakeJob job(8);
    std::vector<Result> results(8);
    std::mutex mu;
    std::condition_variable cv;
    size_t reached = 0;
    bool dead = false;
    auto die = [&](StepContext& c) -> Status {
      if (c.step != 5) return Status::Ok();
      std::unique_lock<std::mutex> lock(mu);
      ++reached;
      cv.notify_all();
      cv.wait(lock, [&] { return dead; });
      return Status::Internal("killed by the test");
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < 8; ++r)
      threads.emplace_back([&, r] {
        results[r] = RunRank(&job, r, RuntimeRole::kInitial, Dir(name + std::to_string(r)),
                             victims.count(r) ? std::function<Status(StepContext&)>(die) : nullptr);
      });
    if (!victims.empty()) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return reached == victims.size(); });
      }
      job.Fail(std::vector<int>(victims.begin(), victims.end()));
      {
        std::lock_guard<std::mutex> lock(mu);
        dead = true;
      }
      cv.notify_all();
      for (int v : victims) {
        threads[v].join();
        EXPECT_EQ(results[v].status.code(), StatusCode::kInternal);
        threads[v] = std::thread([&, v, dir = Dir(name + "spare" + std::to_string(v))] {
          results[v] = RunRank(&job, v, RuntimeRole::kSpareActivated, dir, nullptr);
        });
      }
    }
    for (auto& t : threads) t.join();
    return results;
  }

  std::string root_;
};

// The replay of steps and the check for non-finite gradients on a grid (docs/protect.md,
// "Replay"): a replica replays its neighbour's step whole, so every rank of it runs the same
// local computes and their tensor and pipeline collectives match. Rank 5, (1, 1, 0), flips a bit
// of its gradients at step 3 (with the check, makes one NaN) once: its replica runs the step
// again, and every rank ends with the bits of the run with neither the replay nor the fault.
TEST_F(GridProtectorTest, TheReplayAndTheFiniteCheckRunOnAGrid) {
  const std::vector<Result> want = Job("ref", {});
  for (const bool finite : {false, true}) {
    SCOPED_TRACE(finite ? "check_finite" : "replay_every");
    FakeJob job(8);
    std::vector<Result> got(8);
    std::vector<std::thread> threads;
    for (int r = 0; r < 8; ++r)
      threads.emplace_back([&, r] {
        auto rt = job.Rank(r, RuntimeRole::kInitial);
        ProtectOptions o;
        o.shm_dir = Dir(std::string(finite ? "finite" : "replay") + std::to_string(r));
        o.grid = kGrid;
        if (finite) {
          o.check_finite = 1;
        } else {
          o.replay_every = 1;
        }
        auto p = Protector::Create(rt.get(), o);
        if (!p.ok()) {
          got[r].status = p.status();
          return;
        }
        PartitionModel model;
        got[r].status = (*p)->Protect(model.Describe(*PlaceInGrid(kGrid, job.world(), r)));
        if (!got[r].status.ok()) return;
        const char fault = r != 5 ? 0 : finite ? 'n' : 'f';
        StepFns fns;
        fns.local = [&, fault](StepContext& c) { return model.Local(c, fault); };
        fns.reduce = [&](StepContext& c) { return model.Reduce(c); };
        fns.update = [&](StepContext& c) { return model.Update(c); };
        got[r].status = (*p)->Run(kSteps, fns).status();
        got[r].digest = model.Digest();
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 8; ++r) {
      EXPECT_TRUE(got[r].status.ok()) << r << ": " << got[r].status;
      EXPECT_EQ(got[r].digest, want[r].digest) << r;
    }
  }
}

TEST_F(GridProtectorTest, ASpareOfAnyPlaceIsFedWithinItsDataParallelGroup) {
  const std::vector<Result> want = Job("ref", {});
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(want[r].status.ok()) << r << ": " << want[r].status;
    EXPECT_TRUE(want[r].comms_ok) << r;
  }
  // Partitions differ: the digests of (t, p) differ from those of other partitions.
  EXPECT_NE(want[0].digest, want[1].digest);
  for (const std::set<int>& victims : {std::set<int>{5}, std::set<int>{0, 7}}) {
    const std::vector<Result> got = Job("lost" + std::to_string(*victims.begin()), victims);
    for (int r = 0; r < 8; ++r) {
      ASSERT_TRUE(got[r].status.ok()) << "rank " << r << ": " << got[r].status;
      EXPECT_EQ(got[r].digest, want[r].digest) << "rank " << r;
      EXPECT_EQ(got[r].recovered, 1) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace rtft::protect::test
