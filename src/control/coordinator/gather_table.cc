#include "control/coordinator/gather_table.h"

#include <algorithm>

#include "control/wire/codec.h"

namespace rtft::control {
namespace {

// The leader's answer, framed: the header, the map's other fields (req, code, msg) and, per
// contribution, its MessagePack bin header (at most 5 bytes).
constexpr size_t kAnswerOverhead = kHeaderBytes + 64;
constexpr size_t kPerValueOverhead = 5;

GatherAnswer Error(const GatherPeer& to, Status s) {
  GatherAnswer a;
  a.to = to;
  a.status = std::move(s);
  return a;
}

}  // namespace

std::vector<GatherAnswer> GatherTable::Contribute(const GatherPeer& from, const GatherRequest& r,
                                                  uint64_t epoch, int32_t world, LogicalRank rank,
                                                  SteadyClock::time_point now) {
  const std::string what = "gather '" + r.key + "'";
  if (r.epoch < epoch)
    return {
        Error(from, Status::Aborted(what + ": epoch " + std::to_string(r.epoch) +
                                    " ended (the job is at epoch " + std::to_string(epoch) + ")"))};
  if (r.epoch > epoch)
    return {
        Error(from, Status::FailedPrecondition(what + " names epoch " + std::to_string(r.epoch) +
                                               ", the job is at " + std::to_string(epoch)))};
  if (r.members != world || world < 1)
    return {
        Error(from, Status::InvalidArgument(what + " of " + std::to_string(r.members) +
                                            " members in a world of " + std::to_string(world)))};
  if (rank == kNoRank || r.index != rank)
    return {Error(from,
                  Status::InvalidArgument(what + ": member " + std::to_string(r.index) +
                                          " from a slot that holds rank " + std::to_string(rank)))};
  if (r.value.size() > kMaxGatherValueBytes)
    return {Error(from, Status::InvalidArgument(what + ": contribution too large"))};
  if (r.all && r.members > kMaxAllMembers)
    return {
        Error(from, Status::InvalidArgument(
                        what + ": every contribution to every member is for worlds of at most " +
                        std::to_string(kMaxAllMembers)))};
  auto it = gathers_.find(r.key);
  if (it == gathers_.end()) {
    if (gathers_.size() >= kMaxOpen)
      return {Error(from, Status::ResourceExhausted(what + ": " + std::to_string(kMaxOpen) +
                                                    " gathers open already"))};
    Gather g;
    g.epoch = r.epoch;
    g.members = r.members;
    g.all = r.all;
    g.values.resize(static_cast<size_t>(r.members));  // at most the world, checked above
    g.bytes = kAnswerOverhead;
    it = gathers_.emplace(r.key, std::move(g)).first;
  }
  Gather& g = it->second;
  if (g.epoch != r.epoch || g.members != r.members || g.all != r.all)
    return {Error(from, Status::InvalidArgument(what + ": member " + std::to_string(r.index) +
                                                " disagrees with the others on its epoch, size "
                                                "or kind"))};
  auto& slot = g.values[static_cast<size_t>(r.index)];
  if (slot) {
    // A request sent again (after a takeover, or after its deadline): the same answer again.
    if (*slot != r.value)
      return {Error(from, Status::InvalidArgument(what + ": member " + std::to_string(r.index) +
                                                  " contributed twice, with different values"))};
  } else if (g.failed.ok()) {
    const size_t bytes = g.bytes + r.value.size() + kPerValueOverhead;
    if (bytes > kMaxMessageBytes) {
      g.failed = Status::ResourceExhausted(
          what + ": " + std::to_string(g.members) + " contributions exceed the " +
          std::to_string(kMaxMessageBytes >> 20) + " MiB message limit (" + std::to_string(bytes) +
          " bytes after " + std::to_string(g.have) + ")");
    } else {
      g.bytes = bytes;
      slot = r.value;
      ++g.have;
    }
  }
  const auto deadline = now + std::chrono::milliseconds(r.timeout_ms);
  g.waiting[r.index] = {from, deadline};
  g.next_deadline = g.next_deadline ? std::min(*g.next_deadline, deadline) : deadline;
  std::vector<GatherAnswer> out;
  Answer(g, &out);
  return out;
}

void GatherTable::Answer(Gather& g, std::vector<GatherAnswer>* out) {
  if (!g.failed.ok()) {
    for (const auto& [idx, w] : g.waiting) out->push_back(Error(w.peer, g.failed));
    g.waiting.clear();
    return;
  }
  if (g.have < g.members) return;
  std::shared_ptr<const std::vector<std::string>> all;
  auto values = [&] {
    if (!all) {
      auto v = std::make_shared<std::vector<std::string>>();
      v->reserve(g.values.size());
      for (const auto& x : g.values) v->push_back(*x);
      all = std::move(v);
    }
    return all;
  };
  for (auto w = g.waiting.begin(); w != g.waiting.end();) {
    GatherAnswer a;
    a.to = w->second.peer;
    if (g.all || w->first == 0) {
      a.values = values();
    } else if (g.result) {
      a.result = g.result;
    } else {
      ++w;  // waits for the leader's result
      continue;
    }
    out->push_back(std::move(a));
    w = g.waiting.erase(w);
  }
}

Status GatherTable::Result(const std::string& key, uint64_t gather_epoch, uint64_t epoch,
                           LogicalRank rank, const std::string& value,
                           std::vector<GatherAnswer>* answers) {
  const std::string what = "gather '" + key + "'";
  if (gather_epoch < epoch)
    return Status::Aborted(what + ": epoch " + std::to_string(gather_epoch) + " ended");
  auto it = gathers_.find(key);
  if (it == gathers_.end() || it->second.epoch != gather_epoch)
    return Status::FailedPrecondition(what + " is not open");
  Gather& g = it->second;
  if (rank != 0)
    return Status::InvalidArgument(what + ": a result from rank " + std::to_string(rank) +
                                   ", not its leader (0)");
  if (g.all) return Status::FailedPrecondition(what + " sends every contribution: no result");
  if (!g.failed.ok()) return g.failed;
  if (g.have < g.members)
    return Status::FailedPrecondition(what + ": a result before every member contributed");
  if (value.size() > kMaxGatherResultBytes)
    return Status::InvalidArgument(what + ": result too large");
  if (g.result && *g.result != value)
    return Status::InvalidArgument(what + ": a second, different result");
  g.result = value;
  Answer(g, answers);
  return Status::Ok();
}

std::vector<GatherAnswer> GatherTable::AbortBefore(uint64_t epoch) {
  std::vector<GatherAnswer> out;
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    if (it->second.epoch >= epoch) {
      ++it;
      continue;
    }
    for (const auto& [idx, w] : it->second.waiting) {
      out.push_back(Error(w.peer, Status::Aborted("gather '" + it->first + "': epoch " +
                                                  std::to_string(it->second.epoch) +
                                                  " ended (now " + std::to_string(epoch) + ")")));
    }
    it = gathers_.erase(it);
  }
  return out;
}

