// Restore: reads a committed version back into the memory a StateProvider describes. Every wanted
// tensor is planned before any byte moves (so a missing tensor or a shape mismatch fails fast),
// then tensors are read in parallel: straight into the destination when a saved shard is exactly
// the wanted box, otherwise by reading every overlapping saved shard whole and copying the
// intersection (resharding). Device tensors that need no resharding are then streamed, one after
// another, through one bounded staging buffer (device_staging.h); resharded device tensors are
// assembled whole in host memory and copied once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "checkpoint/capture/device_copy.h"
#include "checkpoint/read/box_copy.h"
#include "checkpoint/read/device_staging.h"
#include "checkpoint/read/reader.h"
#include "checkpoint/read/versions.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread_pool.h"
#include "rtft/checkpoint.h"

namespace rtft {
namespace {

constexpr int kMaxRestoreThreads = 8;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

struct SavedShard {
  const CheckpointFileReader* reader;
  const TensorEntry* entry;
  Box box;  // where it sits in the global tensor
};

struct Piece {
  const SavedShard* source;
  Box region;  // the part of the wanted box this source provides
};

struct TensorPlan {
  const TensorDesc* want;
  Box box;                             // the wanted box in global coordinates
  const SavedShard* direct = nullptr;  // a saved shard that is exactly the wanted box
  std::vector<Piece> pieces;           // otherwise: what to copy from where
};

// Every saved tensor by name, in rank order, with checked shard coordinates.
StatusOr<std::map<std::string, std::vector<SavedShard>>> IndexShards(
    const std::vector<std::unique_ptr<CheckpointFileReader>>& readers) {
  std::map<std::string, std::vector<SavedShard>> index;
  for (const auto& reader : readers) {
    for (const TensorEntry& t : reader->manifest().tensors) {
      SavedShard s{reader.get(), &t, Box{}};
      s.box.shape = t.shape;
      s.box.offset = t.shard.sharded() ? t.shard.offset : std::vector<int64_t>(t.shape.size(), 0);
      bool inside = !t.shard.sharded() || (t.shard.global_shape.size() == t.shape.size() &&
                                           t.shard.offset.size() == t.shape.size());
      for (size_t d = 0; inside && t.shard.sharded() && d < t.shape.size(); ++d)
        inside =
            t.shard.offset[d] >= 0 && t.shard.offset[d] + t.shape[d] <= t.shard.global_shape[d];
      if (!inside)
        return Status::DataLoss("tensor '" + t.name + "' in " + reader->path() +
                                ": its shard coordinates lie outside its global shape");
      index[t.name].push_back(std::move(s));
    }
  }
  return index;
}

const std::vector<int64_t>& GlobalShape(const TensorEntry& t) {
  return t.shard.sharded() ? t.shard.global_shape : t.shape;
}

Status CheckCompatible(const TensorDesc& want, const SavedShard& s) {
  const std::vector<int64_t>& want_global =
      want.shard.sharded() ? want.shard.global_shape : want.shape;
  if (GlobalShape(*s.entry) != want_global)
    return Status::InvalidArgument("tensor '" + want.name +
                                   "': the checkpoint holds global shape " +
                                   ShapeText(GlobalShape(*s.entry)) + " (" + s.reader->path() +
                                   "), the state wants " + ShapeText(want_global));
  if (s.entry->dtype != want.dtype)
    return Status::InvalidArgument("tensor '" + want.name + "': the checkpoint holds " +
                                   DTypeName(s.entry->dtype) + " (" + s.reader->path() +
                                   "), the state wants " + DTypeName(want.dtype));
  return Status::Ok();
}

// Chooses the sources of one wanted tensor and proves they cover it exactly once.
Status PlanPieces(const std::vector<SavedShard>& saved, TensorPlan* plan) {
  const std::string& name = plan->want->name;
  uint64_t covered = 0;
  for (const SavedShard& s : saved) {
    Box region = Intersect(s.box, plan->box);
    if (region.elements() == 0) continue;
    bool replica = false;
    for (const Piece& p : plan->pieces) {
      if (p.source->box == s.box) {
        replica = true;  // the same shard saved by several ranks (data-parallel replicas)
        break;
      }
      if (Intersect(p.region, region).elements() > 0)
        return Status::DataLoss("tensor '" + name + "': saved shards in " +
                                p.source->reader->path() + " and " + s.reader->path() +
                                " overlap without being equal");
    }
    if (replica) continue;
    covered += region.elements();
    plan->pieces.push_back(Piece{&s, std::move(region)});
  }
  if (covered != plan->box.elements())
    return Status::DataLoss(
        "tensor '" + name + "': the saved shards cover " + std::to_string(covered) + " of the " +
        std::to_string(plan->box.elements()) + " elements wanted (offset " +
        ShapeText(plan->box.offset) + ", shape " + ShapeText(plan->box.shape) + ")");
  return Status::Ok();
}

StatusOr<TensorPlan> PlanTensor(const TensorDesc& want,
                                const std::map<std::string, std::vector<SavedShard>>& index,
                                const std::string& version_name) {
  auto it = index.find(want.name);
  if (it == index.end())
    return Status::NotFound("tensor '" + want.name + "' is not in " + version_name);
  TensorPlan plan;
  plan.want = &want;
  plan.box.shape = want.shape;
  plan.box.offset =
      want.shard.sharded() ? want.shard.offset : std::vector<int64_t>(want.shape.size(), 0);
  for (const SavedShard& s : it->second) {
    RTFT_RETURN_IF_ERROR(CheckCompatible(want, s));
    if (!plan.direct && s.box == plan.box) plan.direct = &s;
  }
  if (plan.direct) return plan;
  RTFT_RETURN_IF_ERROR(PlanPieces(it->second, &plan));
  return plan;
}

// Host-to-device copies, one copier per device, created on first use.
class DeviceSink {
 public:
  StatusOr<DeviceCopier*> Get(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& copier = copiers_[device];
    if (!copier) {
      RTFT_ASSIGN_OR_RETURN(copier, CreateDeviceCopier(device));
    }
    return copier.get();
  }
  Status Copy(int device, void* dst, const void* src, size_t bytes) {
    RTFT_ASSIGN_OR_RETURN(DeviceCopier * copier, Get(device));
    return copier->CopyToDevice(dst, src, bytes);
  }

