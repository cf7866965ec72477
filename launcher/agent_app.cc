// The application side of the agent: start, local link (attach, reports, KV), exit handling,
// watchdog, signals and shutdown deadlines, and the application replaced in place (a hang the
// coordinator found, a demotion to spare).
#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "core/logging.h"
#include "core/params.h"
#include "launcher/agent.h"
#include "launcher/job_end.h"

namespace rtft::launch {
namespace {

// Of the second a signalled shutdown may take beyond the grace, what is left once the agent has
// said its last word to the coordinator (slot 0 then waits for the job's end and lingers).
constexpr std::chrono::milliseconds kShutdownSlack{500};

const char* RoleEnvName(control::Role role) {
  switch (role) {
    case control::Role::kActive:
      return "initial";
    case control::Role::kSpare:
      return "spare";
    case control::Role::kActivated:
      return "activated";
    case control::Role::kRestarted:
      return "restarted";
    case control::Role::kRetired:
      return "retired";
    case control::Role::kCoordinator:
      return "coordinator";
  }
  return "?";
}

}  // namespace

ChildSpec Agent::AppSpec() {
  ChildSpec spec;
  spec.argv = config_.options.command;
  spec.isolation = config_.options.isolation;
  spec.app_nofile = config_.app_nofile;
  // A stopped agent is lost to the job once the coordinator's deadline for it passes (slot 0's,
  // without a standby, is the other agents' coordinator timeout; with one, the standby takes
  // over as fast as a spare takes a slot); its keeper then ends the tree and the agent. A job of
  // one slot has no one to replace it: job control in a terminal keeps working there.
  if (config_.launcher != LauncherKind::kNone)
    spec.stop_limit = config_.slot == 0 && !config_.standby ? coordinator_timeout_
                                                            : config_.options.heartbeat_timeout;

  auto env = [](Param p, std::string value) {
    return std::make_pair(std::string(GetParamInfo(p).env), std::move(value));
  };
  spec.env = {env(Param::kAgentSocket, link_->path()),
              env(Param::kRank, std::to_string(assignment_.rank)),
              env(Param::kWorldSize, std::to_string(assignment_.world_size)),
              env(Param::kEpoch, std::to_string(assignment_.epoch)),
              env(Param::kSlot, std::to_string(config_.slot)),
              env(Param::kRole, RoleEnvName(assignment_.role)),
              env(Param::kRestartCount, std::to_string(starts_))};
  if (!shm_dir_.empty()) spec.env.push_back(env(Param::kShmDir, shm_dir_));
  // The device travels with the rank (docs/launcher.md, "GPUs"): a spare, which may take any GPU
  // of its node, is told its device at activation (through the runtime), never here; the
  // device of a restarted application is its slot's.
  const std::string device = GetParamInfo(Param::kDevice).env;
  if (assignment_.device >= 0)
    spec.env.push_back({device, std::to_string(assignment_.device)});
  else if (config_.gpus > 0)
    spec.unset.push_back(device);
  // NCCL's reductions are bitwise reproducible with one algorithm and protocol only; NCCL reads
  // them once, at its first communicator, so they go in before exec (docs/comm.md,
  // "Deterministic results"). A value the user set is kept.
  spec.env_defaults = {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}};
  return spec;
}

Status Agent::StartApp() {
  if (app_.child && !app_.child->exited()) {
    // Reported while it was ending (OnChildExiting): the next process starts once the kernel
    // has released the last one's memory (a GPU context's, the pinned pages of its L1).
    const auto since = app_.child->exiting() ? app_.child->exiting()->at : Clock::now();
    app_ = App();  // ends and reaps the tree
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
    RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": the last application's tree "
                                << "ended " << waited.count() << " ms after it was seen ending";
  }
  ChildSpec spec = AppSpec();
  ++starts_;
  client_->SetCallProgress(std::nullopt);  // the last application's sample is not this one's
  {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.expect_attach = true;
    inbox_.child_exited = false;
  }
  App app;
  auto wake = [this] {
    std::lock_guard<std::mutex> lock(inbox_.mu);
    inbox_.child_exited = true;
    inbox_.cv.notify_all();
  };
  RTFT_ASSIGN_OR_RETURN(app.child, ChildProcess::Start(spec, wake));
  SetForwardedChild(app.child->pid());
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": started " << spec.argv[0]
                              << " (keeper pid " << app.child->pid() << ", "
                              << IsolationName(app.child->isolation()) << ") as "
                              << RoleEnvName(assignment_.role) << " rank " << assignment_.rank
                              << (assignment_.device >= 0
                                      ? " on device " + std::to_string(assignment_.device)
                                      : std::string());
  if (!app.child->proc_note().empty() && starts_ == 1)
    RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot << ": " << app.child->proc_note()
                                << ": the application sees the host's /proc, where "
                                   "/proc/<getpid()> is another process (use /proc/self)";
  app_ = std::move(app);
  state_ = AppState::kRunning;
  return Status::Ok();
}

