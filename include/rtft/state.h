// State providers: how an application tells rt-ft what its state is, without copying it.
// Tensor providers point at host or device memory; object providers serialize small metadata
// (step, RNG state, LR schedule); composite providers gather many providers and coalesce small
// tensors into large transfers. The checkpoint engine saves and restores through them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rtft/export.h"
#include "rtft/status.h"

namespace rtft {

// rtft/enum_list.h lists them with their sizes and names; new types go at the end (the numeric
// values travel in communicator frames and snapshot hashes).
enum class DType : uint8_t {
#define RTFT_DTYPE(id, name, value, bytes, text) id = value,
#include "rtft/enum_list.h"
#undef RTFT_DTYPE
};

RTFT_EXPORT size_t DTypeSize(DType dtype);
// "float32", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "float64".
RTFT_EXPORT const char* DTypeName(DType dtype);
RTFT_EXPORT bool ParseDType(const std::string& name, DType* dtype);

enum class MemoryKind : uint8_t { kHost, kDevice };

// Where a shard sits in the global (unsharded) tensor. Empty global_shape: the tensor is whole.
struct ShardCoords {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;  // per dimension, same rank as global_shape
  // Per-step protection (docs/protect.md, "3D layouts"): every rank of this rank's data-parallel
  // group holds this same shard, bitwise (HSDP's replicate dimension over a shard of the tensor
  // axis). It is protected as a replicated tensor of its partition: compared across the group,
  // fed to a rank that lost it from a live peer's snapshot, not carried in L2's ring; L3 writes
  // its rows split over the group, at their place in the global tensor. Without a grid the data-
  // parallel group is the world: every rank must then hold the same shard.
  bool replicated = false;
  bool sharded() const { return !global_shape.empty(); }
};

struct TensorDesc {
  std::string name;  // unique within a state; '/' separates groups in the file
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  void* data = nullptr;  // read when saving, written when restoring
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;  // CUDA device ordinal when memory == kDevice
  ShardCoords shard;
  // Tensors with the same non-negative group are captured as one transfer (set by
  // CompositeProvider for small tensors).
  int coalesce_group = -1;
  // The step's compute writes it (BatchNorm's running statistics, a module buffer that forward
  // updates): the Protector copies it on the training thread when the step begins, before
  // compute can run, where other tensors are copied while compute runs (a device one waits for
  // the application's stream and its copy, so a step with such tensors starts later).
  bool changed_in_compute = false;

  RTFT_EXPORT uint64_t elements() const;
  uint64_t bytes() const { return elements() * DTypeSize(dtype); }
};

struct ObjectDesc {
  std::string name;
  // Called inside Checkpoint(), so it sees the state at the moment of the call; keep objects
  // small (step, RNG state, LR schedule): tensors belong in TensorDesc.
  std::function<StatusOr<std::string>()> serialize;
  // Called on restore with the saved bytes; may be empty for save-only objects.
  std::function<Status(const std::string&)> deserialize;
  // A checkpoint without it restores without calling `deserialize` (one written before the
  // object was added, as the RNG state of the Python package's State); otherwise its absence
  // is an error.
  bool optional = false;
};

struct StateDescription {
  std::vector<TensorDesc> tensors;
  std::vector<ObjectDesc> objects;
};

class RTFT_EXPORT StateProvider {
 public:
  virtual ~StateProvider();
  // Appends this provider's tensors and objects. Must be cheap: no data is copied here.
  virtual Status Describe(StateDescription* out) const = 0;
  // Called once every tensor and object it described was restored (rtft::Restore, a recovery of
  // the Protector): for state derived from the restored one (an optimizer's parameters from its
  // master weights). Does nothing by default.
  virtual Status Restored() const;
};

class RTFT_EXPORT TensorProvider : public StateProvider {
 public:
  explicit TensorProvider(TensorDesc desc) : desc_(std::move(desc)) {}
  Status Describe(StateDescription* out) const override;

 private:
  TensorDesc desc_;
};

class RTFT_EXPORT ObjectProvider : public StateProvider {
 public:
  explicit ObjectProvider(ObjectDesc desc) : desc_(std::move(desc)) {}
  Status Describe(StateDescription* out) const override;

 private:
  ObjectDesc desc_;
};

// Gathers providers. Tensors smaller than small_tensor_bytes (default:
// RTFT_CKPT_SMALL_TENSOR_BYTES) are grouped, in order and per memory kind and device, into
// transfers of up to group_bytes (default: RTFT_CKPT_CHUNK_BYTES), so thousands of small shards
// move as a few large copies.
class RTFT_EXPORT CompositeProvider : public StateProvider {
 public:
  CompositeProvider();
  CompositeProvider(uint64_t small_tensor_bytes, uint64_t group_bytes);
  ~CompositeProvider() override;

  void Add(std::shared_ptr<StateProvider> provider);
  void AddTensor(TensorDesc desc);
  void AddObject(ObjectDesc desc);
  Status Describe(StateDescription* out) const override;
  // Each added provider's Restored(), in the order they were added.
  Status Restored() const override;

 private:
  uint64_t small_tensor_bytes_;
  uint64_t group_bytes_;
  std::vector<std::shared_ptr<StateProvider>> providers_;
};

// The even split of `n` rows over `parts` ranks in rank order: part `index` holds n / parts rows,
// plus one when index < n % parts, starting at `offset`.
struct EvenSplit {
  int64_t offset = 0;
  int64_t count = 0;
};
RTFT_EXPORT EvenSplit SplitEvenly(int64_t n, int parts, int index);
// Rank `rank`'s shard of a tensor of `global_shape` whose first dimension is split evenly over
// `world` ranks (SplitEvenly): its shape and shard coordinates; `data` left for the caller. What
// the Protector lays shards out as after a shrink.
RTFT_EXPORT TensorDesc EvenShard(std::string name, DType dtype, std::vector<int64_t> global_shape,
                                 int world, int rank);

// Checks names (unique, non-empty, no "//", no leading '/'), shapes, shard coordinates and data
// pointers; the engine calls it before any copy starts.
RTFT_EXPORT Status ValidateDescription(const StateDescription& state);

}  // namespace rtft
