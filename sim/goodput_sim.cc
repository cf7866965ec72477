#include "sim/goodput_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "sim/goodput_random.h"

namespace rtft::bench::goodput {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Failure {
  double t = kInf;
  bool crash = false;
  int node = 0;
};

// Failures of the active nodes: Poisson in wall time, whatever the job is doing.
class FailureStream {
 public:
  FailureStream(const SimParams& p, uint64_t seed)
      : rng_(seed),
        mean_gap_s_(p.failures_per_node_h > 0 ? 3600.0 / (p.failures_per_node_h * p.nodes) : kInf),
        transient_(p.transient_fraction),
        nodes_(p.nodes) {}
  Failure Next() {
    Failure f;
    if (mean_gap_s_ == kInf) return f;
    t_ += rng_.Exponential(mean_gap_s_);
    f.t = t_;
    f.crash = rng_.Uniform() < transient_;
    f.node = rng_.Below(nodes_);
    return f;
  }

 private:
  Rng rng_;
  double mean_gap_s_, transient_;
  int nodes_;
  double t_ = 0;
};

enum class Ev { kFailure, kResume, kCkptDue, kCkptEnd, kCommit, kRepair, kDone };

struct Event {
  double t;
  uint64_t seq;  // ties in time keep the order of scheduling
  Ev type;
  uint64_t epoch;  // the event is void once its epoch has moved on
  double value;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// One job under one policy. Work advances at `rate_` while running; a checkpoint holds the job
// for the blocking time and commits after the write; a failure stops it, rolls the work back
// and keeps it down for the policy's cost. Epochs void the events a change of state outdates:
// run_epoch_ (the running segment's next checkpoint and its end), fail_epoch_ (blocking ends,
// commits in flight, the resume), repair_epoch_ (repairs of nodes a relaunch left behind).
class JobSim {
 public:
  JobSim(const SimParams& p, Policy policy, uint64_t seed)
      : p_(p),
        policy_(policy),
        failures_(p, seed),
        repair_rng_(seed ^ 0x7265706169727321ull),
        rate_(policy == Policy::kRtft ? 1.0 / (1.0 + p.protect_overhead) : 1.0),
        interval_(policy == Policy::kRtft ? p.rtft_l3_interval_s : p.restart_interval_s),
        next_ckpt_(interval_),
        spares_free_(p.spares) {}
  JobResult Run();

 private:
  enum class Mode { kRunning, kBlocked, kDown };
  void Push(Ev type, double t, uint64_t epoch, double value = 0) {
    queue_.push(Event{t, seq_++, type, epoch, value});
  }
  bool Stale(const Event& e) const;
  void Dispatch(const Event& e);
  void StartRunning();
  void OnCkptDue();
  void SkipQuietCycles();
  void OnFailure();
  double RestartCost(const Failure& f, bool was_down);
  double RtftCost(const Failure& f);
  double RtftNodeLoss(const Failure& f);
  void RollBackTo(double work);
  void Relaunched();
  bool BothHoldersLost(int node);
  double Progress() const {
    return mode_ == Mode::kRunning ? run_start_work_ + (t_ - run_start_t_) * rate_ : work_;
  }
  double StepStart(double work) const { return std::floor(work / p_.step_s + 1e-9) * p_.step_s; }

