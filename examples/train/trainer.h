// The trainer behind rtft-train: its protected state (parameters, replicated; the optimizer's
// shard, sharded; the loss average, an object), its two step functions, the timeline it prints
// and the digest of its final state. Its methods: set-up and the step functions in trainer.cc,
// their CUDA paths in trainer_gpu.cc, the run and the digest in trainer_run.cc, the replica drop
// of rtft-bench in drop_replica.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu_model.h"
#include "grid_model.h"
#include "model.h"
#include "rtft/offload.h"
#include "rtft/protect.h"
#include "rtft/runtime.h"

namespace train {

// The clocks the timeline prints with (wall seconds since the epoch) and the process's CPU time
// (every thread: the protection's capture and replication too).
double WallSeconds();
double CpuSeconds();

struct Options {
  uint64_t steps = 60;
  int64_t l3_every = -1;
  std::string ckpt_dir;
  int hidden = 1024;
  int batch = 16;
  uint64_t seed = 42;
  int log_every = 10;
  std::string fault;  // RANK:point[@n][:action],... (tests and the demo)
  bool protect = true;
  // rtft-bench protect: blocks of this many steps alternately protected and not (0: all
  // protected), each kind timed on its own.
  uint64_t protect_blocks = 0;
  // rtft-bench ckpt-e2e: only every N-th step protected (0: every step), and the baseline that
  // writes the state from the training thread every N steps (-1: never; blocking_save.cc).
  int64_t protect_every = 0;
  int64_t blocking_save_every = -1;
  bool offload = false;  // rt-ft's OffloadOptimizer instead of the trainer's own AdamW loop
  // --device cuda --offload: kInterleaved, or kCpu (every subgroup on the CPU: the CPU-only
  // baseline of rtft-bench offload-e2e).
  rtft::OffloadMode offload_mode = rtft::OffloadMode::kInterleaved;
  // Tensor and pipeline degrees (grid_model.h; the data-parallel one from the world size) and
  // the micro-batches of the pipeline's schedule.
  int tp = 1, pp = 1, micro = 2;
  bool grid() const { return tp > 1 || pp > 1; }
  // Test option: each partition's parameters described as its shard of the stage's parameters,
  // which its data-parallel group shares (ShardCoords::replicated), not a tensor of its own.
  bool shared_shards = false;
  // Test option: a running statistic that compute changes (TensorDesc::changed_in_compute), each
  // rank's own (a function of the step and the rank), as a module buffer under DDP differs; 2 MiB.
  bool buffers = false;
  // --drop-replica D@STEP (a test option): after STEP steps, the layout as if data-parallel
  // replica D had left (drop_replica.cc); -1: never.
  int drop_replica = -1;
  uint64_t drop_step = 0;
  // --device cuda: the model on the GPU (gpu_model.h), bf16 parameters with the fp32 master
  // weights and moments in rt-ft's OffloadOptimizer (resident on the GPU; with --offload in
  // pinned host memory, interleaved); its collectives over NCCL, or over Gloo staged through
  // pinned host buffers (`comm`: "nccl" or "gloo").
  bool cuda = false;
  std::string comm = "nccl";
};

// Sums of the step times of one kind of step.
struct Timing {
  double wall_s = 0, cpu_s = 0;
  uint64_t steps = 0;
  std::string Mean(double sum) const;
};

class Trainer {
 public:
  Trainer(const Options& o, rtft::Runtime* rt);
  ~Trainer();
  int Run();

