// The naive baseline, shaped like torch.save: for each tensor, a blocking copy into freshly
// allocated pageable memory (cudaMemcpy for device tensors), then a small header and the bytes
// appended to one buffered stream; fflush and fsync at the end. The caller waits for all of it.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"

namespace rtft::bench {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// The record header a pickler would emit: name, dtype, shape, byte count.
std::string Header(const TensorDesc& t) {
  std::string h = t.name + " " + DTypeName(t.dtype) + " [";
  for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
  return h + "] " + std::to_string(t.bytes()) + "\n";
}

Status CopyOut(const TensorDesc& t, char* dst) {
  if (t.memory == MemoryKind::kDevice) return GpuCopyToHost(dst, t.data, t.bytes());
  std::memcpy(dst, t.data, t.bytes());
  return Status::Ok();
}

Status WriteAll(FILE* f, const void* data, size_t n, const std::string& path) {
  if (std::fwrite(data, 1, n, f) != n) return Status::FromErrno(errno, "writing " + path);
  return Status::Ok();
}

}  // namespace

StatusOr<VariantResult> RunNaive(const BenchState& state, const VariantConfig& config) {
  const std::string path = config.dir + "/naive.pt";
  VariantResult r;
  r.io = "stdio";
  const auto start = Clock::now();
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f) return Status::FromErrno(errno, "creating " + path);
  for (const TensorDesc& t : state.tensors()) {
    const auto copy_start = Clock::now();
    std::unique_ptr<char, FreeDeleter> copy(static_cast<char*>(std::malloc(t.bytes())));
    if (!copy) return Status::ResourceExhausted("malloc of " + std::to_string(t.bytes()));
    RTFT_RETURN_IF_ERROR(CopyOut(t, copy.get()));
    r.capture_s += SecondsSince(copy_start);
    const std::string header = Header(t);
    RTFT_RETURN_IF_ERROR(WriteAll(f.get(), header.data(), header.size(), path));
    RTFT_RETURN_IF_ERROR(WriteAll(f.get(), copy.get(), t.bytes(), path));
  }
  if (std::fflush(f.get()) != 0) return Status::FromErrno(errno, "flushing " + path);
  if (::fsync(::fileno(f.get())) != 0) return Status::FromErrno(errno, "fsync of " + path);
  if (std::fclose(f.release()) != 0) return Status::FromErrno(errno, "closing " + path);
  r.persist_s = r.blocking_s = SecondsSince(start);
  if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "removing " + path);
  return r;
}

}  // namespace rtft::bench
