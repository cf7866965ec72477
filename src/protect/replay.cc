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
// its rank) once every rank holds the verdict (a barrier), and the others wait for that epoch.
//
// In a tensor x pipeline x data grid the unit is a replica: the local compute has the tensor and
// pipeline groups' collectives, so replica d runs replica d - 1's step whole, each rank comparing
// with its counterpart in its data-parallel group, and the replicas a disagreement names (in any
// position: one small all-reduce over the job) run their step again whole.
//
// The check for non-finite gradients (RTFT_PROTECT_CHECK_FINITE) runs at every step: each rank
// looks for a NaN or an infinity in its own gradients and the group gathers one flag a rank; a
// step with one is replayed as above (a transient fault's second run is finite, a faulty device
// computes it twice). A NaN that the replay reproduces is the model's own: every rank ends the
// step with FAILED_PRECONDITION before the reduction, so it never reaches the state.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/protector.h"

namespace rtft::protect {
namespace {

// A local compute's result: the digest of its gradient buffer and whether it holds a NaN or an
// infinity (or the application said so).
struct LocalResult {
  uint64_t digest = 0;
  bool nonfinite = false;
};

// Whether any of the `n` elements of width U at `p` has every bit of `mask` (an exponent of all
// ones: a NaN or an infinity). Bits, not floating-point compares: no trap, no denormal flush.
template <typename U>
bool AnyAllOnes(const char* p, size_t n, U mask) {
  constexpr size_t kBlock = 4096;
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t end = std::min(n, at + kBlock);
    bool found = false;
    for (size_t i = at; i < end; ++i) {
      U v;
      std::memcpy(&v, p + i * sizeof(U), sizeof(U));
      found |= (v & mask) == mask;
    }
    if (found) return true;
  }
  return false;
}

bool NonFinite(const StepContext& ctx) {
  if (ctx.nonfinite) return true;
  const char* p = static_cast<const char*>(ctx.gradients);
  const size_t bytes = ctx.gradient_bytes;
  switch (ctx.gradient_dtype) {
    case DType::kFloat32:
      return AnyAllOnes<uint32_t>(p, bytes / 4, 0x7F800000u);
    case DType::kFloat64:
      return AnyAllOnes<uint64_t>(p, bytes / 8, 0x7FF0000000000000ull);
    case DType::kFloat16:
      return AnyAllOnes<uint16_t>(p, bytes / 2, 0x7C00u);
    case DType::kBFloat16:
      return AnyAllOnes<uint16_t>(p, bytes / 2, 0x7F80u);
    default:
      return false;  // integers and bytes of no one type hold no NaN
  }
}

// Runs the local compute as `data_rank`'s step.
StatusOr<LocalResult> RunLocal(const StepFns& fns, StepContext& ctx, int data_rank,
                               bool replaying) {
  ctx.data_rank = data_rank;
  ctx.replaying = replaying;
  ctx.gradients = nullptr;
  ctx.gradient_bytes = 0;
  ctx.gradient_dtype = DType::kUInt8;
  ctx.nonfinite = false;
  RTFT_RETURN_IF_ERROR(fns.local(ctx));
  if (!ctx.gradients || ctx.gradient_bytes == 0)
    return Status::FailedPrecondition(
        "the replay of step " + std::to_string(ctx.step) +
        " needs the local step function to name its gradient buffer (StepContext::gradients and "
        "::gradient_bytes)");
  return LocalResult{Xxh3(ctx.gradients, ctx.gradient_bytes), NonFinite(ctx)};
}

using Clock = std::chrono::steady_clock;

// " (N ms)": the time from `since` to now, for the log lines that say what a check cost.
std::string Took(Clock::time_point since) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - since);
  return " (" + std::to_string(us.count() / 1000) + "." + std::to_string(us.count() / 100 % 10) +
         " ms)";
}

