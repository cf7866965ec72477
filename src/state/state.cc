#include "rtft/state.h"

#include <limits>
#include <map>
#include <set>
#include <utility>

#include "core/params.h"

namespace rtft {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kInt8:
      return 1;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

namespace {
const std::pair<DType, const char*> kDTypeNames[] = {
    {DType::kFloat32, "float32"}, {DType::kFloat16, "float16"}, {DType::kBFloat16, "bfloat16"},
    {DType::kInt8, "int8"},       {DType::kInt32, "int32"},     {DType::kInt64, "int64"},
    {DType::kUInt8, "uint8"}};
}  // namespace

const char* DTypeName(DType dtype) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == dtype) return name;
  return "unknown";
}

bool ParseDType(const std::string& name, DType* dtype) {
  for (const auto& [d, n] : kDTypeNames) {
    if (name == n) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

uint64_t TensorDesc::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

StateProvider::~StateProvider() = default;

Status TensorProvider::Describe(StateDescription* out) const {
  out->tensors.push_back(desc_);
  return Status::Ok();
}

Status ObjectProvider::Describe(StateDescription* out) const {
  out->objects.push_back(desc_);
  return Status::Ok();
}

CompositeProvider::CompositeProvider()
    : small_tensor_bytes_(ParamBytes(Param::kCkptSmallTensorBytes).ok()
                              ? *ParamBytes(Param::kCkptSmallTensorBytes)
                              : (16u << 20)),
      group_bytes_(ParamBytes(Param::kCkptChunkBytes).ok() ? *ParamBytes(Param::kCkptChunkBytes)
                                                           : (64u << 20)) {}

CompositeProvider::CompositeProvider(uint64_t small_tensor_bytes, uint64_t group_bytes)
    : small_tensor_bytes_(small_tensor_bytes), group_bytes_(group_bytes) {}

CompositeProvider::~CompositeProvider() = default;

void CompositeProvider::Add(std::shared_ptr<StateProvider> provider) {
  providers_.push_back(std::move(provider));
}
void CompositeProvider::AddTensor(TensorDesc desc) {
  Add(std::make_shared<TensorProvider>(std::move(desc)));
}
void CompositeProvider::AddObject(ObjectDesc desc) {
  Add(std::make_shared<ObjectProvider>(std::move(desc)));
}

Status CompositeProvider::Describe(StateDescription* out) const {
  const size_t first = out->tensors.size();
  int next_group = 0;
  for (size_t i = 0; i < first; ++i)
    next_group = std::max(next_group, out->tensors[i].coalesce_group + 1);
  for (const auto& p : providers_) RTFT_RETURN_IF_ERROR(p->Describe(out));

  // Open group per (memory kind, device): small tensors join it until it is full.
  struct Open {
    int group;
    uint64_t bytes;
  };
  std::map<std::pair<int, int>, Open> open;
  for (size_t i = first; i < out->tensors.size(); ++i) {
    TensorDesc& t = out->tensors[i];
    if (t.coalesce_group >= 0 || t.bytes() >= small_tensor_bytes_) continue;
    auto key = std::make_pair(static_cast<int>(t.memory), t.device);
    auto it = open.find(key);
    if (it == open.end() || it->second.bytes + t.bytes() > group_bytes_) {
      it = open.insert_or_assign(key, Open{next_group++, 0}).first;
    }
    t.coalesce_group = it->second.group;
    it->second.bytes += t.bytes();
  }
  return Status::Ok();
}

Status ValidateDescription(const StateDescription& state) {
  std::set<std::string> names;
  auto check_name = [&](const std::string& name, const char* what) -> Status {
    if (name.empty()) return Status::InvalidArgument(std::string(what) + " with an empty name");
    if (name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos ||
        name.find('.') == 0)
      return Status::InvalidArgument(std::string(what) + " name '" + name +
                                     "' is not a valid path (no leading/trailing '/', no '//')");
    if (!names.insert(name).second)
      return Status::InvalidArgument("name '" + name + "' is used twice in one state");
    return Status::Ok();
  };
  for (const TensorDesc& t : state.tensors) {
    RTFT_RETURN_IF_ERROR(check_name(t.name, "tensor"));
    for (int64_t d : t.shape)
      if (d < 0) return Status::InvalidArgument("tensor '" + t.name + "' has a negative dimension");
    if (t.data == nullptr && t.bytes() > 0)
      return Status::InvalidArgument("tensor '" + t.name + "' has no data pointer");
    if (t.shard.sharded()) {
      const auto& g = t.shard.global_shape;
      if (g.size() != t.shape.size() || t.shard.offset.size() != t.shape.size())
        return Status::InvalidArgument("tensor '" + t.name +
                                       "': shard coordinates must have the tensor's rank");
      for (size_t d = 0; d < g.size(); ++d) {
        if (t.shard.offset[d] < 0 || t.shard.offset[d] + t.shape[d] > g[d])
          return Status::InvalidArgument("tensor '" + t.name +
                                         "': shard lies outside the global shape");
      }
    }
  }
  for (const ObjectDesc& o : state.objects) {
    RTFT_RETURN_IF_ERROR(check_name(o.name, "object"));
    if (!o.serialize && !o.deserialize)
      return Status::InvalidArgument("object '" + o.name +
                                     "' has neither serializer nor deserializer");
  }
  return Status::Ok();
}

}  // namespace rtft
