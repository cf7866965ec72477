// The primary's side of primary-backup replication (docs/control-protocol.md "Standby
// coordinator"), owned by the PrimaryRole (primary.h): it appoints a standby in another slot,
// copies the state there, sends it every change and holds the change's output (acks, broadcasts,
// the job's end) until the standby has it, replaces a standby that is lost, and steps its primary
// down when it hears neither its standby nor half of the agents. Runs on the coordinator's
// event loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "control/coordinator/coordinator_state.h"
#include "control/net/event_loop.h"

namespace rtft::control {

class CoordinatorImpl;
class PrimaryRole;

class Replicator {
 public:
  // The primary's connection to its standby.
  struct StandbyLink {
    SlotId slot = -1;
    std::string endpoint;
    EventLoop::SocketId socket = -1;
    uint64_t sync_end_seq = 0;
    bool synced = false;
    SteadyClock::time_point last_heard{};
    SteadyClock::time_point next_ping{};
  };

  Replicator(CoordinatorImpl& c, PrimaryRole& primary) : c_(c), primary_(primary) {}

  // The change was made (CoordinatorState::Apply): it goes to the standby, and `out` runs once
  // the standby holds it. `ends_job`: the change ends the job (every live slot's application
  // has exited).
  void Commit(const ReplChange& c, std::function<void()> out, bool ends_job = false);
  // Appoints a standby when the job keeps one and has none.
  void AppointStandby();
  // Every tick: the standby pinged, replaced when lost, or this primary fenced when it is cut
  // off. False when the primary stepped down.
  bool Check(SteadyClock::time_point now);
  // After a gap in the loop: the standby is heard again first.
  void Resumed(SteadyClock::time_point now, SteadyClock::duration lost);
  // The primary steps down: nothing held goes out, and the standby is let go.
  void Stop();
  // The standby in sync (nullptr: none).
  const StandbyLink* synced() const { return link_ && link_->synced ? &*link_ : nullptr; }
  // When the standby is to be pinged next, if there is one.
  std::optional<SteadyClock::time_point> next_ping() const {
    return link_ ? std::optional<SteadyClock::time_point>(link_->next_ping) : std::nullopt;
  }

 private:
  // Outputs (acks, broadcasts, the job's end) of a change the standby does not hold yet.
  struct Held {
    uint64_t seq;
    std::function<void()> out;
    bool exit = false;  // an application's exit, as its agent reported it
  };

  bool Replicating() const;
  void Release();
  bool MajorityHeard(SteadyClock::time_point now) const;
  void DropStandby(const std::string& why);
  void OnStandbyMessage(const Message& msg);

  CoordinatorImpl& c_;
  PrimaryRole& primary_;
  std::optional<StandbyLink> link_;
  std::set<SlotId> bad_standbys_;  // appointed once and lost: not again
  uint64_t next_seq_ = 1;
  uint64_t acked_seq_ = 0;
  std::deque<Held> held_;
  std::optional<SteadyClock::time_point> alone_since_;  // standby silent, no majority heard
};

}  // namespace rtft::control
