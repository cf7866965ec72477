// The primary's decisions and their output: the liveness scan, the job's start, the events it
// broadcasts and the job's end; a takeover's first steps; stepping down. Each change is made on
// the state (CoordinatorState::Apply) and committed (replication.cc) before its output goes out.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "control/coordinator/primary.h"
#include "control/wire/delta.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

// How far ahead a planned swap's step is, in time, and the margin past it that its deadline
// allows.
constexpr double kSwapLookAheadMs = 500;
constexpr milliseconds kSwapMargin{3000};

}  // namespace

PrimaryRole::PrimaryRole(CoordinatorImpl& c, SteadyClock::time_point join_deadline)
    : c_(c),
      state_(c.state()),
      replicator_(c, *this),
      current_(c.state().latest()),
      join_deadline_(join_deadline),
      hangs_(c.options().hang),
      stragglers_(c.options().straggler) {
  ResetDetectors(SteadyClock::now());
}

void PrimaryRole::ResetDetectors(SteadyClock::time_point now) {
  hangs_.Reset(current_.membership.world_size, now);
  stragglers_.Reset(current_.membership.world_size, c_.options().grid_tensor,
                    c_.options().grid_pipeline);
}

SlotId PrimaryRole::standby_slot() const {
  const Replicator::StandbyLink* link = replicator_.synced();
  return link ? link->slot : -1;
}

void PrimaryRole::Tick(SteadyClock::time_point now) {
  const MembershipTable& table = state_.table();
  auto& slots = state_.slots();
  ReadPartition(now);
  if (!state_.started()) {
    if (now < join_deadline_) return;
    ReplChange missing(ReplOp::kFail);
    for (SlotId s = 0; s < table.slots(); ++s) {
      if (!slots[s].joined && table.has_agent(s))
        missing.failures.push_back({s, FailureKind::kSlotLost, 0});
    }
    RTFT_LOG(kWarn, kLogCtrl) << missing.failures.size() << " slot(s) did not join within "
                              << c_.options().join_timeout.count() << " ms; treating them as lost";
    const Decision d = state_.Apply(missing);
    replicator_.Commit(missing, [this, d] { Apply(d, false); });
    return StartJob("join timeout");
  }
  if (!replicator_.Check(now) || table.over()) return;
  ReplChange lost(ReplOp::kFail);
  for (SlotId s = 0; s < table.slots(); ++s) {
    if (table.retired(s) || !slots[s].joined) continue;
    if (now - slots[s].last_seen > c_.options().heartbeat_timeout) {
      RTFT_LOG(kWarn, kLogCtrl)
          << "slot " << s << " (" << slots[s].host << "): no heartbeat for "
          << std::chrono::duration_cast<milliseconds>(now - slots[s].last_seen).count() << " ms";
      lost.failures.push_back({s, FailureKind::kSlotLost, 0});
    }
  }
  if (lost.failures.empty()) {
    if (!CheckPlannedSwap(now) && !CheckHangs(now)) CheckStragglers();
    return;
  }
  const Decision d = state_.Apply(lost);
  replicator_.Commit(lost, [this, d] { Apply(d, true); });
}

bool PrimaryRole::CheckHangs(SteadyClock::time_point now) {
  if (state_.table().draining()) return false;  // a checkpoint-and-exit's writes are no step
  const auto verdict = hangs_.Check(now, gathers_.Waiting(current_.membership.epoch));
  return verdict && DeclareHung(verdict->ranks, verdict->why);
}

bool PrimaryRole::DeclareHung(const std::vector<LogicalRank>& ranks, const std::string& why) {
  const MembershipTable& table = state_.table();
  const Membership& m = current_.membership;
  // One verdict per epoch, from the detector or a gather: the next epoch's comes after.
  if (hung_epoch_ == m.epoch) return false;
  ReplChange hung(ReplOp::kFail);
  std::string where;
  for (LogicalRank r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= m.rank_to_slot.size()) continue;
    const SlotId s = m.rank_to_slot[r];
    if (s < 0 || s >= table.slots()) continue;
    hung.failures.push_back({s, FailureKind::kHang, 0});
    where += (where.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on slot " +
             std::to_string(s) + " (" + state_.slots()[s].host + ")";
  }
  if (hung.failures.empty()) return false;
  hung_epoch_ = m.epoch;
  RTFT_LOG(kWarn, kLogCtrl) << "hang: " << where << ": " << why;
  const Decision d = state_.Apply(hung);
  replicator_.Commit(hung, [this, d] { Apply(d, true); });
  return true;
}

