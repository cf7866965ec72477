#include "checkpoint/read/versions.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "checkpoint/commit/commit.h"
#include "checkpoint/layout/naming.h"
#include "core/checksum.h"
#include "core/params.h"
#include "rtft/checkpoint.h"

namespace rtft {
namespace {

// A version number and a newline, with room to spare.
constexpr uint64_t kMaxLatestBytes = 4096;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string VersionName(uint64_t version, const std::string& root) {
  return "version " + std::to_string(version) + " of " + root;
}

// LATEST holds a decimal number, perhaps followed by a newline.
bool ParseLatest(std::string text, uint64_t* version) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  if (text.empty() || text.size() > 20) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  errno = 0;
  *version = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0;
}

// A file name from MANIFEST.json must stay inside the version directory.
bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

Status CheckFileAgainstGlobal(const CheckpointFileReader& reader, const GlobalFileEntry& entry,
                              const GlobalManifest& global) {
  const std::string& path = reader.path();
  if (reader.file_size() != entry.bytes)
    return Status::DataLoss(path + " is " + std::to_string(reader.file_size()) +
                            " bytes, but MANIFEST.json says " + std::to_string(entry.bytes) +
                            " (truncated or replaced)");
  const std::string& json = reader.manifest_json();
  if (Xxh3(json.data(), json.size()) != entry.manifest_xxh3)
    return Status::DataLoss("the manifest of " + path +
                            " does not match MANIFEST.json (file replaced or damaged)");
  const FileManifest& m = reader.manifest();
  if (m.version != global.version || m.rank != entry.rank || m.world_size != global.world_size)
    return Status::DataLoss(
        path + " holds version " + std::to_string(m.version) + ", rank " + std::to_string(m.rank) +
        " of " + std::to_string(m.world_size) + ", but MANIFEST.json lists it as version " +
        std::to_string(global.version) + ", rank " + std::to_string(entry.rank) + " of " +
        std::to_string(global.world_size));
  if (m.format_version > global.format_version)
    return Status::DataLoss(path + " has format version " + std::to_string(m.format_version) +
                            ", newer than its version's MANIFEST.json (" +
                            std::to_string(global.format_version) + ")");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<IoBackend>> CreateReadBackend() {
  IoBackendOptions options;
  options.kind = ParamString(Param::kCkptIoBackend);
  auto depth = ParamInt(Param::kCkptIoDepth);
  if (depth.ok() && *depth > 0) options.queue_depth = static_cast<int>(*depth);
  return CreateIoBackend(options);
}

Status CheckRootExists(const std::string& root) {
  if (IsDirectory(root)) return Status::Ok();
  struct stat st;
  if (::stat(root.c_str(), &st) == 0)
    return Status::InvalidArgument("checkpoint directory " + root + " is not a directory");
  return Status::FromErrno(errno, "checkpoint directory " + root);
}

StatusOr<GlobalManifest> ReadGlobalManifest(IoBackend* io, const std::string& root,
                                            uint64_t version) {
  RTFT_RETURN_IF_ERROR(CheckRootExists(root));
  if (!IsDirectory(VersionDir(root, version)))
    return Status::NotFound(VersionName(version, root) + " does not exist (no directory " +
                            VersionDir(root, version) + ")");
  const std::string path = GlobalManifestPath(root, version);
  auto text = ReadSmallFile(io, path);
  if (text.status().code() == StatusCode::kNotFound)
    return Status::DataLoss(VersionName(version, root) +
                            " is incomplete: it has no MANIFEST.json (not every rank's file was "
                            "committed)");
  if (!text.ok()) return text.status();
  auto global = GlobalManifest::FromJson(*text);
  if (!global.ok()) return global.status().Annotate(path);
  if (global->version != version)
    return Status::DataLoss(path + " describes version " + std::to_string(global->version));
  return global;
}

StatusOr<std::vector<std::unique_ptr<CheckpointFileReader>>> OpenVersionFiles(
    IoBackend* io, const std::string& root, const GlobalManifest& global) {
  std::map<int, const GlobalFileEntry*> by_rank;
  for (const GlobalFileEntry& f : global.files) {
    if (f.rank < 0 || f.rank >= global.world_size || !by_rank.emplace(f.rank, &f).second)
      return Status::DataLoss("MANIFEST.json of " + VersionName(global.version, root) +
                              " lists rank " + std::to_string(f.rank) + " twice or out of range");
    if (!PlainFileName(f.file))
      return Status::DataLoss("MANIFEST.json of " + VersionName(global.version, root) +
                              " names file '" + f.file + "' outside the version directory");
  }
  std::vector<std::unique_ptr<CheckpointFileReader>> readers;
  for (const auto& [rank, entry] : by_rank) {
    const std::string path = JoinPath(VersionDir(root, global.version), entry->file);
    auto reader = CheckpointFileReader::Open(path, io);
    if (reader.status().code() == StatusCode::kNotFound)
      return Status::DataLoss(VersionName(global.version, root) + " is damaged: rank " +
                              std::to_string(rank) + "'s file " + path +
                              " is missing although MANIFEST.json lists it");
    if (!reader.ok()) return reader.status();
    RTFT_RETURN_IF_ERROR(CheckFileAgainstGlobal(**reader, *entry, global));
    readers.push_back(std::move(reader).value());
  }
  return readers;
}

StatusOr<std::vector<VersionInfo>> ListVersions(const std::string& dir) {
  RTFT_RETURN_IF_ERROR(CheckRootExists(dir));
  RTFT_ASSIGN_OR_RETURN(auto io, CreateReadBackend());
  std::vector<VersionInfo> versions;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    VersionInfo info;
    if (!ParseVersionDirName(entry.path().filename().string(), &info.version) ||
        !entry.is_directory(ec))
      continue;
    info.path = VersionDir(dir, info.version);
    auto global = ReadGlobalManifest(io.get(), dir, info.version);
    if (global.ok()) {
      info.complete = true;
      info.world_size = global->world_size;
      info.marks = global->marks;
    }
    versions.push_back(std::move(info));
  }
  if (ec) return Status::FromErrno(ec.value(), "listing checkpoint directory " + dir);
  std::sort(versions.begin(), versions.end(),
            [](const VersionInfo& a, const VersionInfo& b) { return a.version < b.version; });
  return versions;
}

StatusOr<uint64_t> LatestVersion(const std::string& dir) {
  RTFT_RETURN_IF_ERROR(CheckRootExists(dir));
  RTFT_ASSIGN_OR_RETURN(auto io, CreateReadBackend());
  const std::string path = LatestPath(dir);
  auto file = io->Open(path, {OpenMode::kReadOnly, false});
  if (file.status().code() == StatusCode::kNotFound)
    return Status::NotFound("no version of " + dir + " was committed yet (no LATEST file)");
  if (!file.ok()) return file.status();
  RTFT_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
  if (size > kMaxLatestBytes)
    return Status::DataLoss(path + " is damaged: too large for a version number");
  RTFT_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(file->get(), kMaxLatestBytes));
  uint64_t version = 0;
  // Its bytes are not shown: LATEST may be a link to a file that is none of our business.
  if (!ParseLatest(text, &version))
    return Status::DataLoss(path + " is damaged: its " + std::to_string(text.size()) +
                            " bytes are not a decimal version number");
  auto global = ReadGlobalManifest(io.get(), dir, version);
  if (!global.ok())
    return Status::DataLoss("LATEST of " + dir + " names version " + std::to_string(version) +
                            ", which is not a complete version: " + global.status().message());
  return version;
}

}  // namespace rtft