 private:
  std::mutex mu_;
  std::map<int, std::unique_ptr<DeviceCopier>> copiers_;
};

// A device tensor read from one saved tensor as it is: streamed through the staging buffer.
bool Streamed(const TensorPlan& plan) {
  return plan.want->memory == MemoryKind::kDevice && plan.direct && plan.want->bytes() > 0;
}

Status RunPlan(const TensorPlan& plan, bool verify, DeviceSink* device) {
  const TensorDesc& want = *plan.want;
  const bool on_device = want.memory == MemoryKind::kDevice;
  // Resharded device destinations are assembled in host memory first.
  std::vector<char> staging(on_device ? want.bytes() : 0);
  char* dst = on_device ? staging.data() : static_cast<char*>(want.data);
  if (plan.direct) {
    RTFT_RETURN_IF_ERROR(plan.direct->reader->ReadTensor(*plan.direct->entry, dst, verify));
  } else {
    std::vector<char> source;
    for (const Piece& p : plan.pieces) {
      source.resize(p.source->entry->bytes);
      RTFT_RETURN_IF_ERROR(p.source->reader->ReadTensor(*p.source->entry, source.data(), verify));
      CopyRegion(source.data(), p.source->box, dst, plan.box, p.region, DTypeSize(want.dtype));
    }
  }
  if (on_device && want.bytes() > 0) {
    Status s = device->Copy(want.device, want.data, dst, want.bytes());
    if (!s.ok()) return s.Annotate("restoring tensor '" + want.name + "' into device memory");
  }
  return Status::Ok();
}

// The staging buffer is allocated once, large enough for the largest chunk of any streamed
// tensor; the tensors go through it in one pipeline, so that the disk is read without a pause
// between one tensor and the next.
Status StreamToDevice(const std::vector<const TensorPlan*>& streamed, const RestoreOptions& options,
                      DeviceSink* device) {
  if (streamed.empty()) return Status::Ok();
  uint64_t largest = 0;
  std::vector<DeviceStaging::Item> items;
  for (const TensorPlan* p : streamed) {
    const TensorDesc& want = *p->want;
    largest = std::max(largest, std::min(p->direct->reader->chunk_bytes(), want.bytes()));
    auto copier = device->Get(want.device);
    if (!copier.ok())
      return copier.status().Annotate("restoring tensor '" + want.name + "' into device memory");
    items.push_back(DeviceStaging::Item{p->direct->reader, p->direct->entry, *copier, want.data});
  }
  if (largest > options.staging_bytes)
    RTFT_LOG(kInfo, kLogCkpt) << "restore: staging_bytes of " << FormatBytes(options.staging_bytes)
                              << " is smaller than a " << FormatBytes(largest) << " chunk; staging "
                              << FormatBytes(largest) << " instead";
  const auto creating = std::chrono::steady_clock::now();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceStaging> staging,
                        DeviceStaging::Create(options.staging_bytes, largest));
  RTFT_LOG(kDebug, kLogCkpt)
      << "restore staging: " << FormatBytes(staging->bytes())
      << (staging->pinned() ? ", pinned" : ", not pinned") << " in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - creating).count() << " s";
  return staging->Stream(items, options.verify_checksums);
}

// One piece of parallel work: a chunk of a host tensor read straight into its place, or a whole
// tensor that needs host staging (resharded, or device memory assembled on the host).
struct Work {
  const TensorPlan* plan;
  uint64_t chunk;  // for chunks of a direct host plan
  bool whole;
};

Status RunWork(const Work& w, bool verify, DeviceSink* device) {
  if (w.whole) return RunPlan(*w.plan, verify, device);
  const SavedShard& s = *w.plan->direct;
  char* dst = static_cast<char*>(w.plan->want->data) + w.chunk * s.reader->chunk_bytes();
  return s.reader->ReadTensorChunk(*s.entry, w.chunk, dst, verify);
}

Status RestoreTensors(const std::vector<TensorPlan>& plans, const RestoreOptions& options) {
  std::vector<const TensorPlan*> streamed;
  std::vector<Work> work;
  for (const TensorPlan& p : plans) {
    if (Streamed(p)) {
      streamed.push_back(&p);
    } else if (p.direct && p.want->memory == MemoryKind::kHost && p.want->bytes() > 0) {
      // Chunk by chunk, so that one large tensor is read by every thread, not by one.
      const uint64_t chunks = ChunkCount(p.direct->entry->bytes, p.direct->reader->chunk_bytes());
      for (uint64_t c = 0; c < chunks; ++c) work.push_back(Work{&p, c, false});
    } else {
      work.push_back(Work{&p, 0, true});
    }
  }
  // Reading is bound by the disk, not by cores: enough reads in flight to keep it busy.
  ThreadPool pool(kMaxRestoreThreads);
  DeviceSink device;
  std::vector<Status> results(work.size());
  std::atomic<bool> failed{false};
  pool.ParallelFor(work.size(), [&](size_t i) {
    if (failed.load()) return;  // the first error decides; stop reading
    results[i] = RunWork(work[i], options.verify_checksums, &device);
    if (!results[i].ok()) failed = true;
  });
  for (const Status& s : results) RTFT_RETURN_IF_ERROR(s);
  return StreamToDevice(streamed, options, &device);
}

Status RestoreObjects(const std::vector<ObjectDesc>& objects,
                      const std::vector<std::unique_ptr<CheckpointFileReader>>& readers,
                      std::optional<int> rank, bool verify, const std::string& version_name) {
  for (const ObjectDesc& o : objects) {
    if (!o.deserialize) continue;  // save-only
    const CheckpointFileReader* holder = nullptr;
    const ObjectEntry* entry = nullptr;
    // The given rank's file first; then in rank order (OpenVersionFiles).
    for (size_t i = 0; rank && !entry && i < readers.size(); ++i) {
      if (readers[i]->manifest().rank != *rank) continue;
      entry = readers[i]->manifest().FindObject(o.name);
      if (entry) holder = readers[i].get();
    }
    for (size_t i = 0; !entry && i < readers.size(); ++i) {
      entry = readers[i]->manifest().FindObject(o.name);
      if (entry) holder = readers[i].get();
    }
    if (!entry && o.optional) continue;
    if (!entry) return Status::NotFound("object '" + o.name + "' is not in " + version_name);
    RTFT_ASSIGN_OR_RETURN(std::string bytes, holder->ReadObject(*entry, verify));
    Status s = o.deserialize(bytes);
    if (!s.ok()) return s.Annotate("restoring object '" + o.name + "'");
  }
  return Status::Ok();
}

}  // namespace

