#include "bench/common/bench_util.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/params.h"

namespace rtft::bench {

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void Progress(const std::string& line) { std::cerr << "[rtft-bench] " << line << std::endl; }

void JsonLines::Emit(const nlohmann::json& object) {
  std::cout << object.dump() << std::endl;
  lines_.push_back(object);
}

StatusOr<std::string> MakeScratchDir(const std::string& parent) {
  std::string pattern = parent + "/rtft-bench-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return Status::FromErrno(errno, "creating a scratch directory under " + parent);
  return std::string(buf.data());
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::IoError("removing " + path + ": " + ec.message());
  return Status::Ok();
}

Status EnsureDir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::IoError("creating " + path + ": " + ec.message());
  return Status::Ok();
}

uint64_t RaiseFileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    ::getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur;
}

bool DropPageCache() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "3\n", 2) == 2;
  ::close(fd);
  return ok;
}

namespace {
template <typename ParseOne>
StatusOr<std::vector<uint64_t>> ParseList(const std::string& text, ParseOne parse_one) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    RTFT_ASSIGN_OR_RETURN(uint64_t v, parse_one(item));
    if (v == 0) return Status::InvalidArgument("zero in list '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) return Status::InvalidArgument("empty list '" + text + "'");
  return out;
}
}  // namespace

StatusOr<std::vector<uint64_t>> ParseByteList(const std::string& text) {
  return ParseList(text, [](const std::string& s) { return ParseBytes(s); });
}

StatusOr<std::vector<std::string>> ParseChoiceList(const std::string& text,
                                                   const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  std::string rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string word = rest.substr(0, comma);
    if (std::find(allowed.begin(), allowed.end(), word) == allowed.end())
      return Status::InvalidArgument("'" + word + "' is not one of the choices");
    out.push_back(word);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  if (out.empty()) return Status::InvalidArgument("an empty list");
  return out;
}

StatusOr<std::vector<uint64_t>> ParseCountList(const std::string& text) {
  return ParseList(text, [](const std::string& s) -> StatusOr<uint64_t> {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (errno != 0 || end == s.c_str() || *end != '\0' || s[0] == '-')
      return Status::InvalidArgument("'" + s + "' is not a count");
    return static_cast<uint64_t>(v);
  });
}

StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  auto number = [](const std::string& s) -> StatusOr<int> {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || s[0] < '0' || s[0] > '9' || errno != 0 || *end != '\0' || v < 0 ||
        v >= CPU_SETSIZE)
      return Status::InvalidArgument("'" + s + "' is not a CPU number (0.." +
                                     std::to_string(CPU_SETSIZE - 1) + ")");
    return static_cast<int>(v);
  };
  std::vector<int> cpus;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const size_t dash = item.find('-');
    RTFT_ASSIGN_OR_RETURN(int lo, number(item.substr(0, dash)));
    int hi = lo;
    if (dash != std::string::npos) {
      RTFT_ASSIGN_OR_RETURN(hi, number(item.substr(dash + 1)));
    }
    if (hi < lo) return Status::InvalidArgument("'" + item + "' is an empty range");
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    at = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes, uint32_t seed) {
  constexpr size_t kAlign = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) return Status::ResourceExhausted("cannot allocate " + FormatBytes(rounded));
  // A cheap non-repeating pattern: one 64-bit word per step of an LCG.
  auto* words = static_cast<uint64_t*>(p);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  for (size_t i = 0; i < rounded / sizeof(uint64_t); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    words[i] = x;
  }
  AlignedBuffer b;
  b.data_ = static_cast<char*>(p);
  b.size_ = bytes;
  return b;
}

}  // namespace rtft::bench
