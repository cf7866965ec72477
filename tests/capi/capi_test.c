/* The C API (include/rtft/rtft.h) from a file compiled as C99 with -Wall -Wextra -pedantic
 * -Werror, in one process (a standalone runtime: rank 0 of 1): statuses and their messages,
 * state by pointer and by callback, the checkpoint engine's round trip, communicators, and the
 * protector's bracket and driver. capi_job.c runs the same API in a real job with a lost slot.
 *
 *   capi_test SCRATCH_DIR EXPECTED_VERSION */
#define _POSIX_C_SOURCE 200809L /* mkdir, opendir */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rtft/rtft.h"

static int failures = 0;

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              rtft_last_error());                                                        \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)
#define EXPECT_OK(call) EXPECT((call) == RTFT_OK)

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

/* ---- statuses and state --------------------------------------------------------------- */

static void test_statuses(const char* version) {
  rtft_state_t* state = NULL;
  double x[4] = {0};
  int64_t shape[1] = {4};
  int64_t offset = -1, count = -1;
  EXPECT(strcmp(rtft_version(), version) == 0);
  EXPECT(RTFT_ABI_VERSION == 1);
  EXPECT(RTFT_SHUTDOWN == -16 && RTFT_DEVICE_LOST == -15 && RTFT_FLOAT64 == 7);
  EXPECT(rtft_state_create(NULL) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "INVALID_ARGUMENT: rtft_state_create: state is NULL"));
  EXPECT_OK(rtft_state_create(&state));
  EXPECT(rtft_state_add_tensor(state, "x", 99, 1, shape, x) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "dtype 99 is not an rtft_dtype_t"));
  EXPECT(rtft_state_add_tensor(state, "x", RTFT_FLOAT64, 1, NULL, x) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_state_add_tensor(state, "", RTFT_FLOAT64, 1, shape, x) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_state_add_tensor(state, "x", RTFT_FLOAT64, 99, shape, x) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_state_add_tensor(state, "x", RTFT_FLOAT64, 1, shape, x));
  EXPECT(rtft_state_add_tensor(state, "x", RTFT_FLOAT64, 1, shape, x) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "used twice"));
  EXPECT(rtft_state_add_object(state, "o", NULL, NULL, NULL) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_state_destroy(state));
  EXPECT_OK(rtft_state_destroy(NULL));
  EXPECT_OK(rtft_even_split(10, 3, 0, &offset, &count));
  EXPECT(offset == 0 && count == 4);
  EXPECT_OK(rtft_even_split(10, 3, 2, &offset, &count));
  EXPECT(offset == 7 && count == 3);
  EXPECT(rtft_even_split(10, 3, 3, &offset, &count) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_fault_point("capi.unarmed") == RTFT_OK); /* unarmed: nothing happens */
}

/* ---- checkpoint engine ---------------------------------------------------------------- */

typedef struct {
  char saved[32];
  char loaded[32];
  int fail_save;
  int restored;
} object_t;

static rtft_status_t save_object(void* user, rtft_bytes_t* bytes) {
  object_t* o = (object_t*)user;
  if (o->fail_save) return RTFT_DATA_LOSS;
  return rtft_bytes_set(bytes, o->saved, strlen(o->saved));
}

static rtft_status_t load_object(void* user, const void* data, size_t size) {
  object_t* o = (object_t*)user;
  if (size >= sizeof(o->loaded)) return RTFT_OUT_OF_RANGE;
  memcpy(o->loaded, data, size);
  o->loaded[size] = '\0';
  return RTFT_OK;
}

static rtft_status_t on_restored(void* user) {
  ++((object_t*)user)->restored;
  return RTFT_OK;
}

