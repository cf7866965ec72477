// The trainer's --device cuda path (trainer.h): the model on the GPU, its ZeRO-1 step over NCCL
// or over Gloo staged through pinned host buffers, the optimizer rt-ft's OffloadOptimizer with
// bf16 parameters and fp32 master weights (resident on the GPU, or with --offload in pinned host
// memory and interleaved). No CUDA call here: gpu_model.h does them.
#include <cstring>

#include "rtft/testing.h"
#include "trainer.h"

namespace train {
namespace {

using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;

constexpr size_t kBf16 = 2;

char* Bytes(void* p, size_t offset) { return static_cast<char*>(p) + offset; }

}  // namespace

Status Trainer::CreateGpu(int device) {
  if (o_.comm != "nccl" && o_.comm != "gloo")
    return Status::InvalidArgument("--comm must be nccl or gloo, not '" + o_.comm + "'");
  RTFT_ASSIGN_OR_RETURN(gpu_, GpuModel::Create(shape_, o_.seed, device, o_.batch));
  n_ = gpu_->params();
  RTFT_ASSIGN_OR_RETURN(void* loss, gpu_->Alloc(sizeof(float)));
  loss_dev_ = static_cast<float*>(loss);
  if (o_.comm == "gloo") {
    RTFT_ASSIGN_OR_RETURN(void* grad, gpu_->AllocHost(n_ * sizeof(float)));
    RTFT_ASSIGN_OR_RETURN(void* params, gpu_->AllocHost(n_ * kBf16));
    grad_host_ = static_cast<float*>(grad);
    params_host_ = static_cast<uint16_t*>(params);
  }
  return Status::Ok();
}

Status Trainer::DescribeGpu(rtft::CompositeProvider* state, int world, int rank) {
  RTFT_ASSIGN_OR_RETURN(void* shard, gpu_->Alloc(shard_.count * sizeof(float)));
  grad_shard_dev_ = static_cast<float*>(shard);
  if (o_.comm == "gloo") {
    RTFT_ASSIGN_OR_RETURN(void* host, gpu_->AllocHost(shard_.count * sizeof(float)));
    grad_shard_host_ = static_cast<float*>(host);
  }
  rtft::TensorDesc params{"params", DType::kBFloat16, {int64_t(n_)}, gpu_->params_data()};
  params.memory = rtft::MemoryKind::kDevice;
  params.device = gpu_->device();
  state->AddTensor(params);
  rtft::OffloadParam p;
  p.name = "params";
  p.dtype = DType::kBFloat16;
  p.grad_dtype = DType::kFloat32;
  p.data = Bytes(gpu_->params_data(), shard_.offset * kBf16);
  p.elements = shard_.count;
  p.memory = rtft::MemoryKind::kDevice;
  p.device = gpu_->device();
  p.shard = rtft::EvenShard("params", DType::kBFloat16, {int64_t(n_)}, world, rank).shard;
  rtft::OffloadOptions oo;
  oo.mode = o_.offload ? o_.offload_mode : rtft::OffloadMode::kGpu;
  RTFT_ASSIGN_OR_RETURN(optimizer_, rtft::OffloadOptimizer::Create({p}, oo));
  state->Add(optimizer_->state_provider());
  return Status::Ok();
}

Status Trainer::ComputeGpu(rtft::StepContext& ctx) {
  MakeBatch(shape_, o_.seed, ctx.step, ctx.rank, o_.batch, &x_, &y_);
  RTFT_ASSIGN_OR_RETURN(float loss, gpu_->LossAndGradient(x_, y_));
  rtft::FaultPoint("train.backward");  // test hook: a failure in the middle of the computation
  rtft::Communicator* c = ctx.comm;
  const std::vector<size_t> counts = Counts(c->world_size());
  if (c->memory() == rtft::MemoryKind::kDevice) {
    rtft::CallOptions call;
    call.stream = gpu_->stream();
    RTFT_RETURN_IF_ERROR(gpu_->Copy(loss_dev_, &loss, sizeof(float)));
    RTFT_RETURN_IF_ERROR(c->ReduceScatterV(gpu_->grad_data(), grad_shard_dev_, counts,
                                           DType::kFloat32, ReduceOp::kAvg, call));
    RTFT_RETURN_IF_ERROR(
        c->AllReduce(loss_dev_, loss_dev_, 1, DType::kFloat32, ReduceOp::kSum, call));
    RTFT_RETURN_IF_ERROR(c->Wait(call.stream));
    RTFT_RETURN_IF_ERROR(gpu_->Copy(&mean_loss_, loss_dev_, sizeof(float)));
  } else {
    // Gloo: the gradients staged through pinned host memory, the shard copied back.
    RTFT_RETURN_IF_ERROR(gpu_->Copy(grad_host_, gpu_->grad_data(), n_ * sizeof(float)));
    RTFT_RETURN_IF_ERROR(
        c->ReduceScatterV(grad_host_, grad_shard_host_, counts, DType::kFloat32, ReduceOp::kAvg));
    RTFT_RETURN_IF_ERROR(
        gpu_->Copy(grad_shard_dev_, grad_shard_host_, shard_.count * sizeof(float)));
    RTFT_RETURN_IF_ERROR(c->AllReduce(&loss, &mean_loss_, 1, DType::kFloat32, ReduceOp::kSum));
  }
  mean_loss_ /= c->world_size();
  return Status::Ok();
}

Status Trainer::UpdateGpu(rtft::StepContext& ctx) {
  RTFT_RETURN_IF_ERROR(optimizer_->Step({grad_shard_dev_}));
  rtft::Communicator* c = ctx.comm;
  const std::vector<size_t> counts = Counts(c->world_size());
  const size_t offset = shard_.offset * kBf16;
  void* params = gpu_->params_data();
  if (c->memory() == rtft::MemoryKind::kDevice) {
    rtft::CallOptions call;
    call.stream = gpu_->stream();
    RTFT_RETURN_IF_ERROR(
        c->AllGatherV(Bytes(params, offset), params, counts, DType::kBFloat16, call));
    return c->Wait(call.stream);
  }
  char* host = reinterpret_cast<char*>(params_host_);
  RTFT_RETURN_IF_ERROR(gpu_->Copy(host + offset, Bytes(params, offset), shard_.count * kBf16));
  RTFT_RETURN_IF_ERROR(c->AllGatherV(host + offset, host, counts, DType::kBFloat16));
  return gpu_->Copy(params, host, n_ * kBf16);
}

}  // namespace train
