/* rt-ft's C API: what a C or Fortran solver needs of librt-ft, over the C++ API
 * (docs/capi.md). The runtime of the job a process runs in under dp-launch, state described by
 * pointer (tensors) and by callback (byte-string objects), the checkpoint engine, communicators
 * that survive a failed peer, and per-step protection (the bracket and the step driver:
 * rtft/rtft_protect.h, which this header includes).
 *
 * C99. Opaque handles; every call but rtft_version() and rtft_last_error() returns an
 * rtft_status_t: RTFT_OK (0), or minus the rtft::StatusCode of the failure, whose message
 * rtft_last_error() gives on the same thread. Outputs come last. No C++ exception crosses it.
 * examples/heatdis_c is a complete solver; include/rtft/rtft.f90 the Fortran module over it. */
#ifndef RTFT_RTFT_H_
#define RTFT_RTFT_H_

#include <stddef.h>
#include <stdint.h>

/* The ABI of this header: raised with every change that breaks a program built with an older one
 * (a struct's layout, a signature). It is librt-ft's soname (librt-ft.so.1); CMake reads it from
 * this line. 1: rt-ft 0.2, whose option structs carry their size. */
#define RTFT_ABI_VERSION 1

#if defined(RTFT_BUILDING_LIBRARY)
#define RTFT_CAPI __attribute__((visibility("default")))
#else
#define RTFT_CAPI
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ---------------------------------------------------------------------------- */

/* RTFT_OK, or one of the codes below: minus rtft::StatusCode (include/rtft/status.h), which
 * says how far to roll back (RTFT_ABORTED: a peer failed, recover; RTFT_SHUTDOWN: the job is
 * ending, exit 0). */
typedef int rtft_status_t;
/* The values: rtft/enum_list.h, the one list of them. */
/* BEGIN generated: status (scripts/gen-enums.sh) */
/* clang-format off */
enum {
  RTFT_OK = 0, /* success */
  RTFT_INVALID_ARGUMENT = -1, /* bad input from the caller: fix the call */
  RTFT_NOT_FOUND = -2, /* a file, version, tensor or key does not exist */
  RTFT_ALREADY_EXISTS = -3, /* refusing to overwrite */
  RTFT_FAILED_PRECONDITION = -4, /* the system is not in a state for this call (a call out of order) */
  RTFT_OUT_OF_RANGE = -5, /* an index or region outside the valid bounds */
  RTFT_RESOURCE_EXHAUSTED = -6, /* disk full, memory pool exhausted, quota */
  RTFT_PERMISSION_DENIED = -7, /* read-only file system, access refused */
  RTFT_DEADLINE_EXCEEDED = -8, /* a blocking call ran past its timeout */
  RTFT_UNAVAILABLE = -9, /* transient: retry may succeed */
  RTFT_ABORTED = -10, /* a peer failed: rebuild communicators (recover), then retry */
  RTFT_DATA_LOSS = -11, /* corrupt or missing data: restore state from elsewhere */
  RTFT_IO_ERROR = -12, /* an operating-system I/O error not covered above */
  RTFT_UNIMPLEMENTED = -13, /* not supported by this build or backend */
  RTFT_INTERNAL = -14, /* a bug in rt-ft */
  RTFT_DEVICE_LOST = -15, /* the GPU is unusable for the rest of this process: exit, a spare takes the rank */
  RTFT_SHUTDOWN = -16, /* the job is ending (not a failure): exit 0 */
};
/* clang-format on */
/* END generated: status */

/* The message of the last call on this thread that failed ("CODE: message"); "" if none did.
 * Valid until this thread's next failing call. */
RTFT_CAPI const char* rtft_last_error(void);
/* librt-ft's version, "MAJOR.MINOR.PATCH". */
RTFT_CAPI const char* rtft_version(void);

/* ---- Types ----------------------------------------------------------------------------- */

/* Generated from rtft/enum_list.h (rtft::DType, ReduceOp, CommBackend, RuntimeRole), values
 * and all: the numeric values travel in frames and files. */
