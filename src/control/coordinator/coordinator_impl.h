// The coordinator's implementation, private to src/control/coordinator/. CoordinatorImpl owns the
// sockets, the event loop and what both roles share (the state, coordinator_state.h; the
// generation; what other threads see, coordinator_view.h), and holds the role it plays now: a
// PrimaryRole (primary.h: it decides, and keeps a standby through its Replicator) or a
// StandbyRole (standby.h: it holds a copy of the primary's state and may take over). The loop
// swaps the standby for a primary at takeover and drops the primary when it steps down (fenced:
// no role). Every method runs on the coordinator's event loop, except the public accessors.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/coordinator/coordinator.h"
#include "control/coordinator/coordinator_state.h"
#include "control/coordinator/coordinator_view.h"
#include "control/coordinator/zap.h"
#include "control/net/event_loop.h"
#include "control/net/zmq_util.h"
#include "control/wire/messages.h"

namespace rtft::control {

// Descriptors the coordinator's connection budget leaves to the rest of slot 0's process (the
// agent's own sockets, pipes and the application's restarts).
constexpr size_t kDescriptorReserve = 256;

// What the coordinator does, as primary or as standby; the loop calls it.
class CoordinatorRole {
 public:
  virtual ~CoordinatorRole() = default;
  // A message that arrived on the coordinator's router (counted already).
  virtual void OnMessage(const std::string& peer, const Message& msg) = 0;
  // The liveness scan, about every 1/20 of the heartbeat timeout.
  virtual void Tick(SteadyClock::time_point now) = 0;
  // After the tick, every round: what expired is answered; returns when the timer is wanted
  // next, at the latest `next`.
  virtual SteadyClock::time_point Expire(SteadyClock::time_point now,
                                         SteadyClock::time_point next) = 0;
  // After a gap in the loop: the silence it saw for `lost` is its own; every liveness clock moves
  // forward by that much, never past `now` (MovedForward).
  virtual void Resumed(SteadyClock::time_point now, SteadyClock::duration lost) = 0;
  // The stats' role fields.
  virtual bool deciding() const = 0;
  virtual SlotId standby_slot() const { return -1; }  // its standby in sync
  virtual bool synced() const { return false; }       // a standby's complete copy
};

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& o);
  ~CoordinatorImpl() override {
    if (loop_) loop_->Stop();
    loop_.reset();
  }

  Status Init();
  std::string endpoint() const override { return endpoint_; }
  Membership membership() const override { return view_.membership(); }
  int WaitJobEnd() override { return view_.WaitJobEnd(); }
  std::optional<int> WaitJobEndFor(std::chrono::milliseconds timeout) override {
    return view_.WaitJobEndFor(timeout);
  }
  CoordinatorStats stats() const override { return view_.stats(); }
  Status error() const override { return view_.error(); }
  bool is_primary() const override { return view_.primary(); }
  bool fenced() const override { return view_.fenced(); }

  // For the roles, on the loop's thread.
  const CoordinatorOptions& options() const { return options_; }
  CoordinatorState& state() { return state_; }
  EventLoop& loop() { return *loop_; }
  EventLoop::SocketId router() const { return router_; }
  zmq::context_t& context() { return ctx_; }
  // The primary's generation (for a standby: the one it follows); every message carries it.
  Generation gen() const { return gen_; }
  void set_gen(Generation gen) { gen_ = gen; }
  LogLimiter& log_limit() { return log_limit_; }
  CoordinatorView& view() { return view_; }
  // The heartbeat ack of the epoch last published, encoded once.
  const std::string& heartbeat_ack() const { return heartbeat_ack_; }
  // Whether `role` is the one the coordinator plays now (not replaced, not stepped down).
  bool plays(const CoordinatorRole* role) const { return role_.get() == role; }

  // A malformed or misdirected message: counted, logged (ten lines a second at most).
  void Reject(const std::string& why);
  // Whether `peer`'s connection belongs to another slot than `slot` (then rejected, naming
  // `what`: a hello or a vote).
  bool OnAnotherSlotsConnection(const char* what, SlotId slot, const std::string& peer);
  // membership(), the heartbeat ack and the stats' role fields.
  void Publish(const Membership& m);
  void FinishJob(int code);
  // The slot a hello names, checked against the job and the connection it came on; -1 when it
  // was rejected.
  SlotId CheckHello(const std::string& peer, const nlohmann::json& b);
  // The hello of `slot` arrived on `peer`'s connection: its agent is there now.
  void Greet(SlotId slot, const std::string& peer);
  // The slot a vote names, checked as a hello is, its connection recorded; -1 when rejected.
  SlotId AcceptVote(const std::string& peer, const Message& msg);
  // The standby takes over from the primary of slot `old`: a generation later, as primary.
  void TakeOver(SteadyClock::time_point now, SlotId old, const std::string& why);
  // The primary steps down (fenced): no role any more, its agents stop hearing it at once.
  void StepDown(const Membership& last);

 private:
  SteadyClock::time_point OnTimer(SteadyClock::time_point now);
  // After a gap in the loop (the process stopped, or starved of CPU): liveness clocks move forward
  // by the time it did not run, or restart after half a heartbeat timeout or more.
  void Resumed(SteadyClock::time_point now, std::chrono::milliseconds gap);
  void Tick(SteadyClock::time_point now);
  void Dispatch(const std::string& peer, const Message& msg);
  void OnRejected(const std::string& peer, const std::string& why);

  CoordinatorOptions options_;
  CoordinatorState state_;
  Generation gen_ = 1;
  std::string heartbeat_ack_;  // encoded once per epoch
  LogLimiter log_limit_;
  SteadyClock::time_point next_tick_{};
  SteadyClock::time_point last_timer_{};
  std::chrono::milliseconds tick_{100};
  uint64_t takeovers_ = 0;

  zmq::context_t ctx_;
  std::unique_ptr<ZapHandler> zap_;
  std::string endpoint_;
  CoordinatorView view_;

  // The role played now (none: stepped down), and those it replaced, kept until the loop's
  // callback that replaced them has returned (their methods may be on the stack).
  std::unique_ptr<CoordinatorRole> role_;
  std::vector<std::unique_ptr<CoordinatorRole>> replaced_;

  EventLoop::SocketId router_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread uses every member above
};

}  // namespace rtft::control
