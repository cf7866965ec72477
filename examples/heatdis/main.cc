// heatdis: the 2-D heat-diffusion solver that VeloC and FTI ship as their example, protected by
// rt-ft (docs/solvers.md). A Jacobi stencil on an R x C float64 grid whose top row is held at
// 100; the R-2 interior rows are split over the ranks in contiguous blocks and the rows at the
// blocks' edges are exchanged every iteration. Every K iterations make one protected step: rt-ft
// snapshots the block in memory, replicates it to the ring neighbour and, when a rank is lost,
// feeds the spare that takes its place; the final field is bitwise that of a run without the
// failure, and that of any number of ranks.
//
//   mpirun -np 5 --enable-recovery dp-launch --spares 1 -- rtft-heatdis --rows 1024 --cols 1024 \
//       --iterations 5000 --protect-every 100 --output field.h5
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rtft/protect.h"
#include "rtft/testing.h"

namespace {

using rtft::Status;

struct Options {
  int64_t rows = 0, cols = 0, iterations = 0;
  std::string output;
  int64_t protect_every = 100;  // iterations per protected step
  int64_t l3_every = 0;         // steps between L3 checkpoints (0: RTFT_PROTECT_L3_EVERY)
  std::string ckpt_dir;
  int64_t residual_every = 100;
  int64_t bench_blocks = 0;  // rtft-bench heatdis: steps protected and unprotected in turn
};

// This rank's rows of the grid with one ghost row above and one below (the neighbours' edge
// rows, or the grid's fixed top and bottom rows), twice: `now` holds the field at the start of a
// step (the protected state), `next` the iteration being computed.
struct Block {
  int rank = 0, world = 1;
  int64_t first = 0, rows = 0, cols = 0;  // global index of the first own row; own rows
  std::vector<double> now, next;
};

// Rows 1..R-2 split evenly (SplitEvenly: the first mod P ranks hold one row more); row 0
// is 100 everywhere, every other cell 0.
Block MakeBlock(const Options& o, int world, int rank) {
  const rtft::EvenSplit split = rtft::SplitEvenly(o.rows - 2, world, rank);
  Block b{rank, world, split.offset + 1, split.count, o.cols, {}, {}};
  b.now.assign((b.rows + 2) * b.cols, 0.0);
  if (rank == 0) std::fill(b.now.begin(), b.now.begin() + b.cols, 100.0);
  b.next = b.now;
  return b;
}

// One Jacobi iteration of the own rows, in exactly this order of operations (the scheme).
void Sweep(const double* u, double* v, int64_t rows, int64_t cols) {
  for (int64_t i = 1; i <= rows; ++i)
    for (int64_t j = 1; j < cols - 1; ++j) {
      const int64_t c = i * cols + j;
      v[c] = 0.25 * (((u[c - cols] + u[c + cols]) + u[c - 1]) + u[c + 1]);
    }
}

double Residual(const double* u, const double* v, int64_t rows, int64_t cols) {
  double r = 0;
  for (int64_t i = 1; i <= rows; ++i)
    for (int64_t j = 1; j < cols - 1; ++j)
      r = std::max(r, std::fabs(v[i * cols + j] - u[i * cols + j]));
  return r;
}

// The ghost rows of `u` from the neighbours (MPI_Sendrecv in an MPI code). Two phases of
// disjoint pairs (r, r+1), r even then r odd; in each pair the upper rank sends first, so that no
// send, which completes once its receiver took it, waits on another.
Status Halo(rtft::Communicator* comm, const Block& b, double* u) {
  const int64_t c = b.cols;
  for (int phase = 0; phase < 2; ++phase) {
    if (b.rank % 2 == phase && b.rank + 1 < b.world) {
      RTFT_RETURN_IF_ERROR(comm->Send(u + b.rows * c, c, rtft::DType::kFloat64, b.rank + 1));
      RTFT_RETURN_IF_ERROR(comm->Recv(u + (b.rows + 1) * c, c, rtft::DType::kFloat64, b.rank + 1));
    } else if (b.rank % 2 != phase && b.rank > 0) {
      RTFT_RETURN_IF_ERROR(comm->Recv(u, c, rtft::DType::kFloat64, b.rank - 1));
      RTFT_RETURN_IF_ERROR(comm->Send(u + c, c, rtft::DType::kFloat64, b.rank - 1));
    }
  }
  return Status::Ok();
}

// Iteration k: v from u; every N iterations and at the last, the residual (MPI_Allreduce, max).
Status Iterate(const Options& o, rtft::StepContext& ctx, const Block& b, double* u, double* v,
               int64_t k) {
  rtft::FaultPoint("heatdis.iteration");  // where the tests fail a rank mid-step
  RTFT_RETURN_IF_ERROR(Halo(ctx.comm, b, u));
  Sweep(u, v, b.rows, b.cols);
  if (k % o.residual_every != 0 && k != o.iterations) return Status::Ok();
  const double mine = Residual(u, v, b.rows, b.cols);
  double all = 0;
  RTFT_RETURN_IF_ERROR(
      ctx.comm->AllReduce(&mine, &all, 1, rtft::DType::kFloat64, rtft::ReduceOp::kMax));
  if (ctx.rank == 0) std::printf("iter %" PRId64 " residual %.17g\n", k, all);
  std::fflush(stdout);
  return Status::Ok();
}

// The final grid, gathered on every rank (MPI_Allgatherv), written by rank 0 as /field.
Status WriteField(const Options& o, rtft::Communicator* comm, const Block& b) {
  std::vector<double> field(o.rows * o.cols, 0.0);
  std::fill(field.begin(), field.begin() + o.cols, 100.0);
  std::vector<size_t> counts;
  for (int r = 0; r < b.world; ++r)
    counts.push_back(rtft::SplitEvenly(o.rows - 2, b.world, r).count * o.cols);
  RTFT_RETURN_IF_ERROR(comm->AllGatherV(b.now.data() + b.cols, field.data() + o.cols, counts,
                                        rtft::DType::kFloat64));
  if (b.rank != 0) return Status::Ok();
  const std::string tmp = o.output + ".tmp";
  const hsize_t dims[2] = {hsize_t(o.rows), hsize_t(o.cols)};
  const hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = file < 0 ? -1 : H5Screate_simple(2, dims, nullptr);
  const hid_t set = space < 0 ? -1
                              : H5Dcreate2(file, "/field", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                                           H5P_DEFAULT, H5P_DEFAULT);
  bool ok = set >= 0 &&
            H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, field.data()) >= 0;
  if (set >= 0) ok = H5Dclose(set) >= 0 && ok;
  if (space >= 0) H5Sclose(space);
  if (file >= 0) ok = H5Fclose(file) >= 0 && ok;
  if (!ok || std::rename(tmp.c_str(), o.output.c_str()) != 0)
    return Status::IoError("cannot write " + o.output);
  return Status::Ok();
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// rtft-bench heatdis (--bench-blocks B): steps alternate in blocks of B protected and B
// unprotected ones, and each kind's wall and CPU time (every thread of the process) per
// iteration, from one step's start to the next's, is printed at the end. The first step of each
// block is left out: it waits for the replica of the block before, or does not.
struct BenchTimer {
  int64_t blocks = 0, per_step = 1;
  uint64_t last_step = 0;
  double last_t = -1, last_cpu = 0, wall[2] = {0, 0}, cpu[2] = {0, 0};
  int64_t count[2] = {0, 0};