/* BEGIN generated: dtype (scripts/gen-enums.sh) */
/* clang-format off */
typedef enum rtft_dtype {
  RTFT_FLOAT32 = 0, /* float32 */
  RTFT_FLOAT16 = 1, /* float16 */
  RTFT_BFLOAT16 = 2, /* bfloat16 */
  RTFT_INT8 = 3, /* int8 */
  RTFT_INT32 = 4, /* int32 */
  RTFT_INT64 = 5, /* int64 */
  RTFT_UINT8 = 6, /* uint8 */
  RTFT_FLOAT64 = 7, /* float64 */
} rtft_dtype_t;
/* clang-format on */
/* END generated: dtype */
/* BEGIN generated: reduce_op (scripts/gen-enums.sh) */
/* clang-format off */
typedef enum rtft_reduce_op {
  RTFT_SUM = 0, /* sum */
  RTFT_AVG = 1, /* avg */
  RTFT_MAX = 2, /* max */
  RTFT_MIN = 3, /* min */
} rtft_reduce_op_t;
/* clang-format on */
/* END generated: reduce_op */
/* BEGIN generated: backend (scripts/gen-enums.sh) */
/* clang-format off */
typedef enum rtft_backend {
  RTFT_BACKEND_GLOO = 0, /* gloo */
  RTFT_BACKEND_NCCL = 1, /* nccl */
} rtft_backend_t;
/* clang-format on */
/* END generated: backend */
/* How a process started (rtft_runtime_role). */
/* BEGIN generated: role (scripts/gen-enums.sh) */
/* clang-format off */
typedef enum rtft_role {
  RTFT_ROLE_INITIAL = 0, /* started with its logical rank */
  RTFT_ROLE_SPARE_ACTIVATED = 1, /* a warm spare that took over a failed slot's logical rank */
  RTFT_ROLE_RESTARTED = 2, /* restarted on the same slot after a transient failure */
  RTFT_ROLE_STANDALONE = 3, /* not started by dp-launch: rank 0 of 1, no failure handling */
} rtft_role_t;
/* clang-format on */
/* END generated: role */

typedef struct rtft_runtime rtft_runtime_t;
typedef struct rtft_state rtft_state_t;
typedef struct rtft_ckpt rtft_ckpt_t;
typedef struct rtft_comm rtft_comm_t;
typedef struct rtft_protector rtft_protector_t;

/* Options that grow. An options struct (rtft_ckpt_options_t, rtft_protect_options_t) starts with
 * its size, which its _init function sets to the size of the struct as the caller was compiled
 * (the inline rtft_*_options_init passes sizeof), with every field at its default. The library
 * reads only the fields that size covers and gives the others their defaults, so a program built
 * with an older rtft.h keeps working as fields are added at the end. Refused: a size smaller than
 * the struct's first version or larger than RTFT_OPTIONS_MAX_SIZE (RTFT_INVALID_ARGUMENT: the
 * struct was not initialised), and a size larger than this library's struct whose extra bytes
 * are not zero (RTFT_UNIMPLEMENTED: fields of a newer rt-ft; run with the library the header came
 * from). */
#define RTFT_OPTIONS_MAX_SIZE 4096

/* ---- Runtime: the application's side of its dp-launch agent ----------------------------- */

/* Under dp-launch, attaches to the slot's agent and returns once this process has a logical
 * rank (a warm spare waits here until it takes a failed slot's); otherwise a standalone runtime.
 * Destroy it last, after every other handle. */
RTFT_CAPI rtft_status_t rtft_runtime_create(rtft_runtime_t** runtime);
RTFT_CAPI rtft_status_t rtft_runtime_destroy(rtft_runtime_t* runtime);
/* This process's place now: the latest failure event's epoch, rank and world size. */
RTFT_CAPI rtft_status_t rtft_runtime_rank(rtft_runtime_t* runtime, int* rank);
RTFT_CAPI rtft_status_t rtft_runtime_world_size(rtft_runtime_t* runtime, int* world_size);
RTFT_CAPI rtft_status_t rtft_runtime_epoch(rtft_runtime_t* runtime, uint64_t* epoch);
/* How it started (rtft_role_t). */
RTFT_CAPI rtft_status_t rtft_runtime_role(rtft_runtime_t* runtime, int* role);

