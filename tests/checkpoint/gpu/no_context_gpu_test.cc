// A state all in host memory, checkpointed and restored with CheckpointOptions::pin_pool = false,
// never makes the process create a CUDA context on a GPU node (a process holding one takes tens
// of milliseconds longer to die, time in which its crash cannot be seen, docs/protect.md). With
// pin_pool left true, the pool's registration does create one: the check itself works. Asked of
// the driver (cuDevicePrimaryCtxGetState, through dlopen: the library links no driver API). Its
// own process: a context, once made, stays. Skips where there is no CUDA driver or device.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <vector>

#include "engine_test_util.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

// Whether device 0's primary context is active, from the driver; nullopt without a driver/device.
struct Driver {
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using State = int (*)(int, unsigned*, int*);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  Init init = lib ? reinterpret_cast<Init>(dlsym(lib, "cuInit")) : nullptr;
  Get get = lib ? reinterpret_cast<Get>(dlsym(lib, "cuDeviceGet")) : nullptr;
  State state = lib ? reinterpret_cast<State>(dlsym(lib, "cuDevicePrimaryCtxGetState")) : nullptr;
  int device = -1;
  bool Usable() {
    if (!init || !get || !state || init(0) != 0) return false;
    return get(&device, 0) == 0;
  }
  bool ContextActive() {
    unsigned flags = 0;
    int active = 0;
    return state(device, &flags, &active) == 0 && active != 0;
  }
};

void CheckpointAndRestore(bool pin_pool) {
  TempDir dir;
  std::vector<float> w = Iota(1 << 20, 1);
  TensorProvider state(HostTensor("w", &w));
  CheckpointOptions o;
  o.dir = dir.path();
  o.pool_bytes = 8 << 20;
  o.chunk_bytes = 1 << 20;
  o.pin_pool = pin_pool;
  auto engine = CheckpointEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->Checkpoint(1, state).ok());
  ASSERT_TRUE((*engine)->WaitPersisted(1).ok());
  std::vector<float> back(w.size(), 0);
  TensorProvider into(HostTensor("w", &back));
  ASSERT_TRUE(Restore(dir.path(), RestoreOptions{}, into).ok());
  EXPECT_EQ(back, w);
}

TEST(NoCudaContext, AHostStateWithAnUnpinnedPoolMakesNoContext) {
  Driver driver;
  if (!driver.Usable()) GTEST_SKIP() << "no CUDA driver or device";
  ASSERT_FALSE(driver.ContextActive()) << "something made a context before the test";
  CheckpointAndRestore(/*pin_pool=*/false);
  EXPECT_FALSE(driver.ContextActive()) << "pin_pool = false still made a CUDA context";
  CheckpointAndRestore(/*pin_pool=*/true);
  EXPECT_TRUE(driver.ContextActive()) << "a registered pool made no context: the check is blind";
}

}  // namespace
}  // namespace rtft
