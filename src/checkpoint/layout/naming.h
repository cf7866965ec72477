// The one place that owns checkpoint file and directory names (docs/format.md, "Directory").
//   <root>/LATEST                         text: the newest committed version number
//   <root>/v<12 digits>/rank-<5 digits>.h5   one HDF5 file per rank
//   <root>/v<12 digits>/MANIFEST.json     global manifest; written last, marks the version complete
// Files are written under "<name>.tmp" and renamed into place.
#pragma once

#include <cstdint>
#include <string>

namespace rtft {

std::string VersionDirName(uint64_t version);
bool ParseVersionDirName(const std::string& name, uint64_t* version);
std::string VersionDir(const std::string& root, uint64_t version);
std::string RankFileName(int rank);
bool ParseRankFileName(const std::string& name, int* rank);
std::string RankFilePath(const std::string& root, uint64_t version, int rank);
std::string GlobalManifestPath(const std::string& root, uint64_t version);
std::string LatestPath(const std::string& root);
std::string TempPath(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
std::string DirName(const std::string& path);

}  // namespace rtft