/* A float64 grid, an int32 shard of a tensor of 10 and an object, over `grid`, `shard`, `o`. */
static rtft_state_t* make_state(double* grid, int32_t* shard, object_t* o) {
  rtft_state_t* state = NULL;
  const int64_t shape[2] = {4, 5}, shard_shape[1] = {3}, global[1] = {10}, at[1] = {6};
  EXPECT_OK(rtft_state_create(&state));
  EXPECT_OK(rtft_state_add_tensor(state, "grid", RTFT_FLOAT64, 2, shape, grid));
  EXPECT_OK(rtft_state_add_shard(state, "shard", RTFT_INT32, 1, shard_shape, global, at, shard));
  EXPECT_OK(rtft_state_add_object(state, "meta", save_object, load_object, o));
  EXPECT_OK(rtft_state_on_restored(state, on_restored, o));
  return state;
}

/* A shard that the data-parallel group shares (HSDP's): taken, and refused as a shard is. */
static void test_replicated_shard(void) {
  rtft_state_t* state = NULL;
  int32_t rows[3] = {1, 2, 3};
  const int64_t shape[1] = {3}, global[1] = {6}, at[1] = {3};
  EXPECT_OK(rtft_state_create(&state));
  EXPECT_OK(rtft_state_add_replicated_shard(state, "w", RTFT_INT32, 1, shape, global, at, rows));
  EXPECT(rtft_state_add_replicated_shard(NULL, "x", RTFT_INT32, 1, shape, global, at, rows) ==
         RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_state_add_replicated_shard(state, "x", RTFT_INT32, 0, shape, global, at, rows) ==
         RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_state_add_replicated_shard(state, "x", RTFT_INT32, 1, shape, NULL, at, rows) ==
         RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_state_add_replicated_shard(state, "w", RTFT_INT32, 1, shape, global, at, rows) ==
         RTFT_INVALID_ARGUMENT); /* its name again */
  EXPECT_OK(rtft_state_destroy(state));
}

static void test_checkpoint(const char* dir) {
  double grid[20], back[20];
  int32_t shard[3] = {7, 8, 9}, shard_back[3] = {0};
  object_t o, o_back;
  rtft_ckpt_options_t opts;
  rtft_ckpt_t* ckpt = NULL;
  rtft_state_t *state, *fresh;
  uint64_t latest = 0;
  int i;
  memset(&o, 0, sizeof(o));
  memset(&o_back, 0, sizeof(o_back));
  for (i = 0; i < 20; ++i) grid[i] = 1.0 / (i + 3);
  strcpy(o.saved, "step=1");
  state = make_state(grid, shard, &o);
  EXPECT(rtft_ckpt_latest(dir, &latest) == RTFT_NOT_FOUND);
  EXPECT_OK(rtft_ckpt_options_init(&opts));
  EXPECT(rtft_ckpt_create(&opts, &ckpt) == RTFT_INVALID_ARGUMENT); /* no dir */
  opts.dir = dir;
  opts.world_size = 1;
  opts.pool_bytes = 128u << 20; /* two chunks: the state is small, the default pool large */
  EXPECT_OK(rtft_ckpt_create(&opts, &ckpt));
  EXPECT_OK(rtft_ckpt_checkpoint(ckpt, 1, state));
  EXPECT_OK(rtft_ckpt_wait_captured(ckpt, 1));
  /* Changed after the fence: version 1 keeps the old values, version 2 gets these. */
  grid[0] = 42.0;
  strcpy(o.saved, "step=2");
  EXPECT_OK(rtft_ckpt_checkpoint(ckpt, 2, state));
  EXPECT_OK(rtft_ckpt_wait_persisted(ckpt, 2));
  o.fail_save = 1; /* a save callback's error is the checkpoint's */
  EXPECT(rtft_ckpt_checkpoint(ckpt, 3, state) == RTFT_DATA_LOSS);
  EXPECT_OK(rtft_ckpt_destroy(ckpt));
  EXPECT_OK(rtft_ckpt_latest(dir, &latest));
  EXPECT(latest == 2);

  fresh = make_state(back, shard_back, &o_back);
  EXPECT_OK(rtft_ckpt_restore(dir, 1, fresh));
  grid[0] = 1.0 / 3;
  EXPECT(memcmp(back, grid, sizeof(grid)) == 0);
  EXPECT(shard_back[0] == 7 && shard_back[2] == 9);
  EXPECT(strcmp(o_back.loaded, "step=1") == 0 && o_back.restored == 1);
  EXPECT_OK(rtft_ckpt_restore(dir, RTFT_CKPT_LATEST, fresh));
  EXPECT(back[0] == 42.0 && strcmp(o_back.loaded, "step=2") == 0 && o_back.restored == 2);
  EXPECT(rtft_ckpt_restore(dir, 7, fresh) == RTFT_NOT_FOUND);
  EXPECT_OK(rtft_state_destroy(state));
  EXPECT_OK(rtft_state_destroy(fresh));
}

