#include "launcher/agent.h"

#include <signal.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/logging.h"
#include "core/thread.h"
#include "launcher/job_end.h"

namespace rtft::launch {
namespace {

std::atomic<pid_t> g_child_pid{0};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  int expected = 0;
  if (sig != SIGUSR1 && sig != SIGUSR2) g_signal.compare_exchange_strong(expected, sig);
  pid_t child = g_child_pid.load();
  if (child > 0) kill(child, sig);
}

// Longest sleep of Run()'s thread: the watchdog, deadlines and signals are checked this often.
constexpr std::chrono::milliseconds kTick{20};
// How long a listener blocks before it looks at the stop flag.
constexpr std::chrono::milliseconds kListen{100};

}  // namespace

void InstallAgentSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void SetForwardedChild(pid_t pid) { g_child_pid.store(pid); }
int AgentPendingSignal() { return g_signal.load(); }

Agent::Agent(AgentConfig config) : config_(std::move(config)) {}

Agent::~Agent() {
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.stop = true;
  }
  coordinator_listener_.Join();
  link_listener_.Join();
  EndHealthCheck("");
  // Its thread wakes the inbox (on_answer): it ends before the inbox does.
  client_.reset();
  SetForwardedChild(0);
  app_ = App();  // kills a child still running
  link_.reset();
  if (!link_dir_.empty()) rmdir(link_dir_.c_str());
  if (!shm_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(shm_dir_, ec);
  }
}

// The slot's memory directory, /dev/shm/rtft-<agent pid>-slot<S>: its application keeps its L1
// snapshot and L2 replica there (docs/protect.md), so they outlive the application; this agent
// removes it when it ends. Directories of agents that died without cleaning up (SIGKILL) are
// removed first: their pid names them, and a pid that is gone owns nothing.
Status Agent::MakeShmDir() {
  const std::filesystem::path root = "/dev/shm";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return Status::Ok();  // no tmpfs: no L1 files
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0, slot = 0;
    char tail = 0;
    if (std::sscanf(name.c_str(), "rtft-%d-slot%d%c", &pid, &slot, &tail) != 2 || pid <= 0)
      continue;
    struct stat st {};
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
      continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove_all(entry.path(), ec);
  }
  const std::string dir =
      "/dev/shm/rtft-" + std::to_string(getpid()) + "-slot" + std::to_string(config_.slot);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "creating the slot's memory directory " + dir);
  shm_dir_ = dir;
  return Status::Ok();
}

Status Agent::Join() {
  control::AgentClientOptions o;
  o.endpoint = config_.endpoint;
  o.keys = config_.keys;
  o.me = {
      config_.slot,   config_.host, static_cast<int32_t>(getpid()), config_.coordinator_endpoint,
      config_.device, config_.gpus};
  o.heartbeat_period = config_.options.heartbeat;
  // With a standby, an agent votes for it once the primary is silent as long as a slot may be.
  if (config_.standby) o.primary_timeout = config_.options.heartbeat_timeout;
  // RTFT_CTRL_COORDINATOR_TIMEOUT_MS, but never shorter than the slots' own timeout.
  o.coordinator_timeout = std::max(o.coordinator_timeout, config_.options.heartbeat_timeout);
  // The answers to the application's gets and gathers wake the loop (PollKvGets) at once.
  o.on_answer = [this] {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.answers = true;
    inbox_.cv.notify_all();
  };
  coordinator_timeout_ = o.coordinator_timeout;
  auto client = control::AgentClient::Connect(o);
  if (!client.ok()) return client.status().Annotate("connecting to the coordinator " + o.endpoint);
  client_ = std::move(*client);
  // The coordinator decides at its join deadline (started before this slot could even connect)
  // who is in, and answers then: wait one heartbeat timeout longer, so that its answer, not a
  // race between two equal deadlines, ends the wait.
  auto a = client_->Join(std::chrono::duration_cast<std::chrono::milliseconds>(
      config_.options.join_timeout + config_.options.heartbeat_timeout));
  if (!a.ok())
    return a.status().Annotate("slot " + std::to_string(config_.slot) +
                               " could not join the job (the coordinator refuses, without an " +
                               "answer, an agent whose job key differs from slot 0's: check " +
                               "--job-key-file)");
  assignment_ = *a;
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot
                              << " joined: " << control::RoleName(assignment_.role) << " rank "
                              << assignment_.rank << " epoch " << assignment_.epoch
                              << (assignment_.device >= 0
                                      ? " device " + std::to_string(assignment_.device)
                                      : std::string());
  return Status::Ok();
}