#define RTFT_EVENT_MAX_FAILED 16
typedef struct rtft_event {
  uint64_t epoch;     /* the new epoch */
  int32_t rank;       /* this process's rank in it (a shrink renumbers) */
  int32_t world_size; /* ranks in it */
  int32_t shutdown;   /* 1: the job is ending (write the checkpoint first if asked) */
  int32_t checkpoint_first;
  int32_t failed_count; /* ranks that failed; the first RTFT_EVENT_MAX_FAILED are listed */
  int32_t failed_ranks[RTFT_EVENT_MAX_FAILED];
  char reason[256]; /* NUL-terminated, cut short if longer */
} rtft_event_t;
/* The next failure event not yet polled: *has_event 1 and *event filled, or *has_event 0. */
RTFT_CAPI rtft_status_t rtft_runtime_poll_event(rtft_runtime_t* runtime, rtft_event_t* event,
                                                int* has_event);
/* Step progress for the agent's hang watchdog (the step API reports it itself). */
RTFT_CAPI rtft_status_t rtft_runtime_report_step(rtft_runtime_t* runtime, uint64_t step);

/* ---- State: what to save, described without copying it ---------------------------------- */

/* An object's bytes: its save callback hands them over with rtft_bytes_set (copied). */
typedef struct rtft_bytes rtft_bytes_t;
RTFT_CAPI rtft_status_t rtft_bytes_set(rtft_bytes_t* bytes, const void* data, size_t size);
/* Called when the state is saved (checkpoint, snapshot): a status, RTFT_OK on success. */
typedef rtft_status_t (*rtft_object_save_fn)(void* user, rtft_bytes_t* bytes);
/* Called on restore with the saved bytes. */
typedef rtft_status_t (*rtft_object_load_fn)(void* user, const void* data, size_t size);
/* Called once everything the state describes was restored (state derived from it). */
typedef rtft_status_t (*rtft_restored_fn)(void* user);

RTFT_CAPI rtft_status_t rtft_state_create(rtft_state_t** state);
/* The checkpoint engine and the protector keep what they were given: destroy it when done. */
RTFT_CAPI rtft_status_t rtft_state_destroy(rtft_state_t* state);
/* A whole tensor in host memory (replicated: the same on every rank), `ndim` dimensions of
 * `shape`, C order. `data` is read when saving and written when restoring. */
RTFT_CAPI rtft_status_t rtft_state_add_tensor(rtft_state_t* state, const char* name, int dtype,
                                              int ndim, const int64_t* shape, void* data);
/* This rank's shard of a tensor of `global_shape`: `shape` at `offset` in it. */
RTFT_CAPI rtft_status_t rtft_state_add_shard(rtft_state_t* state, const char* name, int dtype,
                                             int ndim, const int64_t* shape,
                                             const int64_t* global_shape, const int64_t* offset,
                                             void* data);
/* The same, for a shard that every rank of this rank's data-parallel group holds bitwise (HSDP's
 * replicas, a tensor-parallel partition's slice): per-step protection compares the copies, feeds a
 * rank that lost it from a live one and leaves it out of L2's ring (rtft::ShardCoords::replicated;
 * docs/protect.md, "3D layouts"). */
RTFT_CAPI rtft_status_t rtft_state_add_replicated_shard(rtft_state_t* state, const char* name,
                                                        int dtype, int ndim, const int64_t* shape,
                                                        const int64_t* global_shape,
                                                        const int64_t* offset, void* data);
RTFT_CAPI rtft_status_t rtft_state_add_object(rtft_state_t* state, const char* name,
                                              rtft_object_save_fn save, rtft_object_load_fn load,
                                              void* user);
RTFT_CAPI rtft_status_t rtft_state_on_restored(rtft_state_t* state, rtft_restored_fn restored,
                                               void* user);
