#include "checkpoint/io/fault/fault_backend.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "core/params.h"

namespace rtft {
namespace {

// What every File and the backend share: the spec, the counters, and the byte budget, which
// spans all matching files because a disk fills up for all of them at once.
struct FaultState {
  FaultSpec spec;
  std::shared_ptr<FaultStats> stats;
  std::mutex mu;
  uint64_t budget_used = 0;  // guarded by mu; never above the limit

  bool Matches(const std::string& path) const {
    return spec.path_substring.empty() || path.find(spec.path_substring) != std::string::npos;
  }

  Status Inject(int err, const std::string& what) {
    stats->faults_injected.fetch_add(1);
    RTFT_LOG(kDebug, kLogIo) << "injecting " << std::strerror(err) << " into " << what;
    Status status = Status::FromErrno(err, what + " (injected fault)");
    if (spec.throw_instead) throw std::runtime_error(status.ToString());
    return status;
  }
};

uint64_t TotalBytes(const std::vector<IoRequest>& requests) {
  uint64_t total = 0;
  for (const IoRequest& r : requests) total += r.length;
  return total;
}

class FaultFile final : public File {
 public:
  FaultFile(std::unique_ptr<File> inner, std::shared_ptr<FaultState> state)
      : inner_(std::move(inner)), state_(std::move(state)), matches_(state_->Matches(path())) {}

  Status Write(const std::vector<IoRequest>& requests) override {
    const bool limited = matches_ && state_->spec.fail_writes_after_bytes >= 0;
    if (!limited) return WriteThrough(requests);
    std::vector<IoRequest> fits;
    uint64_t fault_offset = 0;
    bool fault = Plan(requests, &fits, &fault_offset);
    RTFT_RETURN_IF_ERROR(WriteThrough(fits));
    if (!fault) return Status::Ok();
    return state_->Inject(state_->spec.error,
                          "write " + path() + " at offset " + std::to_string(fault_offset) +
                              " after the limit of " +
                              std::to_string(state_->spec.fail_writes_after_bytes) + " bytes");
  }

  Status Read(const std::vector<IoRequest>& requests) override { return inner_->Read(requests); }

  Status Sync() override {
    if (matches_ && state_->spec.fail_sync) return state_->Inject(EIO, "fdatasync " + path());
    return inner_->Sync();
  }

  Status Truncate(uint64_t size) override { return inner_->Truncate(size); }
  Status Close() override { return inner_->Close(); }
  StatusOr<uint64_t> Size() override { return inner_->Size(); }
  bool direct() const override { return inner_->direct(); }
  const std::string& path() const override { return inner_->path(); }

 private:
  Status WriteThrough(const std::vector<IoRequest>& requests) {
    RTFT_RETURN_IF_ERROR(inner_->Write(requests));
    uint64_t bytes = TotalBytes(requests);
    state_->stats->bytes_written.fetch_add(bytes);
    if (matches_) state_->stats->matched_bytes_written.fetch_add(bytes);
    return Status::Ok();
  }

  // Reserves budget for the requests, in order, and puts what fits into `fits`. Returns true
  // when the limit stops one, with the offset of the first byte that did not fit.
  bool Plan(const std::vector<IoRequest>& requests, std::vector<IoRequest>* fits,
            uint64_t* fault_offset) {
    const uint64_t limit = static_cast<uint64_t>(state_->spec.fail_writes_after_bytes);
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const IoRequest& r : requests) {
      uint64_t left = limit - state_->budget_used;
      if (r.length <= left) {
        fits->push_back(r);
        state_->budget_used += r.length;
        continue;
      }
      uint64_t part = state_->spec.partial ? left : 0;
      // Direct I/O cannot end mid-block; neither does a device that runs out of space.
      if (inner_->direct()) part -= part % kDirectIoAlignment;
      if (part > 0) {
        fits->push_back({r.offset, r.buffer, static_cast<size_t>(part)});
        state_->budget_used += part;
      }
      *fault_offset = r.offset + part;
      return true;
    }
    return false;
  }

  std::unique_ptr<File> inner_;
  std::shared_ptr<FaultState> state_;
  const bool matches_;
};

class FaultBackend final : public IoBackend {
 public:
  FaultBackend(std::unique_ptr<IoBackend> inner, std::shared_ptr<FaultState> state)
      : inner_(std::move(inner)),
        state_(std::move(state)),
        name_(std::string("fault+") + inner_->name()) {}