 private:
  // This rank's shard of the optimizer for `world` ranks, sized and described (again after a
  // shrink).
  rtft::StatusOr<std::shared_ptr<rtft::StateProvider>> Describe(int world, int rank);
  // --drop-replica: the steps to STEP protected, then the rest on communicators without the
  // replica; the process's exit code.
  int DropReplica(const rtft::StepFns& fns);
  rtft::Status Group(const std::string& name, int rank, int size,
                     std::unique_ptr<rtft::Communicator>* c) const;
  rtft::Status Compute(rtft::StepContext& ctx);
  // The compute split for the replay of steps (StepFns::local and ::reduce; the CPU path of a
  // data-parallel run only).
  rtft::Status Local(rtft::StepContext& ctx);
  rtft::Status Reduce(rtft::StepContext& ctx);
  rtft::Status Update(rtft::StepContext& ctx);
  // The parameters this rank updates a shard of: the whole model, or its partition's block.
  float* Params() { return block_ ? block_->data() : params_.data(); }
  // Flips bit 20 of the first replicated parameter (the SDC test hooks).
  void FlipBit();
  // The group the optimizer's shards are spread over (null: this rank alone).
  rtft::Communicator* DataGroup(rtft::StepContext& ctx) const;
  // The counts of every rank's shard, for the collectives of `world` ranks.
  std::vector<size_t> Counts(int world) const;
  rtft::Status Digest(rtft::Communicator* c, uint64_t* digest) const;
  // --device cuda: the model and its buffers; this rank's state; the steps' collectives.
  rtft::Status CreateGpu(int device);
  rtft::Status DescribeGpu(rtft::CompositeProvider* state, int world, int rank);
  rtft::Status ComputeGpu(rtft::StepContext& ctx);
  rtft::Status UpdateGpu(rtft::StepContext& ctx);
  void ArmFaults(int rank) const;
  void Time(const rtft::StepContext& ctx);
  void Prologue(rtft::StepContext& ctx);
  rtft::Status LocalGradients(rtft::StepContext& ctx);
  rtft::Status Failed(const rtft::StepContext& ctx, const rtft::Status& s);
  void Say(const std::string& line) const;
  int Fail(const char* what, const rtft::Status& s) const;
  void Report(const rtft::RecoveryInfo& r) const;

  Options o_;
  rtft::Runtime* rt_;
  std::unique_ptr<rtft::Protector> p_;
  ModelShape shape_;
  size_t n_ = 0;
  int rank_ = 0;
  // --device cuda: how long this process's CUDA start-up took (the model made on the device:
  // context, cuBLAS, allocations), reported in the recovered line of a process that started
  // after a failure (a spare starts CUDA only once activated: docs/launcher.md, "GPUs"); 0
  // otherwise.
  double cuda_init_s_ = 0;
  rtft::EvenSplit shard_;
  std::vector<float> params_, m_, v_, grad_, grad_shard_;
  std::unique_ptr<rtft::OffloadOptimizer> optimizer_;  // --offload
  std::unique_ptr<GridBlock> block_;                   // --tp / --pp: this rank's block
  // --device cuda: the model; the gradients' shard and the loss in device memory; the pinned
  // host buffers the Gloo communicator is staged through (whole gradients, their shard, the
  // bf16 parameters).
  std::unique_ptr<GpuModel> gpu_;
  float* grad_shard_dev_ = nullptr;
  float* loss_dev_ = nullptr;
  float *grad_host_ = nullptr, *grad_shard_host_ = nullptr;
  uint16_t* params_host_ = nullptr;
  std::shared_ptr<rtft::StateProvider> state_;
  double loss_ema_ = 0;
  float mean_loss_ = 0;  // this step's, from compute to update
  float loss_ = 0;       // this rank's, from the local compute to the reduction
  uint64_t listener_ = 0;
  std::vector<float> x_;
  std::vector<int> y_;
  // Step timing: the time from one step's compute to the next's, for rtft-bench protect.
  bool started_ = false;
  std::vector<float> running_;  // --buffers
  rtft::ShardCoords shared_;    // --shared-shards: where this partition's parameters sit
  std::string shared_name_;
  std::optional<uint64_t> stuck_step_;  // "train.stuck_flip" flipped a bit as this step began
  uint64_t first_step_ = 0, last_step_ = 0;
  double last_wall_ = 0, last_cpu_ = 0;
  Timing timing_[2];  // [0]: unprotected steps, [1]: protected ones
};

}  // namespace train