/* A version written again with another write_id commits only the files of its own write: rank 1's
 * file of write 1 is waited past (rank 1 does not write again), and the commit says so at its
 * deadline; written again by both, it commits. Two ranks' engines in this one process. */
static char wait_error[1024]; /* rtft_last_error() of write_version's wait */

static rtft_status_t write_version(const char* dir, uint64_t write_id, int ranks,
                                   int64_t timeout_ms, rtft_state_t* state) {
  rtft_ckpt_t* engines[2] = {NULL, NULL};
  rtft_status_t persisted = RTFT_INTERNAL;
  int r;
  for (r = 0; r < ranks; ++r) {
    rtft_ckpt_options_t opts;
    EXPECT_OK(rtft_ckpt_options_init(&opts));
    EXPECT(opts.write_id == 0);
    opts.dir = dir;
    opts.rank = r;
    opts.world_size = 2;
    opts.keep_versions = 0;
    opts.pool_bytes = 128u << 20;
    opts.commit_timeout_ms = timeout_ms;
    opts.write_id = write_id;
    EXPECT_OK(rtft_ckpt_create(&opts, &engines[r]));
  }
  /* Rank 1 first: its file is on disk before rank 0 commits. */
  for (r = ranks - 1; r >= 0; --r) {
    EXPECT_OK(rtft_ckpt_checkpoint(engines[r], 5, state));
    if (r > 0) EXPECT_OK(rtft_ckpt_wait_persisted(engines[r], 5));
  }
  if (engines[0]) persisted = rtft_ckpt_wait_persisted(engines[0], 5);
  snprintf(wait_error, sizeof(wait_error), "%s", rtft_last_error());
  for (r = 0; r < ranks; ++r) EXPECT_OK(rtft_ckpt_destroy(engines[r]));
  return persisted;
}

static void test_write_id(const char* dir) {
  double grid[20] = {0};
  int32_t shard[3] = {1, 2, 3};
  object_t o;
  rtft_state_t* state;
  uint64_t latest = 0;
  rtft_status_t again;
  memset(&o, 0, sizeof(o));
  state = make_state(grid, shard, &o);
  EXPECT_OK(write_version(dir, 1, 2, 60000, state));
  again = write_version(dir, 2, 1, 500, state);
  EXPECT(again == RTFT_DEADLINE_EXCEEDED);
  EXPECT(contains(wait_error, "from another write of the version (write 1, this one's 2)"));
  EXPECT_OK(write_version(dir, 3, 2, 60000, state));
  EXPECT_OK(rtft_ckpt_latest(dir, &latest));
  EXPECT(latest == 5);
  EXPECT_OK(rtft_state_destroy(state));
}

/* ---- runtime and communicators -------------------------------------------------------- */

