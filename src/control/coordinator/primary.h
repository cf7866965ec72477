// The coordinator as primary: it decides for the job. It answers the agents' messages
// (primary_handlers.cc: hellos, heartbeats, failures and exits, the key-value store, gathers),
// scans their liveness, releases each decision to the agents once its Replicator
// (replication.h) has it held by the standby, and steps down when it learns of a newer primary
// or is cut off (primary.cc). The first primary starts as one; a standby becomes one at takeover.
// Runs on the coordinator's event loop (coordinator_impl.h).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/coordinator/coordinator_impl.h"
#include "control/coordinator/gather_table.h"
#include "control/coordinator/hang_detector.h"
#include "control/coordinator/replication.h"
#include "control/coordinator/straggler_detector.h"

namespace rtft::control {

class PrimaryRole final : public CoordinatorRole {
 public:
  // `join_deadline`: slots that have not said hello by then are lost (the first primary's).
  PrimaryRole(CoordinatorImpl& c, SteadyClock::time_point join_deadline);

  // CoordinatorRole (primary.cc, and OnMessage in primary_handlers.cc).
  void OnMessage(const std::string& peer, const Message& msg) override;
  void Tick(SteadyClock::time_point now) override;
  SteadyClock::time_point Expire(SteadyClock::time_point now,
                                 SteadyClock::time_point next) override;
  void Resumed(SteadyClock::time_point now, SteadyClock::duration lost) override {
    replicator_.Resumed(now, lost);
  }
  bool deciding() const override { return true; }
  SlotId standby_slot() const override;

  // Right after a standby became this primary: the agents hear of it, and the old primary's
  // slot is declared lost.
  void TakeOver(SlotId old);

  // For the Replicator.
  // The newest event released to the agents.
  const ControlEvent& current() const { return current_; }
  // The test hook's partition: this primary neither hears nor answers the slot.
  bool Partitioned(SlotId slot) const { return partitioned_.count(slot) > 0; }
  // Where the coordinators are (to one slot's agent; -1: to every agent).
  void SendCoordinators(SlotId slot);
  // A newer primary took over, or this one is cut off: it steps down (the job's end here).
  void Fence(const std::string& why);

 private:
  // primary.cc: decisions and their output.
  void Apply(const Decision& d, bool broadcast);
  void StartJob(const std::string& why);
  void Broadcast(const ControlEvent& event);
  bool Send(const std::string& peer, MsgType type, const nlohmann::json& body);
  void SendCurrent(SlotId slot);
  void ReadPartition(SteadyClock::time_point now);
  // A rank its peers wait for past the hang detector's bound is failed as hung (kHang): its
  // agent kills and restarts it, or the slot is lost if the agent is gone too.
  // Returns whether it failed one.
  bool CheckHangs(SteadyClock::time_point now);
  // Fails `ranks` as hung (at most once per epoch, whoever found them); `why` goes to the log.
  bool DeclareHung(const std::vector<LogicalRank>& ranks, const std::string& why);
  // A rank whose own work per step is persistently slower than its peers' is swapped for a free
  // spare (through the lost-slot path: its slot is retired), or reported once when none is free.
  void CheckStragglers();
  // A planned swap (docs/protect.md, "Stragglers"): every rank is asked to pause at a step a
  // little ahead; once all say they stand there, the straggler's slot is retired and the spare
  // restores that very step (nothing runs again); past its deadline it is called off and the
  // slot retired at once (the lost-slot path, at most one step again).
  void PlanSwap(LogicalRank rank, SlotId slot, double median_step_ms);
  // Returns whether a swap is pending (the hang detector then waits: paused ranks wait for no
  // one).
  bool CheckPlannedSwap(SteadyClock::time_point now);
  void SendPause(const PauseNotice& notice);
  void RetireStraggler(SlotId slot);
  // A new epoch: the detectors forget what they saw.
  void ResetDetectors(SteadyClock::time_point now);

  // primary_handlers.cc: the agents' messages.
  void DispatchSlot(SlotId slot, const std::string& peer, const Message& msg);
  void OnHello(const std::string& peer, const nlohmann::json& b);
  void OnVote(const std::string& peer, const Message& msg);
  void OnHeartbeat(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void OnRequest(SlotId slot, const std::string& peer, const Message& msg);
  void OnKvPut(const std::string& peer, const nlohmann::json& b);
  void OnKvGet(const std::string& peer, const nlohmann::json& b);
  void Ack(const std::string& peer, const nlohmann::json& b, const Status& status);
  // The gathers (docs/control-protocol.md, "Gather").
  void OnGather(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void OnGatherResult(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void SendGatherAnswers(const std::vector<GatherAnswer>& answers);
  void EndGathersBefore(uint64_t epoch);
  LogicalRank CurrentRankOf(SlotId slot);

  CoordinatorImpl& c_;
  CoordinatorState& state_;
  Replicator replicator_;
  ControlEvent current_;  // the newest event released to the agents
  // The membership the agents were last sent as a broadcast: the base of the next event's delta.
  std::optional<Membership> sent_base_;
  SteadyClock::time_point join_deadline_;
  GatherTable gathers_;
  HangDetector hangs_;
  uint64_t hung_epoch_ = 0;  // the epoch whose hang was declared (one per epoch)
  StragglerDetector stragglers_;
  struct PlannedSwap {
    LogicalRank rank = kNoRank;
    SlotId slot = -1;
    uint64_t epoch = 0, step = 0;
    SteadyClock::time_point deadline{};
  };
  std::optional<PlannedSwap> swap_;
  std::vector<LogicalRank> rank_of_slot_;  // of current_, for CurrentRankOf
  uint64_t rank_of_slot_epoch_ = ~uint64_t{0};
  std::set<SlotId> partitioned_;  // the test hook's slots
  SteadyClock::time_point partition_read_{};
};

}  // namespace rtft::control
