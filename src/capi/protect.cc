// Per-step protection through the C API (include/rtft/rtft.h, "Per-step protection"): the
// Protector's bracket, its driver with C step functions, and a shrink's new description through
// a C callback.
#include <chrono>
#include <cstddef>
#include <cstring>

#include "capi/handles.h"

using rtft::Status;
using rtft::StatusOr;
using rtft::capi::Call;
using rtft::capi::FromC;
using rtft::capi::NotNull;

namespace {

Status Check(rtft_protector_t* p) { return NotNull(p, "protector"); }

constexpr const char* kType = "rtft_protect_options";
// The struct's first version with a size (rt-ft 0.2): the fields up to comm_name. Callers whose
// size ends there get the later fields' defaults; the number is the ABI and never changes.
constexpr size_t kFirstSize = offsetof(rtft_protect_options_t, comm_name) + sizeof(const char*);
static_assert(kFirstSize == 40, "rtft_protect_options_t's first version is 40 bytes (ABI)");
static_assert(offsetof(rtft_protect_options_t, check_finite) + sizeof(int32_t) ==
                  sizeof(rtft_protect_options_t),
              "no padding at the end: a field added later would land in an older caller's");
// More ranks than a grid of any job has: a bound on what is copied from the caller.
constexpr size_t kMaxGridRanks = 1u << 20;

rtft_protect_options_t Defaults() {
  const rtft::ProtectOptions cc;
  rtft_protect_options_t o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.enabled = cc.enabled ? 1 : 0;
  o.backend = static_cast<int32_t>(cc.backend);
  o.device = cc.device;
  o.grid_tensor = cc.grid.tensor;
  o.grid_pipeline = cc.grid.pipeline;
  return o;
}

Status ConvertGrid(const rtft_protect_options_t& c, rtft::Grid* grid) {
  if (c.grid_tensor < 1 || c.grid_pipeline < 1)
    return Status::InvalidArgument("options.grid_tensor and grid_pipeline: 1 or more");
  grid->tensor = c.grid_tensor;
  grid->pipeline = c.grid_pipeline;
  if (c.grid_rank_count == 0) return Status::Ok();
  if (!c.grid_ranks || c.grid_rank_count > kMaxGridRanks)
    return Status::InvalidArgument("options.grid_ranks: " + std::to_string(c.grid_rank_count) +
                                   " ranks expected at a non-NULL address (at most " +
                                   std::to_string(kMaxGridRanks) + ")");
  grid->ranks.assign(c.grid_ranks, c.grid_ranks + c.grid_rank_count);
  return Status::Ok();
}

// The C options as the C++ ones; `c` holds this library's version of the struct.
Status Convert(const rtft_protect_options_t& c, rtft::ProtectOptions* o) {
  o->enabled = c.enabled != 0;
  o->l3_every = c.l3_every;
  if (c.ckpt_dir) {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(c.ckpt_dir, 4096, "options.ckpt_dir"));
    o->ckpt_dir = c.ckpt_dir;
  }
  if (c.comm_name) {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(c.comm_name, 64, "options.comm_name"));
    o->comm_name = c.comm_name;
  }
  RTFT_RETURN_IF_ERROR(rtft::capi::CheckBackend(c.backend, &o->backend));
  if (c.device < -1) return Status::InvalidArgument("options.device: -1 (the runtime's) or more");
  o->device = c.device;
  o->stream = c.stream;
  if (c.shm_dir) {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(c.shm_dir, 4096, "options.shm_dir"));
    o->shm_dir = c.shm_dir;
  }
  o->max_object_bytes = c.max_object_bytes;
  if (c.recovery_timeout_ms < 0)
    return Status::InvalidArgument("options.recovery_timeout_ms: 0 (the setting) or more");
  o->recovery_timeout = std::chrono::milliseconds(c.recovery_timeout_ms);
  RTFT_RETURN_IF_ERROR(ConvertGrid(c, &o->grid));
  o->replay_every = c.replay_every;
  if (c.check_finite < -1 || c.check_finite > 1)
    return Status::InvalidArgument(
        "options.check_finite: 0 (RTFT_PROTECT_CHECK_FINITE), 1 (on) "
        "or -1 (off)");
  o->check_finite = c.check_finite;
  if (c.protect_step) {
    o->protect_step = [fn = c.protect_step, user = c.protect_step_user](uint64_t step) {
      return fn(user, step) != 0;
    };
  }
  return Status::Ok();
}

