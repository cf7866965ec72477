#include "checkpoint/layout/naming.h"

#include <cstdio>
#include <cstdlib>

namespace rtft {
namespace {
constexpr int kVersionDigits = 12;
constexpr int kRankDigits = 5;

bool AllDigits(const std::string& s, size_t from, size_t count) {
  if (s.size() < from + count) return false;
  for (size_t i = from; i < from + count; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
}  // namespace

std::string VersionDirName(uint64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "v%0*llu", kVersionDigits,
                static_cast<unsigned long long>(version));
  return buf;
}

bool ParseVersionDirName(const std::string& name, uint64_t* version) {
  if (name.size() != 1 + kVersionDigits || name[0] != 'v' || !AllDigits(name, 1, kVersionDigits))
    return false;
  *version = std::strtoull(name.c_str() + 1, nullptr, 10);
  return true;
}

std::string VersionDir(const std::string& root, uint64_t version) {
  return JoinPath(root, VersionDirName(version));
}

std::string RankFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%0*d.h5", kRankDigits, rank);
  return buf;
}

bool ParseRankFileName(const std::string& name, int* rank) {
  const size_t n = 5 + kRankDigits + 3;  // "rank-" digits ".h5"
  if (name.size() != n || name.compare(0, 5, "rank-") != 0 || !AllDigits(name, 5, kRankDigits) ||
      name.compare(5 + kRankDigits, 3, ".h5") != 0)
    return false;
  *rank = std::atoi(name.c_str() + 5);
  return true;
}

std::string RankFilePath(const std::string& root, uint64_t version, int rank) {
  return JoinPath(VersionDir(root, version), RankFileName(rank));
}

std::string GlobalManifestPath(const std::string& root, uint64_t version) {
  return JoinPath(VersionDir(root, version), "MANIFEST.json");
}

std::string LatestPath(const std::string& root) { return JoinPath(root, "LATEST"); }
std::string TempPath(const std::string& path) { return path + ".tmp"; }

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace rtft