Status Agent::OpenLink() {
  RTFT_RETURN_IF_ERROR(MakeShmDir());
  RTFT_ASSIGN_OR_RETURN(link_dir_, control::MakeLocalLinkDir());
  RTFT_ASSIGN_OR_RETURN(link_, control::LocalServer::Bind(link_dir_ + "/link"));
  // A listener that fails (an exception, the link's own thread gone) ends the slot with its
  // error instead of the process (core/thread.h).
  auto guarded = [this](const char* name, const char* what, void (Agent::*listen)()) {
    return Thread::Start(name, [this, what, listen] {
      Status s = RunGuarded(what, [this, listen] { (this->*listen)(); });
      if (s.ok()) return;
      std::lock_guard<std::mutex> lock(inbox_.mu);
      if (!inbox_.failed) inbox_.failed = s;
      inbox_.cv.notify_all();
    });
  };
  RTFT_ASSIGN_OR_RETURN(
      coordinator_listener_,
      guarded("rtft-agent-coord", "the agent's coordinator listener", &Agent::ListenCoordinator));
  RTFT_ASSIGN_OR_RETURN(
      link_listener_,
      guarded("rtft-agent-link", "the agent's application listener", &Agent::ListenLink));
  return Status::Ok();
}

void Agent::ListenCoordinator() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(inbox_.mu);
      if (inbox_.stop) return;
    }
    auto ev = client_->WaitEvent(kListen);
    std::lock_guard<std::mutex> lock(inbox_.mu);
    if (!ev.ok()) {
      inbox_.coordinator_lost = ev.status();
      inbox_.cv.notify_all();
      return;
    }
    if (!ev->has_value()) continue;
    inbox_.events.push_back(std::move(**ev));
    inbox_.cv.notify_all();
  }
}

void Agent::ListenLink() {
  while (true) {
    bool expect_attach;
    {
      std::lock_guard<std::mutex> lock(inbox_.mu);
      if (inbox_.stop) return;
      expect_attach = inbox_.expect_attach;
    }
    if (expect_attach) {
      // Reports come only after the attach, so waiting for the attach alone loses nothing.
      auto pid = link_->WaitAttach(std::chrono::milliseconds(10));
      if (!pid.ok() && pid.status().code() != StatusCode::kDeadlineExceeded)
        throw std::runtime_error(pid.status().ToString());
      if (!pid.ok()) continue;
      std::lock_guard<std::mutex> lock(inbox_.mu);
      inbox_.attaches.push_back(*pid);
      inbox_.expect_attach = false;
      inbox_.cv.notify_all();
      continue;
    }
    auto report = link_->PollReport(kListen);
    if (!report.ok()) throw std::runtime_error(report.status().ToString());
    if (!report->has_value()) continue;
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.reports.push_back(std::move(**report));
    inbox_.cv.notify_all();
  }
}

int Agent::Run() {
  Status s = Join();
  // An agent that cannot reach slot 0 is, as far as it can tell, a job without slot 0.
  coordinator_lost_ = !s.ok();
  if (s.ok()) s = OpenLink();
  if (!s.ok()) {
    RTFT_LOG(kError, kLogLaunch) << s;
    return kExitJobFailed;
  }
  if (assignment_.role == control::Role::kRetired) return 0;
  s = StartApp();
  if (!s.ok()) {
    RTFT_LOG(kError, kLogLaunch) << s;
    (void)client_->ReportExit(kExitNoStart);
    return kExitNoStart;
  }
  while (!done_) WaitAndHandle();
  // A retired slot still here (a frozen node's processes, stopped) would hold the launcher once
  // the job is over: fence it now rather than after the delay it was given to go by itself.
  for (auto& [slot, at] : fence_at_) {
    if (at == Clock::time_point::max()) continue;
    at = Clock::time_point::max();
    if (slot != client_->primary_slot()) KillPeer(slot, "was retired");
  }
  return exit_code_;
}