  void Tick(uint64_t step) {
    const double t = WallSeconds(), c = double(std::clock()) / CLOCKS_PER_SEC;
    const uint64_t s = step - 1;  // the step that just ended
    if (blocks > 0 && last_t >= 0 && step == last_step + 1 && s % blocks != 0) {
      const int on = (s / blocks) % 2 == 1;
      wall[on] += (t - last_t) / per_step;
      cpu[on] += (c - last_cpu) / per_step;
      ++count[on];
    }
    last_step = step;
    last_t = t;
    last_cpu = c;
  }
  void Print() const {
    auto mean = [&](const double* v, int on) { return count[on] ? v[on] / count[on] : 0.0; };
    std::printf(
        "bench protected_iter_s=%.9f unprotected_iter_s=%.9f protected_cpu_s=%.9f "
        "unprotected_cpu_s=%.9f steps=%" PRId64 ",%" PRId64 "\n",
        mean(wall, 1), mean(wall, 0), mean(cpu, 1), mean(cpu, 0), count[1], count[0]);
  }
};

int Fail(const Status& s) {
  std::fprintf(stderr, "rtft-heatdis: %s\n", s.ToString().c_str());
  return 1;
}

int ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app{"rtft-heatdis: 2-D heat diffusion (Jacobi), protected by rt-ft"};
  app.add_option("--rows", o->rows, "grid rows R (with the fixed top and bottom rows)")
      ->required()
      ->check(CLI::Range(int64_t(3), int64_t(1) << 30));
  app.add_option("--cols", o->cols, "grid columns C")
      ->required()
      ->check(CLI::Range(int64_t(3), int64_t(1) << 30));
  app.add_option("--iterations", o->iterations, "Jacobi iterations I")
      ->required()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--output", o->output, "HDF5 file for the final grid (dataset /field)");
  app.add_option("--protect-every", o->protect_every, "iterations per protected step K")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_option("--l3-every", o->l3_every, "protected steps between L3 checkpoints")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  app.add_option("--ckpt-dir", o->ckpt_dir, "directory of the L3 checkpoints");
  app.add_option("--residual-every", o->residual_every, "iterations between residuals N")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--bench-blocks", o->bench_blocks, "rtft-bench: protect blocks of B steps")
      ->group("")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (o->rows > (int64_t(1) << 31) / o->cols) {
    std::fprintf(stderr, "rtft-heatdis: --rows x --cols: at most 2^31 cells\n");
    return 2;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = ParseOptions(argc, argv, &o); rc >= 0) return rc;