void Agent::OnAttach(int32_t pid) {
  app_.attached = true;
  // The runtime attaches with getpid(), its pid in the application's namespace.
  const auto outer = app_.child->OuterPid(pid);
  app_.pid = outer.value_or(-1);
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": application attached: pid "
                              << app_.pid << " (" << pid << " in its namespace)";
  if (is_spare() || shutting_down_) return;  // a spare waits in standby for its activation
  Status s = link_->SendAssignment(assignment_);
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "sending the assignment: " << s;
  app_.assigned = true;
}

void Agent::HandleReport(const control::RuntimeReport& r) {
  using Type = control::RuntimeReport::Type;
  switch (r.type) {
    case Type::kProgress:
      app_.progress_seen = true;
      app_.last_progress = Clock::now();
      client_->SetProgress(r.step);
      if (r.work_us >= 0) client_->AddStepWork(static_cast<uint64_t>(r.work_us));
      break;
    case Type::kDeviceError: {
      RTFT_LOG(kError, kLogLaunch) << "slot " << config_.slot << ": device error: " << r.detail;
      Status s = client_->ReportFailure(control::FailureKind::kDeviceError, assignment_.rank, 0);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting a device error: " << s;
      break;
    }
    case Type::kSample:
      client_->SetCallProgress(r.progress);
      break;
    case Type::kCorrupt: {
      // Every rank recovers into the epoch this asks for; the corrupt copy is fed from a peer
      // (docs/protect.md, "Silent data corruption").
      RTFT_LOG(kError, kLogLaunch) << "slot " << config_.slot << ": rank " << assignment_.rank
                                   << " held a corrupt copy at step " << r.step;
      const int32_t step = static_cast<int32_t>(std::min<uint64_t>(r.step, INT32_MAX));
      Status s = client_->ReportFailure(control::FailureKind::kCorrupt, assignment_.rank, step);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting a corrupt copy: " << s;
      break;
    }
    case Type::kPaused:
      // Its heartbeats say so until the next event or a cancel (docs/protect.md, "Stragglers").
      client_->SetPaused(control::PauseNotice{r.epoch, r.step, false});
      break;
    case Type::kDetach:
      break;
    case Type::kKvPut: {
      Status s = client_->KvPut(r.key, r.value);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "KV put '" << r.key << "': " << s;
      break;
    }
    case Type::kKvGet:
      StartKvGet(r);
      break;
    case Type::kGather:
      StartGather(r);
      break;
    case Type::kGatherResult: {
      Status s = client_->GatherResult(r.key, r.epoch, r.value);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "gather result '" << r.key << "': " << s;
      break;
    }
  }
}

// A get goes to the coordinator at once, which answers when the key exists (or at the get's
// deadline); the answer wakes the loop (on_answer), which forwards it (PollKvGets).
void Agent::StartKvGet(const control::RuntimeReport& r) {
  auto handle = client_->StartKvGet(r.key, std::chrono::milliseconds(r.timeout_ms));
  if (handle.ok()) {
    gets_.push_back({r.key, *handle});
    return;
  }
  Status s = link_->SendKvReply(r.key, handle.status());
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "KV reply: " << s;
}

// A gather likewise.
void Agent::StartGather(const control::RuntimeReport& r) {
  control::GatherRequest g;
  g.key = r.key;
  g.epoch = r.epoch;
  g.members = r.members;
  g.index = r.index;
  g.value = r.value;
  g.all = r.all;
  g.timeout_ms = r.timeout_ms;
  auto handle = client_->StartGather(g);
  if (handle.ok()) {
    gathers_.push_back({r.key, *handle});
    return;
  }
  Status s = link_->SendGatherReply(r.key, handle.status());
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "gather reply: " << s;
}

void Agent::PollKvGets() {
  for (auto it = gets_.begin(); it != gets_.end();) {
    auto v = client_->PollKvGet(it->handle);
    if (!v) {
      ++it;
      continue;
    }
    if (state_ == AppState::kRunning) {
      Status s = link_->SendKvReply(it->key, *v);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "KV reply: " << s;
    }
    it = gets_.erase(it);
  }
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    auto reply = client_->PollGather(it->handle);
    if (!reply) {
      ++it;
      continue;
    }
    if (state_ == AppState::kRunning) {
      Status s = link_->SendGatherReply(it->key, *reply);
      if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "gather reply: " << s;
    }
    it = gathers_.erase(it);
  }
}

void Agent::ForgetRequests() {
  for (const auto& g : gets_) client_->Forget(g.handle);
  gets_.clear();
  for (const auto& g : gathers_) client_->Forget(g.handle);
  gathers_.clear();
}

void Agent::OnChildExiting(const ChildExit& exit) {
  // A spare's crash and an exit at shutdown are handled at the tree's end, as is a plain exit.
  const bool crashed = exit.signaled() || exit.code() == kRestartExitCode;
  if (shutting_down_ || is_spare() || (!crashed && !app_.watchdog_killed)) return;
  OnChildExit(exit, /*ending=*/true);
}

