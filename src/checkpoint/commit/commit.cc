#include "checkpoint/commit/commit.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/layout/naming.h"
#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"

namespace rtft {
namespace {

// The version directories under root, ascending; unreadable entries are skipped.
std::vector<uint64_t> VersionsOnDisk(const std::string& root) {
  std::vector<uint64_t> versions;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    uint64_t v;
    if (entry.is_directory(ec) && ParseVersionDirName(entry.path().filename().string(), &v))
      versions.push_back(v);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// A rank's file of this write of `version`, opened once and read through that descriptor (size,
// manifest), with its manifest's JSON and the manifest.
struct RankFile {
  std::unique_ptr<File> file;
  std::string json;
  FileManifest manifest;
};

// A rank's file appears only by rename after it is durable, so a file that opens is done. With a
// nonzero `write_id` it is this write's only when its manifest says so: a file an earlier write
// of the version left (an epoch that ended, a run that crashed) is waited past until this write's
// file is renamed over it.
StatusOr<RankFile> WaitForRankFile(IoBackend* io, const std::string& path, uint64_t version,
                                   int rank, std::chrono::steady_clock::time_point deadline,
                                   const std::atomic<bool>* abandon, uint64_t write_id) {
  uint64_t other_write = 0;  // the id of an earlier write's file seen at `path`
  for (;;) {
    StatusOr<std::unique_ptr<File>> file = io->Open(path, {OpenMode::kReadOnly, false});
    if (file.ok()) {
      RankFile got;
      got.file = std::move(*file);
      StatusOr<std::string> json = ReadFileManifestJson(got.file.get());
      StatusOr<FileManifest> m =
          json.ok() ? FileManifest::FromJson(*json) : StatusOr<FileManifest>(json.status());
      // Without a write id every file of the version is this write's, and one that cannot be
      // read fails the commit; with one, such a file is another write's, waited past.
      if (write_id == 0 && !m.ok()) return m.status();
      if (m.ok() && (write_id == 0 || m->write_id == write_id)) {
        got.json = std::move(*json);
        got.manifest = std::move(*m);
        return got;
      }
      other_write = m.ok() ? m->write_id : 0;
    } else if (file.status().code() != StatusCode::kNotFound) {
      return file.status();
    }
    if (abandon != nullptr && abandon->load())
      return Status::Aborted("version " + std::to_string(version) + ": the commit was abandoned " +
                             "while waiting for rank " + std::to_string(rank) + "'s file");
    if (std::chrono::steady_clock::now() > deadline) {
      if (other_write != 0 || (write_id != 0 && file.ok()))
        return Status::DeadlineExceeded(
            "version " + std::to_string(version) + ": rank " + std::to_string(rank) + "'s file " +
            path + " is from another write of the version (write " + std::to_string(other_write) +
            ", this one's " + std::to_string(write_id) +
            ") and this write's did not replace it in time; the version is not committed");
      return Status::DeadlineExceeded("version " + std::to_string(version) + ": rank " +
                                      std::to_string(rank) + "'s file " + path +
                                      " did not appear in time; the version is not committed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Status WriteFileAtomically(IoBackend* io, const std::string& path, const std::string& content) {
  const std::string tmp = TempPath(path);
  {
    RTFT_ASSIGN_OR_RETURN(auto file, io->Open(tmp, OpenOptions{OpenMode::kCreate, false}));
    // IoRequest's buffer is non-const because reads share the type; a write only reads it.
    if (!content.empty())
      RTFT_RETURN_IF_ERROR(
          file->Write({IoRequest{0, const_cast<char*>(content.data()), content.size()}}));
    RTFT_RETURN_IF_ERROR(file->Sync());
    RTFT_RETURN_IF_ERROR(file->Close());
  }
  RTFT_RETURN_IF_ERROR(io->Rename(tmp, path));
  return io->SyncDir(DirName(path));
}

StatusOr<std::string> ReadSmallFile(IoBackend* io, const std::string& path, uint64_t max_bytes) {
  RTFT_ASSIGN_OR_RETURN(auto file, io->Open(path, OpenOptions{OpenMode::kReadOnly, false}));
  return ReadSmallFile(file.get(), max_bytes);
}

StatusOr<std::string> ReadSmallFile(File* file, uint64_t max_bytes) {
  RTFT_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > max_bytes)
    return Status::DataLoss(file->path() + " is " + std::to_string(size) +
                            " bytes, more than expected");
  std::string content(size, '\0');
  if (size > 0) RTFT_RETURN_IF_ERROR(file->Read({IoRequest{0, content.data(), content.size()}}));
  return content;
}

Status CommitVersion(IoBackend* io, const std::string& root, uint64_t version, int world_size,
                     std::chrono::milliseconds timeout, bool move_latest,
                     const std::atomic<bool>* abandon, uint64_t write_id) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  GlobalManifest global;
  global.version = version;
  global.world_size = world_size;
  std::vector<VersionMarks> marks;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = RankFilePath(root, version, rank);
    RTFT_ASSIGN_OR_RETURN(RankFile got,
                          WaitForRankFile(io, path, version, rank, deadline, abandon, write_id));
    const std::unique_ptr<File>& file = got.file;
    const std::string& json = got.json;
    const FileManifest& m = got.manifest;
    if (m.version != version || m.rank != rank || m.world_size != world_size)
      return Status::DataLoss(path + " belongs to version " + std::to_string(m.version) +
                              ", rank " + std::to_string(m.rank) + " of " +
                              std::to_string(m.world_size) + "; refusing to commit it");
    RTFT_ASSIGN_OR_RETURN(uint64_t bytes, file->Size());
    // The version's format is its newest file's: a reader too old for one file refuses the
    // version at MANIFEST.json, before it reads any file.
    global.format_version = std::max(global.format_version, m.format_version);
    global.files.push_back(
        GlobalFileEntry{rank, RankFileName(rank), bytes, Xxh3(json.data(), json.size())});
    marks.push_back(m.marks);
  }
  global.marks = CombineMarks(marks);
  global.created_unix_ms = NowUnixMs();
  RTFT_RETURN_IF_ERROR(WriteFileAtomically(io, GlobalManifestPath(root, version), global.ToJson()));
  FaultPoint("ckpt.committed");
  if (!move_latest) {
    RTFT_LOG(kInfo, kLogCkpt) << "committed version " << version
                              << " after a newer one; LATEST stays";
    return Status::Ok();
  }
  RTFT_RETURN_IF_ERROR(WriteFileAtomically(io, LatestPath(root), std::to_string(version) + "\n"));
  FaultPoint("ckpt.latest");
  RTFT_LOG(kInfo, kLogCkpt) << "committed version " << version << " (" << world_size << " ranks)";
  return Status::Ok();
}

Status PruneVersions(IoBackend* io, const std::string& root, int keep, uint64_t below) {
  if (keep <= 0) return Status::Ok();
  std::vector<uint64_t> versions = VersionsOnDisk(root);
  std::vector<uint64_t> complete;
  for (uint64_t v : versions)
    if (Exists(GlobalManifestPath(root, v))) complete.push_back(v);
  if (complete.size() <= static_cast<size_t>(keep)) return Status::Ok();
  const uint64_t oldest_kept = complete[complete.size() - keep];
  for (uint64_t v : versions) {
    if (v >= oldest_kept || v >= below) break;
    RTFT_LOG(kDebug, kLogCkpt) << "pruning version " << v;
    FaultPoint("ckpt.prune");
    RTFT_RETURN_IF_ERROR(io->RemoveAll(VersionDir(root, v)));
  }
  return Status::Ok();
}

}  // namespace rtft