// The application's resize callback as the Protector's ResizeState: it describes the new state
// into a handle that rt-ft owns.
rtft::ResizeState Resize(rtft_resize_fn resize, void* user) {
  if (!resize) return nullptr;
  return [resize,
          user](const rtft::ShrinkPlace& place) -> StatusOr<std::shared_ptr<rtft::StateProvider>> {
    rtft_state handle{std::make_shared<rtft::capi::CState>(), /*borrowed=*/true};
    RTFT_RETURN_IF_ERROR(
        FromC(resize(user, place.rank, place.world_size, &handle), "the resize callback"));
    return std::shared_ptr<rtft::StateProvider>(handle.state);
  };
}

// The local step function that runs on this thread now, for rtft_step_gradients.
struct LocalStep {
  const rtft_step_context_t* c = nullptr;
  rtft::StepContext* cc = nullptr;
};
thread_local LocalStep current_local;

rtft::StepFn Step(rtft_protector_t* p, rtft_step_fn fn, void* user, const char* what,
                  bool local = false) {
  return [p, fn, user, what, local](rtft::StepContext& c) {
    rtft_step_context_t ctx;
    std::memset(&ctx, 0, sizeof(ctx));
    ctx.step = c.step;
    ctx.epoch = c.epoch;
    ctx.rank = c.rank;
    ctx.world_size = c.world_size;
    ctx.comm = &p->comm;
    ctx.recovered = c.recovered ? 1 : 0;
    ctx.device = c.device;
    ctx.stream = c.stream;
    ctx.data_rank = c.data_rank;
    ctx.replaying = c.replaying ? 1 : 0;
    if (!local) return FromC(fn(user, &ctx), what);
    const LocalStep outer = current_local;
    current_local = LocalStep{&ctx, &c};
    const rtft_status_t s = fn(user, &ctx);
    current_local = outer;
    return FromC(s, what);
  };
}

void Fill(const rtft::RunResult& r, rtft_run_result_t* result) {
  result->outcome = r.outcome == rtft::RunOutcome::kDone ? RTFT_RUN_DONE : RTFT_RUN_SHUTDOWN;
  result->checkpointed = r.checkpointed ? 1 : 0;
  result->next_step = r.next_step;
}

}  // namespace

extern "C" {

rtft_status_t rtft_protect_options_init_size(rtft_protect_options_t* options, size_t size) {
  return Call(
      [&] { return rtft::capi::InitOptions(options, size, kFirstSize, Defaults(), kType); });
}

rtft_status_t rtft_protector_create(rtft_runtime_t* runtime, const rtft_protect_options_t* options,
                                    rtft_protector_t** protector) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(runtime, "rtft_protector_create: runtime"));
    RTFT_RETURN_IF_ERROR(NotNull(protector, "rtft_protector_create: protector"));
    *protector = nullptr;
    rtft_protect_options_t c = Defaults();
    if (options) RTFT_RETURN_IF_ERROR(rtft::capi::ReadOptions(options, kFirstSize, &c, kType));
    rtft::ProtectOptions o;
    RTFT_RETURN_IF_ERROR(Convert(c, &o));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<rtft::Protector> made,
                          rtft::Protector::Create(runtime->runtime.get(), o));
    auto handle = std::make_unique<rtft_protector>();
    handle->protector = std::move(made);
    handle->comm.protector = handle->protector.get();
    *protector = handle.release();
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_destroy(rtft_protector_t* protector) {
  return Call([&] {
    delete protector;
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_protect(rtft_protector_t* protector, rtft_state_t* state,
                                     rtft_resize_fn resize, void* user) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    RTFT_RETURN_IF_ERROR(NotNull(state, "rtft_protector_protect: state"));
    protector->state = state->state;
    return protector->protector->Protect(state->state, Resize(resize, user));
  });
}

rtft_status_t rtft_protector_start(rtft_protector_t* protector, uint64_t* step) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(Check(protector));
    RTFT_RETURN_IF_ERROR(NotNull(step, "rtft_protector_start: step"));
    RTFT_ASSIGN_OR_RETURN(*step, protector->protector->Start());
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_begin_step(rtft_protector_t* protector, uint64_t step) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    return protector->protector->BeginStep(step);
  });
}