void Agent::OnChildExit(const ChildExit& exit, bool ending) {
  SetForwardedChild(0);
  ForgetRequests();
  const auto delay = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - exit.at);
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": application pid "
                              << app_.child->pid() << (ending ? " ending, " : " ")
                              << exit.ToString() << " (handled " << delay.count() << " us after "
                              << (ending ? "its descriptors closed" : "the reaper saw it") << ")";
  if (shutting_down_) {
    if (app_.assigned) (void)client_->ReportExit(exit.code());
    state_ = AppState::kFinished;
    return Finish(signal_seen_ ? exit.code() : exit_code_, "application ended at shutdown");
  }
  if (is_spare()) {
    // A spare's application is restarted at once; the coordinator counts the crash and may
    // retire the slot (the next event then says so).
    Status s =
        client_->ReportFailure(control::FailureKind::kProcessCrash, control::kNoRank, exit.code());
    if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting the spare's crash: " << s;
    s = StartApp();
    if (!s.ok()) Finish(kExitNoStart, s.ToString());
    return;
  }
  const bool crashed = exit.signaled() || exit.code() == kRestartExitCode;
  if (!app_.watchdog_killed && !crashed) {
    state_ = AppState::kFinished;  // wait for the job's end
    Status s = client_->ReportExit(exit.code());
    if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting the exit: " << s;
    return;
  }
  const auto kind =
      app_.watchdog_killed ? control::FailureKind::kHang : control::FailureKind::kProcessCrash;
  rank_at_failure_ = assignment_.rank;
  state_ = AppState::kAwaitingDecision;
  Status s = client_->ReportFailure(kind, assignment_.rank, exit.code());
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting the failure: " << s;
}

void Agent::CheckWatchdog() {
  const auto limit = config_.options.watchdog;
  if (limit.count() == 0 || state_ != AppState::kRunning || !app_.progress_seen ||
      app_.watchdog_killed || shutting_down_)
    return;
  if (Clock::now() - app_.last_progress < limit) return;
  RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot << ": no step progress for "
                              << limit.count() << " s: killing application pid "
                              << app_.child->pid();
  app_.watchdog_killed = true;
  app_.child->Kill();
}

void Agent::CheckSignalsAndDeadlines() {
  const auto now = Clock::now();
  if (!signal_seen_) {
    if (int sig = AgentPendingSignal()) {
      // The handler already forwarded it to the application.
      RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": signal " << sig;
      signal_seen_ = true;
      shutting_down_ = true;
      exit_code_ = 128 + sig;
      // Within the grace plus one second: the application is killed at the grace, and whatever
      // is said to the coordinator after that may not take more than half a second.
      gone_by_ = now + config_.options.shutdown_grace + std::chrono::seconds(1);
      client_->SetDeadline(*gone_by_ - kShutdownSlack);
      if (state_ != AppState::kRunning) return Finish(exit_code_, "signal");
      term_deadline_.reset();
      if (!app_.assigned)
        app_.child->Kill();
      else if (!kill_deadline_ || now + config_.options.shutdown_grace < *kill_deadline_)
        kill_deadline_ = now + config_.options.shutdown_grace;
    }
  }
  if (state_ != AppState::kRunning || !app_.child) return;
  if (term_deadline_ && now >= *term_deadline_) {
    term_deadline_.reset();
    app_.child->Signal(SIGTERM);
    kill_deadline_ = now + std::chrono::seconds(5);
  }
  if (kill_deadline_ && now >= *kill_deadline_) {
    kill_deadline_.reset();
    RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot
                                << ": application did not exit in time: SIGKILL";
    app_.child->Kill();
  }
}

// A shrink of a tensor x pipeline layout dropped this rank's data-parallel replica: the slot is
// a spare now (docs/protect.md, "3D layouts"). Its application holds state of a rank the job no
// longer has, so it ends, its snapshot with it, and a new one waits in standby, warm, for a rank.
void Agent::Demote(const std::string& why) {
  RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot
                              << ": its rank left the job, the slot joins the spare pool: " << why;
  app_ = App();  // kills and reaps the application
  if (!shm_dir_.empty()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(shm_dir_, ec))
      std::filesystem::remove_all(entry.path(), ec);
  }
  ReplaceApp("as a spare");
}

void Agent::RestartHung(const std::string& why) {
  RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot << ": the coordinator found application "
                              << "pid " << (app_.child ? app_.child->pid() : -1)
                              << " hung: killing it and starting it again (" << why << ")";
  ReplaceApp("after its hang");
}

void Agent::ReplaceApp(const std::string& what) {
  SetForwardedChild(0);
  ForgetRequests();
  Status s = StartApp();  // ends and reaps a running tree first
  if (!s.ok()) {
    RTFT_LOG(kError, kLogLaunch) << s;
    (void)client_->ReportExit(kExitNoStart);
    Finish(kExitNoStart, "cannot start the application again " + what);
  }
}

void Agent::ForwardPause() {
  const auto notice = client_->TakePause();
  if (!notice) return;
  if (notice->cancel) client_->SetPaused(std::nullopt);
  // Only an application that runs with its rank pauses: a spare has no step to stop at.
  if (state_ != AppState::kRunning || !app_.attached || !app_.assigned || is_spare()) return;
  Status s = link_->SendPause(*notice);
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "forwarding a pause to the application: " << s;
}

}  // namespace rtft::launch