void PrimaryRole::CheckStragglers() {
  const MembershipTable& table = state_.table();
  if (table.draining()) return;
  const auto verdict = stragglers_.Check();
  if (!verdict) return;
  const Membership& m = current_.membership;
  const LogicalRank r = verdict->rank;
  if (r < 0 || static_cast<size_t>(r) >= m.rank_to_slot.size()) return;
  const SlotId s = m.rank_to_slot[r];
  if (s < 0 || s >= table.slots()) return;
  const std::string who = "rank " + std::to_string(r) + " on slot " + std::to_string(s) + " (" +
                          state_.slots()[s].host + ")";
  if (m.spares.empty()) {
    RTFT_LOG(kWarn, kLogCtrl) << "straggler: " << who << ": " << verdict->why
                              << "; no spare is free: reported only";
    return;
  }
  const std::optional<double> median = hangs_.MedianStepMs();
  if (median && *median > 0) {
    RTFT_LOG(kWarn, kLogCtrl) << "straggler: " << who << ": " << verdict->why
                              << "; a planned swap: a spare takes the rank at a step boundary";
    return PlanSwap(r, s, *median);
  }
  RTFT_LOG(kWarn, kLogCtrl) << "straggler: " << who << ": " << verdict->why
                            << "; its slot is retired and a spare takes the rank";
  RetireStraggler(s);
}

void PrimaryRole::RetireStraggler(SlotId slot) {
  ReplChange slow(ReplOp::kFail);
  slow.failures = {{slot, FailureKind::kStraggler, 0}};
  const Decision d = state_.Apply(slow);
  replicator_.Commit(slow, [this, d] { Apply(d, true); });
}

void PrimaryRole::PlanSwap(LogicalRank rank, SlotId slot, double median_step_ms) {
  const Membership& m = current_.membership;
  uint64_t newest = 0;
  for (SlotId s : m.rank_to_slot) {
    if (s >= 0 && s < state_.table().slots()) newest = std::max(newest, state_.slots()[s].step);
  }
  // Far enough ahead that no rank has begun it when the notice arrives: the heartbeats' lag
  // (their step is a period old) and the notice's way through the agent, about half a second.
  const auto ahead = static_cast<uint64_t>(
      std::clamp(std::ceil(kSwapLookAheadMs / median_step_ms) + 2.0, 3.0, 1e6));
  PlannedSwap p;
  p.rank = rank;
  p.slot = slot;
  p.epoch = m.epoch;
  p.step = newest + ahead;
  // The steps until then and a margin: a rank that missed the notice never pauses.
  p.deadline = SteadyClock::now() +
               std::chrono::milliseconds(static_cast<int64_t>(ahead * median_step_ms * 2)) +
               kSwapMargin;
  swap_ = p;
  RTFT_LOG(kInfo, kLogCtrl) << "planned swap of rank " << rank << ": every rank pauses at step "
                            << p.step << " of epoch " << p.epoch;
  SendPause(PauseNotice{p.epoch, p.step, false});
}

void PrimaryRole::SendPause(const PauseNotice& notice) {
  const Membership& m = current_.membership;
  for (SlotId s : m.rank_to_slot) {
    if (s < 0 || s >= state_.table().slots()) continue;
    const CoordinatorSlot& st = state_.slots()[s];
    if (st.joined && !st.peer.empty()) Send(st.peer, MsgType::kPause, PauseBody(notice));
  }
}