Status Restore(const std::string& dir, const RestoreOptions& options, const StateProvider& state) {
  StateDescription want;
  RTFT_RETURN_IF_ERROR(state.Describe(&want));
  RTFT_RETURN_IF_ERROR(ValidateDescription(want));
  RTFT_ASSIGN_OR_RETURN(auto io, CreateReadBackend());
  uint64_t version = 0;
  if (options.version) {
    version = *options.version;
  } else {
    RTFT_ASSIGN_OR_RETURN(version, LatestVersion(dir));
  }
  const std::string version_name = "version " + std::to_string(version) + " of " + dir;
  RTFT_ASSIGN_OR_RETURN(GlobalManifest global, ReadGlobalManifest(io.get(), dir, version));
  RTFT_ASSIGN_OR_RETURN(auto readers, OpenVersionFiles(io.get(), dir, global));
  RTFT_ASSIGN_OR_RETURN(auto index, IndexShards(readers));

  std::vector<TensorPlan> plans;
  plans.reserve(want.tensors.size());
  for (const TensorDesc& t : want.tensors) {
    RTFT_ASSIGN_OR_RETURN(TensorPlan plan, PlanTensor(t, index, version_name));
    plans.push_back(std::move(plan));
  }
  RTFT_RETURN_IF_ERROR(RestoreTensors(plans, options));
  RTFT_RETURN_IF_ERROR(
      RestoreObjects(want.objects, readers, options.rank, options.verify_checksums, version_name));
  RTFT_RETURN_IF_ERROR(state.Restored().Annotate("after restoring " + version_name));
  RTFT_LOG(kInfo, kLogCkpt) << "restored " << version_name << ": " << want.tensors.size()
                            << " tensors from " << global.world_size << " files";
  return Status::Ok();
}

}  // namespace rtft