static void test_runtime_and_comm(rtft_runtime_t* rt) {
  int rank = -1, world = -1, role = -1, has = -1;
  uint64_t epoch = 99;
  rtft_event_t event;
  rtft_comm_t* comm = NULL;
  double in[3] = {1.5, -2.0, 4.0}, out[3] = {0};
  size_t counts[1] = {3};
  EXPECT_OK(rtft_runtime_rank(rt, &rank));
  EXPECT_OK(rtft_runtime_world_size(rt, &world));
  EXPECT_OK(rtft_runtime_epoch(rt, &epoch));
  EXPECT_OK(rtft_runtime_role(rt, &role));
  EXPECT(rank == 0 && world == 1 && epoch == 0 && role == RTFT_ROLE_STANDALONE);
  EXPECT_OK(rtft_runtime_poll_event(rt, &event, &has));
  EXPECT(has == 0);
  EXPECT_OK(rtft_runtime_report_step(rt, 3));
  EXPECT(rtft_comm_create(rt, "bad name!", RTFT_BACKEND_GLOO, &comm) != RTFT_OK);
  EXPECT(rtft_comm_create(rt, "capi", 7, &comm) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_comm_create(rt, "capi", RTFT_BACKEND_GLOO, &comm));
  EXPECT_OK(rtft_comm_all_reduce(comm, in, out, 3, RTFT_FLOAT64, RTFT_MAX));
  EXPECT(memcmp(in, out, sizeof(in)) == 0);
  EXPECT_OK(rtft_comm_all_gather_v(comm, in, out, counts, RTFT_FLOAT64));
  EXPECT_OK(rtft_comm_reduce_scatter(comm, in, out, 3, RTFT_FLOAT64, RTFT_SUM));
  EXPECT_OK(rtft_comm_broadcast(comm, out, 3, RTFT_FLOAT64, 0));
  EXPECT_OK(rtft_comm_barrier(comm));
  EXPECT(rtft_comm_all_reduce(comm, in, out, 3, 42, RTFT_SUM) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_comm_all_reduce(comm, in, out, 3, RTFT_FLOAT64, 42) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_comm_broadcast(comm, out, 3, RTFT_FLOAT64, 5) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_comm_abort(comm));
  EXPECT(rtft_comm_all_reduce(comm, in, out, 3, RTFT_FLOAT64, RTFT_SUM) == RTFT_ABORTED);
  EXPECT_OK(rtft_comm_destroy(comm));
}

/* ---- the protector: bracket and driver ------------------------------------------------ */

typedef struct {
  double value[8];
  int computes, updates, fail_at;
  uint64_t last_step;
} model_t;

static rtft_status_t compute(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  double sum = 0;
  ++m->computes;
  if (ctx->rank != 0 || ctx->world_size != 1 || !ctx->comm) return RTFT_INTERNAL;
  if ((int)ctx->step == m->fail_at) return RTFT_DATA_LOSS;
  return rtft_comm_all_reduce(ctx->comm, &m->value[0], &sum, 1, RTFT_FLOAT64, RTFT_SUM);
}

static rtft_status_t update(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  int i;
  ++m->updates;
  m->last_step = ctx->step;
  for (i = 0; i < 8; ++i) m->value[i] += (double)ctx->step;
  return RTFT_OK;
}

