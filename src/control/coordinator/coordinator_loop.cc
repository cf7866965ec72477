// The coordinator's event loop: its timer and the router's messages, handed to the role it plays
// now; what both roles share (rejections, the published membership, the agents' hellos and
// votes); and the swap of roles at a takeover or when the primary steps down.
#include <time.h>

#include <algorithm>

#include "control/coordinator/coordinator_impl.h"
#include "control/coordinator/primary.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

SteadyClock::time_point CoordinatorImpl::OnTimer(SteadyClock::time_point now) {
  replaced_.clear();  // no method of theirs is on the stack at the top of a callback
  const auto gap = std::chrono::duration_cast<milliseconds>(now - last_timer_);
  if (last_timer_ != SteadyClock::time_point{} && gap > 2 * tick_) Resumed(now, gap);
  last_timer_ = now;
  if (now >= next_tick_) {
    Tick(now);
    next_tick_ = now + tick_;
  }
  return role_ ? role_->Expire(now, next_tick_) : next_tick_;
}

void CoordinatorImpl::Resumed(SteadyClock::time_point now, milliseconds gap) {
  // This coordinator did not run: the silence it saw is its own. It judges no agent, standby or
  // primary by it: every liveness clock moves forward by the time the loop lost (past its tick),
  // so a slot is declared lost only for silence the coordinator was there to hear (two stalls of
  // 700 ms, the agent's and the coordinator's, made a 1.5 s timeout once). After half a timeout
  // or more it hears them again first (a primary replaced meanwhile learns so from its
  // standby's first answer, within a round trip).
  const bool afresh = gap > options_.heartbeat_timeout / 2;
  if (afresh)
    RTFT_LOG(kWarn, kLogCtrl) << "the coordinator's thread did not run for " << gap.count()
                              << " ms (stopped, or starved of CPU): liveness is judged afresh";
  const SteadyClock::duration lost =
      afresh ? SteadyClock::duration::max() : SteadyClock::duration(gap - tick_);
  for (CoordinatorSlot& s : state_.slots()) s.last_seen = MovedForward(s.last_seen, now, lost);
  if (role_) role_->Resumed(now, lost);
}

void CoordinatorImpl::Tick(SteadyClock::time_point now) {
  view_.SetThreadCpu(ThreadCpuSeconds());
  if (role_) role_->Tick(now);  // none: it stepped down, and decides nothing
}

void CoordinatorImpl::Dispatch(const std::string& peer, const Message& msg) {
  replaced_.clear();
  view_.CountMessage(msg.type);
  // Stepped down: its router is closed, and nothing more arrives.
  if (role_) role_->OnMessage(peer, msg);
}

void CoordinatorImpl::Reject(const std::string& why) {
  view_.CountRejectedMessage();
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed)) {
    RTFT_LOG(kWarn, kLogCtrl) << "rejected message: " << why
                              << (suppressed ? " (" + std::to_string(suppressed) +
                                                   " more rejections not logged)"
                                             : std::string());
  }
}

void CoordinatorImpl::OnRejected(const std::string& peer, const std::string& why) {
  const SlotId slot = state_.SlotOf(peer);
  Reject(why + (slot >= 0 ? " (from slot " + std::to_string(slot) + ")" : ""));
}

void CoordinatorImpl::Publish(const Membership& m) {
  auto ack = EncodeMessage(MsgType::kHeartbeatAck, json{{"epoch", m.epoch}}, gen_);
  if (ack.ok()) heartbeat_ack_ = std::move(*ack);
  RoleStats role;
  role.primary = role_ && role_->deciding();
  role.fenced = !role_;
  role.generation = gen_;
  role.standby_slot = role_ ? role_->standby_slot() : -1;
  role.synced = role_ && role_->synced();
  role.takeovers = takeovers_;
  view_.Publish(m, role);
}

void CoordinatorImpl::FinishJob(int code) {
  RTFT_LOG(kInfo, kLogCtrl) << "job over, exit code " << code;
  view_.EndJob(code);
}

SlotId CoordinatorImpl::CheckHello(const std::string& peer, const json& b) {
  const SlotId slot = b["slot"].get<SlotId>();
  const MembershipTable& table = state_.table();
  if (slot >= table.slots()) {
    Reject("hello from slot " + std::to_string(slot) + " of a " + std::to_string(table.slots()) +
           "-slot job");
    return -1;
  }
  if (!table.has_agent(slot)) {
    Reject("hello from slot " + std::to_string(slot) + ", which runs only the coordinator");
    return -1;
  }
  if (OnAnotherSlotsConnection("hello", slot, peer)) return -1;
  return slot;
}

bool CoordinatorImpl::OnAnotherSlotsConnection(const char* what, SlotId slot,
                                               const std::string& peer) {
  const SlotId known = state_.SlotOf(peer);
  if (known < 0 || known == slot) return false;
  Reject(std::string(what) + " for slot " + std::to_string(slot) + " on slot " +
         std::to_string(known) + "'s connection");
  return true;
}

void CoordinatorImpl::Greet(SlotId slot, const std::string& peer) {
  CoordinatorSlot& st = state_.slots()[slot];
  if (!st.peer.empty() && st.peer != peer)
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << slot << " said hello again from a new connection";
  state_.Connect(slot, peer);
  st.last_seen = SteadyClock::now();
}

SlotId CoordinatorImpl::AcceptVote(const std::string& peer, const Message& msg) {
  const SlotId slot = msg.body["slot"].get<SlotId>();
  if (slot >= state_.table().slots() || !state_.table().has_agent(slot)) {
    Reject("vote from slot " + std::to_string(slot));
    return -1;
  }
  if (OnAnotherSlotsConnection("vote", slot, peer)) return -1;
  if (state_.SlotOf(peer) < 0) state_.Connect(slot, peer);
  return slot;
}

void CoordinatorImpl::TakeOver(SteadyClock::time_point now, SlotId old, const std::string& why) {
  ++gen_;
  ++takeovers_;
  RTFT_LOG(kWarn, kLogCtrl) << "slot " << options_.self_slot << " takes over from slot " << old
                            << " (generation " << gen_ << "): " << why;
  for (CoordinatorSlot& s : state_.slots()) s.last_seen = now;
  auto primary = std::make_unique<PrimaryRole>(*this, now);
  PrimaryRole* p = primary.get();
  replaced_.push_back(std::move(role_));
  role_ = std::move(primary);
  p->TakeOver(old);
}

void CoordinatorImpl::StepDown(const Membership& last) {
  replaced_.push_back(std::move(role_));
  // Its agents stop hearing it at once and turn to the standby (or end).
  loop_->RemoveSocket(router_);
  Publish(last);
  view_.Fence();
}

}  // namespace rtft::control
