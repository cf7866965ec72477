/* The C API in a real job (run by capi_job_test under mpirun --enable-recovery dp-launch): each
 * collective checked across the ranks, then a data-parallel model protected through the driver
 * (rtft_protector_run with C step functions): replicated weights, a momentum shard, a step counter
 * as an object. It prints a digest of the final state, which a lost slot must not change.
 * With `split`, compute is split in local and reduce (rtft_protector_run_split); with `replay`,
 * every step is also replayed by a peer; with `finite`, split and checked for non-finite
 * gradients, which "capi.loss_nan" (flag) reports once through rtft_step_nonfinite.
 * "capi.grad_flip" armed with flag or flags flips a bit of the rank's own gradients in local (a
 * faulty SM), which the replay must catch.
 *
 *   capi_job STEPS [split|replay|finite] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtft/rtft.h"

#define N 96

typedef struct {
  double weights[N], grad[N], sum[N];
  double* momentum;
  int64_t offset, count;
  uint64_t counter;
  size_t counts[64];
} model_t;

static int fail(const char* what, rtft_status_t s) {
  fprintf(stderr, "capi_job: %s: %d %s\n", what, s, rtft_last_error());
  return 1;
}

#define CHECK(call)                            \
  do {                                         \
    rtft_status_t s_ = (call);                 \
    if (s_ != RTFT_OK) return fail(#call, s_); \
  } while (0)
#define VERIFY(cond)                                           \
  do {                                                         \
    if (!(cond)) return fail("wrong result: " #cond, RTFT_OK); \
  } while (0)

/* Every collective of the API, its result checked on every rank. */
static int check_collectives(rtft_runtime_t* rt, int rank, int world) {
  rtft_comm_t* c = NULL;
  int64_t one = rank, total = -1;
  int32_t me = rank, all[64];
  double send[128], recv[128], token = rank;
  size_t counts[64];
  int r, i, at = 0;
  CHECK(rtft_comm_create(rt, "capi.check", RTFT_BACKEND_GLOO, &c));
  CHECK(rtft_comm_all_reduce(c, &one, &total, 1, RTFT_INT64, RTFT_SUM));
  VERIFY(total == (int64_t)world * (world - 1) / 2);
  CHECK(rtft_comm_all_gather(c, &me, all, 1, RTFT_INT32));
  for (r = 0; r < world; ++r) VERIFY(all[r] == r);
  for (r = 0; r < world; ++r) counts[r] = (size_t)r + 1; /* rank r sends r + 1 values r */
  for (i = 0; i <= rank; ++i) send[i] = rank;
  CHECK(rtft_comm_all_gather_v(c, send, recv, counts, RTFT_FLOAT64));
  for (r = 0; r < world; ++r)
    for (i = 0; i <= r; ++i) VERIFY(recv[at++] == r);
  for (i = 0; i < 2 * world; ++i) send[i] = rank + i; /* slice r: 2r + rank, 2r + 1 + rank */
  CHECK(rtft_comm_reduce_scatter(c, send, recv, 2, RTFT_FLOAT64, RTFT_SUM));
  VERIFY(recv[0] == 2.0 * rank * world + world * (world - 1) / 2.0);
  if (rank == world - 1) token = 1234.5;
  CHECK(rtft_comm_broadcast(c, &token, 1, RTFT_FLOAT64, world - 1));
  VERIFY(token == 1234.5);
  if (world > 1) { /* rank 0 sends to 1, which answers */
    if (rank == 0) {
      CHECK(rtft_comm_send(c, &token, 1, RTFT_FLOAT64, 1));
      CHECK(rtft_comm_recv(c, &token, 1, RTFT_FLOAT64, 1));
      VERIFY(token == 1235.5);
    } else if (rank == 1) {
      CHECK(rtft_comm_recv(c, &token, 1, RTFT_FLOAT64, 0));
      token += 1;
      CHECK(rtft_comm_send(c, &token, 1, RTFT_FLOAT64, 0));
    }
  }
  CHECK(rtft_comm_barrier(c));
  CHECK(rtft_comm_destroy(c));
  printf("[capi %d] collectives ok\n", rank);
  return 0;
}

static rtft_status_t save_counter(void* user, rtft_bytes_t* bytes) {
  return rtft_bytes_set(bytes, &((model_t*)user)->counter, sizeof(uint64_t));
}

static rtft_status_t load_counter(void* user, const void* data, size_t size) {
  if (size != sizeof(uint64_t)) return RTFT_DATA_LOSS;
  memcpy(&((model_t*)user)->counter, data, size);
  return RTFT_OK;
}

/* The gradient of one sample, a function of (step, rank); summed over the ranks. */
static rtft_status_t compute(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  int i;
  rtft_status_t s = rtft_fault_point("capi.compute");
  if (s != RTFT_OK) return s;
  if (ctx->recovered)
    printf("[capi %d] recovered at step %llu\n", ctx->rank, (unsigned long long)ctx->step);
  for (i = 0; i < N; ++i)
    m->grad[i] = sin(0.01 * i + 1.3 * ctx->step + 0.7 * ctx->rank) - m->weights[i];
  return rtft_comm_all_reduce(ctx->comm, m->grad, m->sum, N, RTFT_FLOAT64, RTFT_SUM);
}

/* The replayed form: the gradient of data rank ctx->data_rank's sample (a peer's while
 * replaying), named for the replay's digest; no collective. */
