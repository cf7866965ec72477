// GpuModel::Create: loads the CUDA model (librtft-train-gpu.so, gpu_model.cu) the first time a
// model is made, from the library folder next to rtft-train's (../lib in the build tree, the
// install's library folder once installed), else wherever the dynamic linker finds it.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_model.h"

namespace train {
namespace {

// The folder of the running executable, with a trailing '/'; empty when /proc does not say.
std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  const std::string exe(path, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash + 1);
}

rtft::StatusOr<MakeGpuModelFn> Load() {
  std::string errors;
  const std::string dir = ExecutableDir();
  std::vector<std::string> candidates;
  if (!dir.empty()) {
    candidates.push_back(dir + "../lib/" + kGpuModelModule);
#ifdef RTFT_TRAIN_INSTALL_LIBDIR_FROM_BINDIR
    const std::string installed =
        dir + RTFT_TRAIN_INSTALL_LIBDIR_FROM_BINDIR + "/" + kGpuModelModule;
    if (installed != candidates.back()) candidates.push_back(installed);
#endif
  }
  candidates.push_back(kGpuModelModule);
  for (const std::string& path : candidates) {
    // RTLD_NOW: a module whose CUDA libraries are missing fails here, not at its first call.
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* why = dlerror();
      errors += "\n  " + (why ? std::string(why) : path + ": not loaded");
      continue;
    }
    void* make = dlsym(module, kMakeGpuModelSymbol);
    if (make == nullptr)
      return rtft::Status::FailedPrecondition(path + " has no " + kMakeGpuModelSymbol +
                                              ": not rtft-train's CUDA model");
    return reinterpret_cast<MakeGpuModelFn>(make);
  }
  return rtft::Status::Unimplemented(
      std::string("--device cuda: rtft-train's CUDA model (") + kGpuModelModule +
      ") was not found; it is built where rt-ft is built with CUDA (RTFT_WITH_CUDA)" + errors);
}

}  // namespace

rtft::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const ModelShape& shape, uint64_t seed,
                                                           int device, int batch) {
  // Loaded once per process and never unloaded: its CUDA state lives until the process ends.
  static std::once_flag once;
  static rtft::StatusOr<MakeGpuModelFn> make = rtft::Status::Internal("not loaded");
  std::call_once(once, [] { make = Load(); });
  if (!make.ok()) return make.status();
  rtft::StatusOr<std::unique_ptr<GpuModel>> model = rtft::Status::Internal("no model made");
  (*make)(&shape, seed, device, batch, &model);
  return model;
}

}  // namespace train
