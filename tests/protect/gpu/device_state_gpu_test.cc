// Per-step protection of state in GPU memory (docs/protect.md, "Levels"): the L1 snapshot copies
// device tensors into its memory file on a copy stream ordered after the application's stream,
// hashes them on the host and restores them with host-to-device copies; and the Protector keeps a
// job of ranks that share the one GPU (threads over the fake runtime, host-staged Gloo) going
// through a lost rank and a restart in place, ending with the bits of a run without the failure;
// and a one-rank NCCL communicator aborted at a failure event and made again in the next epoch.
// Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <thread>

#include "checkpoint/capture/device_copy.h"
#include "core/build_config.h"
#include "core/checksum.h"
#include "core/params.h"
#include "protect/fake_runtime.h"
#include "protect/snapshot.h"
#include "rtft/protect.h"

namespace rtft::protect::test {
namespace {

constexpr int64_t kParams = 1 << 16;
constexpr uint64_t kSteps = 10;

#define RTFT_REQUIRE_GPU() \
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device"

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(int64_t n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<int64_t>(n, 1) * 4), 0);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<float> Get(int64_t n) const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost);
    return h;
  }
  void Set(const std::vector<float>& h) {
    cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  }
};

class DirTest : public ::testing::Test {
 public:
  void SetUp() override {
    setenv("RTFT_COMM_GLOO_HOST", "127.0.0.1", 1);
    ReloadParams();
    char tmpl[] = "/dev/shm/rtft-device-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string Dir(const std::string& name) {
    std::filesystem::create_directories(root_ + "/" + name);
    return root_ + "/" + name;
  }
  std::string root_;
};

TEST_F(DirTest, TheSnapshotCopiesDeviceTensorsAfterTheApplicationsStreamAndRestoresThem) {
  RTFT_REQUIRE_GPU();
  const int64_t n = 8 << 20;  // 32 MiB: the memset below is still running when the capture starts
  DeviceBuffer d(n);
  std::vector<float> host(1000, 2.5f);
  StateDescription desc;
  TensorDesc t{"weights", DType::kFloat32, {n}, d.p};
  t.memory = MemoryKind::kDevice;
  desc.tensors.push_back(t);
  desc.tensors.push_back({"host", DType::kFloat32, {1000}, host.data()});
  desc.objects.push_back({"o", [] { return StatusOr<std::string>(std::string("x")); },
                          [](const std::string&) { return Status::Ok(); }});
  auto layout = Layout::Build(desc, 4096);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto l1 = Snapshot::Open(Dir("l1"), *layout);
  ASSERT_TRUE(l1.ok()) << l1.status();
  cudaStream_t app;
  ASSERT_EQ(cudaStreamCreateWithFlags(&app, cudaStreamNonBlocking), 0);
  ASSERT_EQ(cudaMemsetAsync(d.p, 0x3f, n * 4, app), 0);  // what the application's step wrote
  const std::string objects = *SerializeObjects(layout->objects);
  ASSERT_TRUE((*l1)->Capture(2, 1, 0, 1, objects, app).ok());
  EXPECT_EQ((*l1)->CompleteSteps(), std::vector<uint64_t>{2});
  const char* area = (*l1)->payload(2) + layout->replicated[0].offset;
  std::vector<char> want(n * 4, 0x3f);
  EXPECT_EQ(std::memcmp(area, want.data(), want.size()), 0) << "copied before the stream's work";
  // Changed after the snapshot, restored from it.
  ASSERT_EQ(cudaMemset(d.p, 0, n * 4), 0);
  Status restored = (*l1)->Restore(2);
  ASSERT_TRUE(restored.ok()) << restored;
  std::vector<float> back = d.Get(n);
  EXPECT_EQ(std::memcmp(back.data(), want.data(), want.size()), 0);
  // A damaged byte of the device tensor's bytes is caught by the host-side checksum.
  (*l1)->payload(2)[layout->replicated[0].offset + 12345] ^= 1;
  EXPECT_EQ((*l1)->Restore(2).code(), StatusCode::kDataLoss);
  cudaStreamDestroy(app);
}

