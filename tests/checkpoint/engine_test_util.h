// Helpers for checkpoint engine tests: deterministic tensors, and reading a saved tensor's bytes
// straight from its file at the manifest's offset (independently of the restore code).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "core/checksum.h"
#include "rtft/checkpoint.h"

namespace rtft {

inline std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i) * 0.5f;
  return v;
}

inline TensorDesc HostTensor(const std::string& name, std::vector<float>* data) {
  TensorDesc t;
  t.name = name;
  t.dtype = DType::kFloat32;
  t.shape = {static_cast<int64_t>(data->size())};
  t.data = data->data();
  return t;
}

// The bytes of `tensor` as stored in `path`, or an empty vector when absent.
inline std::vector<char> StoredBytes(const std::string& path, const std::string& tensor) {
  auto m = ReadFileManifest(path);
  if (!m.ok()) return {};
  const TensorEntry* e = m->FindTensor(tensor);
  if (!e) return {};
  std::vector<char> out(e->bytes);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {};
  ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(e->offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(out.size())) return {};
  return out;
}

inline std::string ReadText(const std::string& path) {
  std::string s;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return s;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

}  // namespace rtft
