// State through the C API (include/rtft/rtft.h, "State"): tensors by pointer, byte-string
// objects by callback, one rtft::StateProvider that the checkpoint engine and the protector take.
#include "capi/handles.h"

namespace rtft::capi {
namespace {

constexpr int kMaxDims = 16;
constexpr size_t kMaxNameBytes = 1024;

Status CheckDims(int ndim, const int64_t* dims, const char* what) {
  if (ndim < 0 || ndim > kMaxDims)
    return Status::InvalidArgument(std::string(what) + ": ndim " + std::to_string(ndim) +
                                   " (0 to " + std::to_string(kMaxDims) + ")");
  if (ndim > 0) RTFT_RETURN_IF_ERROR(NotNull(dims, what));
  return Status::Ok();
}

StatusOr<TensorDesc> Tensor(const char* name, int dtype, int ndim, const int64_t* shape,
                            void* data) {
  TensorDesc t;
  RTFT_RETURN_IF_ERROR(CheckName(name, kMaxNameBytes, "tensor name"));
  RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t.dtype));
  RTFT_RETURN_IF_ERROR(CheckDims(ndim, shape, "shape"));
  t.name = name;
  t.shape.assign(shape, shape + ndim);
  t.data = data;
  return t;
}

}  // namespace

Status CState::Describe(StateDescription* out) const {
  out->tensors.insert(out->tensors.end(), state_.tensors.begin(), state_.tensors.end());
  out->objects.insert(out->objects.end(), state_.objects.begin(), state_.objects.end());
  return Status::Ok();
}

Status CState::Restored() const {
  if (!restored_.first) return Status::Ok();
  return FromC(restored_.first(restored_.second), "the restored callback");
}

Status CState::Add(TensorDesc tensor) {
  state_.tensors.push_back(std::move(tensor));
  Status s = ValidateDescription(state_);
  if (!s.ok()) state_.tensors.pop_back();
  return s;
}

Status CState::Add(ObjectDesc object) {
  state_.objects.push_back(std::move(object));
  Status s = ValidateDescription(state_);
  if (!s.ok()) state_.objects.pop_back();
  return s;
}

}  // namespace rtft::capi

using rtft::Status;
using rtft::capi::Call;
using rtft::capi::NotNull;

extern "C" {

rtft_status_t rtft_bytes_set(rtft_bytes_t* bytes, const void* data, size_t size) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(bytes, "rtft_bytes_set: bytes"));
    if (size > 0) RTFT_RETURN_IF_ERROR(NotNull(data, "rtft_bytes_set: data"));
    bytes->data.assign(static_cast<const char*>(data), size);
    return Status::Ok();
  });
}

rtft_status_t rtft_state_create(rtft_state_t** state) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_state_create: state"));
    *state = new rtft_state{std::make_shared<rtft::capi::CState>()};
    return Status::Ok();
  });
}

rtft_status_t rtft_state_destroy(rtft_state_t* state) {
  return Call([&] {
    if (state && state->borrowed)
      return Status::InvalidArgument("rtft_state_destroy: this state belongs to rt-ft (resize)");
    delete state;
    return Status::Ok();
  });
}

rtft_status_t rtft_state_add_tensor(rtft_state_t* state, const char* name, int dtype, int ndim,
                                    const int64_t* shape, void* data) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_state_add_tensor: state"));
    RTFT_ASSIGN_OR_RETURN(rtft::TensorDesc t, rtft::capi::Tensor(name, dtype, ndim, shape, data));
    return state->state->Add(std::move(t)).Annotate("rtft_state_add_tensor");
  });
}

namespace {

rtft_status_t AddShard(rtft_state_t* state, const char* name, int dtype, int ndim,
                       const int64_t* shape, const int64_t* global_shape, const int64_t* offset,
                       void* data, bool replicated, const char* what) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(state, (std::string(what) + ": state").c_str()));
    RTFT_ASSIGN_OR_RETURN(rtft::TensorDesc t, rtft::capi::Tensor(name, dtype, ndim, shape, data));
    if (ndim == 0) return Status::InvalidArgument(std::string(what) + ": a shard has dimensions");
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckDims(ndim, global_shape, "global_shape"));
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckDims(ndim, offset, "offset"));
    t.shard.global_shape.assign(global_shape, global_shape + ndim);
    t.shard.offset.assign(offset, offset + ndim);
    t.shard.replicated = replicated;
    return state->state->Add(std::move(t)).Annotate(what);
  });
}

}  // namespace

rtft_status_t rtft_state_add_shard(rtft_state_t* state, const char* name, int dtype, int ndim,
                                   const int64_t* shape, const int64_t* global_shape,
                                   const int64_t* offset, void* data) {
  return AddShard(state, name, dtype, ndim, shape, global_shape, offset, data, false,
                  "rtft_state_add_shard");
}

rtft_status_t rtft_state_add_replicated_shard(rtft_state_t* state, const char* name, int dtype,
                                              int ndim, const int64_t* shape,
                                              const int64_t* global_shape, const int64_t* offset,
                                              void* data) {
  return AddShard(state, name, dtype, ndim, shape, global_shape, offset, data, true,
                  "rtft_state_add_replicated_shard");
}

rtft_status_t rtft_state_add_object(rtft_state_t* state, const char* name, rtft_object_save_fn save,
                                    rtft_object_load_fn load, void* user) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_state_add_object: state"));
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(name, rtft::capi::kMaxNameBytes, "object name"));
    if (!save) return Status::InvalidArgument("rtft_state_add_object: save is NULL");
    rtft::ObjectDesc o;
    o.name = name;
    const std::string what = "object '" + o.name + "'";
    o.serialize = [save, user, what]() -> rtft::StatusOr<std::string> {
      rtft_bytes bytes;
      RTFT_RETURN_IF_ERROR(rtft::capi::FromC(save(user, &bytes), what + ": its save callback"));
      return std::move(bytes.data);
    };
    if (load)
      o.deserialize = [load, user, what](const std::string& b) {
        return rtft::capi::FromC(load(user, b.data(), b.size()), what + ": its load callback");
      };
    return state->state->Add(std::move(o)).Annotate("rtft_state_add_object");
  });
}

rtft_status_t rtft_state_on_restored(rtft_state_t* state, rtft_restored_fn restored, void* user) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_state_on_restored: state"));
    state->state->OnRestored(restored, user);
    return Status::Ok();
  });
}

rtft_status_t rtft_even_split(int64_t n, int parts, int index, int64_t* offset, int64_t* count) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(offset, "rtft_even_split: offset"));
    RTFT_RETURN_IF_ERROR(NotNull(count, "rtft_even_split: count"));
    if (n < 0 || parts < 1 || index < 0 || index >= parts)
      return Status::InvalidArgument("rtft_even_split: n >= 0, parts >= 1, 0 <= index < parts");
    const rtft::EvenSplit s = rtft::SplitEvenly(n, parts, index);
    *offset = s.offset;
    *count = s.count;
    return Status::Ok();
  });
}

}  // extern "C"