bool Has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Who the logs name: a data-parallel rank, or in a grid a rank and its place. `ranks[d]`: the
// job's rank of data-parallel index d in this rank's group.
class Names {
 public:
  Names(const StepContext& ctx, const std::vector<int>& ranks)
      : grid_(ctx.place.tensor * ctx.place.pipeline > 1),
        t_(ctx.place.t),
        p_(ctx.place.p),
        ranks_(ranks) {}
  std::string One(int d) const { return (grid_ ? "rank " : "data-parallel rank ") + Place(d); }
  // A replaying peer: "rank d" (data parallel alone, the group is the job).
  std::string Peer(int d) const { return "rank " + Place(d); }
  std::string Many(const std::vector<int>& ds) const {
    std::string out;
    for (int d : ds) out += (out.empty() ? "" : ", ") + Place(d);
    return (grid_ ? "rank(s) " : "data-parallel rank(s) ") + out;
  }

 private:
  std::string Place(int d) const {
    if (!grid_) return std::to_string(d);
    const int r = d >= 0 && d < static_cast<int>(ranks_.size()) ? ranks_[d] : -1;
    return std::to_string(r) + " (t " + std::to_string(t_) + ", p " + std::to_string(p_) + ", d " +
           std::to_string(d) + ")";
  }
  bool grid_;
  int t_, p_;
  const std::vector<int>& ranks_;  // outlives it: ComputeStep's
};

// The data-parallel indexes of this rank's group whose flag is set, the same list on every rank
// of the group, and each one's rank in the job (`ranks`).
StatusOr<std::vector<int>> Flagged(Communicator* data, bool mine, int rank,
                                   std::vector<int>* ranks) {
  const int n = data->world_size();
  const int32_t pair[2] = {mine ? 1 : 0, rank};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  RTFT_RETURN_IF_ERROR(data->AllGather(pair, all.data(), 2, DType::kInt32));
  std::vector<int> out;
  ranks->assign(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    if (all[2 * static_cast<size_t>(r)]) out.push_back(r);
    (*ranks)[static_cast<size_t>(r)] = all[2 * static_cast<size_t>(r) + 1];
  }
  return out;
}

// In a grid, the data-parallel indexes that any of the job's groups named (`here`: this rank's
// group's), the same on every rank of the job: a replica's tensor and pipeline groups have
// collectives of their own in the local compute, so every rank of a replica must run it as often
// as the others (docs/protect.md, "Replay"). Data parallel alone, the group is the job.
StatusOr<std::vector<int>> InAnyGroup(const StepContext& ctx, int n, const std::vector<int>& here) {
  if (ctx.place.tensor * ctx.place.pipeline == 1) return here;
  std::vector<int32_t> marks(static_cast<size_t>(n), 0), any(static_cast<size_t>(n), 0);
  for (int d : here) marks[static_cast<size_t>(d)] = 1;
  RTFT_RETURN_IF_ERROR(
      ctx.comm->AllReduce(marks.data(), any.data(), marks.size(), DType::kInt32, ReduceOp::kMax));
  std::vector<int> out;
  for (int d = 0; d < n; ++d)
    if (any[static_cast<size_t>(d)]) out.push_back(d);
  return out;
}

}  // namespace