/* The bracket, the driver, pause and an L3 version written on demand (into `l3`). */
static void test_protector(rtft_runtime_t* rt, const char* l3) {
  model_t m;
  double back[8] = {0};
  const int64_t shape[1] = {8};
  rtft_state_t *state = NULL, *fresh = NULL;
  uint64_t version = 99;
  int i;
  rtft_protector_t* p = NULL;
  rtft_protect_options_t opts;
  rtft_comm_t* comm = NULL;
  rtft_run_result_t result;
  uint64_t step = 99;
  memset(&m, 0, sizeof(m));
  m.fail_at = -1;
  for (i = 0; i < 8; ++i) m.value[i] = 0.5 * i;
  EXPECT_OK(rtft_state_create(&state));
  EXPECT_OK(rtft_state_add_tensor(state, "value", RTFT_FLOAT64, 1, shape, m.value));
  EXPECT_OK(rtft_protect_options_init(&opts));
  EXPECT(opts.enabled == 1);
  opts.ckpt_dir = l3;
  opts.l3_every = -1; /* no L3 but on demand */
  EXPECT_OK(rtft_protector_create(rt, &opts, &p));
  EXPECT_OK(rtft_protector_protect(p, state, NULL, NULL));
  EXPECT_OK(rtft_state_destroy(state)); /* the protector keeps what it needs */
  EXPECT_OK(rtft_protector_comm(p, &comm));
  EXPECT(rtft_comm_barrier(comm) == RTFT_FAILED_PRECONDITION); /* no epoch yet */
  EXPECT(rtft_protector_begin_step(p, 0) == RTFT_FAILED_PRECONDITION);
  EXPECT_OK(rtft_protector_start(p, &step));
  EXPECT(step == 0);
  EXPECT_OK(rtft_comm_barrier(comm));
  EXPECT(rtft_comm_destroy(comm) == RTFT_INVALID_ARGUMENT); /* the protector's own */
  EXPECT(rtft_protector_before_update(p) == RTFT_FAILED_PRECONDITION);
  EXPECT(contains(rtft_last_error(), "BeginStep() first"));
  EXPECT_OK(rtft_protector_begin_step(p, 0));
  EXPECT_OK(rtft_protector_before_update(p));
  m.value[0] = 1.0;
  EXPECT_OK(rtft_protector_end_step(p));
  /* Step 0's snapshot (the state as it began) on disk now, read back by the engine. */
  EXPECT_OK(rtft_protector_checkpoint_now(p));
  EXPECT_OK(rtft_ckpt_latest(l3, &version));
  EXPECT(version == 0);
  EXPECT_OK(rtft_state_create(&fresh));
  EXPECT_OK(rtft_state_add_tensor(fresh, "value", RTFT_FLOAT64, 1, shape, back));
  EXPECT_OK(rtft_ckpt_restore(l3, 0, fresh));
  EXPECT(back[0] == 0.0 && back[7] == 3.5);
  EXPECT_OK(rtft_state_destroy(fresh));
  /* The driver from step 1 to 5, then a compute that fails with its own status. */
  EXPECT_OK(rtft_protector_run(p, 5, compute, update, &m, &result));
  EXPECT(result.outcome == RTFT_RUN_DONE && result.next_step == 5);
  EXPECT(m.computes == 4 && m.updates == 4 && m.last_step == 4);
  EXPECT(m.value[7] == 3.5 + 1 + 2 + 3 + 4 && m.value[0] == 11);
  /* Paused, step 5 takes no snapshot: there is none to write. */
  EXPECT_OK(rtft_protector_pause(p, 1));
  EXPECT_OK(rtft_protector_run(p, 6, compute, update, &m, &result));
  EXPECT(rtft_protector_checkpoint_now(p) == RTFT_FAILED_PRECONDITION);
  EXPECT(contains(rtft_last_error(), "no complete snapshot"));
  EXPECT_OK(rtft_protector_pause(p, 0));
  m.fail_at = 6;
  EXPECT(rtft_protector_run(p, 8, compute, update, &m, &result) == RTFT_DATA_LOSS);
  EXPECT(contains(rtft_last_error(), "compute returned DATA_LOSS"));
  EXPECT(rtft_protector_run(p, 8, NULL, update, &m, &result) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_protector_destroy(p));
}

/* ---- options that grow (rtft.h), and the fields C gained in rt-ft 0.2 ----------------- */

/* rtft_protect_options_t's first version with a size: a program built with that header. */
typedef struct {
  size_t size;
  int32_t enabled;
  int64_t l3_every;
  const char* ckpt_dir;
  const char* comm_name;
} protect_options_first_t;

