/* rt-ft's C API, per-step protection: the protector's options, the step bracket and the step
 * driver with its context (docs/capi.md, "What it covers"). Part of rtft/rtft.h, which includes it:
 * include that one. Over rtft.h's types (status, state, communicator), which it includes first. */
#ifndef RTFT_RTFT_PROTECT_H_
#define RTFT_RTFT_PROTECT_H_

#include "rtft/rtft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Per-step protection: L1 snapshot, L2 replica, L3 checkpoint, recovery --------------- */

/* Decides whether `step` takes a snapshot (nonzero: it does). A failure rolls back to the last
 * step that took one. Called on the thread that runs the steps, as each step begins. */
typedef int (*rtft_protect_step_fn)(void* user, uint64_t step);

/* rtft::ProtectOptions (include/rtft/protect.h says more of each). */
typedef struct rtft_protect_options {
  size_t size;           /* set by rtft_protect_options_init ("Options that grow") */
  int32_t enabled;       /* 0: no snapshot and no replica (to measure what protection costs) */
  int64_t l3_every;      /* L3 every this many steps (0: RTFT_PROTECT_L3_EVERY; <0: none) */
  const char* ckpt_dir;  /* L3's directory (NULL: RTFT_PROTECT_CKPT_DIR) */
  const char* comm_name; /* the training communicator's name (NULL: "train") */
  /* ---- from here, fields a caller's size may not cover (added in rt-ft 0.2) ---- */
  int32_t backend;     /* the training communicator's rtft_backend_t (RTFT_BACKEND_GLOO) */
  int32_t device;      /* its CUDA device and the step's (-1: the runtime's, RTFT_DEVICE) */
  void* stream;        /* the cudaStream_t the application computes on (NULL: the default stream) */
  const char* shm_dir; /* where L1 and L2 live (NULL: dp-launch's, RTFT_SHM_DIR, or a private
                        * directory under /dev/shm for a standalone run); must exist */
  uint64_t max_object_bytes;   /* room for one version's serialized objects (0: 1 MiB) */
  int64_t recovery_timeout_ms; /* recovery's wait at each stage (0: RTFT_COMM_CREATE_TIMEOUT_MS) */
  /* The grid (rtft::Grid): tensor x pipeline degrees (1 x 1: data parallel only) and, optionally,
   * grid_rank_count ranks (the world size) mapping (t, p, d) to a rank, as in C++. */
  int32_t grid_tensor;
  int32_t grid_pipeline;
  const int32_t* grid_ranks; /* NULL: rank = t + T * (d + D * p) */
  size_t grid_rank_count;
  rtft_protect_step_fn protect_step; /* NULL: every step takes a snapshot */
  void* protect_step_user;           /* protect_step's first argument */
  /* ---- from here, fields a caller's size may not cover (added in rt-ft 0.3) ---- */
  /* The replay of a step by a peer every this many steps (0: RTFT_PROTECT_REPLAY_EVERY, off by
   * default; <0: never), and the check for non-finite gradients at every step (0:
   * RTFT_PROTECT_CHECK_FINITE, off by default; 1: on; -1: off); both need
   * rtft_protector_run_split. */
  int32_t replay_every;
  int32_t check_finite;
} rtft_protect_options_t;
/* Fills the first `size` bytes at `options` with the defaults (enabled 1, backend
 * RTFT_BACKEND_GLOO, device -1, grid 1 x 1, every other field 0 or NULL) and sets options->size
 * to `size`. Call it through rtft_protect_options_init. */
RTFT_CAPI rtft_status_t rtft_protect_options_init_size(rtft_protect_options_t* options,
                                                       size_t size);
static inline rtft_status_t rtft_protect_options_init(rtft_protect_options_t* options) {
  return rtft_protect_options_init_size(options, sizeof(*options));
}
/* `options` may be NULL (the defaults). The runtime must outlive the protector. */
RTFT_CAPI rtft_status_t rtft_protector_create(rtft_runtime_t* runtime,
                                              const rtft_protect_options_t* options,
                                              rtft_protector_t** protector);
RTFT_CAPI rtft_status_t rtft_protector_destroy(rtft_protector_t* protector);

/* After a shrink (no spare left, the job goes on with fewer ranks): describes the state again
 * into `state` (empty) with shards of the new rank and world size (each sharded tensor's first
 * dimension split by rtft_even_split); rt-ft fills them from the old ones. */
typedef rtft_status_t (*rtft_resize_fn)(void* user, int rank, int world_size, rtft_state_t* state);
/* The state, described once before the first step; `resize` may be NULL (a shrink then ends the
 * job with an error). */
RTFT_CAPI rtft_status_t rtft_protector_protect(rtft_protector_t* protector, rtft_state_t* state,
                                               rtft_resize_fn resize, void* user);

