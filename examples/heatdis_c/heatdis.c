/* heatdis in C: examples/heatdis (rtft-heatdis) written with the C API, rtft/rtft.h its only
 * rt-ft header (docs/solvers.md). The same scheme, options and output, bit for bit the same
 * field. It drives its own loop with the step bracket, the way a code that used VeloC or FTI is
 * laid out: each step of K iterations between rtft_protector_begin_step and _end_step, and when a
 * call returns RTFT_ABORTED (a rank was lost), rtft_protector_recover gives the step to redo.
 *
 *   mpirun -np 5 --enable-recovery dp-launch --spares 1 -- heatdis-c --rows 1024 --cols 1024 \
 *       --iterations 5000 --protect-every 100 --output field.h5 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "options.h"
#include "rtft/rtft.h"

/* This rank's rows with a ghost row above and below, twice: `now` is the field at the start of a
 * step (the protected state), `next` the iteration being computed. */
typedef struct {
  const options_t* o;
  int rank, world;
  int64_t first, rows, cols; /* global index of the first own row; own rows; columns */
  double *now, *next;
} block_t;

static int make_block(block_t* b, int world, int rank) {
  int64_t offset, j;
  if (rtft_even_split(b->o->rows - 2, world, rank, &offset, &b->rows) != RTFT_OK) return -1;
  free(b->now);
  free(b->next);
  b->rank = rank;
  b->world = world;
  b->first = offset + 1;
  b->cols = b->o->cols;
  b->now = calloc((size_t)((b->rows + 2) * b->cols), sizeof(double));
  b->next = calloc((size_t)((b->rows + 2) * b->cols), sizeof(double));
  if (!b->now || !b->next) return -1;
  if (rank == 0)
    for (j = 0; j < b->cols; ++j) b->now[j] = b->next[j] = 100.0;
  return 0;
}

/* The state: this rank's rows of the R-2 interior rows, a shard of one float64 tensor. */
static rtft_status_t describe(block_t* b, rtft_state_t* state) {
  const int64_t shape[2] = {b->rows, b->cols}, global[2] = {b->o->rows - 2, b->cols};
  const int64_t offset[2] = {b->first - 1, 0};
  return rtft_state_add_shard(state, "field", RTFT_FLOAT64, 2, shape, global, offset,
                              b->now + b->cols);
}

/* After a shrink: blocks for the new ranks, which rt-ft fills. */
static rtft_status_t resize(void* user, int rank, int world, rtft_state_t* state) {
  block_t* b = (block_t*)user;
  if (make_block(b, world, rank) != 0) return RTFT_RESOURCE_EXHAUSTED;
  return describe(b, state);
}

static void sweep(const double* u, double* v, int64_t rows, int64_t cols) {
  int64_t i, j;
  for (i = 1; i <= rows; ++i)
    for (j = 1; j < cols - 1; ++j) {
      const int64_t c = i * cols + j;
      v[c] = 0.25 * (((u[c - cols] + u[c + cols]) + u[c - 1]) + u[c + 1]);
    }
}

static double residual(const double* u, const double* v, int64_t rows, int64_t cols) {
  int64_t i, j;
  double r = 0;
  for (i = 1; i <= rows; ++i)
    for (j = 1; j < cols - 1; ++j)
      if (fabs(v[i * cols + j] - u[i * cols + j]) > r) r = fabs(v[i * cols + j] - u[i * cols + j]);
  return r;
}

/* The ghost rows of `u` (MPI_Sendrecv): pairs (r, r+1), r even then r odd, the upper rank
 * sending first, so that no send (complete once received) waits on another. */
static rtft_status_t halo(rtft_comm_t* comm, const block_t* b, double* u) {
  const int64_t c = b->cols;
  rtft_status_t s = RTFT_OK;
  int phase;
  for (phase = 0; phase < 2 && s == RTFT_OK; ++phase) {
    if (b->rank % 2 == phase && b->rank + 1 < b->world) {
      s = rtft_comm_send(comm, u + b->rows * c, (size_t)c, RTFT_FLOAT64, b->rank + 1);
      if (s == RTFT_OK)
        s = rtft_comm_recv(comm, u + (b->rows + 1) * c, (size_t)c, RTFT_FLOAT64, b->rank + 1);
    } else if (b->rank % 2 != phase && b->rank > 0) {
      s = rtft_comm_recv(comm, u, (size_t)c, RTFT_FLOAT64, b->rank - 1);
      if (s == RTFT_OK) s = rtft_comm_send(comm, u + c, (size_t)c, RTFT_FLOAT64, b->rank - 1);
    }
  }
  return s;
}

/* Iteration k: v from u; every N iterations and at the last, the residual (MPI_Allreduce). */
static rtft_status_t iterate(rtft_comm_t* comm, const block_t* b, double* u, double* v, int64_t k) {
  double mine, all = 0;
  rtft_status_t s = rtft_fault_point("heatdis.iteration");
  if (s == RTFT_OK) s = halo(comm, b, u);
  if (s != RTFT_OK) return s;
  sweep(u, v, b->rows, b->cols);
  if (k % b->o->residual_every != 0 && k != b->o->iterations) return RTFT_OK;
  mine = residual(u, v, b->rows, b->cols);
  s = rtft_comm_all_reduce(comm, &mine, &all, 1, RTFT_FLOAT64, RTFT_MAX);
  if (s == RTFT_OK && b->rank == 0) printf("iter %" PRId64 " residual %.17g\n", k, all);
  fflush(stdout);
  return s;
}

/* Step s: iterations sK+1 .. min((s+1)K, I) in the bracket; the first reads `now` while rt-ft
 * copies it, the others change it after before_update. */