  const char* name() const override { return name_.c_str(); }

  StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                       const OpenOptions& options) override {
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> file, inner_->Open(path, options));
    return std::unique_ptr<File>(new FaultFile(std::move(file), state_));
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (state_->spec.fail_rename && (state_->Matches(from) || state_->Matches(to))) {
      return state_->Inject(EIO, "rename " + from + " to " + to);
    }
    return inner_->Rename(from, to);
  }

  Status SyncDir(const std::string& dir) override {
    if (state_->spec.fail_sync_dir && state_->Matches(dir)) {
      return state_->Inject(EIO, "fsync directory " + dir);
    }
    return inner_->SyncDir(dir);
  }

  Status CreateDirs(const std::string& dir) override { return inner_->CreateDirs(dir); }
  Status Remove(const std::string& path) override { return inner_->Remove(path); }
  Status RemoveAll(const std::string& path) override { return inner_->RemoveAll(path); }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::shared_ptr<FaultState> state_;
  std::string name_;
};

StatusOr<int> ParseErrno(const std::string& text) {
  static const struct {
    const char* name;
    int value;
  } kNames[] = {{"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EIO", EIO},
                {"EROFS", EROFS},   {"EACCES", EACCES}, {"EPERM", EPERM}};
  for (const auto& n : kNames) {
    if (text == n.name) return n.value;
  }
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0' && v > 0 && v < 4096) return static_cast<int>(v);
  return Status::InvalidArgument("fault spec: '" + text +
                                 "' is not an errno (use ENOSPC, EDQUOT, EIO, EROFS, EACCES, "
                                 "EPERM or a positive number)");
}

StatusOr<int64_t> ParseLimit(const std::string& key, const std::string& value) {
  auto bytes = ParseBytes(value);
  if (!bytes.ok()) return bytes.status().Annotate("fault spec: " + key);
  if (*bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::OutOfRange("fault spec: " + key + "=" + value + " is too large");
  }
  return static_cast<int64_t>(*bytes);
}

// Applies one "key" or "key=value" item to `spec`.
Status ApplyItem(const std::string& item, FaultSpec* spec) {
  size_t eq = item.find('=');
  const std::string key = item.substr(0, eq);
  const bool has_value = eq != std::string::npos;
  const std::string value = has_value ? item.substr(eq + 1) : "";
  bool* flag = key == "fail_sync"       ? &spec->fail_sync
               : key == "fail_rename"   ? &spec->fail_rename
               : key == "fail_sync_dir" ? &spec->fail_sync_dir
               : key == "throw"         ? &spec->throw_instead
                                        : nullptr;
  if (flag != nullptr) {
    if (has_value) return Status::InvalidArgument("fault spec: '" + key + "' takes no value");
    *flag = true;
    return Status::Ok();
  }
  if (!has_value || value.empty()) {
    return Status::InvalidArgument("fault spec: unknown item or missing value: '" + item + "'");
  }
  if (key == "enospc_after" || key == "fail_writes_after") {
    RTFT_ASSIGN_OR_RETURN(spec->fail_writes_after_bytes, ParseLimit(key, value));
    if (key == "enospc_after") spec->error = ENOSPC;
  } else if (key == "errno") {
    RTFT_ASSIGN_OR_RETURN(spec->error, ParseErrno(value));
  } else if (key == "partial") {
    if (value != "0" && value != "1") {
      return Status::InvalidArgument("fault spec: partial=" + value + " (use 0 or 1)");
    }
    spec->partial = value == "1";
  } else if (key == "path") {
    spec->path_substring = value;
  } else {
    return Status::InvalidArgument("fault spec: unknown item '" + item + "'");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<FaultSpec> ParseFaultSpec(const std::string& text) {
  FaultSpec spec;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    if (!item.empty()) RTFT_RETURN_IF_ERROR(ApplyItem(item, &spec));
    start = end + 1;
  }
  return spec;
}

std::unique_ptr<IoBackend> CreateFaultBackend(std::unique_ptr<IoBackend> inner, FaultSpec spec,
                                              std::shared_ptr<FaultStats> stats) {
  RTFT_CHECK(inner != nullptr);
  auto state = std::make_shared<FaultState>();
  state->spec = std::move(spec);
  state->stats = stats ? std::move(stats) : std::make_shared<FaultStats>();
  return std::unique_ptr<IoBackend>(new FaultBackend(std::move(inner), std::move(state)));
}

}  // namespace rtft