std::vector<GatherAnswer> GatherTable::Expire(SteadyClock::time_point now) {
  std::vector<GatherAnswer> out;
  for (auto& [key, g] : gathers_) {
    if (!g.next_deadline || *g.next_deadline > now) continue;
    g.next_deadline.reset();
    if (g.blamed) continue;
    for (auto w = g.waiting.begin(); w != g.waiting.end();) {
      if (w->second.deadline > now) {
        g.next_deadline =
            g.next_deadline ? std::min(*g.next_deadline, w->second.deadline) : w->second.deadline;
        ++w;
        continue;
      }
      const std::string why =
          g.have < g.members
              ? std::to_string(g.have) + " of " + std::to_string(g.members) + " members contributed"
              : "no result from its leader (rank 0)";
      out.push_back(
          Error(w->second.peer, Status::DeadlineExceeded("gather '" + key + "' of epoch " +
                                                         std::to_string(g.epoch) + ": " + why)));
      w = g.waiting.erase(w);
    }
  }
  return out;
}

std::vector<GatherTable::Overdue> GatherTable::FindOverdue(uint64_t epoch,
                                                           SteadyClock::time_point now) const {
  std::vector<Overdue> out;
  for (const auto& [key, g] : gathers_) {
    if (g.epoch != epoch || g.blamed || !g.failed.ok()) continue;
    if (!g.next_deadline || *g.next_deadline > now) continue;
    Overdue o;
    o.key = key;
    for (int32_t i = 0; i < g.members; ++i)
      if (!g.values[static_cast<size_t>(i)]) o.ranks.push_back(i);
    if (o.ranks.empty() && !g.all && !g.result) o.ranks.push_back(0);
    if (o.ranks.empty()) continue;
    o.why = "gather '" + key + "' of epoch " + std::to_string(g.epoch) + ": " +
            (g.have < g.members ? std::to_string(g.have) + " of " + std::to_string(g.members) +
                                      " members contributed"
                                : std::string("no result from its leader (rank 0)")) +
            " by the deadline of one who did";
    out.push_back(std::move(o));
  }
  return out;
}

void GatherTable::Blamed(const std::string& key) {
  auto it = gathers_.find(key);
  if (it != gathers_.end()) it->second.blamed = true;
}

std::vector<LogicalRank> GatherTable::Waiting(uint64_t epoch) const {
  std::vector<LogicalRank> out;
  for (const auto& [key, g] : gathers_) {
    if (g.epoch != epoch) continue;
    for (const auto& [index, w] : g.waiting) out.push_back(index);
  }
  return out;
}

std::optional<SteadyClock::time_point> GatherTable::NextDeadline() const {
  std::optional<SteadyClock::time_point> next;
  for (const auto& [key, g] : gathers_)
    if (g.next_deadline) next = next ? std::min(*next, *g.next_deadline) : *g.next_deadline;
  return next;
}

}  // namespace rtft::control