/* The even split of `n` rows over `parts` (rtft::SplitEvenly): part `index` holds n / parts
 * rows, one more when index < n % parts, starting at *offset. How shards are laid out after a
 * shrink. */
RTFT_CAPI rtft_status_t rtft_even_split(int64_t n, int parts, int index, int64_t* offset,
                                        int64_t* count);

/* ---- Checkpoint engine: lazy asynchronous checkpoints on disk --------------------------- */

/* rtft::CheckpointOptions. Zero fields take their defaults from the RTFT_CKPT_* settings
 * (README, "Settings"). */
typedef struct rtft_ckpt_options {
  size_t size;     /* set by rtft_ckpt_options_init ("Options that grow") */
  const char* dir; /* checkpoint root, shared by every rank (required) */
  int32_t rank;
  int32_t world_size;     /* 0: 1 */
  uint64_t pool_bytes;    /* host pool (RTFT_CKPT_POOL_BYTES) */
  int32_t keep_versions;  /* -1: RTFT_CKPT_KEEP_VERSIONS; 0 keeps all */
  int32_t pin_pool;       /* 1: register the pool with CUDA; 0 for a state all in host memory,
                           * which then never creates a CUDA context */
  const char* io_backend; /* NULL: RTFT_CKPT_IO_BACKEND (auto, uring, posix) */
  /* ---- from here, fields a caller's size may not cover (added in rt-ft 0.2) ---- */
  uint64_t chunk_bytes;      /* capture and write unit (RTFT_CKPT_CHUNK_BYTES) */
  int32_t capture_threads;   /* RTFT_CKPT_CAPTURE_THREADS */
  int32_t flush_threads;     /* RTFT_CKPT_FLUSH_THREADS */
  int32_t io_depth;          /* RTFT_CKPT_IO_DEPTH */
  int32_t direct_io;         /* -1: RTFT_CKPT_DIRECT_IO; 0 off; 1 where the file system allows */
  int64_t commit_timeout_ms; /* RTFT_CKPT_COMMIT_TIMEOUT_MS */
  int64_t wait_timeout_ms;   /* RTFT_CKPT_WAIT_TIMEOUT_MS */
  /* ---- from here, fields a caller's size may not cover (added in rt-ft 0.3) ---- */
  uint64_t write_id; /* 0: none; else the id of this write of its versions: a version written
                      * again commits only the files of its own write (docs/format.md) */
} rtft_ckpt_options_t;
/* Fills the first `size` bytes at `options` with the defaults (dir NULL, rank 0, world_size 1,
 * keep_versions -1, pin_pool 1 as in C++, direct_io -1, every other field 0) and sets
 * options->size to `size`. Call it through rtft_ckpt_options_init. */
RTFT_CAPI rtft_status_t rtft_ckpt_options_init_size(rtft_ckpt_options_t* options, size_t size);
static inline rtft_status_t rtft_ckpt_options_init(rtft_ckpt_options_t* options) {
  return rtft_ckpt_options_init_size(options, sizeof(*options));
}
RTFT_CAPI rtft_status_t rtft_ckpt_create(const rtft_ckpt_options_t* options, rtft_ckpt_t** ckpt);
/* Waits for the versions in flight. */
RTFT_CAPI rtft_status_t rtft_ckpt_destroy(rtft_ckpt_t* ckpt);
/* Starts `version` (increasing) of `state` and returns at once; its memory must not change until
 * rtft_ckpt_wait_captured(version) returns. */
RTFT_CAPI rtft_status_t rtft_ckpt_checkpoint(rtft_ckpt_t* ckpt, uint64_t version,
                                             rtft_state_t* state);
