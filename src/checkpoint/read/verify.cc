// VerifyVersion: the global manifest against the files (via OpenVersionFiles), then every chunk
// checksum of every tensor and object, read in parallel; progress is reported per chunk.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "checkpoint/read/reader.h"
#include "checkpoint/read/versions.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "rtft/checkpoint.h"

namespace rtft {
namespace {

constexpr int kMaxVerifyThreads = 8;

struct Item {
  const CheckpointFileReader* reader;
  const TensorEntry* tensor;  // or
  const ObjectEntry* object;
};

class Progress {
 public:
  Progress(const std::function<void(const VerifyProgress&)>& fn, uint64_t total) : fn_(fn) {
    state_.bytes_total = total;
  }
  void Add(const std::string& file, uint64_t bytes) {
    if (!fn_) return;
    std::lock_guard<std::mutex> lock(mu_);
    state_.bytes_done += bytes;
    state_.current = file;
    fn_(state_);
  }

 private:
  const std::function<void(const VerifyProgress&)>& fn_;
  std::mutex mu_;
  VerifyProgress state_;
};

Status VerifyItem(const Item& item, Progress* progress) {
  const std::string& path = item.reader->path();
  if (item.tensor)
    return item.reader->VerifyTensor(*item.tensor,
                                     [&](uint64_t bytes) { progress->Add(path, bytes); });
  RTFT_RETURN_IF_ERROR(item.reader->VerifyObject(*item.object));
  progress->Add(path, item.object->bytes);
  return Status::Ok();
}

}  // namespace

Status VerifyVersion(const std::string& dir, uint64_t version,
                     const std::function<void(const VerifyProgress&)>& progress) {
  RTFT_ASSIGN_OR_RETURN(auto io, CreateReadBackend());
  RTFT_ASSIGN_OR_RETURN(GlobalManifest global, ReadGlobalManifest(io.get(), dir, version));
  RTFT_ASSIGN_OR_RETURN(auto readers, OpenVersionFiles(io.get(), dir, global));

  std::vector<Item> items;
  uint64_t total = 0;
  for (const auto& r : readers) {
    for (const TensorEntry& t : r->manifest().tensors) items.push_back({r.get(), &t, nullptr});
    for (const ObjectEntry& o : r->manifest().objects) items.push_back({r.get(), nullptr, &o});
    total += r->data_bytes();
  }
  Progress tracker(progress, total);
  std::vector<Status> results(items.size());
  std::atomic<bool> failed{false};
  const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxVerifyThreads);
  ThreadPool pool(threads);
  pool.ParallelFor(items.size(), [&](size_t i) {
    if (failed.load()) return;  // the first error decides; stop reading
    results[i] = VerifyItem(items[i], &tracker);
    if (!results[i].ok()) failed = true;
  });
  for (const Status& s : results) RTFT_RETURN_IF_ERROR(s);
  RTFT_LOG(kInfo, kLogCkpt) << "verified version " << version << " of " << dir << ": "
                            << readers.size() << " files, " << total << " bytes";
  return Status::Ok();
}

}  // namespace rtft
