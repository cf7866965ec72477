// The agent client's implementation, private to src/control/agent/: agent_client.cc (the calls
// of the agent's threads: join, requests, events) and agent_links.cc (the event loop's side: the
// links to the primary and the standby, heartbeats, votes, the switch to a standby that took
// over). State under mu_ is shared; the rest belongs to the loop's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "control/agent/agent_client.h"
#include "control/net/event_loop.h"
#include "control/wire/messages.h"

namespace rtft::control {

class AgentClientImpl final : public AgentClient {
 public:
  explicit AgentClientImpl(const AgentClientOptions& o);
  ~AgentClientImpl() override {
    if (loop_) loop_->Stop();
    loop_.reset();
  }

  Status Init();
  StatusOr<Assignment> Join(std::chrono::milliseconds timeout) override;
  Status ReportFailure(FailureKind kind, LogicalRank rank, int32_t detail) override;
  void SetProgress(uint64_t step) override { step_ = step; }
  std::optional<PauseNotice> TakePause() override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    std::optional<PauseNotice> p;
    std::swap(p, pause_);
    return p;
  }
  void SetPaused(std::optional<PauseNotice> paused) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    paused_ = paused;
  }
  void AddStepWork(uint64_t us) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    work_.us += us;
    ++work_.steps;
  }
  void SetCallProgress(std::optional<CallProgress> progress) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_ = progress;
    progress_at_ = SteadyClock::now();
  }
  Status ReportExit(int32_t code) override;
  StatusOr<std::optional<ControlEvent>> WaitEvent(std::chrono::milliseconds timeout) override;
  void SetDeadline(SteadyClock::time_point deadline) override;
  Status KvPut(const std::string& key, const std::string& value) override;
  StatusOr<std::string> KvGet(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<uint64_t> StartKvGet(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<StatusOr<std::string>> PollKvGet(uint64_t handle) override;
  StatusOr<uint64_t> StartGather(const GatherRequest& g) override;
  std::optional<StatusOr<GatherReply>> PollGather(uint64_t handle) override;
  void Forget(uint64_t handle) override;
  StatusOr<GatherReply> Gather(const GatherRequest& g) override;
  Status GatherResult(const std::string& key, uint64_t epoch, const std::string& value) override;
  SlotId primary_slot() const override { return primary_slot_seen_; }
  Generation generation() const override { return gen_seen_; }
  SteadyClock::time_point last_heartbeat_sent() const override {
    return SteadyClock::time_point(SteadyClock::duration(last_beat_.load()));
  }
  SteadyClock::duration longest_heartbeat_gap() const override {
    return SteadyClock::duration(longest_gap_.load());
  }

 private:
  // One connection to a coordinator (the primary, or the standby).
  struct Link {
    int tag = -1;  // tells the links apart in the loop's handler
    EventLoop::SocketId socket = -1;
    std::string endpoint;
    SlotId slot = -1;
  };
  struct Outgoing {
    MsgType type;
    nlohmann::json body;
  };

  // agent_client.cc
  void Post(MsgType type, const nlohmann::json& body);
  StatusOr<nlohmann::json> Request(uint64_t req, MsgType type, const nlohmann::json& body,
                                   std::chrono::milliseconds timeout);
  // A request answered later (a gather, a get): sent, its handle returned for PollAnswer, the
  // client's deadline `timeout` plus the request timeout.
  StatusOr<uint64_t> StartRequest(uint64_t req, MsgType type, const nlohmann::json& body,
                                  std::chrono::milliseconds timeout, const char* what);
  // nullopt while `handle`'s answer is not in; then the answer (or why there is none), once.
  std::optional<StatusOr<nlohmann::json>> PollAnswer(uint64_t handle, const char* what);

  // agent_links.cc (the loop's thread)
  StatusOr<Link> Connect(const std::string& endpoint, SlotId slot);
  void OnMessage(int tag, Message msg);
  void OnReject(const std::string& why);
  void Handle(Message msg);
  void OnEvent(const nlohmann::json& body);
  void OnEventDelta(const nlohmann::json& body);
  void Deliver(ControlEvent e);
  void OnCoordinators(const nlohmann::json& body);
  void SwitchToStandby(Generation gen);
  void ConnectStandby(const std::string& endpoint, SlotId slot);
  SteadyClock::time_point OnTimer(SteadyClock::time_point now);
  void Beat(SteadyClock::time_point now);
  void CheckPrimary(SteadyClock::time_point now);
  void SetLost(Status s);

  const AgentClientOptions options_;
  const std::chrono::milliseconds primary_timeout_;
  zmq::context_t ctx_;
  std::atomic<uint64_t> step_{0};
  std::atomic<SteadyClock::rep> last_beat_{0};    // last_heartbeat_sent()'s ticks
  std::atomic<SteadyClock::rep> longest_gap_{0};  // longest_heartbeat_gap()'s
  std::mutex progress_mu_;  // SetCallProgress's and AddStepWork's, read by Beat
  std::optional<CallProgress> progress_;
  SteadyClock::time_point progress_at_{};
  StepWork work_;                      // since the last heartbeat; progress_mu_'s
  std::optional<PauseNotice> pause_;   // from the coordinator, not taken yet; progress_mu_'s
  std::optional<PauseNotice> paused_;  // the application's; progress_mu_'s
  std::atomic<uint64_t> next_req_{1};
  std::atomic<SlotId> primary_slot_seen_{0};
  std::atomic<Generation> gen_seen_{0};

  // The loop's own state.
  Link primary_, standby_;
  int next_tag_ = 0;
  Generation gen_ = 0;
  bool suspect_ = false;  // lost the primary; voting for the standby
  LogLimiter log_limit_;
  SteadyClock::time_point next_beat_{}, last_heard_{}, last_ack_request_{}, next_vote_{};
  SteadyClock::time_point last_timer_{};
  uint64_t seq_ = 0;
  bool beating_ = false;
  std::optional<std::pair<uint64_t, int>> last_event_;  // epoch and type delivered last
  std::optional<Membership> have_;  // the newest membership received: the base of a delta

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Outgoing> outbox_;  // to the primary, from the agent's threads
  bool hello_sent_ = false;
  std::optional<Assignment> first_;
  std::deque<ControlEvent> events_;
  std::unordered_map<uint64_t, std::optional<nlohmann::json>> pending_;
  std::map<uint64_t, Outgoing> inflight_;  // unanswered requests: sent again after a takeover
  // StartRequest's handles (gathers, gets): their deadline.
  std::map<uint64_t, SteadyClock::time_point> started_;
  Status lost_;                                      // set once the coordinators are gone
  std::optional<SteadyClock::time_point> deadline_;  // SetDeadline
  std::unique_ptr<EventLoop> loop_;                  // last: its thread uses the members above
};

}  // namespace rtft::control
