// The replay of a step by a peer (docs/protect.md, "Replay"). A corrupt gradient (a flipped bit,
// a faulty SM) reaches every rank identically through the reduction, and the replicated copies
// then agree: only running the step's compute again can tell. Every `every` steps each rank runs
// its left neighbour's local compute (StepFns::local, on the same replicated parameters, the
// neighbour's data) before its own, and the data-parallel group gathers both digests of the
// gradient buffers: rank r's own against its replay by r + 1. All of it before the reduction, so
// a wrong gradient never reaches the state. A rank that disagrees runs its step again and, with
// three ranks or more, rank r + 2 replays it too: a second run that agrees with the replay was a
// transient fault (its buffer now holds the right gradients: the step goes on); one that agrees
// with r + 2's replay shows the replay by r + 1 was wrong; otherwise the rank disagreed twice and
// its device is taken for faulty: it reports a device error (its slot is retired, a spare takes
// its rank) and the others wait for that epoch.
#include <algorithm>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/protector.h"

namespace rtft::protect {
namespace {

// Runs the local compute as `data_rank`'s step: the digest of the gradient buffer it names.
StatusOr<uint64_t> RunLocal(const StepFns& fns, StepContext& ctx, int data_rank, bool replaying) {
  ctx.data_rank = data_rank;
  ctx.replaying = replaying;
  ctx.gradients = nullptr;
  ctx.gradient_bytes = 0;
  RTFT_RETURN_IF_ERROR(fns.local(ctx));
  if (!ctx.gradients || ctx.gradient_bytes == 0)
    return Status::FailedPrecondition(
        "the replay of step " + std::to_string(ctx.step) +
        " needs the local step function to name its gradient buffer (StepContext::gradients and "
        "::gradient_bytes)");
  return Xxh3(ctx.gradients, ctx.gradient_bytes);
}

bool Has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

Status ComputeStep(StepContext& ctx, const StepFns& fns, int64_t every) {
  if (!fns.local) return fns.compute(ctx);
  Communicator* data = ctx.data ? ctx.data : ctx.comm;
  const int n = data->world_size(), d = ctx.place.d;
  const bool replay = every > 0 && n > 1 && ctx.step % static_cast<uint64_t>(every) == 0;
  if (!replay) {
    RTFT_RETURN_IF_ERROR(RunLocal(fns, ctx, d, false).status());
    return fns.reduce(ctx);
  }
  if (ctx.place.tensor * ctx.place.pipeline > 1)
    return Status::InvalidArgument(
        "the replay of steps is for data-parallel layouts: a tensor or pipeline group's local "
        "compute has collectives of its own (set RTFT_PROTECT_REPLAY_EVERY=0)");
  // Round 1: the left neighbour's step here, then this rank's own (its gradients stay in the
  // buffer). Rank r's digest is all[2r]; its replay by r + 1 is all[2(r + 1) + 1].
  const int left = (d + n - 1) % n;
  RTFT_ASSIGN_OR_RETURN(const uint64_t theirs, RunLocal(fns, ctx, left, true));
  RTFT_ASSIGN_OR_RETURN(const uint64_t mine, RunLocal(fns, ctx, d, false));
  const uint64_t pair[2] = {mine, theirs};
  std::vector<uint64_t> all(2 * static_cast<size_t>(n));
  RTFT_RETURN_IF_ERROR(data->AllGather(pair, all.data(), sizeof(pair), DType::kUInt8));
  const auto replayed = [&](int r) { return all[2 * static_cast<size_t>((r + 1) % n) + 1]; };
  std::vector<int> bad;
  for (int r = 0; r < n; ++r)
    if (all[2 * static_cast<size_t>(r)] != replayed(r)) bad.push_back(r);
  if (bad.empty()) return fns.reduce(ctx);

  // Round 2: each disagreeing rank runs its step again; with three ranks or more, r + 2 replays
  // it too, then runs its own step again (what the local compute left for the reduction, the
  // gradients and whatever else it keeps, is this rank's own again).
  const bool me_bad = Has(bad, d);
  const int two_left = (d + n - 2) % n;
  const bool i_replay = n >= 3 && Has(bad, two_left);
  uint64_t again = 0, third = 0;
  if (i_replay) {
    RTFT_ASSIGN_OR_RETURN(third, RunLocal(fns, ctx, two_left, true));
  }
  if (me_bad || i_replay) {
    RTFT_ASSIGN_OR_RETURN(again, RunLocal(fns, ctx, d, false));
  }
  // A rank that agreed with its replay and ran its step again for the reduction must get the
  // same gradients again; if not, it is one more rank that disagrees with itself.
  if (!me_bad && i_replay && again != mine)
    return Status::DataLoss("at step " + std::to_string(ctx.step) +
                            " this rank's local compute "
                            "gave other gradients when run again after a replay");
  if (!me_bad) again = 0;
  const uint64_t pair2[2] = {again, third};
  std::vector<uint64_t> all2(2 * static_cast<size_t>(n));
  RTFT_RETURN_IF_ERROR(data->AllGather(pair2, all2.data(), sizeof(pair2), DType::kUInt8));
  std::vector<int> faulty;
  for (int r : bad) {
    const uint64_t second = all2[2 * static_cast<size_t>(r)];
    const bool by_third = n >= 3 && all2[2 * static_cast<size_t>((r + 2) % n) + 1] == second;
    std::string what;
    if (second == replayed(r)) {
      what = "its second run agrees with the replay: a transient fault, the step goes on";
    } else if (by_third) {
      what = "its second run agrees with rank " + std::to_string((r + 2) % n) + "'s replay: rank " +
             std::to_string((r + 1) % n) + "'s replay was wrong";
    } else {
      what = "its second run disagrees too: its device is taken for faulty";
      faulty.push_back(r);
    }
    if (d == 0 || d == r)
      RTFT_LOG(kError, kLogRuntime)
          << "silent data corruption: at step " << ctx.step << " the gradients of data-parallel "
          << "rank " << r << " differ from its replay by rank " << (r + 1) % n << "; " << what;
  }
  if (faulty.empty()) return fns.reduce(ctx);
  // With two ranks, one that disagrees twice with its replay may be right and its replayer wrong
  // (a faulty device replays wrong too): no third device can tell which.
  if (n == 2)
    return Status::DataLoss("silent data corruption at step " + std::to_string(ctx.step) +
                            ": the gradients and their replays disagree twice, and with two "
                            "ranks no third can tell which is wrong");
  if (Has(faulty, d))
    return Status::DeviceLost("at step " + std::to_string(ctx.step) + " this rank's gradients " +
                              "disagreed twice with its replays by its peers");
  return Status::Aborted("at step " + std::to_string(ctx.step) + " data-parallel rank(s) " +
                         std::to_string(faulty.front()) + (faulty.size() > 1 ? " and others" : "") +
                         " computed wrong gradients twice: waiting for the epoch that retires " +
                         "their slots");
}

}  // namespace rtft::protect
