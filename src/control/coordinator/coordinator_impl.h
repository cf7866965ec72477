// The coordinator's implementation, private to src/control/coordinator/: coordinator.cc
// (sockets, timers, decisions and their broadcast), coordinator_handlers.cc (the agents'
// messages), replication.cc (the primary: its standby, the commit of each change, stepping down)
// and standby.cc (the standby: the copy of the primary's state, votes, the takeover). Every
// method runs on the coordinator's event loop, except the public accessors (under mu_).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/coordinator/coordinator.h"
#include "control/coordinator/gather_table.h"
#include "control/coordinator/kv_store.h"
#include "control/coordinator/membership_table.h"
#include "control/coordinator/repl_ops.h"
#include "control/coordinator/zap.h"
#include "control/net/event_loop.h"
#include "control/net/zmq_util.h"
#include "control/wire/messages.h"

namespace rtft::control {

// Descriptors the coordinator's connection budget leaves to the rest of slot 0's process (the
// agent's own sockets, pipes and the application's restarts).
constexpr size_t kDescriptorReserve = 256;

// What the coordinator knows of one slot's agent.
struct CoordinatorSlot {
  bool joined = false;  // its hello reached the primary (replicated)
  std::string peer;     // routing id of the agent's connection to this coordinator
  std::string host;
  std::string endpoint;  // its standby-capable coordinator (replicated)
  SteadyClock::time_point last_seen{};
  SteadyClock::time_point last_retired_notice{};
  SteadyClock::time_point voted_at{};  // a standby: its last vote (it lost the primary)
  uint64_t step = 0;
  std::optional<uint64_t> applied_req;  // its last failure or exit request applied (replicated)
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
  Membership membership() const override;
  int WaitJobEnd() override;
  std::optional<int> WaitJobEndFor(std::chrono::milliseconds timeout) override;
  CoordinatorStats stats() const override;
  Status error() const override;
  bool is_primary() const override;
  bool fenced() const override;

 private:
  enum class Standing { kPrimary, kStandby, kFenced };
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
  // Outputs (acks, broadcasts, the job's end) of a change the standby does not hold yet.
  struct Held {
    uint64_t seq;
    std::function<void()> out;
    bool exit = false;  // an application's exit, as its agent reported it
  };

  // coordinator.cc
  SteadyClock::time_point OnTimer(SteadyClock::time_point now);
  // After a gap in the loop (the process stopped, or starved of CPU): liveness clocks restart.
  void Resumed(SteadyClock::time_point now, std::chrono::milliseconds gap);
  void Tick(SteadyClock::time_point now);
  void Apply(const Decision& d, bool broadcast);
  void StartJob(const std::string& why);
  void Broadcast(const ControlEvent& event);
  // membership(), the heartbeat ack and the stats' role fields.
  void Publish(const Membership& m);
  bool Send(const std::string& peer, MsgType type, const nlohmann::json& body);
  void FinishJob(int code);
  // The change, made here (the primary) or received (the standby): the same code for both.
  Decision ApplyChange(const ReplChange& c);

  // coordinator_handlers.cc
  void OnRejected(const std::string& peer, const std::string& why);
  void Reject(const std::string& why);
  void Dispatch(const std::string& peer, const Message& msg);
  void DispatchSlot(SlotId slot, const std::string& peer, const Message& msg);
  void OnHello(const std::string& peer, const nlohmann::json& b);
  void OnHeartbeat(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void OnRequest(SlotId slot, const std::string& peer, const Message& msg);
  void OnKvPut(const std::string& peer, const nlohmann::json& b);
  void OnKvGet(const std::string& peer, const nlohmann::json& b);
  // gathers.cc: the gathers, the whole membership for an agent that asks, the epoch's end.
  void OnGather(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void OnGatherResult(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void SendGatherAnswers(const std::vector<GatherAnswer>& answers);
  void EndGathersBefore(uint64_t epoch);
  LogicalRank CurrentRankOf(SlotId slot);
  void Ack(const std::string& peer, const nlohmann::json& b, const Status& status);
  void SendCurrent(SlotId slot);
  void SendCoordinators(SlotId slot);  // -1: every agent
  bool Partitioned(SlotId slot) const;
  void ReadPartition(SteadyClock::time_point now);

  // replication.cc
  bool Replicating() const;
  // `ends_job`: the change ends the job (every live slot's application has exited).
  void Commit(const ReplChange& c, std::function<void()> out, bool ends_job = false);
  void Release();
  bool MajorityHeard(SteadyClock::time_point now) const;
  void AppointStandby();
  void DropStandby(const std::string& why);
  void OnStandbyMessage(const Message& msg);
  void CheckStandby(SteadyClock::time_point now);
  void Fence(const std::string& why);

  // standby.cc
  void OnRepl(const std::string& peer, const Message& msg);
  void ResetCopy();
  void OnVote(const std::string& peer, const Message& msg);
  void CheckTakeOver(SteadyClock::time_point now);
  void TakeOver(SteadyClock::time_point now, int votes, int members);
  int LiveMembers(const Membership& m) const;

  CoordinatorOptions options_;
  MembershipTable table_;
  std::vector<CoordinatorSlot> slots_;
  std::unordered_map<std::string, SlotId> by_peer_;
  KvStore kv_;
  GatherTable gathers_;
  // The membership the agents were last sent as a broadcast: the base of the next event's delta.
  std::optional<Membership> sent_base_;
  std::vector<LogicalRank> rank_of_slot_;  // of current_, for CurrentRankOf
  uint64_t rank_of_slot_epoch_ = ~uint64_t{0};
  bool started_ = false;
  SteadyClock::time_point join_deadline_{};
  ControlEvent latest_;        // the newest event decided
  ControlEvent current_;       // the newest event released to the agents
  std::string heartbeat_ack_;  // encoded once per epoch
  LogLimiter log_limit_;
  SteadyClock::time_point next_tick_{};
  SteadyClock::time_point last_timer_{};
  std::chrono::milliseconds tick_{100};

  // Primary and standby.
  Standing role_ = Standing::kPrimary;
  Generation gen_ = 1;
  SlotId primary_slot_ = 0;
  std::vector<ReplChange> log_;  // the table's changes since the start
  // The primary.
  std::optional<StandbyLink> standby_;
  std::set<SlotId> bad_standbys_;  // appointed once and lost: not again
  uint64_t next_seq_ = 1;
  uint64_t acked_seq_ = 0;
  std::deque<Held> held_;
  std::optional<SteadyClock::time_point> alone_since_;  // standby silent, no majority heard
  std::set<SlotId> partitioned_;                        // the test hook's slots
  SteadyClock::time_point partition_read_{};
  // The standby.
  bool synced_ = false;
  std::string primary_peer_;
  SteadyClock::time_point primary_heard_{};
  uint64_t takeovers_ = 0;

  zmq::context_t ctx_;
  std::unique_ptr<ZapHandler> zap_;
  std::string endpoint_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership snapshot_;
  CoordinatorStats stats_;
  std::optional<int> job_code_;
  bool fenced_ = false;
  Status error_;  // what ended the thread

  EventLoop::SocketId router_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread uses every member above
};

}  // namespace rtft::control