static rtft_status_t local(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  int i;
  for (i = 0; i < N; ++i)
    m->grad[i] = sin(0.01 * i + 1.3 * ctx->step + 0.7 * ctx->data_rank) - m->weights[i];
  /* "capi.loss_nan": the application's own verdict that its loss is not finite (check_finite). */
  if (!ctx->replaying && rtft_fault_flag("capi.loss_nan")) {
    rtft_status_t s = rtft_step_nonfinite(ctx);
    if (s != RTFT_OK) return s;
  }
  if (!ctx->replaying && rtft_fault_flag("capi.grad_flip")) {
    uint64_t bits;
    memcpy(&bits, &m->grad[0], sizeof(bits));
    bits ^= 1ull << 40;
    memcpy(&m->grad[0], &bits, sizeof(bits));
  }
  return rtft_step_gradients(ctx, m->grad, N, RTFT_FLOAT64);
}

static rtft_status_t reduce(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  return rtft_comm_all_reduce(ctx->comm, m->grad, m->sum, N, RTFT_FLOAT64, RTFT_SUM);
}

static rtft_status_t update(void* user, const rtft_step_context_t* ctx) {
  model_t* m = (model_t*)user;
  int64_t i;
  for (i = 0; i < m->count; ++i) {
    m->momentum[i] = 0.9 * m->momentum[i] + m->sum[m->offset + i];
    m->weights[m->offset + i] += 1e-2 * m->momentum[i];
  }
  ++m->counter;
  return rtft_comm_all_gather_v(ctx->comm, m->weights + m->offset, m->weights, m->counts,
                                RTFT_FLOAT64);
}

static uint64_t fnv(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = (const unsigned char*)data;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The failure events this process saw (the protector does not consume them). */
static void report_events(rtft_runtime_t* rt, int rank) {
  rtft_event_t e;
  int has = 0, n = 0, i;
  char failed[128] = "";
  while (rtft_runtime_poll_event(rt, &e, &has) == RTFT_OK && has) {
    ++n;
    for (i = 0; i < e.failed_count && i < RTFT_EVENT_MAX_FAILED; ++i)
      snprintf(failed + strlen(failed), sizeof(failed) - strlen(failed), "%s%d",
               failed[0] ? "," : "", (int)e.failed_ranks[i]);
  }
  printf("[capi %d] events=%d failed=%s\n", rank, n, failed[0] ? failed : "none");
}

int main(int argc, char** argv) {
  rtft_runtime_t* rt = NULL;
  rtft_protector_t* p = NULL;
  rtft_state_t* state = NULL;
  rtft_comm_t* comm = NULL;
  rtft_run_result_t result;
  rtft_protect_options_t options;
  model_t m;
  double all_momentum[N];
  int rank, world, role, r;
  const int64_t shape[1] = {N}, global[1] = {N};
  int64_t offset[1], count[1], o;
  uint64_t h;
  const long steps = argc >= 2 ? strtol(argv[1], NULL, 10) : 0;
  const int replay = argc == 3 && strcmp(argv[2], "replay") == 0;
  const int finite = argc == 3 && strcmp(argv[2], "finite") == 0;
  const int split = replay || finite || (argc == 3 && strcmp(argv[2], "split") == 0);
  if (steps < 1 || steps > 100000 || argc > 3 || (argc == 3 && !split))
    return fprintf(stderr, "usage: capi_job STEPS [split|replay|finite]\n"), 2;
  memset(&m, 0, sizeof(m));
  CHECK(rtft_runtime_create(&rt));
  CHECK(rtft_runtime_rank(rt, &rank));
  CHECK(rtft_runtime_world_size(rt, &world));
  CHECK(rtft_runtime_role(rt, &role));
  if (world > 64) return fail("at most 64 ranks", RTFT_OK);
  /* Only the ranks that start together can meet: a spare joins a later epoch. */
  if (role == RTFT_ROLE_INITIAL && check_collectives(rt, rank, world) != 0) return 1;

  for (r = 0; r < world; ++r) {
    CHECK(rtft_even_split(N, world, r, &o, count));
    m.counts[r] = (size_t)count[0];
  }
  CHECK(rtft_even_split(N, world, rank, offset, count));
  m.offset = offset[0];
  m.count = count[0];
  m.momentum = (double*)calloc((size_t)m.count, sizeof(double));
  CHECK(rtft_state_create(&state));
  CHECK(rtft_state_add_tensor(state, "weights", RTFT_FLOAT64, 1, shape, m.weights));
  CHECK(
      rtft_state_add_shard(state, "momentum", RTFT_FLOAT64, 1, count, global, offset, m.momentum));
  CHECK(rtft_state_add_object(state, "counter", save_counter, load_counter, &m));
  CHECK(rtft_protect_options_init(&options));
  options.replay_every = replay ? 1 : -1;
  options.check_finite = finite ? 1 : -1;
  CHECK(rtft_protector_create(rt, &options, &p));
  CHECK(rtft_protector_protect(p, state, NULL, NULL));
  CHECK(rtft_state_destroy(state));
  if (split)
    CHECK(rtft_protector_run_split(p, (uint64_t)steps, local, reduce, update, &m, &result));
  else
    CHECK(rtft_protector_run(p, (uint64_t)steps, compute, update, &m, &result));
  if (result.outcome == RTFT_RUN_SHUTDOWN) return 0;

  report_events(rt, rank);
  CHECK(rtft_protector_comm(p, &comm));
  CHECK(rtft_comm_all_gather_v(comm, m.momentum, all_momentum, m.counts, RTFT_FLOAT64));
  h = fnv(m.weights, sizeof(m.weights), 14695981039346656037ull);
  h = fnv(all_momentum, sizeof(all_momentum), h);
  printf("[capi %d] done steps=%ld counter=%llu digest=%016llx\n", rank, steps,
         (unsigned long long)m.counter, (unsigned long long)h);
  free(m.momentum);
  CHECK(rtft_protector_destroy(p));
  CHECK(rtft_runtime_destroy(rt));
  return 0;
}
