// The coordinator's open gathers (docs/control-protocol.md, "Gather"): the contributions of one
// epoch's members under one key, the answers they are owed, and the end of every gather whose
// epoch is over. No I/O: the coordinator sends the answers this returns. Everything in a
// contribution came from the network: sizes, indices and counts are checked before anything is
// stored, and the bytes held are bounded by what one answer can carry.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/net/zmq_util.h"
#include "control/wire/gather.h"

namespace rtft::control {

struct GatherPeer {
  std::string peer;  // routing id
  uint64_t req = 0;
};

// One answer: an error, every contribution (shared among the answers of an `all` gather), or
// the leader's result.
struct GatherAnswer {
  GatherPeer to;
  Status status;
  std::shared_ptr<const std::vector<std::string>> values;
  std::optional<std::string> result;
};

class GatherTable {
 public:
  // At most this many gathers open at once (each epoch's recovery opens one or two).
  static constexpr size_t kMaxOpen = 16;
  // An `all` gather sends every contribution to every member: O(N^2) bytes, so small worlds only.
  static constexpr int32_t kMaxAllMembers = 256;

  // A member's contribution. `epoch` and `world` are the coordinator's current epoch and world
  // size; `rank` the logical rank of the sender's slot in it. Returns the answers now due.
  std::vector<GatherAnswer> Contribute(const GatherPeer& from, const GatherRequest& g,
                                       uint64_t epoch, int32_t world, LogicalRank rank,
                                       SteadyClock::time_point now);
  // The leader's result (the sender holds `rank`): the status to ack it with, and the answers
  // of the members waiting for it.
  Status Result(const std::string& key, uint64_t gather_epoch, uint64_t epoch, LogicalRank rank,
                const std::string& value, std::vector<GatherAnswer>* answers);
  // Every gather of an epoch before `epoch` ends: its waiting members get kAborted.
  std::vector<GatherAnswer> AbortBefore(uint64_t epoch);
  // Members whose own deadline passed get kDeadlineExceeded (their contribution stays), but
  // those of a gather whose absent ranks were blamed (Blamed): the epoch's end answers them.
  std::vector<GatherAnswer> Expire(SteadyClock::time_point now);
  // A gather of `epoch` that some member waited on past its own deadline: the ranks it waits
  // for (those that never contributed, or its leader, rank 0, when every member did and no
  // result came), with what was seen, for the log. The coordinator fails them as hung; a
  // gather whose ranks it failed is then Blamed and not named again.
  struct Overdue {
    std::string key;
    std::vector<LogicalRank> ranks;
    std::string why;
  };
  std::vector<Overdue> FindOverdue(uint64_t epoch, SteadyClock::time_point now) const;
  void Blamed(const std::string& key);
  // The ranks waiting in a gather of `epoch` (contributed, owed an answer): the hang detector
  // takes them for ranks that wait on the others.
  std::vector<LogicalRank> Waiting(uint64_t epoch) const;
  std::optional<SteadyClock::time_point> NextDeadline() const;
  size_t open() const { return gathers_.size(); }

 private:
  struct Waiter {
    GatherPeer peer;
    SteadyClock::time_point deadline;
  };
  struct Gather {
    uint64_t epoch = 0;
    int32_t members = 0;
    bool all = false;
    std::vector<std::optional<std::string>> values;  // by member index
    int32_t have = 0;
    size_t bytes = 0;                   // the leader's answer, framed
    std::map<int32_t, Waiter> waiting;  // members owed an answer
    std::optional<std::string> result;
    Status failed;        // it cannot complete (too large): every member is told so
    bool blamed = false;  // its absent ranks were failed: the epoch's end answers its waiters
    std::optional<SteadyClock::time_point> next_deadline;  // no later than the earliest waiter's
  };
  // Answers the waiting members that can be answered now.
  static void Answer(Gather& g, std::vector<GatherAnswer>* out);

  std::map<std::string, Gather> gathers_;
};

}  // namespace rtft::control
