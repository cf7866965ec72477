#include "rtft/state.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "core/params.h"

namespace rtft {

// Sizes and names from rtft/enum_list.h, the one list of the types.
size_t DTypeSize(DType dtype) {
  switch (dtype) {
#define RTFT_DTYPE(id, name, value, bytes, text) \
  case DType::id:                                \
    return bytes;
#include "rtft/enum_list.h"
#undef RTFT_DTYPE
  }
  return 0;
}

namespace {
const std::pair<DType, const char*> kDTypeNames[] = {
#define RTFT_DTYPE(id, name, value, bytes, text) {DType::id, text},
#include "rtft/enum_list.h"
#undef RTFT_DTYPE
};
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

Status StateProvider::Restored() const { return Status::Ok(); }

EvenSplit SplitEvenly(int64_t n, int parts, int index) {
  EvenSplit s;
  if (n <= 0 || parts <= 0 || index < 0 || index >= parts) return s;
  const int64_t base = n / parts, extra = n % parts;
  s.offset = index * base + std::min<int64_t>(index, extra);
  s.count = base + (index < extra ? 1 : 0);
  return s;
}

TensorDesc EvenShard(std::string name, DType dtype, std::vector<int64_t> global_shape, int world,
                     int rank) {
  TensorDesc t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = global_shape;
  t.shard.offset.assign(global_shape.size(), 0);
  if (!global_shape.empty()) {
    const EvenSplit s = SplitEvenly(global_shape[0], world, rank);
    t.shape[0] = s.count;
    t.shard.offset[0] = s.offset;
  }
  t.shard.global_shape = std::move(global_shape);
  return t;
}

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

Status CompositeProvider::Restored() const {
  for (const auto& p : providers_) RTFT_RETURN_IF_ERROR(p->Restored());
  return Status::Ok();
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

namespace {

// Names end up in the manifest's JSON, which must be UTF-8 (a JSON writer throws on anything
// else), and in HDF5 link names, which end at a NUL: both are refused here, in the caller's
// thread, instead of failing on a background thread later.
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (extra >= s.size() - i) return false;  // cut off at the end
    for (size_t k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      code = (code << 6) | (b & 0x3f);
    }
    // Overlong forms, surrogates and code points past Unicode's end are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

bool HasControlCharacter(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

// The bytes a tensor's shape and dtype hold, or false when that does not fit in 64 bits.
bool CheckedBytes(const TensorDesc& t, uint64_t* bytes) {
  uint64_t n = DTypeSize(t.dtype);
  for (int64_t d : t.shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *bytes = n;
  return true;
}

}  // namespace

Status ValidateDescription(const StateDescription& state) {
  std::set<std::string> names;
  auto check_name = [&](const std::string& name, const char* what) -> Status {
    if (name.empty()) return Status::InvalidArgument(std::string(what) + " with an empty name");
    if (!ValidUtf8(name) || HasControlCharacter(name))
      return Status::InvalidArgument(std::string(what) +
                                     " name is not printable UTF-8 text (a byte sequence that is "
                                     "not UTF-8, or a control character)");
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
    uint64_t bytes = 0;
    if (!CheckedBytes(t, &bytes))
      return Status::InvalidArgument("tensor '" + t.name +
                                     "': its shape holds more than 2^64 bytes");
    if (t.data == nullptr && bytes > 0)
      return Status::InvalidArgument("tensor '" + t.name + "' has no data pointer");
    if (t.shard.sharded()) {
      const auto& g = t.shard.global_shape;
      if (g.size() != t.shape.size() || t.shard.offset.size() != t.shape.size())
        return Status::InvalidArgument("tensor '" + t.name +
                                       "': shard coordinates must have the tensor's rank");
      for (size_t d = 0; d < g.size(); ++d) {
        // Compared without adding, so that huge coordinates cannot wrap around.
        if (t.shard.offset[d] < 0 || t.shard.offset[d] > g[d] ||
            t.shape[d] > g[d] - t.shard.offset[d])
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