  auto rt = rtft::Runtime::Create();  // under dp-launch: this slot's rank; a spare waits here
  if (!rt.ok()) return Fail(rt.status());
  const int world = (*rt)->info().world_size;
  if (world > o.rows - 2)
    return Fail(Status::InvalidArgument("more ranks than the grid's " + std::to_string(o.rows - 2) +
                                        " interior rows"));
  Block b;
  // The state: this rank's rows of the R-2 interior rows, a shard of one float64 tensor. After a
  // shrink rt-ft splits the rows again over fewer ranks and fills the new blocks.
  auto describe = [&](int w, int r) -> rtft::StatusOr<std::shared_ptr<rtft::StateProvider>> {
    b = MakeBlock(o, w, r);
    rtft::TensorDesc rows =
        rtft::EvenShard("field", rtft::DType::kFloat64, {o.rows - 2, o.cols}, w, r);
    rows.data = b.now.data() + b.cols;
    return std::make_shared<rtft::TensorProvider>(rows);
  };
  rtft::ProtectOptions po;
  po.l3_every = o.l3_every;
  po.ckpt_dir = o.ckpt_dir;
  BenchTimer timer{o.bench_blocks, o.protect_every};
  if (o.bench_blocks > 0)
    po.protect_step = [blocks = o.bench_blocks](uint64_t s) { return (s / blocks) % 2 == 1; };
  auto p = rtft::Protector::Create(rt->get(), po);
  if (!p.ok()) return Fail(p.status());
  Status s = (*p)->Protect(*describe(world, (*rt)->info().rank), [&](const rtft::ShrinkPlace& at) {
    return describe(at.world_size, at.rank);
  });
  if (!s.ok()) return Fail(s);

  // Step s runs iterations sK+1 .. min((s+1)K, I): the first in compute (it reads `now`, the
  // snapshot's memory, while rt-ft copies it), the others in update.
  const int64_t k_per = o.protect_every;
  auto compute = [&](rtft::StepContext& c) {
    timer.Tick(c.step);
    if (c.recovered && c.rank == 0)
      std::printf("recovered epoch %" PRIu64 ": iteration %" PRId64 " again on %d ranks t=%.6f\n",
                  c.epoch, int64_t(c.step) * k_per + 1, c.world_size, WallSeconds());
    return Iterate(o, c, b, b.now.data(), b.next.data(), int64_t(c.step) * k_per + 1);
  };
  auto update = [&](rtft::StepContext& c) {
    double *u = b.next.data(), *v = b.now.data();
    const int64_t last = std::min(o.iterations, (int64_t(c.step) + 1) * k_per);
    for (int64_t k = int64_t(c.step) * k_per + 2; k <= last; ++k, std::swap(u, v))
      RTFT_RETURN_IF_ERROR(Iterate(o, c, b, u, v, k));
    // An odd number of iterations left the field in `next`: back into the protected buffer.
    if (u != b.now.data()) std::copy(u + b.cols, u + (b.rows + 1) * b.cols, b.now.data() + b.cols);
    return Status::Ok();
  };
  auto result = (*p)->Run((o.iterations + k_per - 1) / k_per, {compute, update});
  if (!result.ok()) return Fail(result.status());
  if (result->outcome == rtft::RunOutcome::kShutdown) return 0;  // the job is ending
  if (o.bench_blocks > 0 && (*p)->comm()->rank() == 0) timer.Print();
  if (!o.output.empty() && !(s = WriteField(o, (*p)->comm(), b)).ok()) return Fail(s);
  return 0;
}