static void test_option_sizes(rtft_runtime_t* rt, const char* dir) {
  rtft_ckpt_options_t c;
  rtft_protect_options_t o;
  rtft_ckpt_t* ckpt = NULL;
  rtft_protector_t* p = NULL;
  struct {
    rtft_protect_options_t known;
    int64_t newer[2]; /* a later rt-ft's fields */
  } big;
  struct {
    protect_options_first_t old;
    unsigned char after[sizeof(rtft_protect_options_t)]; /* not the caller's: never read */
  } first;
  EXPECT_OK(rtft_ckpt_options_init(&c));
  EXPECT(c.size == sizeof(c) && c.dir == NULL && c.world_size == 1 && c.keep_versions == -1);
  EXPECT(c.pin_pool == 1 && c.direct_io == -1 && c.chunk_bytes == 0 && c.wait_timeout_ms == 0);
  c.dir = dir;
  c.size = 0; /* not initialised */
  EXPECT(rtft_ckpt_create(&c, &ckpt) == RTFT_INVALID_ARGUMENT && ckpt == NULL);
  EXPECT(contains(rtft_last_error(), "rtft_ckpt_options.size is 0: smaller than any version"));
  EXPECT(contains(rtft_last_error(), "set it with rtft_ckpt_options_init"));
  c.size = RTFT_OPTIONS_MAX_SIZE + 1;
  EXPECT(rtft_ckpt_create(&c, &ckpt) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "larger than any options struct"));
  EXPECT(rtft_ckpt_options_init_size(&c, 8) == RTFT_INVALID_ARGUMENT);
  EXPECT(rtft_ckpt_options_init_size(NULL, sizeof(c)) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_ckpt_options_init(&c));
  c.dir = dir;
  c.direct_io = 2;
  EXPECT(rtft_ckpt_create(&c, &ckpt) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "direct_io"));
  c.direct_io = -1;
  c.flush_threads = -2;
  EXPECT(rtft_ckpt_create(&c, &ckpt) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "rtft_ckpt_options.flush_threads is -2"));

  /* A newer caller: a larger struct is fine while its unknown fields are zero. */
  memset(&big, 0xff, sizeof(big));
  EXPECT_OK(rtft_protect_options_init_size(&big.known, sizeof(big)));
  EXPECT(big.known.size == sizeof(big) && big.newer[0] == 0 && big.newer[1] == 0);
  EXPECT(big.known.enabled == 1 && big.known.backend == RTFT_BACKEND_GLOO);
  EXPECT(big.known.device == -1 && big.known.grid_tensor == 1 && big.known.grid_pipeline == 1);
  EXPECT(big.known.stream == NULL && big.known.shm_dir == NULL && big.known.grid_ranks == NULL);
  EXPECT(big.known.protect_step == NULL && big.known.max_object_bytes == 0);
  EXPECT_OK(rtft_protector_create(rt, &big.known, &p));
  EXPECT_OK(rtft_protector_destroy(p));
  p = NULL;
  big.newer[1] = 5;
  EXPECT(rtft_protector_create(rt, &big.known, &p) == RTFT_UNIMPLEMENTED && p == NULL);
  EXPECT(contains(rtft_last_error(), "rtft_protect_options sets a field that librt-ft"));

  /* An older caller: init writes only its bytes, create reads only them and defaults the rest
   * (the bytes after it, all ones, would be backend -1 and a protect_step that crashes). */
  memset(&first, 0xff, sizeof(first));
  EXPECT_OK(rtft_protect_options_init_size((rtft_protect_options_t*)&first.old, sizeof(first.old)));
  EXPECT(first.old.size == sizeof(first.old) && first.old.enabled == 1);
  EXPECT(first.old.ckpt_dir == NULL && first.old.comm_name == NULL && first.after[0] == 0xff);
  first.old.comm_name = "first";
  EXPECT_OK(rtft_protector_create(rt, (const rtft_protect_options_t*)&first.old, &p));
  EXPECT_OK(rtft_protector_destroy(p));
  first.old.size = sizeof(first.old) - 8;
  EXPECT(rtft_protector_create(rt, (const rtft_protect_options_t*)&first.old, &p) ==
         RTFT_INVALID_ARGUMENT);

  EXPECT_OK(rtft_protect_options_init(&o));
  o.backend = 9;
  EXPECT(rtft_protector_create(rt, &o, &p) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "backend 9 is not an rtft_backend_t"));
  o.backend = RTFT_BACKEND_GLOO;
  o.recovery_timeout_ms = -1;
  EXPECT(rtft_protector_create(rt, &o, &p) == RTFT_INVALID_ARGUMENT);
  o.recovery_timeout_ms = 0;
  o.grid_rank_count = 1; /* and no ranks */
  EXPECT(rtft_protector_create(rt, &o, &p) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "options.grid_ranks"));
  o.grid_rank_count = 0;
  o.check_finite = 2;
  EXPECT(rtft_protector_create(rt, &o, &p) == RTFT_INVALID_ARGUMENT);
  EXPECT(contains(rtft_last_error(), "options.check_finite"));
  o.check_finite = 0;
  /* Outside a local step function, rtft_step_gradients has no step to name gradients for. */
  {
    rtft_step_context_t ctx;
    double g = 0;
    memset(&ctx, 0, sizeof(ctx));
    EXPECT(rtft_step_gradients(&ctx, &g, 1, RTFT_FLOAT64) == RTFT_FAILED_PRECONDITION);
    EXPECT(contains(rtft_last_error(), "only inside the local step function"));
    EXPECT(rtft_step_nonfinite(&ctx) == RTFT_FAILED_PRECONDITION);
    EXPECT(rtft_step_nonfinite(NULL) == RTFT_FAILED_PRECONDITION);
  }
  EXPECT(rtft_fault_flag("capi.never_armed") == 0);
  EXPECT(rtft_fault_flag(NULL) == 0);
}