static rtft_status_t run_step(rtft_protector_t* p, rtft_comm_t* comm, block_t* b, uint64_t step) {
  const int64_t k0 = (int64_t)step * b->o->protect_every + 1;
  int64_t k, last = k0 - 1 + b->o->protect_every;
  double *u = b->next, *v = b->now, *t;
  rtft_status_t s = rtft_protector_begin_step(p, step);
  if (last > b->o->iterations) last = b->o->iterations;
  if (s == RTFT_OK) s = iterate(comm, b, b->now, b->next, k0);
  if (s == RTFT_OK) s = rtft_protector_before_update(p);
  for (k = k0 + 1; s == RTFT_OK && k <= last; ++k, t = u, u = v, v = t)
    s = iterate(comm, b, u, v, k);
  if (s != RTFT_OK) return s;
  /* An odd number of iterations left the field in `next`: back into the protected buffer. */
  if (u != b->now)
    memcpy(b->now + b->cols, u + b->cols, (size_t)(b->rows * b->cols) * sizeof(double));
  return rtft_protector_end_step(p);
}

/* The final grid, gathered on every rank (MPI_Allgatherv), written by rank 0 as /field. */
static int write_field(rtft_comm_t* comm, const block_t* b) {
  const options_t* o = b->o;
  const hsize_t dims[2] = {(hsize_t)o->rows, (hsize_t)o->cols};
  double* field = calloc((size_t)(o->rows * o->cols), sizeof(double));
  size_t* counts = calloc((size_t)b->world, sizeof(size_t));
  int64_t j, offset, count;
  int r, ok = field && counts;
  hid_t file = -1, space = -1, set = -1;
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp", o->output);
  for (r = 0; ok && r < b->world; ++r) {
    ok = rtft_even_split(o->rows - 2, b->world, r, &offset, &count) == RTFT_OK;
    counts[r] = (size_t)(count * o->cols);
  }
  for (j = 0; ok && j < o->cols; ++j) field[j] = 100.0;
  ok = ok && rtft_comm_all_gather_v(comm, b->now + b->cols, field + o->cols, counts,
                                    RTFT_FLOAT64) == RTFT_OK;
  if (ok && b->rank == 0) {
    file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    space = file < 0 ? -1 : H5Screate_simple(2, dims, NULL);
    set = space < 0 ? -1
                    : H5Dcreate2(file, "/field", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                 H5P_DEFAULT);
    ok = set >= 0 && H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, field) >= 0;
    if (set >= 0) ok = H5Dclose(set) >= 0 && ok;
    if (space >= 0) H5Sclose(space);
    if (file >= 0) ok = H5Fclose(file) >= 0 && ok;
    ok = ok && rename(tmp, o->output) == 0;
  }
  free(field);
  free(counts);
  return ok ? 0 : -1;
}

static double wall_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int fail(const char* what, rtft_status_t s) {
  fprintf(stderr, "heatdis-c: %s: %s\n", what, s == RTFT_OK ? "failed" : rtft_last_error());
  return 1;
}

int main(int argc, char** argv) {
  options_t o;
  block_t b;
  rtft_runtime_t* rt = NULL;
  rtft_protector_t* p = NULL;
  rtft_protect_options_t po;
  rtft_state_t* state = NULL;
  rtft_comm_t* comm = NULL;
  uint64_t step = 0, steps, epoch = 0;
  int rank, world, rc = parse_options(argc, argv, &o);
  rtft_status_t s;
  if (rc >= 0) return rc;
  memset(&b, 0, sizeof(b));
  b.o = &o;
  if ((s = rtft_runtime_create(&rt)) != RTFT_OK) return fail("rtft_runtime_create", s);
  rtft_runtime_rank(rt, &rank);
  rtft_runtime_world_size(rt, &world);
  if (world > o.rows - 2) {
    fprintf(stderr, "heatdis-c: more ranks than the grid's %" PRId64 " interior rows\n",
            o.rows - 2);
    return 1;
  }
  if (make_block(&b, world, rank) != 0) return fail("out of memory", RTFT_OK);
  rtft_protect_options_init(&po);
  po.l3_every = o.l3_every;
  po.ckpt_dir = o.ckpt_dir;
  if ((s = rtft_protector_create(rt, &po, &p)) != RTFT_OK ||
      (s = rtft_state_create(&state)) != RTFT_OK || (s = describe(&b, state)) != RTFT_OK ||
      (s = rtft_protector_protect(p, state, resize, &b)) != RTFT_OK ||
      (s = rtft_protector_start(p, &step)) != RTFT_OK ||
      (s = rtft_protector_comm(p, &comm)) != RTFT_OK)
    return fail("protecting the grid", s);
  rtft_state_destroy(state);

  steps = (uint64_t)((o.iterations + o.protect_every - 1) / o.protect_every);
  while (step < steps) {
    if ((s = run_step(p, comm, &b, step)) == RTFT_OK) {
      ++step;
      continue;
    }
    if (s != RTFT_ABORTED) return fail("step", s);
    s = rtft_protector_recover(p, &step); /* every rank back to one step, a spare fed */
    if (s == RTFT_SHUTDOWN) return 0;     /* the job is ending */
    if (s != RTFT_OK) return fail("recovery", s);
    rtft_comm_epoch(comm, &epoch);
    if (b.rank == 0)
      printf("recovered epoch %" PRIu64 ": iteration %" PRId64 " again on %d ranks t=%.6f\n", epoch,
             (int64_t)step * o.protect_every + 1, b.world, wall_seconds());
  }
  if (o.output && write_field(comm, &b) != 0) return fail("writing the field", RTFT_OK);
  free(b.now);
  free(b.next);
  rtft_protector_destroy(p);
  rtft_runtime_destroy(rt);
  return 0;
}
