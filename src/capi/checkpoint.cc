// The checkpoint engine through the C API (include/rtft/rtft.h, "Checkpoint engine").
#include <cstring>

#include "capi/handles.h"

using rtft::Status;
using rtft::capi::Call;
using rtft::capi::NotNull;

namespace {

constexpr size_t kMaxPathBytes = 4096;

Status Engine(rtft_ckpt_t* ckpt) { return NotNull(ckpt, "ckpt"); }

}  // namespace

extern "C" {

rtft_status_t rtft_ckpt_options_init(rtft_ckpt_options_t* options) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(options, "rtft_ckpt_options_init: options"));
    std::memset(options, 0, sizeof(*options));
    options->world_size = 1;
    options->keep_versions = -1;
    return Status::Ok();
  });
}

rtft_status_t rtft_ckpt_create(const rtft_ckpt_options_t* options, rtft_ckpt_t** ckpt) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(options, "rtft_ckpt_create: options"));
    RTFT_RETURN_IF_ERROR(NotNull(ckpt, "rtft_ckpt_create: ckpt"));
    *ckpt = nullptr;
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(options->dir, kMaxPathBytes, "options.dir"));
    rtft::CheckpointOptions o;
    o.dir = options->dir;
    o.rank = options->rank;
    o.world_size = options->world_size == 0 ? 1 : options->world_size;
    o.pool_bytes = options->pool_bytes;
    if (options->keep_versions < -1)
      return Status::InvalidArgument("options.keep_versions: -1 (the default), 0 or more");
    if (options->keep_versions >= 0) o.keep_versions = options->keep_versions;
    o.pin_pool = options->pin_pool != 0;
    if (options->io_backend) {
      RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(options->io_backend, 16, "options.io_backend"));
      o.io_backend = options->io_backend;
    }
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
