// A real GPU fault: a kernel writes out of bounds, the context is lost, and every rt-ft path that
// touches the device afterwards (capture, restore, the copier itself) returns kDeviceLost, with
// the way out in its message, instead of kInternal ("a bug in rt-ft"). A real out-of-memory is
// kResourceExhausted. Skips cleanly without a GPU; its own process, since the fault is sticky.
#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/capture/device_copy.h"
#include "core/build_config.h"
#include "core/cuda_status.h"
#include "engine_test_util.h"
#include "gpu/out_of_bounds.h"
#include "rtft/comm.h"
#include "test_util.h"

namespace rtft {
namespace {

void ExpectDeviceLost(const Status& s, const char* where) {
  EXPECT_EQ(s.code(), StatusCode::kDeviceLost) << where << ": " << s;
  EXPECT_NE(s.message().find("ReportDeviceError"), std::string::npos) << where << ": " << s;
}

TEST(DeviceError, AKernelFaultIsADeviceLostEverywhere) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  void* huge = nullptr;
  Status oom = CudaStatus(cudaMalloc(&huge, size_t{1} << 50), "cudaMalloc of 1 PiB");
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted) << oom;

  std::vector<float> host = Iota(1 << 20, 1);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  TensorDesc t = HostTensor("w", &host);
  t.data = device;
  t.memory = MemoryKind::kDevice;
  TensorProvider state(t);
  TempDir dir;
  CheckpointOptions o;
  o.dir = dir.path();
  o.pool_bytes = 16 << 20;
  o.chunk_bytes = 1 << 20;
  auto engine = CheckpointEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->Checkpoint(1, state).ok());
  ASSERT_TRUE((*engine)->WaitPersisted(1).ok());  // the device works before the fault
  auto copier = CreateDeviceCopier(0);
  ASSERT_TRUE(copier.ok()) << copier.status();

  ASSERT_EQ(testing::LaunchOutOfBoundsWrite(device), cudaSuccess);
  ExpectDeviceLost(CudaStatus(cudaDeviceSynchronize(), "the faulting kernel"), "synchronize");

  Status captured = (*engine)->Checkpoint(2, state);
  if (captured.ok()) captured = (*engine)->WaitCaptured(2);
  ExpectDeviceLost(captured, "checkpoint");
  ExpectDeviceLost(Restore(dir.path(), {}, state), "restore");
  std::vector<float> back(16);
  auto ticket = (*copier)->CopyToHost({CopyPiece{back.data(), device, 64}});
  ExpectDeviceLost(ticket.ok() ? (*ticket)->Wait() : ticket.status(), "copier");
  ExpectDeviceLost((*copier)->CopyToDevice(device, back.data(), 64), "copier H2D");
#if RTFT_WITH_NCCL
  // The communicators map CUDA's errors the same way: a new epoch's NCCL communicator on a lost
  // GPU says the slot must go, not that the call may be retried.
  auto store = NewLocalCommStore();
  CommOptions c;
  c.backend = CommBackend::kNccl;
  c.world_size = 1;
  c.name = "after-the-fault";
  c.store = store.get();
  ExpectDeviceLost(Communicator::Create(c).status(), "NCCL communicator");
#endif
}

}  // namespace
}  // namespace rtft
