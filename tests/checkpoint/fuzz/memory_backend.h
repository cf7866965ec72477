// An I/O backend over memory, for the reader fuzzer: files are byte vectors keyed by path, so a
// run writes and reads a whole checkpoint file without touching a disk.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/io/io_backend.h"

namespace rtft::fuzz {

class MemoryFile : public File {
 public:
  MemoryFile(std::string path, std::shared_ptr<std::vector<char>> bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}

  Status Write(const std::vector<IoRequest>& requests) override {
    for (const IoRequest& r : requests) {
      if (r.offset + r.length > kMaxBytes) return Status::ResourceExhausted("memory file full");
      if (bytes_->size() < r.offset + r.length) bytes_->resize(r.offset + r.length);
      std::memcpy(bytes_->data() + r.offset, r.buffer, r.length);
    }
    return Status::Ok();
  }
  Status Read(const std::vector<IoRequest>& requests) override {
    for (const IoRequest& r : requests) {
      if (r.offset > bytes_->size() || r.length > bytes_->size() - r.offset)
        return Status::DataLoss("read past the end of " + path_);
      std::memcpy(r.buffer, bytes_->data() + r.offset, r.length);
    }
    return Status::Ok();
  }
  Status Truncate(uint64_t size) override {
    if (size > kMaxBytes) return Status::ResourceExhausted("memory file full");
    bytes_->resize(size);
    return Status::Ok();
  }
  Status Sync() override { return Status::Ok(); }
  Status Close() override { return Status::Ok(); }
  StatusOr<uint64_t> Size() override { return static_cast<uint64_t>(bytes_->size()); }
  bool direct() const override { return false; }
  const std::string& path() const override { return path_; }

 private:
  // HDF5 may be asked to allocate large datasets early: they stay sparse nowhere but here.
  static constexpr uint64_t kMaxBytes = 64ull << 20;
  std::string path_;
  std::shared_ptr<std::vector<char>> bytes_;
};

class MemoryBackend : public IoBackend {
 public:
  const char* name() const override { return "memory"; }
  StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                       const OpenOptions& options) override {
    auto it = files_.find(path);
    if (it == files_.end()) {
      if (options.mode != OpenMode::kCreate) return Status::NotFound(path + " does not exist");
      it = files_.emplace(path, std::make_shared<std::vector<char>>()).first;
    }
    if (options.mode == OpenMode::kCreate) it->second->clear();
    return std::unique_ptr<File>(new MemoryFile(path, it->second));
  }
  Status Rename(const std::string&, const std::string&) override { return Status::Ok(); }
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Status CreateDirs(const std::string&) override { return Status::Ok(); }
  Status Remove(const std::string& path) override {
    files_.erase(path);
    return Status::Ok();
  }
  Status RemoveAll(const std::string&) override { return Status::Ok(); }

  std::vector<char>* bytes(const std::string& path) {
    auto it = files_.find(path);
    return it == files_.end() ? nullptr : it->second.get();
  }

 private:
  std::map<std::string, std::shared_ptr<std::vector<char>>> files_;
};

}  // namespace rtft::fuzz