void Agent::WaitAndHandle() {
  std::deque<control::ControlEvent> events;
  std::deque<control::RuntimeReport> reports;
  std::deque<int32_t> attaches;
  std::optional<Status> lost, failed;
  {
    std::unique_lock<std::mutex> lock(inbox_.mu);
    inbox_.cv.wait_for(lock, kTick, [&] {
      return !inbox_.events.empty() || !inbox_.reports.empty() || !inbox_.attaches.empty() ||
             inbox_.child_exited || inbox_.answers || inbox_.coordinator_lost || inbox_.failed;
    });
    inbox_.answers = false;
    failed = inbox_.failed;
    events.swap(inbox_.events);
    reports.swap(inbox_.reports);
    attaches.swap(inbox_.attaches);
    inbox_.child_exited = false;
    lost = inbox_.coordinator_lost;
  }
  if (!attaches.empty() && state_ == AppState::kRunning) OnAttach(attaches.back());
  for (const auto& r : reports)
    if (state_ == AppState::kRunning) HandleReport(r);
  // The child's exit first: an event that answers its failure report may already be queued.
  if (state_ == AppState::kRunning && app_.child) {
    if (auto exit = app_.child->exited())
      OnChildExit(*exit);
    else if (auto ending = app_.child->exiting())
      OnChildExiting(*ending);
  }
  for (const auto& e : events) {
    if (done_) break;
    HandleEvent(e);
  }
  if (failed && !done_) {
    // The agent can no longer hear its application or the coordinator: the slot is lost to
    // the job (the coordinator notices its silence and hands the rank to a spare).
    if (app_.child) app_.child->Kill();
    return Finish(kExitJobFailed, failed->ToString());
  }
  if (lost && !done_) {
    coordinator_lost_ = true;
    if (app_.child) app_.child->Kill();
    // A primary that is stopped or hung would hold the launcher forever (its keeper ends a
    // stopped one too; this also covers one that runs but no longer answers).
    KillPeer(client_->primary_slot(), "stopped answering");
    return Finish(1, "lost the coordinators: " + lost->ToString());
  }
  CheckWatchdog();
  CheckHealth();
  ForwardPause();
  PollKvGets();
  CheckSignalsAndDeadlines();
  Fence();
}

void Agent::HandleEvent(const control::ControlEvent& event) {
  client_->SetPaused(std::nullopt);  // a pause ends with the next epoch
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": epoch " << event.membership.epoch
                              << (event.type == control::ControlEvent::Type::kShutdown
                                      ? " shutdown: "
                                      : " change: ")
                              << event.reason;
  ScheduleFencing(event.membership);
  if (event.type == control::ControlEvent::Type::kShutdown) return HandleShutdown(event);
  const bool was_spare = is_spare();
  const control::LogicalRank had = assignment_.rank;
  assignment_ = event.assignment;
  if (assignment_.role == control::Role::kRetired) {
    if (app_.child) app_.child->Kill();
    return Finish(0, "slot retired: " + event.reason);
  }
  // A rank that left (its replica did): the slot is a spare now, whether its application runs or
  // crashed and waits for this answer.
  if (!was_spare && is_spare() &&
      (state_ == AppState::kRunning || state_ == AppState::kAwaitingDecision))
    return Demote(event.reason);
  if (state_ == AppState::kAwaitingDecision) {
    // Our failure report is answered by the event that lists our rank.
    const auto& f = event.failed_ranks;
    if (std::find(f.begin(), f.end(), rank_at_failure_) == f.end()) return;
    Status s = StartApp();
    if (!s.ok()) {
      RTFT_LOG(kError, kLogLaunch) << s;
      (void)client_->ReportExit(kExitNoStart);
      Finish(kExitNoStart, "cannot restart the application");
    }
    return;
  }
  // The coordinator found this running application hung (docs/protect.md, "Hangs"): its rank
  // is among the failed and the slot keeps it, so the application is killed and started again.
  const auto& failed = event.failed_ranks;
  if (state_ == AppState::kRunning && !was_spare && had != control::kNoRank &&
      assignment_.rank == had && std::find(failed.begin(), failed.end(), had) != failed.end())
    return RestartHung(event.reason);
  if (state_ != AppState::kRunning || !app_.attached) return;
  if (was_spare && !is_spare()) {
    // This spare was activated: release its runtime from standby.
    Status s = link_->SendAssignment(assignment_);
    if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "activating the spare's application: " << s;
    app_.assigned = true;
    return;
  }
  if (app_.assigned) {
    Status s = link_->SendEvent(event);
    if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "forwarding an event to the application: " << s;
  }
}

void Agent::HandleShutdown(const control::ControlEvent& event) {
  shutting_down_ = true;
  exit_code_ = event.exit_code;
  if (state_ != AppState::kRunning || !app_.child) return Finish(event.exit_code, event.reason);
  if (!app_.assigned) {
    app_.child->Kill();  // a spare in standby has nothing to finish
    return;
  }
  Status s = app_.attached ? link_->SendEvent(event) : Status::Ok();
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "forwarding the shutdown: " << s;
  const auto now = Clock::now();
  // A deadline already running (a signal came first) is never pushed back.
  auto at_most = [](std::optional<Clock::time_point>& deadline, Clock::time_point at) {
    if (!deadline || at < *deadline) deadline = at;
  };
  if (event.checkpoint_first) {
    // The application checkpoints and exits by itself; SIGTERM only after the grace period.
    if (!kill_deadline_) at_most(term_deadline_, now + config_.options.shutdown_grace);
  } else {
    app_.child->Signal(SIGTERM);
    at_most(kill_deadline_, now + config_.options.shutdown_grace);
  }
}

void Agent::Finish(int code, const std::string& why) {
  if (done_) return;
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << " done (exit " << code << "): " << why;
  done_ = true;
  exit_code_ = code;
}

}  // namespace rtft::launch
