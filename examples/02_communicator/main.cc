// 02_communicator: a collective that a dead peer aborts, and the next epoch (docs/comm.md). Every
// rank all-reduces (rank + iteration) and checks the sum. When a peer dies, the call in flight
// returns kAborted within milliseconds instead of hanging; the ranks wait for the failure event,
// build the next epoch's communicator (with the spare or the restarted process in the dead one's
// place), agree on the iteration to redo, and go on.
//
//   mpirun -np 4 --enable-recovery dp-launch --spares 1 -- example-02-communicator --iterations 40
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "rtft/runtime.h"

int main(int argc, char** argv) {
  CLI::App app{"example-02-communicator: all-reduces that survive a lost peer"};
  int64_t iterations = 40;
  app.add_option("--iterations", iterations, "all-reduces to run")->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);

  auto rt = rtft::Runtime::Create().value();  // under dp-launch: this slot's rank of the job
  int64_t it = 0;
  while (true) {
    auto comm = rt->CreateCommunicator("example").value();  // every rank of the current epoch
    const int rank = comm->rank(), world = comm->world_size();
    // A process that joined this epoch (a spare, a restart) starts at 0: the highest wins.
    int64_t at = it;
    rtft::Status s = comm->AllReduce(&it, &at, 1, rtft::DType::kInt64, rtft::ReduceOp::kMax);
    for (it = at; s.ok() && it < iterations; ++it) {
      const double x = rank + it;
      double sum = 0;
      s = comm->AllReduce(&x, &sum, 1, rtft::DType::kFloat64, rtft::ReduceOp::kSum);
      const double want = world * (world - 1) / 2.0 + double(world) * it;
      if (s.ok() && sum != want) {
        std::fprintf(stderr, "[comm %d] iteration %" PRId64 ": sum %g, not %g\n", rank, it, sum,
                     want);
        return 1;
      }
      if (s.ok() && rank == 0) std::printf("[comm 0] iteration %" PRId64 " sum %g\n", it, sum);
    }
    if (s.ok()) break;
    if (s.code() != rtft::StatusCode::kAborted) {
      std::fprintf(stderr, "[comm %d] %s\n", rank, s.ToString().c_str());
      return 1;
    }
    std::printf("[comm %d] epoch %" PRIu64 " aborted at iteration %" PRId64 ": %s\n", rank,
                comm->epoch(), it, s.message().c_str());
    // The failure event names the next epoch; a shutdown ends the job.
    while (rt->current().epoch <= comm->epoch()) {
      if (auto e = rt->PollEvent(); e && e->shutdown) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::printf("[comm %d] done iterations=%" PRId64 " epoch=%" PRIu64 "\n", rt->current().rank,
              iterations, rt->current().epoch);
  return 0;
}