// A collective of host buffers on `c`: as it is on Gloo, staged through device buffers on NCCL
// (enqueued on the step's stream and waited for).
Status Staged(StepContext& c, const float* send, float* recv, size_t send_n, size_t recv_n,
              const std::function<Status(const void*, void*, const CallOptions&)>& call) {
  CallOptions o;
  o.stream = c.stream;
  if (c.comm->memory() == MemoryKind::kHost) return call(send, recv, o);
  DeviceBuffer s(send_n), r(recv_n);
  cudaMemcpy(s.p, send, send_n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(r.p, recv, recv_n * 4, cudaMemcpyHostToDevice);
  RTFT_RETURN_IF_ERROR(call(s.p, r.p, o));
  RTFT_RETURN_IF_ERROR(c.comm->Wait(c.stream, std::chrono::milliseconds(30000)));
  return cudaMemcpy(recv, r.p, recv_n * 4, cudaMemcpyDeviceToHost) == cudaSuccess
             ? Status::Ok()
             : Status::Internal("D2H");
}

// A rank's model on the GPU: parameters and its shard of a moment in device memory, the
// arithmetic staged through the host, the gradients reduced and the parameters gathered on the
// training communicator (Gloo, host-staged; or NCCL).
class DeviceModel {
 public:
  DeviceModel() : params_(kParams) { params_.Set(std::vector<float>(kParams, 0.5f)); }
  std::shared_ptr<StateProvider> Describe(int world, int rank) {
    split_ = SplitEvenly(kParams, world, rank);
    moment_ = std::make_unique<DeviceBuffer>(split_.count);
    moment_->Set(std::vector<float>(split_.count, 0.0f));
    auto state = std::make_shared<CompositeProvider>();
    TensorDesc p{"params", DType::kFloat32, {kParams}, params_.p};
    p.memory = MemoryKind::kDevice;
    state->AddTensor(p);
    TensorDesc m = EvenShard("moment", DType::kFloat32, {kParams}, world, rank);
    m.data = moment_->p;
    m.memory = MemoryKind::kDevice;
    state->AddTensor(m);
    return state;
  }
  Status Compute(StepContext& c) {
    const std::vector<float> p = params_.Get(kParams);
    std::vector<float> mine(kParams);
    for (int64_t i = 0; i < kParams; ++i)
      mine[i] = std::sin(0.001f * i + c.step) * (c.rank + 1) + p[i] * 0.01f;
    grad_.assign(kParams, 0.0f);
    return Staged(c, mine.data(), grad_.data(), kParams, kParams,
                  [&](const void* s, void* r, const CallOptions& o) {
                    return c.comm->AllReduce(s, r, kParams, DType::kFloat32, ReduceOp::kSum, o);
                  });
  }
  Status Update(StepContext& c) {
    std::vector<float> p = params_.Get(kParams), m = moment_->Get(split_.count);
    for (int64_t i = 0; i < split_.count; ++i) {
      m[i] = 0.9f * m[i] + grad_[split_.offset + i];
      p[split_.offset + i] -= 0.001f * m[i];
    }
    moment_->Set(m);
    std::vector<size_t> counts;
    for (int r = 0; r < c.world_size; ++r)
      counts.push_back(SplitEvenly(kParams, c.world_size, r).count);
    std::vector<float> mine(p.begin() + split_.offset, p.begin() + split_.offset + split_.count);
    RTFT_RETURN_IF_ERROR(Staged(c, mine.data(), p.data(), mine.size(), kParams,
                                [&](const void* s, void* r, const CallOptions& o) {
                                  return c.comm->AllGatherV(s, r, counts, DType::kFloat32, o);
                                }));
    params_.Set(p);
    return Status::Ok();
  }
  uint64_t Digest() const {
    const std::vector<float> p = params_.Get(kParams), m = moment_->Get(split_.count);
    return Xxh3(p.data(), p.size() * 4) ^ (Xxh3(m.data(), m.size() * 4) * 31);
  }

 private:
  DeviceBuffer params_;
  std::unique_ptr<DeviceBuffer> moment_;
  std::vector<float> grad_;
  EvenSplit split_;
};

struct Result {
  Status status;
  uint64_t digest = 0;
  int recovered = 0;
};

Result RunRank(FakeJob* job, int rank, RuntimeRole role, const std::string& dir,
               const std::function<Status(StepContext&)>& hook, CommBackend backend) {
  cudaSetDevice(0);
  auto rt = job->Rank(rank, role);
  ProtectOptions o;
  o.shm_dir = dir;
  o.backend = backend;
  auto p = Protector::Create(rt.get(), o);
  if (!p.ok()) return {p.status()};
  DeviceModel model;
  Status s = (*p)->Protect(model.Describe(job->world(), rank));
  if (!s.ok()) return {s};
  Result out;
  auto run = (*p)->Run(kSteps, {[&](StepContext& c) -> Status {
                                  if (c.recovered) ++out.recovered;
                                  if (hook) RTFT_RETURN_IF_ERROR(hook(c));
                                  return model.Compute(c);
                                },
                                [&](StepContext& c) { return model.Update(c); }});
  out.status = run.status();
  out.digest = model.Digest();
  return out;
}

// `world` ranks on the GPU; rank `victim` dies in step 4 and `replacement` takes its place.
std::vector<Result> Job(DirTest* t, const std::string& name, int world, int victim,
                        RuntimeRole replacement, CommBackend backend = CommBackend::kGloo) {
  FakeJob job(world);
  std::vector<Result> results(world);
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false, dead = false;
  auto die = [&](StepContext& c) -> Status {
    if (c.step != 4) return Status::Ok();
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return dead; });
    return Status::Internal("killed by the test");
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      results[r] =
          RunRank(&job, r, RuntimeRole::kInitial, t->Dir(name + std::to_string(r)),
                  r == victim ? std::function<Status(StepContext&)>(die) : nullptr, backend);
    });
  if (victim >= 0) {
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
    EXPECT_EQ(results[victim].status.code(), StatusCode::kInternal);
    const std::string dir = replacement == RuntimeRole::kRestarted
                                ? t->Dir(name + std::to_string(victim))
                                : t->Dir(name + "spare");
    threads[victim] = std::thread(
        [&, dir] { results[victim] = RunRank(&job, victim, replacement, dir, nullptr, backend); });
  }
  for (auto& th : threads) th.join();
  return results;
}

