#include "blocking_save.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

namespace train {
namespace {

rtft::Status Errno(const std::string& what, const std::string& path) {
  return rtft::Status::Internal(what + " " + path + ": " + std::strerror(errno));
}

rtft::Status WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("writing", path);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return rtft::Status::Ok();
}

}  // namespace

rtft::Status BlockingSave(const rtft::StateProvider& state, GpuModel* gpu,
                          const std::string& path) {
  rtft::StateDescription d;
  RTFT_RETURN_IF_ERROR(state.Describe(&d));
  std::error_code made;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), made);
  if (made) return rtft::Status::Internal("creating the folder of " + path + ": " + made.message());
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", tmp);
  rtft::Status s;
  std::vector<char> host;  // pageable, as torch.save's copy of a CUDA tensor is
  for (const rtft::TensorDesc& t : d.tensors) {
    if (!s.ok()) break;
    const void* data = t.data;
    if (t.memory == rtft::MemoryKind::kDevice) {
      if (gpu == nullptr) {
        s = rtft::Status::Internal("'" + t.name + "' is in device memory and no GPU is in use");
        break;
      }
      host.resize(t.bytes());
      s = gpu->Copy(host.data(), t.data, t.bytes());
      data = host.data();
    }
    if (s.ok()) s = WriteAll(fd, data, t.bytes(), tmp);
  }
  for (const rtft::ObjectDesc& o : d.objects) {
    if (!s.ok()) break;
    auto bytes = o.serialize();
    s = bytes.ok() ? WriteAll(fd, bytes->data(), bytes->size(), tmp) : bytes.status();
  }
  if (s.ok() && ::fsync(fd) != 0) s = Errno("syncing", tmp);
  if (::close(fd) != 0 && s.ok()) s = Errno("closing", tmp);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("renaming", tmp);
  if (!s.ok()) (void)std::remove(tmp.c_str());
  return s;
}

}  // namespace train
