// The rt-ft variant: CheckpointEngine with its defaults, a pool that holds the whole state unless
// --pool-bytes says otherwise. Blocking time is Checkpoint() plus WaitCaptured(), what a training
// loop that updates its weights right after checkpointing would be held for. The version stays
// on disk for the restore phase (ckpt_restore.cc).
#include <algorithm>
#include <memory>

#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_util.h"
#include "checkpoint/engine.h"

namespace rtft::bench {
namespace {

constexpr uint64_t kPage = 4096;

// Room for every capture unit rounded up to a page, plus one chunk of wasted space where the
// ring buffer wraps.
StatusOr<uint64_t> PoolToHoldState(const BenchState& state, const CheckpointOptions& resolved) {
  const uint64_t chunk = resolved.chunk_bytes;
  const uint64_t units = state.tensors().size() + state.bytes() / chunk + 1;
  return (state.bytes() + kPage - 1) / kPage * kPage + units * kPage + chunk;
}

}  // namespace

std::string RtftDir(const VariantConfig& config) { return config.dir + "/rtft"; }

StatusOr<VariantResult> RunRtft(const BenchState& state, const VariantConfig& config) {
  RTFT_RETURN_IF_ERROR(RemoveTree(RtftDir(config)));  // the previous repeat's version
  CheckpointOptions o;
  o.dir = RtftDir(config);
  o.io_backend = config.io;
  o.flush_threads = config.flush_threads;
  o.pool_bytes = config.pool_bytes;
  if (o.pool_bytes == 0 && !config.engine_pool) {
    RTFT_ASSIGN_OR_RETURN(CheckpointOptions resolved, ResolveCheckpointOptions(o));
    RTFT_ASSIGN_OR_RETURN(o.pool_bytes, PoolToHoldState(state, resolved));
  }
  // Creating the engine allocates and touches the pool: a one-time cost, not part of a
  // checkpoint.
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointEngine> engine, CheckpointEngine::Create(o));
  constexpr uint64_t kVersion = 1;
  const auto start = Clock::now();
  RTFT_RETURN_IF_ERROR(engine->Checkpoint(kVersion, state.provider()));
  VariantResult r;
  r.call_s = SecondsSince(start);
  RTFT_RETURN_IF_ERROR(engine->WaitCaptured(kVersion));
  r.blocking_s = SecondsSince(start);
  RTFT_RETURN_IF_ERROR(engine->WaitPersisted(kVersion));
  RTFT_ASSIGN_OR_RETURN(CheckpointStats stats, engine->Stats(kVersion));
  r.capture_s = stats.capture_s;
  r.persist_s = stats.persist_s;
  r.io = stats.io_backend;
  r.direct_io = stats.direct_io;
  r.pool_bytes = engine->options().pool_bytes;
  engine.reset();  // joins the engine's threads before the restore phase reads its files
  return r;
}

}  // namespace rtft::bench
