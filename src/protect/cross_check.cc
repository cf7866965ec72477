// The replicator's cross-check of the replicated tensors' copies (docs/protect.md, "Silent data
// corruption"): the gather of every rank's checksum that ends each step's exchange, and, only
// when the checksums differ, what every rank needs to act alike: the older snapshot every rank
// holds and which tensors differ, read again (none: a checksum was wrong, not a copy).
#include <algorithm>
#include <map>
#include <string>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/replicator.h"

namespace rtft::protect {
namespace {

constexpr uint64_t kNoStep = ~uint64_t{0};  // no such snapshot
constexpr size_t kNamed = 3;                // tensors a log line names

// The ranks whose value differs from the one more than half of them hold (empty: no such
// majority, or no difference).
std::vector<int> Minority(const std::vector<uint64_t>& values) {
  std::map<uint64_t, int> count;
  for (uint64_t v : values) ++count[v];
  std::vector<int> ranks;
  for (const auto& [value, n] : count) {
    if (2 * n <= static_cast<int>(values.size())) continue;
    for (size_t r = 0; r < values.size(); ++r)
      if (values[r] != value) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace

Status Replicator::Compare(uint64_t step, uint64_t own) {
  // Test hook: "protect.checksum_flip:flag" makes this rank's checksum of the step wrong, not its
  // copy (a fault in the hash or its read): read again, the copies agree.
  if (FaultFlag("protect.checksum_flip")) own ^= 1;
  std::vector<uint64_t> sums(static_cast<size_t>(world_));
  RTFT_RETURN_IF_ERROR(comm_->AllGather(&own, sums.data(), sizeof(own), DType::kUInt8));
  if (std::all_of(sums.begin(), sums.end(), [&](uint64_t s) { return s == sums[0]; }))
    return Status::Ok();  // every copy agrees: the usual case
  // Rare: which older snapshot (the other area's) every rank holds and checks out. The corrupt
  // copy may have been read by that step's compute already (a flip between its snapshot and its
  // compute is seen only now), so the repair goes back to it.
  uint64_t older = kNoStep;
  for (uint64_t s : l1_->CompleteSteps()) {  // newest first
    if (s >= step) continue;
    older = s;
    break;
  }
  std::vector<uint64_t> olders(static_cast<size_t>(world_));
  RTFT_RETURN_IF_ERROR(comm_->AllGather(&older, olders.data(), sizeof(older), DType::kUInt8));
  std::optional<uint64_t> back;
  if (olders[0] != kNoStep &&
      std::all_of(olders.begin(), olders.end(), [&](uint64_t o) { return o == olders[0]; }))
    back = olders[0];
  // Which tensors differ: each rank's digest of each replicated tensor of the step's snapshot
  // (the ranks of a group lay out the same ones, which the shard table checked; those that
  // compute changes are hashed too, for one gather of a fixed size, and left out).
  const std::vector<Entry>& entries = l1_->layout().replicated;
  const char* area = l1_->payload(step);
  std::vector<uint64_t> mine(entries.size()), all(entries.size() * static_cast<size_t>(world_));
  for (size_t i = 0; i < entries.size(); ++i)
    mine[i] = Xxh3(area + entries[i].offset, entries[i].bytes);
  if (!entries.empty())
    RTFT_RETURN_IF_ERROR(
        comm_->AllGather(mine.data(), all.data(), mine.size() * sizeof(uint64_t), DType::kUInt8));
  std::vector<std::string> tensors;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].tensor.changed_in_compute) continue;  // may differ, and are not compared
    std::vector<uint64_t> copies(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) copies[r] = all[r * entries.size() + i];
    if (std::any_of(copies.begin(), copies.end(), [&](uint64_t c) { return c != copies[0]; }))
      tensors.push_back(entries[i].tensor.name);
  }
  // Read again, every compared tensor agrees on every rank (the same verdict everywhere: the
  // gather is everyone's): the checksums were wrong, not the copies, and nothing is repaired. The
  // range they cover is these tensors and their alignment padding.
  if (tensors.empty()) {
    if (rank_ == 0)
      RTFT_LOG(kWarn, kLogRuntime)
          << "at step " << step
          << " the replicated tensors' checksums differ, and read again every tensor agrees on "
             "every rank: a checksum was wrong (its computation or its read), not a copy; the "
             "step goes on";
    return Status::Ok();
  }
  const bool ask = CrossCheck(step, sums, back, std::move(tensors));
  // Every rank computed the same verdict and acted on it before it enters the barrier: the
  // repair's epoch, which the report starts, can no longer abort a rank that has yet to drop its
  // corrupt snapshot.
  RTFT_RETURN_IF_ERROR(comm_->Barrier());
  if (ask) FaultPoint("protect.sdc_report");  // test hook: a repair asked for late
  if (ask && report_) report_(step);
  return Status::Ok();
}

bool Replicator::CrossCheck(uint64_t step, const std::vector<uint64_t>& sums,
                            std::optional<uint64_t> back, std::vector<std::string> tensors) {
  Corruption c;
  c.step = step;
  c.copies = static_cast<int>(sums.size());
  c.ranks = Minority(sums);
  c.tensors = std::move(tensors);
  const bool named = !c.ranks.empty();
  std::string who, which;
  for (int r : c.ranks) who += (who.empty() ? "" : ", ") + std::to_string(r);
  for (size_t i = 0; i < c.tensors.size() && i < kNamed; ++i)
    which += (i ? ", '" : " (in '") + c.tensors[i] + "'";
  if (c.tensors.size() > kNamed)
    which += " and " + std::to_string(c.tensors.size() - kNamed) + " more";
  if (!which.empty()) which += ")";
  // Where every rank holds an older snapshot that agreed, every rank drops this step's and goes
  // back to it: the corrupt copy may have fed that step's compute, whose gradients entered every
  // rank's update (a flip between a snapshot and its compute is seen only at the next check).
  // Without one, the corrupt copy is fed from a peer's snapshot of this step, and with no majority
  // there is nothing to go back to.
  std::string what;
  if (back) {
    what = "back to step " + std::to_string(*back) + ", the last whose copies agreed, which " +
           "runs again on every rank";
  } else if (named) {
    what = "repaired from a peer, step " + std::to_string(step) +
           " runs again (no older snapshot on every rank: a flip before the compute of step " +
           std::to_string(step - 1) + " is not undone)";
  } else {
    what = "no older snapshot on every rank to go back to";
  }
  RTFT_LOG(kError, kLogRuntime)
      << "silent data corruption: at step " << step << " the replicated tensors of "
      << (named ? "data-parallel rank(s) " + who + " differ from the other copies'"
                : std::to_string(c.copies) + " copies differ with no majority")
      << which << "; " << what;
  const bool mine =
      back || !named || std::find(c.ranks.begin(), c.ranks.end(), rank_) != c.ranks.end();
  if (mine) l1_->Invalidate(step);
  const int asker = named ? c.ranks.front() : 0;
  std::lock_guard<std::mutex> lock(mu_);
  corrupt_.push_back(std::move(c));
  return rank_ == asker;
}

}  // namespace rtft::protect