typedef struct {
  double value[4];
  char meta[5000]; /* serialized as an object */
  int asked[8];    /* the steps protect_step was asked about */
  int device;
  void* stream;
} fields_t;

static int protect_step(void* user, uint64_t step) {
  fields_t* f = (fields_t*)user;
  if (step < 8) ++f->asked[step];
  return step != 3; /* step 3 takes no snapshot */
}

static rtft_status_t fields_compute(void* user, const rtft_step_context_t* ctx) {
  fields_t* f = (fields_t*)user;
  f->device = ctx->device;
  f->stream = ctx->stream;
  return RTFT_OK;
}

static rtft_status_t fields_update(void* user, const rtft_step_context_t* ctx) {
  ((fields_t*)user)->value[0] += (double)ctx->step;
  return RTFT_OK;
}

static rtft_status_t save_meta(void* user, rtft_bytes_t* bytes) {
  fields_t* f = (fields_t*)user;
  return rtft_bytes_set(bytes, f->meta, strlen(f->meta));
}

static rtft_status_t load_meta(void* user, const void* data, size_t size) {
  (void)user;
  (void)data;
  (void)size;
  return RTFT_OK;
}

static int dir_has_entries(const char* path) {
  DIR* d = opendir(path);
  struct dirent* e;
  int n = 0;
  if (!d) return 0;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ++n;
  closedir(d);
  return n;
}

/* A protector with one of `options` changed from the defaults: the state is `f`'s. */
static rtft_protector_t* fields_protector(rtft_runtime_t* rt, const rtft_protect_options_t* o,
                                          fields_t* f) {
  rtft_state_t* state = NULL;
  rtft_protector_t* p = NULL;
  const int64_t shape[1] = {4};
  EXPECT_OK(rtft_state_create(&state));
  EXPECT_OK(rtft_state_add_tensor(state, "value", RTFT_FLOAT64, 1, shape, f->value));
  EXPECT_OK(rtft_state_add_object(state, "meta", save_meta, load_meta, f));
  EXPECT_OK(rtft_protector_create(rt, o, &p));
  if (p) EXPECT_OK(rtft_protector_protect(p, state, NULL, NULL));
  EXPECT_OK(rtft_state_destroy(state));
  return p;
}