bool PrimaryRole::CheckPlannedSwap(SteadyClock::time_point now) {
  if (!swap_) return false;
  const Membership& m = current_.membership;
  if (m.epoch != swap_->epoch || state_.table().draining()) {
    swap_.reset();  // another failure came first: its recovery is the swap's end
    return false;
  }
  size_t paused = 0;
  for (SlotId s : m.rank_to_slot) {
    if (s < 0 || s >= state_.table().slots()) continue;
    const auto& at = state_.slots()[s].paused;
    if (at && at->epoch == swap_->epoch && at->step == swap_->step) ++paused;
  }
  if (paused == m.rank_to_slot.size()) {
    RTFT_LOG(kWarn, kLogCtrl) << "planned swap: every rank paused at step " << swap_->step
                              << "; slot " << swap_->slot << " is retired, a spare takes rank "
                              << swap_->rank << " from that step";
    const SlotId slot = swap_->slot;
    swap_.reset();
    RetireStraggler(slot);
    return true;
  }
  if (now < swap_->deadline) return true;
  RTFT_LOG(kWarn, kLogCtrl) << "planned swap at step " << swap_->step << ": " << paused << " of "
                            << m.rank_to_slot.size() << " ranks paused in time; called off, slot "
                            << swap_->slot << " retired at once (the lost-slot path)";
  SendPause(PauseNotice{swap_->epoch, swap_->step, true});
  const SlotId slot = swap_->slot;
  swap_.reset();
  RetireStraggler(slot);
  return true;
}

SteadyClock::time_point PrimaryRole::Expire(SteadyClock::time_point now,
                                            SteadyClock::time_point next) {
  KvStore& kv = state_.kv();
  for (const auto& w : kv.Expire(now)) {
    Send(w.peer, MsgType::kKvValue,
         KvValueBody(w.req, Status::DeadlineExceeded("KV key '" + w.key + "' not put in time")));
  }
  // A member waited past its own deadline on ranks that never came (a rank hung in the call it
  // was in when the epoch ended never joins the recovery): they are failed as hung, and the
  // others' answer is the new epoch, not an error that would end them.
  if (hangs_.enabled() && !state_.table().draining()) {
    for (const auto& o : gathers_.FindOverdue(current_.membership.epoch, now)) {
      std::string why = o.why + " (rank(s)";
      for (LogicalRank r : o.ranks) why += " " + std::to_string(r);
      // A hang already declared in this epoch (its change being committed) moves it too.
      if (DeclareHung(o.ranks, why + " absent)") || hung_epoch_ == current_.membership.epoch)
        gathers_.Blamed(o.key);
    }
  }
  SendGatherAnswers(gathers_.Expire(now));
  if (auto d = kv.NextDeadline()) next = std::min(next, *d);
  if (auto d = gathers_.NextDeadline()) next = std::min(next, *d);
  if (auto d = replicator_.next_ping()) next = std::min(next, *d);
  return next;
}

void PrimaryRole::TakeOver(SlotId old) {
  current_ = state_.latest();
  ResetDetectors(SteadyClock::now());
  c_.Publish(current_.membership);
  // The newest change decided: some agents may not have heard of it from the old primary.
  Broadcast(current_);
  SendCoordinators(-1);
  ReplChange lost(ReplOp::kFail);
  lost.failures = {{old, FailureKind::kSlotLost, 0}};
  const Decision d = state_.Apply(lost);
  replicator_.Commit(lost, [this, d] { Apply(d, true); });
  replicator_.AppointStandby();
}

void PrimaryRole::Apply(const Decision& d, bool broadcast) {
  if (d.event) {
    // membership() shows the new epoch before any agent can hear of it.
    c_.Publish(d.event->membership);
    const auto declared = SteadyClock::now();
    RTFT_LOG(kWarn, kLogCtrl) << "epoch " << d.event->membership.epoch << ": "
                              << (d.event->type == ControlEvent::Type::kShutdown ? "shutdown: "
                                                                                 : "")
                              << d.event->reason;
    current_ = *d.event;
    ResetDetectors(declared);
    // The gathers of the epochs before are over: their members start again in this one.
    EndGathersBefore(current_.membership.epoch);
    if (broadcast) Broadcast(*d.event);
    c_.view().EpochSent(d.event->membership.epoch, declared);
  }
  if (d.job_exit_code) c_.FinishJob(*d.job_exit_code);
}

void PrimaryRole::StartJob(const std::string& why) {
  const ReplChange start(ReplOp::kStart);
  state_.Apply(start);
  replicator_.Commit(start, [this, why] {
    current_ = state_.latest();
    ResetDetectors(SteadyClock::now());
    RTFT_LOG(kInfo, kLogCtrl) << "job starts (" << why << "), epoch " << current_.membership.epoch;
    Broadcast(current_);
    replicator_.AppointStandby();
  });
}