TEST_F(DirTest, RanksSharingTheGpuSurviveALostRankAndACrashWithTheBitsOfARunWithoutThem) {
  RTFT_REQUIRE_GPU();
  const std::vector<Result> want = Job(this, "ref", 2, -1, RuntimeRole::kInitial);
  for (const Result& r : want) ASSERT_TRUE(r.status.ok()) << r.status;
  for (RuntimeRole role : {RuntimeRole::kSpareActivated, RuntimeRole::kRestarted}) {
    const std::vector<Result> got =
        Job(this, role == RuntimeRole::kRestarted ? "crash" : "lost", 2, 1, role);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(got[r].status.ok())
          << RuntimeRoleName(role) << " rank " << r << ": " << got[r].status;
      EXPECT_EQ(got[r].digest, want[r].digest) << RuntimeRoleName(role) << " rank " << r;
      EXPECT_EQ(got[r].recovered, 1) << RuntimeRoleName(role) << " rank " << r;
    }
  }
}

TEST_F(DirTest, AOneRankNcclCommunicatorIsMadeAgainInTheNextEpoch) {
  RTFT_REQUIRE_GPU();
  if (!CommBackendAvailable(CommBackend::kNccl)) GTEST_SKIP() << "built without NCCL";
  // The training communicator is NCCL (the model's collectives staged through device buffers),
  // aborted at the failure event; the restarted process's next epoch makes a new one.
  const std::vector<Result> want = Job(this, "nccl-ref", 1, -1, RuntimeRole::kInitial);
  ASSERT_TRUE(want[0].status.ok()) << want[0].status;
  const std::vector<Result> got =
      Job(this, "nccl", 1, 0, RuntimeRole::kRestarted, CommBackend::kNccl);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[0].digest, want[0].digest);
  EXPECT_EQ(got[0].recovered, 1);
}

}  // namespace
}  // namespace rtft::protect::test