rtft_status_t rtft_protector_before_update(rtft_protector_t* protector) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    return protector->protector->BeforeUpdate();
  });
}

rtft_status_t rtft_protector_end_step(rtft_protector_t* protector) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    return protector->protector->EndStep();
  });
}

rtft_status_t rtft_protector_recover(rtft_protector_t* protector, uint64_t* step) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(Check(protector));
    RTFT_RETURN_IF_ERROR(NotNull(step, "rtft_protector_recover: step"));
    RTFT_ASSIGN_OR_RETURN(*step, protector->protector->Recover());
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_comm(rtft_protector_t* protector, rtft_comm_t** comm) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    RTFT_RETURN_IF_ERROR(NotNull(comm, "rtft_protector_comm: comm"));
    *comm = &protector->comm;
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_pause(rtft_protector_t* protector, int paused) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    protector->protector->Pause(paused != 0);
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_checkpoint_now(rtft_protector_t* protector) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(protector));
    return protector->protector->CheckpointNow();
  });
}

rtft_status_t rtft_protector_run(rtft_protector_t* protector, uint64_t end_step,
                                 rtft_step_fn compute, rtft_step_fn update, void* user,
                                 rtft_run_result_t* result) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(Check(protector));
    if (!compute || !update)
      return Status::InvalidArgument("rtft_protector_run: compute and update are required");
    RTFT_RETURN_IF_ERROR(NotNull(result, "rtft_protector_run: result"));
    std::memset(result, 0, sizeof(*result));
    RTFT_ASSIGN_OR_RETURN(
        rtft::RunResult r,
        protector->protector->Run(end_step, {Step(protector, compute, user, "compute"),
                                             Step(protector, update, user, "update")}));
    Fill(r, result);
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_run_split(rtft_protector_t* protector, uint64_t end_step,
                                       rtft_step_fn local, rtft_step_fn reduce, rtft_step_fn update,
                                       void* user, rtft_run_result_t* result) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(Check(protector));
    if (!local || !reduce || !update)
      return Status::InvalidArgument(
          "rtft_protector_run_split: local, reduce and update are required");
    RTFT_RETURN_IF_ERROR(NotNull(result, "rtft_protector_run_split: result"));
    std::memset(result, 0, sizeof(*result));
    rtft::StepFns fns;
    fns.update = Step(protector, update, user, "update");
    fns.local = Step(protector, local, user, "local", /*local=*/true);
    fns.reduce = Step(protector, reduce, user, "reduce");
    RTFT_ASSIGN_OR_RETURN(rtft::RunResult r, protector->protector->Run(end_step, fns));
    Fill(r, result);
    return Status::Ok();
  });
}

rtft_status_t rtft_step_gradients(const rtft_step_context_t* context, const void* data,
                                  size_t count, int dtype) {
  return Call([&]() -> Status {
    if (!context || context != current_local.c)
      return Status::FailedPrecondition(
          "rtft_step_gradients: only inside the local step function of "
          "rtft_protector_run_split, with the context it was given");
    rtft::DType type;
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckDType(dtype, &type));
    size_t bytes = 0;
    if (__builtin_mul_overflow(count, rtft::DTypeSize(type), &bytes))
      return Status::InvalidArgument("rtft_step_gradients: " + std::to_string(count) +
                                     " elements are more bytes than memory holds");
    if (!data && bytes > 0)
      return Status::InvalidArgument("rtft_step_gradients: NULL data of " + std::to_string(count) +
                                     " elements");
    current_local.cc->gradients = data;
    current_local.cc->gradient_bytes = bytes;
    current_local.cc->gradient_dtype = type;
    return Status::Ok();
  });
}

rtft_status_t rtft_step_nonfinite(const rtft_step_context_t* context) {
  return Call([&]() -> Status {
    if (!context || context != current_local.c)
      return Status::FailedPrecondition(
          "rtft_step_nonfinite: only inside the local step function of "
          "rtft_protector_run_split, with the context it was given");
    current_local.cc->nonfinite = true;
    return Status::Ok();
  });
}

}  // extern "C"
