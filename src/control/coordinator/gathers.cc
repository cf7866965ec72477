// The coordinator's gathers (docs/control-protocol.md, "Gather"): contributions checked against
// the current epoch (its world size, the sender's rank), the answers sent, and every gather of
// an epoch that ended aborted, so that a recovery interrupted by a failure starts over in the
// next epoch instead of waiting for a member that is gone.
#include "control/coordinator/coordinator_impl.h"
#include "core/logging.h"

namespace rtft::control {

using json = nlohmann::json;

LogicalRank CoordinatorImpl::CurrentRankOf(SlotId slot) {
  const Membership& m = current_.membership;
  if (rank_of_slot_epoch_ != m.epoch || rank_of_slot_.size() != m.slot_roles.size()) {
    rank_of_slot_.assign(m.slot_roles.size(), kNoRank);
    for (size_t r = 0; r < m.rank_to_slot.size(); ++r) {
      const SlotId s = m.rank_to_slot[r];
      if (s >= 0 && static_cast<size_t>(s) < rank_of_slot_.size())
        rank_of_slot_[s] = static_cast<LogicalRank>(r);
    }
    rank_of_slot_epoch_ = m.epoch;
  }
  if (slot < 0 || static_cast<size_t>(slot) >= rank_of_slot_.size()) return kNoRank;
  return rank_of_slot_[slot];
}

void CoordinatorImpl::OnGather(SlotId slot, const std::string& peer, const json& b) {
  const GatherRequest g = GatherFrom(b);
  const GatherPeer from{peer, b["req"].get<uint64_t>()};
  SendGatherAnswers(gathers_.Contribute(from, g, current_.membership.epoch,
                                        current_.membership.world_size, CurrentRankOf(slot),
                                        SteadyClock::now()));
}

void CoordinatorImpl::OnGatherResult(SlotId slot, const std::string& peer, const json& b) {
  std::vector<GatherAnswer> answers;
  const Status s = gathers_.Result(b["key"].get<std::string>(), b["epoch"].get<uint64_t>(),
                                   current_.membership.epoch, CurrentRankOf(slot),
                                   BytesFrom(b["value"]), &answers);
  Ack(peer, b, s);
  SendGatherAnswers(answers);
}

void CoordinatorImpl::SendGatherAnswers(const std::vector<GatherAnswer>& answers) {
  for (const GatherAnswer& a : answers) {
    if (!Send(a.to.peer, MsgType::kGatherValue,
              GatherValueBody(a.to.req, a.status, a.values.get(), a.result)))
      RTFT_LOG(kDebug, kLogCtrl) << "a gather answer to a departed agent";
  }
}

void CoordinatorImpl::EndGathersBefore(uint64_t epoch) {
  SendGatherAnswers(gathers_.AbortBefore(epoch));
}

}  // namespace rtft::control