void PrimaryRole::Broadcast(const ControlEvent& event) {
  // What changed since the broadcast before (docs/control-protocol.md, "Event deltas"); the
  // first event, and the first after a takeover, carry the whole membership.
  auto bytes =
      sent_base_ ? EncodeMessage(MsgType::kEventDelta, EventDeltaBody(event, *sent_base_), c_.gen())
                 : EncodeMessage(MsgType::kEvent, EventBody(event), c_.gen());
  sent_base_ = event.membership;
  if (!bytes.ok()) {
    RTFT_LOG(kError, kLogCtrl) << "cannot encode the epoch " << event.membership.epoch
                               << " event: " << bytes.status();
    return;
  }
  // One buffer, shared by reference count among all the sends (only CURVE copies it).
  zmq::message_t shared(bytes->data(), bytes->size());
  zmq::socket_t& router = c_.loop().socket(c_.router());
  const auto& slots = state_.slots();
  for (SlotId slot = 0; slot < state_.table().slots(); ++slot) {
    const CoordinatorSlot& s = slots[slot];
    if (!s.joined || s.peer.empty() || Partitioned(slot)) continue;
    zmq::message_t m;
    m.copy(shared);
    try {
      if (router.send(zmq::buffer(s.peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        (void)router.send(m, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      RTFT_LOG(kDebug, kLogCtrl) << "event to a departed agent: " << e.what();
    }
  }
}

bool PrimaryRole::Send(const std::string& peer, MsgType type, const nlohmann::json& body) {
  const SlotId slot = state_.SlotOf(peer);
  if (slot >= 0 && Partitioned(slot)) return false;
  return c_.loop().SendNow(c_.router(), peer, type, body, c_.gen());
}

void PrimaryRole::SendCurrent(SlotId slot) {
  ControlEvent e = current_;
  if (RoleOfSlot(current_.membership, slot) == Role::kRetired) {
    e.type = ControlEvent::Type::kShutdown;
    e.reason = "slot " + std::to_string(slot) + " was retired";
  }
  Send(state_.slots()[slot].peer, MsgType::kEvent, EventBody(e));
}

void PrimaryRole::SendCoordinators(SlotId slot) {
  const CoordinatorOptions& options = c_.options();
  if (!options.replicate) return;
  const Replicator::StandbyLink* synced = replicator_.synced();
  const nlohmann::json body = CoordinatorsBody(options.self_slot, synced ? synced->slot : -1,
                                               synced ? synced->endpoint : "");
  const auto& slots = state_.slots();
  const SlotId slot_count = state_.table().slots();
  for (SlotId s = slot < 0 ? 0 : slot; s < (slot < 0 ? slot_count : slot + 1); ++s) {
    if (!slots[s].peer.empty()) Send(slots[s].peer, MsgType::kCoordinators, body);
  }
}

void PrimaryRole::ReadPartition(SteadyClock::time_point now) {
  const std::string& file = c_.options().partition_file;
  if (file.empty() || now - partition_read_ < milliseconds(100)) return;
  partition_read_ = now;
  std::set<SlotId> slots;
  // A regular file only, and its first 4 KiB: a FIFO or a directory there is no partition.
  std::string text;
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) text.assign(buf, static_cast<size_t>(n));
  }
  if (fd >= 0) ::close(fd);
  for (char& ch : text)
    if (ch == ',') ch = ' ';
  std::istringstream words(text);
  for (SlotId s; words >> s;)
    if (s >= 0 && s < state_.table().slots()) slots.insert(s);
  if (slots == partitioned_) return;
  std::string list;
  for (SlotId s : slots) list += (list.empty() ? "" : ",") + std::to_string(s);
  RTFT_LOG(kWarn, kLogCtrl) << "test partition: dropping the traffic of slot(s) "
                            << (list.empty() ? "none" : list);
  partitioned_ = std::move(slots);
}

void PrimaryRole::Fence(const std::string& why) {
  if (!c_.plays(this)) return;
  RTFT_LOG(kError, kLogCtrl) << "coordinator of slot " << c_.options().self_slot << " (generation "
                             << c_.gen() << ") steps down: " << why;
  replicator_.Stop();
  c_.StepDown(current_.membership);
}

}  // namespace rtft::control
