#include "protect/layout.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "checkpoint/capture/device_copy.h"
#include "core/checksum.h"

namespace rtft::protect {
namespace {

void HashMix(Xxh3Hasher* h, const std::string& s) {
  const uint64_t n = s.size();
  h->Update(&n, sizeof(n));
  h->Update(s.data(), s.size());
}

void HashInts(Xxh3Hasher* h, const std::vector<int64_t>& v) {
  const uint64_t n = v.size();
  h->Update(&n, sizeof(n));
  h->Update(v.data(), v.size() * sizeof(int64_t));
}

Status CheckTensor(const TensorDesc& t, std::set<std::string>* names) {
  if (t.name.empty() || !names->insert(t.name).second)
    return Status::InvalidArgument("protected state: tensor name '" + t.name +
                                   "' is empty or used twice");
  if (t.bytes() > 0 && t.data == nullptr)
    return Status::InvalidArgument("protected state: '" + t.name + "' has no data");
  // A device tensor's pointer must be of its device, so that a wrong description fails here and
  // not in a copy (Unimplemented in a build without CUDA).
  if (t.memory == MemoryKind::kDevice && t.bytes() > 0)
    return CheckDevicePointer(t.data, t.device, "protected state: '" + t.name + "'");
  return Status::Ok();
}

}  // namespace

StatusOr<Layout> Layout::Build(const StateDescription& state, size_t object_capacity) {
  RTFT_RETURN_IF_ERROR(ValidateDescription(state).Annotate("protected state"));
  Layout l;
  for (const TensorDesc& t : state.tensors)
    (t.shard.sharded() && !t.shard.replicated ? l.sharded : l.replicated).push_back({t});
  l.objects = state.objects;
  RTFT_RETURN_IF_ERROR(l.Finish(object_capacity));
  return l;
}

Status Layout::Finish(size_t capacity) {
  Xxh3Hasher h, shared;
  std::set<std::string> names;
  size_t at = 0;
  // Replicated tensors that compute changes go last (in their order): their copies may differ
  // between steps, so the cross-check's checksum ends before them.
  std::stable_partition(replicated.begin(), replicated.end(),
                        [](const Entry& e) { return !e.tensor.changed_in_compute; });
  compared_end = 0;
  for (auto* list : {&replicated, &sharded}) {
    const uint64_t kind = list == &sharded ? 1 : 0;
    if (kind == 1) shard_begin = at;
    for (Entry& e : *list) {
      RTFT_RETURN_IF_ERROR(CheckTensor(e.tensor, &names));
      e.bytes = e.tensor.bytes();
      e.offset = at;
      if (kind == 0 && !e.tensor.changed_in_compute) compared_end = AlignUp(at + e.bytes);
      at = AlignUp(at + e.bytes);
      const uint64_t meta[3] = {static_cast<uint64_t>(e.tensor.dtype), e.bytes, kind};
      HashMix(&h, e.tensor.name);
      h.Update(meta, sizeof(meta));
      HashMix(&shared, e.tensor.name);
      shared.Update(meta, sizeof(uint64_t));
      shared.Update(&kind, sizeof(kind));
      HashInts(&shared, kind == 1 ? e.tensor.shard.global_shape : e.tensor.shape);
      if (kind == 0 && e.tensor.shard.sharded()) {  // a shard the data-parallel group shares
        for (Xxh3Hasher* x : {&h, &shared}) {
          HashInts(x, e.tensor.shard.global_shape);
          HashInts(x, e.tensor.shard.offset);
        }
      }
    }
  }
  for (const ObjectDesc& o : objects) {
    if (o.name.empty() || !names.insert(o.name).second)
      return Status::InvalidArgument("protected state: object name '" + o.name +
                                     "' is empty or used twice");
    if (!o.serialize || !o.deserialize)
      return Status::InvalidArgument("protected state: object '" + o.name +
                                     "' needs both serialize and deserialize");
    HashMix(&h, o.name);
    HashMix(&shared, o.name);
  }
  objects_begin = at;
  object_capacity = AlignUp(std::max<size_t>(capacity, 1));
  payload_bytes = AlignUp(objects_begin + object_capacity);
  const uint64_t cap = object_capacity;
  h.Update(&cap, sizeof(cap));
  hash = h.Digest();
  shared_hash = shared.Digest();
  return Status::Ok();
}

StatusOr<std::string> SerializeObjects(const std::vector<ObjectDesc>& objects) {
  std::string out;
  for (const ObjectDesc& o : objects) {
    auto data = o.serialize();
    if (!data.ok()) return data.status().Annotate("serializing object '" + o.name + "'");
    const uint32_t n = static_cast<uint32_t>(o.name.size());
    const uint64_t d = data->size();
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out.append(o.name);
    out.append(reinterpret_cast<const char*>(&d), sizeof(d));
    out.append(*data);
  }
  return out;
}

Status DeserializeObjects(const std::vector<ObjectDesc>& objects, const char* data, size_t bytes) {
  size_t at = 0;
  for (const ObjectDesc& o : objects) {
    uint32_t n = 0;
    uint64_t d = 0;
    if (bytes - at < sizeof(n)) return Status::DataLoss("objects of a snapshot are cut short");
    std::memcpy(&n, data + at, sizeof(n));
    at += sizeof(n);
    if (bytes - at < n || std::string(data + at, n) != o.name)
      return Status::DataLoss("a snapshot's objects do not match the declared ones ('" + o.name +
                              "' expected)");
    at += n;
    if (bytes - at < sizeof(d)) return Status::DataLoss("objects of a snapshot are cut short");
    std::memcpy(&d, data + at, sizeof(d));
    at += sizeof(d);
    if (bytes - at < d) return Status::DataLoss("object '" + o.name + "' is cut short");
    RTFT_RETURN_IF_ERROR(
        o.deserialize(std::string(data + at, d)).Annotate("restoring object '" + o.name + "'"));
    at += d;
  }
  return Status::Ok();
}

}  // namespace rtft::protect
