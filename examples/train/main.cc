// rtft-train: a data-parallel trainer protected by rt-ft. An MLP on synthetic data (a pure
// function of seed, step and rank), ZeRO-1 AdamW: gradients reduce-scattered, each rank updates
// its shard of the parameters with its shard of the optimizer state (its own loop, or rt-ft's
// OffloadOptimizer with --offload), parameters all-gathered. The steps run through
// Protector::Run, so a rank lost under dp-launch is replaced by a spare fed from its neighbours'
// snapshots and the run ends with the same bits as a run without failures: it prints a digest of
// the final protected state to compare. The timeline lines (start, failure, recovered, done) are
// what the tests, scripts/demo.sh and rtft-bench read.
//
//   mpirun -np 5 --enable-recovery dp-launch --spares 1 -- rtft-train --steps 60
//   mpirun -np 9 --enable-recovery dp-launch --spares 1 -- rtft-train --tp 2 --pp 2 --hidden 64
#include <cinttypes>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"rtft-train: a data-parallel MLP trainer protected by rt-ft (ZeRO-1 AdamW)"};
  train::Options o;
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 100000000));
  app.add_option("--l3-every", o.l3_every, "persistent checkpoint every N steps (-1: none)");
  app.add_option("--ckpt-dir", o.ckpt_dir, "directory of the persistent checkpoints");
  app.add_option("--hidden", o.hidden, "hidden width (the model has about hidden^2 parameters)")
      ->check(CLI::Range(8, 16384));
  app.add_option("--batch", o.batch, "samples per rank and step")->check(CLI::Range(1, 65536));
  app.add_option("--seed", o.seed, "seed of the data and the initial parameters");
  app.add_option("--log-every", o.log_every, "print the loss every N steps")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--fault", o.fault,
                 "test hook: named fault points per rank, RANK:point[@n][:action],... "
                 "(docs/testing.md)");
  app.add_flag("!--no-protect", o.protect,
               "run without per-step snapshots and replicas (to measure what they cost)");
  app.add_option("--protect-blocks", o.protect_blocks,
                 "blocks of N steps alternately protected and not, each kind timed apart "
                 "(rtft-bench protect; a failure in an unprotected block rolls back further)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--protect-every", o.protect_every,
                 "protect only every N-th step (its L1 and L2; L3 at the --l3-every steps, a "
                 "multiple of N): checkpointing without per-step protection (rtft-bench "
                 "ckpt-e2e; a failure rolls back to the last such step)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--blocking-save-every", o.blocking_save_every,
                 "benchmark baseline: write the whole state from the training thread every N "
                 "steps, as torch.save does (copied to the host, written, fsynced), into "
                 "--ckpt-dir (rtft-bench ckpt-e2e; never read back)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--tp", o.tp, "tensor-parallel degree (each block's matrices split over it)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--pp", o.pp, "pipeline-parallel degree (one residual MLP block per stage)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--micro-batches", o.micro, "micro-batches of the pipeline's schedule")
      ->check(CLI::Range(1, 65536));
  app.add_flag("--offload", o.offload,
               "update the shard with rt-ft's OffloadOptimizer (CPU AdamW) instead of the "
               "trainer's own loop (with --device cuda: the optimizer's state in pinned host "
               "memory, subgroups updated on the GPU and the CPU interleaved); its state is "
               "protected through its state provider");
  std::string offload_mode = "interleaved";
  auto* mode = app.add_option("--offload-mode", offload_mode,
                              "--device cuda --offload: interleaved (subgroups on the GPU and the "
                              "CPU, the share chosen by a performance model) or cpu (every "
                              "subgroup updated on the CPU: the baseline of rtft-bench "
                              "offload-e2e)")
                   ->check(CLI::IsMember({"interleaved", "cpu"}));
  app.add_flag("--shared-shards", o.shared_shards,
               "test option, with --tp/--pp: describe each partition's parameters as its shard of "
               "its stage's, which its data-parallel group shares (protected as replicated, fed "
               "from a live replica, out of L2's ring)");
  app.add_flag("--buffers", o.buffers,
               "test option, on the CPU: a running statistic that compute changes and that each "
               "rank holds its own of (a module buffer's case), protected as such");
  std::string drop;
  app.add_option("--drop-replica", drop,
                 "test option, D@STEP: after STEP steps lay the layout out as if data-parallel "
                 "replica D had left (the reference of a shrink with --tp/--pp)");
  std::string device = "cpu";
  app.add_option("--device", device,
                 "where the model runs: cpu, or cuda (the runtime's device, RTFT_DEVICE; bf16 "
                 "parameters, fp32 master weights and AdamW state in rt-ft's OffloadOptimizer)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  auto* comm =
      app.add_option(
             "--comm", o.comm,
             "--device cuda: the collectives' backend, nccl (device buffers) or gloo (staged "
             "through pinned host buffers; ranks sharing one GPU)")
          ->check(CLI::IsMember({"nccl", "gloo"}));
  CLI11_PARSE(app, argc, argv);
  o.cuda = device == "cuda";
  if (!drop.empty()) {
    unsigned d = 0;
    unsigned long long step = 0;
    char tail = 0;
    if (std::sscanf(drop.c_str(), "%u@%llu%c", &d, &step, &tail) != 2 || d > 1000000 ||
        step >= o.steps) {
      std::fprintf(stderr, "rtft-train: --drop-replica '%s': D@STEP, STEP below --steps\n",
                   drop.c_str());
      return 2;
    }
    o.drop_replica = static_cast<int>(d);
    o.drop_step = step;
  }
  if (mode->count() > 0 && !(o.cuda && o.offload)) {
    std::fprintf(stderr, "rtft-train: --offload-mode applies to --device cuda --offload only\n");
    return 2;
  }
  (void)rtft::ParseOffloadMode(offload_mode, &o.offload_mode);  // checked by IsMember above
  if (comm->count() > 0 && !o.cuda) {
    std::fprintf(stderr, "rtft-train: --comm applies to --device cuda only\n");
    return 2;
  }
  if (o.buffers && o.cuda) {
    std::fprintf(stderr, "rtft-train: --buffers applies to the CPU only\n");
    return 2;
  }
  if (o.shared_shards && (!o.grid() || o.cuda)) {
    std::fprintf(stderr, "rtft-train: --shared-shards applies to --tp/--pp on the CPU only\n");
    return 2;
  }
  if (o.protect_every > 0 && o.protect_blocks > 0) {
    std::fprintf(stderr, "rtft-train: --protect-every and --protect-blocks exclude each other\n");
    return 2;
  }
  if (o.protect_every > 0 && o.l3_every > 0 && o.l3_every % o.protect_every != 0) {
    std::fprintf(stderr,
                 "rtft-train: --l3-every must be a multiple of --protect-every (an L3 version is "
                 "written from a protected step's snapshot)\n");
    return 2;
  }
  if (o.blocking_save_every > 0 && o.ckpt_dir.empty()) {
    std::fprintf(stderr, "rtft-train: --blocking-save-every needs --ckpt-dir\n");
    return 2;
  }
  auto rt = rtft::Runtime::Create();
  if (!rt.ok()) {
    std::fprintf(stderr, "rtft-train: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  return train::Trainer(o, rt->get()).Run();
}
