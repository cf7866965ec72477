// The coordinator as standby (docs/control-protocol.md "Standby coordinator"): it applies the
// primary's changes to its copy of the state and acknowledges each, learns where each agent's
// connection is, records the agents' votes (they lost the primary), and takes over when it too
// lost the primary and a majority of the live agents voted. It decides nothing and answers no
// agent. Runs on the coordinator's event loop (coordinator_impl.h), which swaps it for a
// PrimaryRole at takeover.
#pragma once

#include <string>
#include <vector>

#include "control/coordinator/coordinator_impl.h"

namespace rtft::control {

class StandbyRole final : public CoordinatorRole {
 public:
  explicit StandbyRole(CoordinatorImpl& c);

  // CoordinatorRole.
  void OnMessage(const std::string& peer, const Message& msg) override;
  // Takes over when it may.
  void Tick(SteadyClock::time_point now) override;
  SteadyClock::time_point Expire(SteadyClock::time_point, SteadyClock::time_point next) override {
    return next;  // it answers no agent: nothing waits for it
  }
  void Resumed(SteadyClock::time_point now, SteadyClock::duration lost) override;
  bool deciding() const override { return false; }
  bool synced() const override { return synced_; }

 private:
  void OnRepl(const std::string& peer, const Message& msg);
  void OnHello(const std::string& peer, const nlohmann::json& b);
  void TakeOver(SteadyClock::time_point now, int votes, int members);
  int LiveMembers(const Membership& m) const;

  CoordinatorImpl& c_;
  CoordinatorState& state_;
  bool synced_ = false;  // holds a complete copy of the primary's state
  SlotId primary_slot_ = -1;
  std::string primary_peer_;
  SteadyClock::time_point primary_heard_{};
  std::vector<SteadyClock::time_point> voted_at_;  // by slot: its agent's last vote
};

}  // namespace rtft::control
