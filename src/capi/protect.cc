// Per-step protection through the C API (include/rtft/rtft.h, "Per-step protection"): the
// Protector's bracket, its driver with C step functions, and a shrink's new description through
// a C callback.
#include <cstring>

#include "capi/handles.h"

using rtft::Status;
using rtft::StatusOr;
using rtft::capi::Call;
using rtft::capi::FromC;
using rtft::capi::NotNull;

namespace {

Status Check(rtft_protector_t* p) { return NotNull(p, "protector"); }

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

rtft::StepFn Step(rtft_protector_t* p, rtft_step_fn fn, void* user, const char* what) {
  return [p, fn, user, what](rtft::StepContext& c) {
    rtft_step_context_t ctx;
    std::memset(&ctx, 0, sizeof(ctx));
    ctx.step = c.step;
    ctx.epoch = c.epoch;
    ctx.rank = c.rank;
    ctx.world_size = c.world_size;
    ctx.comm = &p->comm;
    ctx.recovered = c.recovered ? 1 : 0;
    return FromC(fn(user, &ctx), what);
  };
}

}  // namespace

extern "C" {

rtft_status_t rtft_protect_options_init(rtft_protect_options_t* options) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(options, "rtft_protect_options_init: options"));
    std::memset(options, 0, sizeof(*options));
    options->enabled = 1;
    return Status::Ok();
  });
}

rtft_status_t rtft_protector_create(rtft_runtime_t* runtime, const rtft_protect_options_t* options,
                                    rtft_protector_t** protector) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(runtime, "rtft_protector_create: runtime"));
    RTFT_RETURN_IF_ERROR(NotNull(protector, "rtft_protector_create: protector"));
    *protector = nullptr;
    rtft::ProtectOptions o;
    if (options) {
      o.enabled = options->enabled != 0;
      o.l3_every = options->l3_every;
      if (options->ckpt_dir) {
        RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(options->ckpt_dir, 4096, "options.ckpt_dir"));
        o.ckpt_dir = options->ckpt_dir;
      }
      if (options->comm_name) {
        RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(options->comm_name, 64, "options.comm_name"));
        o.comm_name = options->comm_name;
      }
    }
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
    result->outcome = r.outcome == rtft::RunOutcome::kDone ? RTFT_RUN_DONE : RTFT_RUN_SHUTDOWN;
    result->checkpointed = r.checkpointed ? 1 : 0;
    result->next_step = r.next_step;
    return Status::Ok();
  });
}

}  // extern "C"
