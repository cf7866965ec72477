// The checkpoint engine through the C API (include/rtft/rtft.h, "Checkpoint engine").
#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

#include "capi/handles.h"

using rtft::Status;
using rtft::capi::Call;
using rtft::capi::NotNull;

namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr const char* kType = "rtft_ckpt_options";
// The struct's first version with a size (rt-ft 0.2): the fields up to io_backend. Callers whose
// size ends there get the later fields' defaults; the number is the ABI and never changes.
constexpr size_t kFirstSize = offsetof(rtft_ckpt_options_t, io_backend) + sizeof(const char*);
static_assert(kFirstSize == 48, "rtft_ckpt_options_t's first version is 48 bytes (ABI)");
static_assert(offsetof(rtft_ckpt_options_t, write_id) + sizeof(uint64_t) ==
                  sizeof(rtft_ckpt_options_t),
              "no padding at the end: a field added later would land in an older caller's");

Status Engine(rtft_ckpt_t* ckpt) { return NotNull(ckpt, "ckpt"); }

rtft_ckpt_options_t Defaults() {
  rtft_ckpt_options_t o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.world_size = 1;
  o.keep_versions = -1;
  o.pin_pool = rtft::CheckpointOptions().pin_pool ? 1 : 0;
  o.direct_io = -1;
  return o;
}

Status NotNegative(int64_t value, const char* field) {
  if (value >= 0) return Status::Ok();
  return Status::InvalidArgument(std::string("rtft_ckpt_options.") + field + " is " +
                                 std::to_string(value) + ": 0 (the setting) or more");
}

// The C options as the C++ ones; `c` holds this library's version of the struct.
Status Convert(const rtft_ckpt_options_t& c, rtft::CheckpointOptions* o) {
  RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(c.dir, kMaxPathBytes, "options.dir"));
  o->dir = c.dir;
  o->rank = c.rank;
  o->world_size = c.world_size == 0 ? 1 : c.world_size;
  o->pool_bytes = c.pool_bytes;
  if (c.keep_versions < -1)
    return Status::InvalidArgument("options.keep_versions: -1 (the default), 0 or more");
  if (c.keep_versions >= 0) o->keep_versions = c.keep_versions;
  o->pin_pool = c.pin_pool != 0;
  if (c.io_backend) {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(c.io_backend, 16, "options.io_backend"));
    o->io_backend = c.io_backend;
  }
  o->chunk_bytes = c.chunk_bytes;
  for (const auto& [value, field] :
       {std::pair<int64_t, const char*>{c.capture_threads, "capture_threads"},
        {c.flush_threads, "flush_threads"},
        {c.io_depth, "io_depth"},
        {c.commit_timeout_ms, "commit_timeout_ms"},
        {c.wait_timeout_ms, "wait_timeout_ms"}})
    RTFT_RETURN_IF_ERROR(NotNegative(value, field));
  o->capture_threads = c.capture_threads;
  o->flush_threads = c.flush_threads;
  o->io_depth = c.io_depth;
  if (c.direct_io < -1 || c.direct_io > 1)
    return Status::InvalidArgument("options.direct_io: -1 (the setting), 0 or 1");
  if (c.direct_io >= 0) o->direct_io = c.direct_io == 1;
  o->commit_timeout = std::chrono::milliseconds(c.commit_timeout_ms);
  o->wait_timeout = std::chrono::milliseconds(c.wait_timeout_ms);
  o->write_id = c.write_id;
  return Status::Ok();
}

}  // namespace

extern "C" {

rtft_status_t rtft_ckpt_options_init_size(rtft_ckpt_options_t* options, size_t size) {
  return Call(
      [&] { return rtft::capi::InitOptions(options, size, kFirstSize, Defaults(), kType); });
}

rtft_status_t rtft_ckpt_create(const rtft_ckpt_options_t* options, rtft_ckpt_t** ckpt) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(options, "rtft_ckpt_create: options"));
    RTFT_RETURN_IF_ERROR(NotNull(ckpt, "rtft_ckpt_create: ckpt"));
    *ckpt = nullptr;
    rtft_ckpt_options_t c = Defaults();
    RTFT_RETURN_IF_ERROR(rtft::capi::ReadOptions(options, kFirstSize, &c, kType));
    rtft::CheckpointOptions o;
    RTFT_RETURN_IF_ERROR(Convert(c, &o));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<rtft::CheckpointEngine> engine,
                          rtft::CheckpointEngine::Create(o));
    *ckpt = new rtft_ckpt{std::move(engine)};
    return Status::Ok();
  });
}

rtft_status_t rtft_ckpt_destroy(rtft_ckpt_t* ckpt) {
  return Call([&] {
    delete ckpt;
    return Status::Ok();
  });
}

rtft_status_t rtft_ckpt_checkpoint(rtft_ckpt_t* ckpt, uint64_t version, rtft_state_t* state) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Engine(ckpt));
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_ckpt_checkpoint: state"));
    return ckpt->engine->Checkpoint(version, *state->state);
  });
}

rtft_status_t rtft_ckpt_wait_captured(rtft_ckpt_t* ckpt, uint64_t version) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Engine(ckpt));
    return ckpt->engine->WaitCaptured(version);
  });
}

rtft_status_t rtft_ckpt_wait_persisted(rtft_ckpt_t* ckpt, uint64_t version) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Engine(ckpt));
    return ckpt->engine->WaitPersisted(version);
  });
}

rtft_status_t rtft_ckpt_latest(const char* dir, uint64_t* version) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(dir, kMaxPathBytes, "rtft_ckpt_latest: dir"));
    RTFT_RETURN_IF_ERROR(NotNull(version, "rtft_ckpt_latest: version"));
    RTFT_ASSIGN_OR_RETURN(*version, rtft::LatestVersion(dir));
    return Status::Ok();
  });
}

rtft_status_t rtft_ckpt_restore(const char* dir, uint64_t version, rtft_state_t* state) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(dir, kMaxPathBytes, "rtft_ckpt_restore: dir"));
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_ckpt_restore: state"));
    rtft::RestoreOptions o;
    if (version != RTFT_CKPT_LATEST) o.version = version;
    return rtft::Restore(dir, o, *state->state);
  });
}

}  // extern "C"