/* Each field that C gained reaches the C++ options: seen in what the protector does. */
static void test_new_protect_fields(rtft_runtime_t* rt, const char* scratch) {
  fields_t f;
  rtft_protect_options_t o;
  rtft_protector_t* p;
  rtft_run_result_t result;
  char shm[4096], l3[4096];
  int marker = 0;
  const int32_t ranks[1] = {0}, bad_ranks[1] = {5};
  uint64_t step = 99;
  memset(&f, 0, sizeof(f));
  memset(f.meta, 'x', sizeof(f.meta) - 1); /* 4999 bytes: more than a page */
  snprintf(shm, sizeof(shm), "%s/shm", scratch);
  snprintf(l3, sizeof(l3), "%s/l3-fields", scratch);
  EXPECT(mkdir(shm, 0700) == 0);

  /* shm_dir, device, stream, protect_step and a grid with its ranks given. */
  EXPECT_OK(rtft_protect_options_init(&o));
  o.shm_dir = shm;
  o.device = 3;
  o.stream = &marker;
  o.protect_step = protect_step;
  o.protect_step_user = &f;
  o.grid_ranks = ranks;
  o.grid_rank_count = 1;
  o.ckpt_dir = l3;
  o.l3_every = -1;
  p = fields_protector(rt, &o, &f);
  EXPECT(dir_has_entries(shm) == 0);
  EXPECT_OK(rtft_protector_start(p, &step));
  EXPECT(dir_has_entries(shm) > 0); /* L1 and L2 live there */
  EXPECT_OK(rtft_protector_run(p, 4, fields_compute, fields_update, &f, &result));
  EXPECT(result.outcome == RTFT_RUN_DONE && result.next_step == 4);
  EXPECT(f.device == 3 && f.stream == &marker);
  EXPECT(f.asked[0] == 1 && f.asked[1] == 1 && f.asked[2] == 1 && f.asked[3] == 1);
  EXPECT(rtft_protector_checkpoint_now(p) == RTFT_FAILED_PRECONDITION); /* step 3: none */
  EXPECT_OK(rtft_protector_run(p, 5, fields_compute, fields_update, &f, &result));
  EXPECT_OK(rtft_protector_checkpoint_now(p)); /* step 4 took one */
  EXPECT_OK(rtft_protector_destroy(p));

  /* max_object_bytes: 4999 bytes of objects do not fit in 16 (a page, once aligned). */
  EXPECT_OK(rtft_protect_options_init(&o));
  o.max_object_bytes = 16;
  p = fields_protector(rt, &o, &f);
  EXPECT_OK(rtft_protector_start(p, &step));
  /* The capture runs in the background: its error comes at the next step's wait for it. */
  EXPECT(rtft_protector_run(p, 3, fields_compute, fields_update, &f, &result) ==
         RTFT_RESOURCE_EXHAUSTED);
  EXPECT(contains(rtft_last_error(), "(ProtectOptions::max_object_bytes)"));
  EXPECT_OK(rtft_protector_destroy(p));

  /* The grid: 2 x 1 needs an even world, and the ranks a permutation of it. */
  EXPECT_OK(rtft_protect_options_init(&o));
  o.grid_tensor = 2;
  p = fields_protector(rt, &o, &f);
  EXPECT(rtft_protector_start(p, &step) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_protector_destroy(p));
  EXPECT_OK(rtft_protect_options_init(&o));
  o.grid_ranks = bad_ranks;
  o.grid_rank_count = 1;
  p = fields_protector(rt, &o, &f);
  EXPECT(rtft_protector_start(p, &step) == RTFT_INVALID_ARGUMENT);
  EXPECT_OK(rtft_protector_destroy(p));
}

int main(int argc, char** argv) {
  rtft_runtime_t* rt = NULL;
  char dir[4096], l3[4096], rewritten[4096];
  if (argc != 3) {
    fprintf(stderr, "usage: capi_test SCRATCH_DIR EXPECTED_VERSION\n");
    return 2;
  }
  snprintf(dir, sizeof(dir), "%s/ckpt", argv[1]);
  snprintf(l3, sizeof(l3), "%s/l3", argv[1]);
  snprintf(rewritten, sizeof(rewritten), "%s/rewritten", argv[1]);
  test_statuses(argv[2]);
  test_replicated_shard();
  test_checkpoint(dir);
  test_write_id(rewritten);
  EXPECT_OK(rtft_runtime_create(&rt));
  if (rt) {
    test_runtime_and_comm(rt);
    test_protector(rt, l3);
    test_option_sizes(rt, dir);
    test_new_protect_fields(rt, argv[1]);
  }
  EXPECT_OK(rtft_runtime_destroy(rt));
  if (failures) {
    fprintf(stderr, "capi_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("capi_test: PASS\n");
  return 0;
}
