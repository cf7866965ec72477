// The agent of one slot (dp-launch after bootstrap): joins the coordinator, starts the
// application (a warm spare's waits in Runtime::Create until activated), supervises it (exit,
// watchdog, signals), reports failures and exits, and carries out the coordinator's decisions:
// restart on this slot, activate this spare, retire, shut down. Decisions are taken on Run()'s
// thread only; two listener threads (coordinator events, the application's link) and the
// child's reaper only queue what arrives and wake it, so nothing waits on a poll interval.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/agent/agent_client.h"
#include "control/link/local_link.h"
#include "core/thread.h"
#include "launcher/bootstrap.h"
#include "launcher/child_process.h"
#include "launcher/launch_options.h"

namespace rtft::launch {

// An application exit code that asks for a restart, like a crash (EX_TEMPFAIL). Any other
// non-zero code is the application's final word and ends the job with that code.
constexpr int kRestartExitCode = 75;

// SIGINT/SIGTERM/SIGHUP: forwarded at once to the current application, then the agent winds
// down. SIGUSR1/SIGUSR2 (which mpirun and Slurm's --signal deliver): forwarded only. Call once,
// before any thread starts.
void InstallAgentSignalHandlers();
// Internal, shared by agent.cc and agent_app.cc: the pid signals are forwarded to, and the
// first signal received (0: none).
void SetForwardedChild(pid_t pid);
int AgentPendingSignal();

struct AgentConfig {
  LaunchOptions options;
  LauncherKind launcher = LauncherKind::kNone;
  int slot = 0;
  int slots = 1;
  std::string host;
  std::vector<Peer> peers;
  std::string endpoint;
  control::JobKeys keys;
  // This slot's standby-capable coordinator (empty: none), and whether the job has a standby.
  std::string coordinator_endpoint;
  bool standby = false;
  // The slot's own CUDA device (-1: none) and its node's GPUs (0: none known), gpu_slot.h.
  int32_t device = -1;
  int32_t gpus = 0;
  // RLIMIT_NOFILE as dp-launch found it (it raised its own): what the application starts with.
  std::optional<rlimit> app_nofile;
};

class Agent {
 public:
  explicit Agent(AgentConfig config);
  ~Agent();
  // Until the job ends for this slot; returns dp-launch's exit code.
  int Run();
  // Run() ended because the job's coordinators stopped answering (slot 0's, and no standby
  // took over).
  bool coordinator_lost() const { return coordinator_lost_; }
  // After SIGINT/SIGTERM/SIGHUP: when this dp-launch must be gone (the signal, plus
  // --shutdown-grace-s, plus one second). Slot 0 bounds its wait for the job's end by it.
  std::optional<std::chrono::steady_clock::time_point> gone_by() const { return gone_by_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class AppState { kNone, kRunning, kAwaitingDecision, kFinished };

  // What the listener threads hand to Run()'s thread.
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<control::ControlEvent> events;
    std::deque<control::RuntimeReport> reports;
    std::deque<int32_t> attaches;  // pids, as the runtimes know themselves
    bool child_exited = false;
    bool answers = false;  // an answer to a get or a gather came (AgentClientOptions::on_answer)
    std::optional<Status> coordinator_lost;
    std::optional<Status> failed;  // a listener thread ended with an error
    bool expect_attach = false;
    bool stop = false;
  };
  struct App {
    std::unique_ptr<ChildProcess> child;
    bool attached = false;
    pid_t pid = -1;         // the attached runtime's pid, as this process sees it
    bool assigned = false;  // the runtime has its logical rank
    bool progress_seen = false;
    Clock::time_point last_progress;
    bool watchdog_killed = false;
  };
  // The slot's health check (agent_health.cc).
  struct Health {
    pid_t pid = -1;  // the checker running now
    int fd = -1;     // its output
    std::string output;
    Clock::time_point started{}, next{};  // next: a spare's first check is due at once
    int device = -1;                      // the device the last check was started for
    bool passive = false;                 // the running check is an active slot's (--passive)
    bool active = false;                  // the slot held a rank at the last look
    bool disabled = false;                // no checker, or the slot failed its check
  };
  // A get or a gather of the application, sent to the coordinator and not answered yet.
  struct Pending {
    std::string key;
    uint64_t handle;  // AgentClient::StartKvGet's or StartGather's
  };

  Status Join();
  Status OpenLink();
  Status MakeShmDir();
  void ListenCoordinator();
  void ListenLink();
  void WaitAndHandle();
  void HandleEvent(const control::ControlEvent& event);
  void HandleShutdown(const control::ControlEvent& event);
  void Demote(const std::string& why);
  // The coordinator declared the running application hung: killed and started again.
  void RestartHung(const std::string& why);
  // Ends the running application, if any, and starts the slot's next one (`what`: for the
  // error when it cannot start).
  void ReplaceApp(const std::string& what);
  void ScheduleFencing(const control::Membership& m);
  void Fence();
  // SIGKILLs `slot`'s dp-launch when it runs on this host (fencing).
  void KillPeer(int slot, const char* why);

  Status StartApp();
  ChildSpec AppSpec();
  void OnAttach(int32_t pid);
  void HandleReport(const control::RuntimeReport& report);
  // Forwards the answers that came to the application's gets and gathers.
  void PollKvGets();
  void StartKvGet(const control::RuntimeReport& r);
  void StartGather(const control::RuntimeReport& r);
  // Drops the application's gets and gathers: their answers would go to the next process.
  void ForgetRequests();
  void OnChildExit(const ChildExit& exit, bool ending = false);
  // The application is ending (ChildProcess::exiting) but its tree is not reaped yet: a crash is
  // reported now, the restart waits for the tree's end (StartApp).
  void OnChildExiting(const ChildExit& exit);
  void CheckWatchdog();
  // A planned swap's notice from the coordinator, to the running application (agent_app.cc).
  void ForwardPause();
  // agent_health.cc: the slot's health check, started, polled and ended on Run()'s thread.
  void CheckHealth();
  void StartHealthCheck(Clock::time_point now, bool passive);
  void PollHealthCheck(Clock::time_point now);
  void EndHealthCheck(const std::string& why);
  void HealthFailed(const std::string& why);
  void CheckSignalsAndDeadlines();
  void Finish(int code, const std::string& why);
  bool is_spare() const { return assignment_.rank == control::kNoRank; }

  AgentConfig config_;
  std::unique_ptr<control::AgentClient> client_;
  std::chrono::milliseconds coordinator_timeout_{0};  // the client's: slot 0 silent this long
  std::unique_ptr<control::LocalServer> link_;
  std::string link_dir_;
  std::string shm_dir_;  // RTFT_SHM_DIR of the application (empty: no /dev/shm here)
  Inbox inbox_;
  Thread coordinator_listener_, link_listener_;
  control::Assignment assignment_;
  App app_;
  AppState state_ = AppState::kNone;
  int starts_ = 0;
  control::LogicalRank rank_at_failure_ = control::kNoRank;
  bool shutting_down_ = false;
  bool signal_seen_ = false;
  std::optional<Clock::time_point> term_deadline_, kill_deadline_, gone_by_;
  std::vector<Pending> gets_;
  std::vector<Pending> gathers_;
  std::map<int, Clock::time_point> fence_at_;  // slot -> when to check it
  Health health_;
  bool done_ = false;
  bool coordinator_lost_ = false;
  int exit_code_ = 0;
};

}  // namespace rtft::launch