RTFT_CAPI rtft_status_t rtft_ckpt_wait_captured(rtft_ckpt_t* ckpt, uint64_t version);
/* Durable; on rank 0 also committed (LATEST moved). */
RTFT_CAPI rtft_status_t rtft_ckpt_wait_persisted(rtft_ckpt_t* ckpt, uint64_t version);
/* The version LATEST names (RTFT_NOT_FOUND: none yet). */
RTFT_CAPI rtft_status_t rtft_ckpt_latest(const char* dir, uint64_t* version);
/* Fills `state` from `version` of the checkpoints in `dir` (RTFT_CKPT_LATEST: LATEST's),
 * checksums verified, shards assembled from the saved ones (another number of ranks). */
#define RTFT_CKPT_LATEST UINT64_MAX
RTFT_CAPI rtft_status_t rtft_ckpt_restore(const char* dir, uint64_t version, rtft_state_t* state);

/* ---- Communicators of one epoch, over every rank of it ---------------------------------- */

/* `name`: 1 to 64 of [A-Za-z0-9_.-]. After a failure its calls return RTFT_ABORTED: destroy it
 * and create the next epoch's. */
RTFT_CAPI rtft_status_t rtft_comm_create(rtft_runtime_t* runtime, const char* name, int backend,
                                         rtft_comm_t** comm);
/* Not for the protector's communicator (rtft_protector_comm), which it owns. */
RTFT_CAPI rtft_status_t rtft_comm_destroy(rtft_comm_t* comm);
RTFT_CAPI rtft_status_t rtft_comm_rank(rtft_comm_t* comm, int* rank);
RTFT_CAPI rtft_status_t rtft_comm_world_size(rtft_comm_t* comm, int* world_size);
RTFT_CAPI rtft_status_t rtft_comm_epoch(rtft_comm_t* comm, uint64_t* epoch);
/* Counts in elements of `dtype`; send and receive buffers may be the same. */
RTFT_CAPI rtft_status_t rtft_comm_all_reduce(rtft_comm_t* comm, const void* send, void* recv,
                                             size_t count, int dtype, int op);
RTFT_CAPI rtft_status_t rtft_comm_broadcast(rtft_comm_t* comm, void* buffer, size_t count,
                                            int dtype, int root);
/* recv holds world_size * count elements, rank r's at r * count. */
RTFT_CAPI rtft_status_t rtft_comm_all_gather(rtft_comm_t* comm, const void* send, void* recv,
                                             size_t count, int dtype);
/* Rank r contributes counts[r] elements (counts: world_size of them), after those of 0..r-1. */
RTFT_CAPI rtft_status_t rtft_comm_all_gather_v(rtft_comm_t* comm, const void* send, void* recv,
                                               const size_t* counts, int dtype);
/* send holds world_size * count elements; rank r receives the reduction of slice r. */
RTFT_CAPI rtft_status_t rtft_comm_reduce_scatter(rtft_comm_t* comm, const void* send, void* recv,
                                                 size_t count, int dtype, int op);
/* Completes once `peer` received it. */
RTFT_CAPI rtft_status_t rtft_comm_send(rtft_comm_t* comm, const void* buffer, size_t count,
                                       int dtype, int peer);
RTFT_CAPI rtft_status_t rtft_comm_recv(rtft_comm_t* comm, void* buffer, size_t count, int dtype,
                                       int peer);
RTFT_CAPI rtft_status_t rtft_comm_barrier(rtft_comm_t* comm);
/* From any thread: a call in flight and every later call return RTFT_ABORTED. */
RTFT_CAPI rtft_status_t rtft_comm_abort(rtft_comm_t* comm);

/* ---- Test hooks (docs/testing.md) ------------------------------------------------------- */

/* A named fault point of the application's (rtft::FaultPoint), armed by RTFT_FAULT. */
RTFT_CAPI rtft_status_t rtft_fault_point(const char* name);
/* 1 where RTFT_FAULT arms `name` with flag (once) or flags (from then on): the application
 * corrupts its own data there (rtft::FaultFlag); 0 otherwise, and for a bad name. */
RTFT_CAPI int rtft_fault_flag(const char* name);

#ifdef __cplusplus
}
#endif

/* Per-step protection (rtft_protector_*), in a header of its own over the types above. */
#include "rtft/rtft_protect.h"

#endif /* RTFT_RTFT_H_ */