Status ComputeStep(StepContext& ctx, const StepFns& fns, int64_t every, bool check_finite,
                   ReplayOutcome* outcome) {
  *outcome = ReplayOutcome();
  if (!fns.local) return fns.compute(ctx);
  Communicator* data = ctx.data ? ctx.data : ctx.comm;
  const int n = data->world_size(), d = ctx.place.d;
  const bool grid = ctx.place.tensor * ctx.place.pipeline > 1;
  const std::string at = "at step " + std::to_string(ctx.step);
  std::vector<int> ranks;    // the job's rank of each data-parallel index of this group
  std::vector<int> flagged;  // the indexes whose gradients were not finite at first
  Clock::time_point found;   // when a check found something: the logs say what it cost since
  // The reduction, once no rank's gradients are left non-finite: what the replays kept
  // non-finite is the model's own, and no rank reduces it.
  const auto reduce = [&]() -> Status {
    if (check_finite) {
      std::vector<int> unused;
      RTFT_ASSIGN_OR_RETURN(const std::vector<int> left,
                            Flagged(data, NonFinite(ctx), ctx.rank, &unused));
      RTFT_ASSIGN_OR_RETURN(const std::vector<int> any, InAnyGroup(ctx, n, left));
      const Names names(ctx, ranks);
      if (any.empty() && !flagged.empty() && d == flagged.front())
        RTFT_LOG(kError, kLogRuntime)
            << at << " the gradients of " << names.Many(flagged)
            << " are finite when computed again: a transient fault, the step goes on"
            << Took(found);
      if (!any.empty())
        return Status::FailedPrecondition(
            at + " the gradients of " +
            (left.empty() ? "a rank of another tensor or pipeline group" : names.Many(left)) +
            " are not finite, and computed again they are not finite either: the model's own "
            "NaN or infinity (a loss that diverged), not a device's fault; the step was not "
            "applied");
    }
    return fns.reduce(ctx);
  };
  const bool replay = every > 0 && n > 1 && ctx.step % static_cast<uint64_t>(every) == 0;
  if (!replay) {
    RTFT_ASSIGN_OR_RETURN(const LocalResult own, RunLocal(fns, ctx, d, false));
    if (!check_finite) return fns.reduce(ctx);
    RTFT_ASSIGN_OR_RETURN(flagged, Flagged(data, own.nonfinite, ctx.rank, &ranks));
    RTFT_ASSIGN_OR_RETURN(const std::vector<int> any, InAnyGroup(ctx, n, flagged));
    if (any.empty()) return fns.reduce(ctx);
    found = Clock::now();
    if (!flagged.empty() && d == flagged.front())
      RTFT_LOG(kError, kLogRuntime)
          << at << " the gradients of " << Names(ctx, ranks).Many(flagged)
          << " are not finite: the step is " << (n > 1 ? "replayed by a peer" : "run again");
    if (n == 1) {  // no peer to replay it: a second run tells a transient fault
      RTFT_RETURN_IF_ERROR(RunLocal(fns, ctx, d, false).status());
      return reduce();
    }
  }
  // Round 1: the left neighbour's step here, then this rank's own (its gradients stay in the
  // buffer); in a grid every rank of replica d runs replica d - 1's step, together. Rank r's
  // digest is all[4r]; its replay by r + 1 is all[4(r + 1) + 1]; all[4r + 2] holds r's own run's
  // non-finite bit (1) and its replay's (2); all[4r + 3] its rank in the job.
  const int left = (d + n - 1) % n;
  RTFT_ASSIGN_OR_RETURN(const LocalResult theirs, RunLocal(fns, ctx, left, true));
  RTFT_ASSIGN_OR_RETURN(const LocalResult mine, RunLocal(fns, ctx, d, false));
  const uint64_t quad[4] = {mine.digest, theirs.digest,
                            (mine.nonfinite ? 1u : 0u) | (theirs.nonfinite ? 2u : 0u),
                            static_cast<uint64_t>(ctx.rank)};
  std::vector<uint64_t> all(4 * static_cast<size_t>(n));
  RTFT_RETURN_IF_ERROR(data->AllGather(quad, all.data(), sizeof(quad), DType::kUInt8));
  const auto at4 = [&](int r, int i) { return all[4 * static_cast<size_t>(r % n) + i]; };
  ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = static_cast<int>(at4(r, 3));
  const Names names(ctx, ranks);
  const auto replay_of = [&](int r) { return at4(r + 1, 1); };
  // Both non-finite: the model's own NaN (whose bits need not repeat), not a disagreement.
  const auto both_nonfinite = [&](int r) { return (at4(r, 2) & 1) && (at4(r + 1, 2) & 2); };
  std::vector<int> bad_here;
  for (int r = 0; r < n; ++r)
    if (at4(r, 0) != replay_of(r) && !both_nonfinite(r)) bad_here.push_back(r);
  // The replicas that run their step again: in a grid, those with a rank that disagreed in any
  // tensor or pipeline position.
  RTFT_ASSIGN_OR_RETURN(const std::vector<int> bad, InAnyGroup(ctx, n, bad_here));
  // Every rank's gradients agree with their replay (or, below, with a second run): the step is
  // certified as replayed once they are reduced.
  const auto certified = [&]() -> Status {
    RTFT_RETURN_IF_ERROR(reduce());
    outcome->replayed = true;
    return Status::Ok();
  };
  if (bad.empty()) return certified();
  if (flagged.empty()) found = Clock::now();

  // Round 2: each disagreeing replica runs its step again; with three replicas or more, r + 2
  // replays it too, then runs its own step again (what the local compute left for the reduction,
  // the gradients and whatever else it keeps, is this rank's own again).
  const bool me_bad = Has(bad, d);
  const int two_left = (d + n - 2) % n;
  const bool i_replay = n >= 3 && Has(bad, two_left);
  uint64_t again = 0, third = 0;
  if (i_replay) {
    RTFT_ASSIGN_OR_RETURN(const LocalResult r3, RunLocal(fns, ctx, two_left, true));
    third = r3.digest;
  }
  if (me_bad || i_replay) {
    RTFT_ASSIGN_OR_RETURN(const LocalResult r2, RunLocal(fns, ctx, d, false));
    again = r2.digest;
  }
  // A rank that agreed with its replay and ran its step again for the reduction must get the
  // same gradients again; if not, it is one more rank that disagrees with itself.
  if (!me_bad && i_replay && again != mine.digest)
    return Status::DataLoss(at +
                            " this rank's local compute gave other gradients when run "
                            "again after a replay");
  if (!me_bad) again = 0;
  const uint64_t pair2[2] = {again, third};
  std::vector<uint64_t> all2(2 * static_cast<size_t>(n));
  RTFT_RETURN_IF_ERROR(data->AllGather(pair2, all2.data(), sizeof(pair2), DType::kUInt8));
  // Every rank of a replica that ran again is judged by its second run: one whose first run
  // agreed (its replica ran again for another position's sake) must agree again.
  std::vector<int> faulty_here;
  for (int r : bad) {
    const uint64_t second = all2[2 * static_cast<size_t>(r)];
    const bool disagreed = Has(bad_here, r);
    if (!disagreed && (second == replay_of(r) || both_nonfinite(r))) continue;
    const bool by_third = n >= 3 && all2[2 * static_cast<size_t>((r + 2) % n) + 1] == second;
    std::string what;
    if (second == replay_of(r)) {
      what = "its second run agrees with the replay: a transient fault, the step goes on";
    } else if (by_third) {
      what = "its second run agrees with " + names.Peer((r + 2) % n) +
             "'s replay: " + names.Peer((r + 1) % n) + "'s replay was wrong";
    } else {
      what = "its second run disagrees too: its device is taken for faulty";
      faulty_here.push_back(r);
    }
    if (d == 0 || d == r)
      RTFT_LOG(kError, kLogRuntime)
          << "silent data corruption: " << at << " the gradients of " << names.One(r)
          << (disagreed ? " differ from its replay by " + names.Peer((r + 1) % n)
                        : " agreed with its replay, and ran again with its replica")
          << "; " << what << Took(found);
  }
  RTFT_ASSIGN_OR_RETURN(const std::vector<int> faulty, InAnyGroup(ctx, n, faulty_here));
  if (faulty.empty()) return certified();
  outcome->faulty = n > 2;  // with two ranks the job ends (below): no recovery follows
  // With two ranks, one that disagrees twice with its replay may be right and its replayer wrong
  // (a faulty device replays wrong too): no third device can tell which.
  if (n == 2)
    return Status::DataLoss("silent data corruption " + at +
                            ": the gradients and their replays disagree twice, and with two "
                            "replicas no third can tell which is wrong");
  // Every rank has the verdict before a faulty one leaves: its device error ends the epoch, which
  // aborts the others' calls, and a rank whose second gather was cut short would recover without
  // the ceiling, from state the faulty gradients made (once in 80 runs on a loaded machine). A
  // rank past this barrier knows every rank entered it, so every rank holds the verdict; the
  // others' barrier may then be aborted, which changes nothing. In a grid, every rank of the job.
  const Status all_know = (grid ? ctx.comm : data)->Barrier();
  if (Has(faulty_here, d))
    return Status::DeviceLost(at +
                              " this rank's gradients disagreed twice with their replays "
                              "by its peers" +
                              (all_know.ok() ? ""
                                             : " (and the barrier after the verdict failed: " +
                                                   all_know.ToString() + ")"));
  return Status::Aborted(at + " the gradients of " +
                         (faulty_here.empty() ? "another tensor or pipeline group's rank(s)"
                                              : names.Many(faulty_here)) +
                         " were computed wrong twice: waiting for the epoch that retires "
                         "their slots");
}

}  // namespace rtft::protect