/* The bracket. start: the step to run first (0, or where a spare, a restarted process or a job
 * started again from L3 resumes, its state restored). begin_step: snapshot of the state as it is
 * (in the background). before_update: returns once the snapshot is taken; change the state after
 * it. end_step: progress and L3. A call that returns RTFT_ABORTED (or a communicator call that
 * does) is followed by recover, which returns the step to resume at, or RTFT_SHUTDOWN when the
 * job is ending (exit 0). */
RTFT_CAPI rtft_status_t rtft_protector_start(rtft_protector_t* protector, uint64_t* step);
RTFT_CAPI rtft_status_t rtft_protector_begin_step(rtft_protector_t* protector, uint64_t step);
RTFT_CAPI rtft_status_t rtft_protector_before_update(rtft_protector_t* protector);
RTFT_CAPI rtft_status_t rtft_protector_end_step(rtft_protector_t* protector);
RTFT_CAPI rtft_status_t rtft_protector_recover(rtft_protector_t* protector, uint64_t* step);
/* The epoch's training communicator, owned by the protector: always the current epoch's. */
RTFT_CAPI rtft_status_t rtft_protector_comm(rtft_protector_t* protector, rtft_comm_t** comm);
/* Steps that begin while paused take no snapshot. */
RTFT_CAPI rtft_status_t rtft_protector_pause(rtft_protector_t* protector, int paused);
/* Writes the current step's snapshot to L3 now and waits for its commit. */
RTFT_CAPI rtft_status_t rtft_protector_checkpoint_now(rtft_protector_t* protector);

/* The driver: runs steps up to `end_step` (exclusive) through the bracket, recovering inside. */
typedef struct rtft_step_context {
  uint64_t step;
  uint64_t epoch;
  int32_t rank;
  int32_t world_size;
  rtft_comm_t* comm; /* the epoch's training communicator (the protector's) */
  int32_t recovered; /* 1 on the first step after a recovery */
  int32_t device;    /* the step's CUDA device and stream (the options' device and stream) */
  void* stream;
  /* For local (rtft_protector_run_split): the data-parallel index whose data the step uses, the
   * rank's own, but the replayed peer's while `replaying` is 1 (rt-ft 0.3). */
  int32_t data_rank;
  int32_t replaying;
} rtft_step_context_t;
/* compute: reads the state, never changes it; update: changes it (after the snapshot). Return
 * RTFT_OK, or the status of the call that failed (RTFT_ABORTED recovers). */
typedef rtft_status_t (*rtft_step_fn)(void* user, const rtft_step_context_t* context);
/* BEGIN generated: run_outcome (scripts/gen-enums.sh) */
/* clang-format off */
typedef enum rtft_run_outcome {
  RTFT_RUN_DONE = 0, /* every step up to the end ran */
  RTFT_RUN_SHUTDOWN = 1, /* the job is ending (no spare was left, or dp-launch was told to stop): exit 0 */
} rtft_run_outcome_t;
/* clang-format on */
/* END generated: run_outcome */
typedef struct rtft_run_result {
  int32_t outcome;      /* RTFT_RUN_DONE, or RTFT_RUN_SHUTDOWN (the job is ending: exit 0) */
  int32_t checkpointed; /* shutdown: the checkpoint the job asked for is written */
  uint64_t next_step;   /* the first step not run */
} rtft_run_result_t;
RTFT_CAPI rtft_status_t rtft_protector_run(rtft_protector_t* protector, uint64_t end_step,
                                           rtft_step_fn compute, rtft_step_fn update, void* user,
                                           rtft_run_result_t* result);
/* The driver with compute in two parts, which the replay of steps (options.replay_every) needs:
 * local computes the gradients of context->data_rank's data with no data-parallel collective (in
 * a grid, the tensor and pipeline groups' own, run alike by every rank of the replica; its data and
 * random numbers drawn from the state, the step and data_rank alone) and names their buffer with
 * rtft_step_gradients; reduce runs their collectives. At a replayed step each rank runs its left
 * neighbour's local (replaying 1) and then its own, and the digests of the buffers are compared
 * before reduce (docs/protect.md, "Replay"). */
RTFT_CAPI rtft_status_t rtft_protector_run_split(rtft_protector_t* protector, uint64_t end_step,
                                                 rtft_step_fn local, rtft_step_fn reduce,
                                                 rtft_step_fn update, void* user,
                                                 rtft_run_result_t* result);
/* Inside local, with its context: its gradients are the `count` elements of `dtype` in host
 * memory at `data`, which must stay unchanged until local returns. RTFT_FAILED_PRECONDITION
 * elsewhere. */
RTFT_CAPI rtft_status_t rtft_step_gradients(const rtft_step_context_t* context, const void* data,
                                            size_t count, int dtype);
/* Inside local, with its context: the application found its loss or gradients not finite; the
 * check for non-finite gradients (options.check_finite) takes it as it takes a NaN in the named
 * buffer. RTFT_FAILED_PRECONDITION elsewhere. */
RTFT_CAPI rtft_status_t rtft_step_nonfinite(const rtft_step_context_t* context);

#ifdef __cplusplus
}
#endif

#endif /* RTFT_RTFT_PROTECT_H_ */
