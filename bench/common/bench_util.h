// Helpers shared by the rtft-bench subcommands: timing, medians, JSON lines on stdout, progress
// on stderr, scratch directories, page-cache dropping and aligned buffers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtft/status.h"

namespace rtft::bench {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
// Decimal GB/s, as disks and PCIe are quoted.
inline double Gbps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}
double Median(std::vector<double> values);

// One line of human-readable progress on stderr.
void Progress(const std::string& line);

// Prints each result as one JSON object per line on stdout (flushed at once, so a killed run
// keeps what it measured) and keeps them for a plot.
class JsonLines {
 public:
  void Emit(const nlohmann::json& object);
  const std::vector<nlohmann::json>& lines() const { return lines_; }

 private:
  std::vector<nlohmann::json> lines_;
};

// A fresh directory `<parent>/rtft-bench-XXXXXX`.
StatusOr<std::string> MakeScratchDir(const std::string& parent);
// rm -rf; OK when absent.
Status RemoveTree(const std::string& path);
// A directory that must exist, created if needed (mkdir -p).
Status EnsureDir(const std::string& path);
// Syncs, then asks the kernel to drop clean page-cache pages (root only). Returns whether the
// cache was dropped; failure is normal in containers and only makes runs less comparable.
bool DropPageCache();
// Raises the soft limit on open descriptors to the hard one (simulations of thousands of agents
// or ranks in one process need that many sockets); returns the soft limit now in force.
uint64_t RaiseFileLimit();

// "1G,4G,16G" -> bytes; "4,64,4096" -> counts.
StatusOr<std::vector<uint64_t>> ParseByteList(const std::string& text);
StatusOr<std::vector<uint64_t>> ParseCountList(const std::string& text);
// "one,two" -> {"one", "two"}, each one of `allowed`; empty or an unknown word: InvalidArgument.
StatusOr<std::vector<std::string>> ParseChoiceList(const std::string& text,
                                                   const std::vector<std::string>& allowed);
// "0-1,4" -> {0, 1, 4}: CPU numbers as taskset(1) takes them, each below CPU_SETSIZE, sorted,
// without repeats.
StatusOr<std::vector<int>> ParseCpuList(const std::string& text);

// Page-aligned memory whose pages are touched at allocation, so first-touch faults never land
// inside a measurement.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Fills the memory with a non-zero pattern seeded by `seed` (zero pages compress or dedupe).
  static StatusOr<AlignedBuffer> Allocate(size_t bytes, uint32_t seed);
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rtft::bench