  struct Window {
    int node;
    double end;
  };
  const SimParams& p_;
  const Policy policy_;
  FailureStream failures_;
  Rng repair_rng_;
  const double rate_, interval_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t seq_ = 0, run_epoch_ = 0, fail_epoch_ = 0, repair_epoch_ = 0;
  Mode mode_ = Mode::kDown;
  double t_ = 0, work_ = 0, run_start_t_ = 0, run_start_work_ = 0;
  double committed_ = 0, next_ckpt_, down_until_ = 0;
  int spares_free_;
  Failure next_failure_;
  std::vector<Window> windows_;  // swaps whose replicas are still being rebuilt
  bool done_ = false;
  JobResult r_;
};

JobResult JobSim::Run() {
  const double checkpoints = std::ceil(p_.work_s / interval_);
  const double give_up_s =
      p_.give_up_factor * (p_.work_s / rate_ + checkpoints * p_.ckpt_blocking_s + 1.0);
  next_failure_ = failures_.Next();
  if (next_failure_.t < kInf) Push(Ev::kFailure, next_failure_.t, 0);
  StartRunning();
  while (!done_ && !queue_.empty()) {
    const Event e = queue_.top();
    if (e.t > give_up_s) break;
    queue_.pop();
    if (Stale(e)) continue;
    t_ = e.t;
    Dispatch(e);
  }
  r_.finished = done_;
  r_.work_done_s = done_ ? p_.work_s : Progress();
  r_.wall_s = done_ ? t_ : give_up_s;
  return r_;
}

bool JobSim::Stale(const Event& e) const {
  switch (e.type) {
    case Ev::kCkptDue:
    case Ev::kDone:
      return e.epoch != run_epoch_;
    case Ev::kCkptEnd:
    case Ev::kCommit:
    case Ev::kResume:
      return e.epoch != fail_epoch_;
    case Ev::kRepair:
      return e.epoch != repair_epoch_;
    case Ev::kFailure:
      return false;
  }
  return true;
}

void JobSim::Dispatch(const Event& e) {
  switch (e.type) {
    case Ev::kFailure:
      return OnFailure();
    case Ev::kResume:
      return StartRunning();
    case Ev::kCkptDue:
      return OnCkptDue();
    case Ev::kCkptEnd:
      next_ckpt_ = work_ + interval_;
      return StartRunning();
    case Ev::kCommit:
      committed_ = std::max(committed_, e.value);
      ++r_.checkpoints;
      return;
    case Ev::kRepair:
      spares_free_ = std::min(p_.spares, spares_free_ + 1);
      return;
    case Ev::kDone:
      done_ = true;
      return;
  }
}

void JobSim::StartRunning() {
  mode_ = Mode::kRunning;
  run_start_t_ = t_;
  run_start_work_ = work_;
  ++run_epoch_;
  Push(Ev::kDone, t_ + (p_.work_s - work_) / rate_, run_epoch_);
  if (next_ckpt_ < p_.work_s) Push(Ev::kCkptDue, t_ + (next_ckpt_ - work_) / rate_, run_epoch_);
}

// Checkpoint cycles (blocking, commit, running to the next one) between failures are alike:
// those that end before the next pending event are counted in one go instead of simulated.
void JobSim::SkipQuietCycles() {
  const double next_event = queue_.empty() ? kInf : queue_.top().t;
  const double period = p_.ckpt_blocking_s + interval_ / rate_;
  double k = std::floor((next_event - t_) / period);
  k = std::min(k, std::floor((next_event - t_ - p_.ckpt_blocking_s - p_.ckpt_write_s) / period));
  k = std::min(k, std::ceil((p_.work_s - next_ckpt_) / interval_) - 1);  // stay before the end
  if (!(k >= 1)) return;
  t_ += k * period;
  committed_ = std::max(committed_, next_ckpt_ + (k - 1) * interval_);
  next_ckpt_ += k * interval_;
  r_.checkpoints += static_cast<int>(k);
}

void JobSim::OnCkptDue() {
  SkipQuietCycles();
  work_ = next_ckpt_;
  mode_ = Mode::kBlocked;
  ++run_epoch_;
  Push(Ev::kCkptEnd, t_ + p_.ckpt_blocking_s, fail_epoch_);
  Push(Ev::kCommit, t_ + p_.ckpt_blocking_s + p_.ckpt_write_s, fail_epoch_, work_);
}

void JobSim::OnFailure() {
  const Failure f = next_failure_;
  next_failure_ = failures_.Next();
  if (next_failure_.t < kInf) Push(Ev::kFailure, next_failure_.t, 0);
  ++r_.failures;
  ++(f.crash ? r_.crashes : r_.node_losses);
  const bool was_down = mode_ == Mode::kDown;
  work_ = Progress();
  mode_ = Mode::kDown;
  ++run_epoch_;
  ++fail_epoch_;  // a snapshot being written is lost with the job's state
  const double cost = policy_ == Policy::kRestart ? RestartCost(f, was_down) : RtftCost(f);
  // A failure during a recovery starts the recovery over from that failure if it ends later.
  down_until_ = was_down ? std::max(down_until_, t_ + cost) : t_ + cost;
  Push(Ev::kResume, down_until_, fail_epoch_);
}

// Every failure ends a plain job; it is started again from its newest committed checkpoint.
// During a restart nothing waits in a collective: the relaunch is retried at once.
double JobSim::RestartCost(const Failure& f, bool was_down) {
  RollBackTo(committed_);
  const double detect = was_down  ? 0.0
                        : f.crash ? p_.restart_detect_crash_s
                                  : p_.restart_detect_node_s;
  return detect + p_.relaunch_s + p_.startup_s + p_.ckpt_load_s;
}

// A failure during a recovery finds the work at a step start already.
double JobSim::RtftCost(const Failure& f) {
  if (!f.crash) return RtftNodeLoss(f);
  // The agent restarts the process on its slot; L1 and L2 live in the agent's memory.
  RollBackTo(StepStart(work_));
  return p_.rtft_detect_crash_s + p_.rtft_recover_crash_s;
}

double JobSim::RtftNodeLoss(const Failure& f) {
  const bool lost_both = BothHoldersLost(f.node);
  if (lost_both) ++r_.both_holders_lost;
  RollBackTo(lost_both ? committed_ : StepStart(work_));
  if (spares_free_ == 0) {
    // Checkpoint-and-exit: the survivors write a version (the lost ranks' part from their
    // replicas) and the job is relaunched; with both holders lost there is nothing to write.
    ++r_.spares_exhausted;
    double cost = p_.rtft_detect_node_s + p_.relaunch_s + p_.startup_s + p_.ckpt_load_s;
    if (!lost_both) {
      cost += p_.ckpt_write_s;
      committed_ = work_;
      next_ckpt_ = work_ + interval_;
    }
    Relaunched();
    return cost;
  }
  --spares_free_;
  ++r_.spare_swaps;
  Push(Ev::kRepair, t_ + repair_rng_.Exponential(p_.repair_h * 3600.0), repair_epoch_);
  const double cost =
      p_.rtft_detect_node_s + p_.rtft_recover_node_s + (lost_both ? p_.ckpt_load_s : 0.0);
  windows_.push_back(Window{f.node, t_ + cost + p_.replica_rebuild_s});
  return cost;
}

void JobSim::RollBackTo(double work) {
  work_ = std::min(work_, work);
  // The next checkpoint follows the newest committed one; a snapshot lost in flight is taken
  // again as soon as the job runs.
  next_ckpt_ = std::max(work_, std::min(next_ckpt_, committed_ + interval_));
}

// A relaunch brings a full set of spares from the cluster (as checkpoint-restart's relaunch
// brings its replacement node); the nodes in repair are no longer the job's.
void JobSim::Relaunched() {
  spares_free_ = p_.spares;
  ++repair_epoch_;
  windows_.clear();
}

// A ring neighbour of a node swapped less than replica_rebuild_s ago: it held the only other
// copy of a shard (the swapped node's replica, or the replica the spare has not rebuilt yet).
bool JobSim::BothHoldersLost(int node) {
  windows_.erase(std::remove_if(windows_.begin(), windows_.end(),
                                [&](const Window& w) { return w.end <= t_; }),
                 windows_.end());
  for (const Window& w : windows_) {
    if (node == (w.node + 1) % p_.nodes || (node + 1) % p_.nodes == w.node) return true;
  }
  return false;
}

Status InRange(const char* field, double v, double lo, double hi) {
  if (v >= lo && v <= hi) return Status::Ok();  // false for NaN
  return Status::InvalidArgument(std::string(field) + " must be in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got " + std::to_string(v));
}

}  // namespace

Status Validate(const SimParams& p) {
  constexpr double kLong = 1e6;  // seconds: longer than any real recovery step
  const struct {
    const char* name;
    double value, lo, hi;
  } fields[] = {
      {"nodes", static_cast<double>(p.nodes), 2, 1 << 20},
      {"work_s", p.work_s, 1e-3, 1e10},
      {"failures_per_node_h", p.failures_per_node_h, 0, 10},
      {"transient_fraction", p.transient_fraction, 0, 1},
      {"step_s", p.step_s, 1e-6, p.work_s},
      {"ckpt_blocking_s", p.ckpt_blocking_s, 0, kLong},
      {"ckpt_write_s", p.ckpt_write_s, 0, kLong},
      {"ckpt_load_s", p.ckpt_load_s, 0, kLong},
      {"protect_overhead", p.protect_overhead, 0, 10},
      {"rtft_detect_crash_s", p.rtft_detect_crash_s, 0, kLong},
      {"rtft_detect_node_s", p.rtft_detect_node_s, 0, kLong},
      {"rtft_recover_crash_s", p.rtft_recover_crash_s, 0, kLong},
      {"rtft_recover_node_s", p.rtft_recover_node_s, 0, kLong},
      {"rtft_l3_interval_s", p.rtft_l3_interval_s, p.work_s * 1e-8, 1e10},
      {"spares", static_cast<double>(p.spares), 0, 1 << 20},
      {"repair_h", p.repair_h, 1e-6, kLong},
      {"replica_rebuild_s", p.replica_rebuild_s, 0, kLong},
      {"restart_detect_crash_s", p.restart_detect_crash_s, 0, kLong},
      {"restart_detect_node_s", p.restart_detect_node_s, 0, kLong},
      {"relaunch_s", p.relaunch_s, 0, kLong},
      {"startup_s", p.startup_s, 0, kLong},
      {"restart_interval_s", p.restart_interval_s, p.work_s * 1e-8, 1e10},
      {"give_up_factor", p.give_up_factor, 1, 1e4},
  };
  for (const auto& f : fields) RTFT_RETURN_IF_ERROR(InRange(f.name, f.value, f.lo, f.hi));
  // Bounds the events of one job: its failures, within the give-up time.
  const double failures = p.failures_per_node_h * p.nodes * p.work_s / 3600.0;
  if (failures * p.give_up_factor > 2e7)
    return Status::InvalidArgument("about " + std::to_string(failures) +
                                   " failures per job: too many to simulate (at most 2e7 within "
                                   "the give-up time)");
  return Status::Ok();
}

const char* PolicyName(Policy policy) { return policy == Policy::kRtft ? "rtft" : "restart"; }

StatusOr<JobResult> SimulateJob(const SimParams& p, Policy policy, uint64_t seed) {
  RTFT_RETURN_IF_ERROR(Validate(p));
  JobResult r = JobSim(p, policy, seed).Run();
  r.failure_free_s = FailureFreeWallSeconds(p, policy);
  r.lost_s = r.wall_s - r.failure_free_s;
  return r;
}

double FailureFreeWallSeconds(const SimParams& p, Policy policy) {
  const bool rtft = policy == Policy::kRtft;
  const double interval = rtft ? p.rtft_l3_interval_s : p.restart_interval_s;
  const double checkpoints = std::ceil(p.work_s / interval) - 1;  // none at the very end
  return p.work_s * (rtft ? 1 + p.protect_overhead : 1.0) + checkpoints * p.ckpt_blocking_s;
}

double JobMtbfSeconds(const SimParams& p) {
  const double rate = p.failures_per_node_h * p.nodes;
  return rate > 0 ? 3600.0 / rate : kInf;
}

}  // namespace rtft::bench::goodput
