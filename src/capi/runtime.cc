// The runtime through the C API (include/rtft/rtft.h, "Runtime"): the process's place in the job,
// its failure events and its step progress.
#include <algorithm>
#include <cstring>

#include "capi/handles.h"

using rtft::Status;
using rtft::capi::Call;
using rtft::capi::NotNull;

namespace {

Status Check(rtft_runtime_t* runtime, const void* out, const char* what) {
  RTFT_RETURN_IF_ERROR(NotNull(runtime, "runtime"));
  return NotNull(out, what);
}

void Copy(const rtft::FailureEvent& e, rtft_event_t* out) {
  std::memset(out, 0, sizeof(*out));
  out->epoch = e.epoch;
  out->rank = e.rank;
  out->world_size = e.world_size;
  out->shutdown = e.shutdown ? 1 : 0;
  out->checkpoint_first = e.checkpoint_first ? 1 : 0;
  out->failed_count = static_cast<int32_t>(e.failed_ranks.size());
  const size_t listed = std::min<size_t>(e.failed_ranks.size(), RTFT_EVENT_MAX_FAILED);
  std::copy(e.failed_ranks.begin(), e.failed_ranks.begin() + listed, out->failed_ranks);
  const size_t n = std::min(e.reason.size(), sizeof(out->reason) - 1);
  std::memcpy(out->reason, e.reason.data(), n);
}

}  // namespace

extern "C" {

rtft_status_t rtft_runtime_create(rtft_runtime_t** runtime) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(runtime, "rtft_runtime_create: runtime"));
    *runtime = nullptr;
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<rtft::Runtime> rt, rtft::Runtime::Create());
    *runtime = new rtft_runtime{std::move(rt)};
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_destroy(rtft_runtime_t* runtime) {
  return Call([&] {
    delete runtime;
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_rank(rtft_runtime_t* runtime, int* rank) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(runtime, rank, "rtft_runtime_rank: rank"));
    *rank = runtime->runtime->current().rank;
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_world_size(rtft_runtime_t* runtime, int* world_size) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(runtime, world_size, "rtft_runtime_world_size: world_size"));
    *world_size = runtime->runtime->current().world_size;
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_epoch(rtft_runtime_t* runtime, uint64_t* epoch) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(runtime, epoch, "rtft_runtime_epoch: epoch"));
    *epoch = runtime->runtime->current().epoch;
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_role(rtft_runtime_t* runtime, int* role) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(runtime, role, "rtft_runtime_role: role"));
    *role = static_cast<int>(runtime->runtime->info().role);
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_poll_event(rtft_runtime_t* runtime, rtft_event_t* event,
                                      int* has_event) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(Check(runtime, event, "rtft_runtime_poll_event: event"));
    RTFT_RETURN_IF_ERROR(NotNull(has_event, "rtft_runtime_poll_event: has_event"));
    std::optional<rtft::FailureEvent> e = runtime->runtime->PollEvent();
    *has_event = e ? 1 : 0;
    if (e) Copy(*e, event);
    return Status::Ok();
  });
}

rtft_status_t rtft_runtime_report_step(rtft_runtime_t* runtime, uint64_t step) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(NotNull(runtime, "runtime"));
    return runtime->runtime->ReportStep(step);
  });
}

}  // extern "C"
