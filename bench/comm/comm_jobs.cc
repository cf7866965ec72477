#include <CLI/CLI.hpp>
#include "bench/comm/comm_command.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "bench/comm/comm_worker.h"
#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"
#include "core/params.h"
#include "sim/comm_sim.h"

namespace rtft::bench {

using std::chrono::milliseconds;

std::vector<std::string> CommCommand::JobArgs(int slots, int spares, const std::string& mode,
                                              const std::string& dir,
                                              const std::string& bytes) const {
  std::vector<std::string> a =
      DpLaunchArgs(slots, dp_launch_,
                   {"--spares", std::to_string(spares), "--heartbeat-ms", "50",
                    "--heartbeat-timeout-ms", std::to_string(heartbeat_timeout_ms_)});
  a.insert(a.end(),
           {SelfPath(), "comm", "--worker", mode, "--backend", backend_, "--bytes", bytes,
            "--rounds", std::to_string(rounds_), "--gpus", std::to_string(gpus_), "--dir", dir});
  return a;
}

Status CommCommand::Bandwidth(std::map<uint64_t, nlohmann::json>* results) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  BenchJob job(dir, ranks_);
  Progress("comm: bandwidth job, " + std::to_string(ranks_) + " ranks, " + bytes_text_);
  RTFT_RETURN_IF_ERROR(job.Start(JobArgs(ranks_, 0, "bw", dir, bytes_text_)));
  RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(1800000)));
  const auto lines = Lines(dir, 0, "bw");
  if (lines.size() != bytes_.size()) {
    for (int s = 0; s < ranks_; ++s)
      for (const auto& e : Lines(dir, s, "error"))
        Progress("comm: slot " + std::to_string(s) + ": " + e.at("what"));
    return Status::Internal("the bandwidth job did not report every size (see " + dir + ")");
  }
  const double factor = ranks_ > 1 ? 2.0 * (ranks_ - 1) / ranks_ : 1.0;
  for (const auto& l : lines) {
    const uint64_t bytes = static_cast<uint64_t>(Num(l, "bytes"));
    const double rtft_s = Real(l, "rtft_s"), direct_s = Real(l, "direct_s");
    const double rtft_sync_s = Real(l, "rtft_sync_s"), direct_sync_s = Real(l, "direct_sync_s");
    // Streamed (calls back to back, one wait: nccl-tests' method) and synchronized (a wait after
    // every call); the target is on the streamed ratio.
    nlohmann::json r = {{"busbw_gbps", Gbps(bytes, rtft_s) * factor},
                        {"direct_busbw_gbps", Gbps(bytes, direct_s) * factor},
                        {"rtft_s", rtft_s},
                        {"direct_s", direct_s},
                        {"ratio", direct_s / rtft_s},
                        {"sync_busbw_gbps", Gbps(bytes, rtft_sync_s) * factor},
                        {"direct_sync_busbw_gbps", Gbps(bytes, direct_sync_s) * factor},
                        {"sync_ratio", direct_sync_s / rtft_sync_s},
                        {"call_overhead_us", (rtft_sync_s - direct_sync_s) * 1e6}};
    // NCCL: NCCL's own non-blocking communicator without rt-ft (the mode rt-ft uses).
    const double nb_s = Real(l, "nb_s"), nb_sync_s = Real(l, "nb_sync_s");
    if (nb_s > 0 && nb_sync_s > 0) {
      r["direct_nonblocking_busbw_gbps"] = Gbps(bytes, nb_s) * factor;
      r["direct_nonblocking_sync_busbw_gbps"] = Gbps(bytes, nb_sync_s) * factor;
      r["ratio_to_nonblocking"] = nb_s / rtft_s;
    }
    if (ranks_ == 1) r["note"] = "one rank: no communication (busbw is algbw)";
    (*results)[bytes] = r;
  }
  (void)RemoveTree(dir);
  return Status::Ok();
}

Status CommCommand::Failure(uint64_t bytes, nlohmann::json* result) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  const int slots = ranks_ + 1;
  BenchJob job(dir, slots);
  std::vector<std::string> args = JobArgs(slots, 1, "fail", dir, std::to_string(bytes));
  // The victim (rank 1) stops in the middle of its second all-reduce: Gloo, at the middle
  // message of its ring; NCCL, before it enqueues.
  const uint64_t seg = 1 << 20;
  const uint64_t msgs =
      2ull * (ranks_ - 1) * std::max<uint64_t>(1, (bytes / ranks_ + seg - 1) / seg);
  const std::string fault =
      be_ == CommBackend::kGloo
          ? "comm.gloo.ring_segment@" + std::to_string(std::max<uint64_t>(1, msgs / 2)) + ":hang"
          : "comm.nccl.allreduce@1:hang";
  args.insert(args.end(), {"--victim", "1", "--victim-fault", fault});
  Progress("comm: failure job, " + std::to_string(ranks_) + " ranks + 1 spare, " +
           FormatBytes(bytes));
  RTFT_RETURN_IF_ERROR(job.Start(args));
  int victim_slot = -1;
  if (!WaitUntil(
          [&] {
            std::ifstream in(dir + "/faults.log");
            std::string w;
            while (in >> w)
              if (w.rfind("slot=", 0) == 0) victim_slot = std::atoi(w.c_str() + 5);
            return victim_slot >= 0;
          },
          milliseconds(120000)))
    return Status::DeadlineExceeded("the victim never reached its fault point (see " + dir + ")");
  const pid_t victim = SlotProcess(job.Marker(), victim_slot, "rtft-bench");
  const pid_t agent = victim > 0 ? AgentOf(victim) : 0;
  if (agent <= 0) return Status::Internal("the victim's dp-launch was not found");
  // The others are inside the same all-reduce.
  auto began = [&] {
    int n = 0;
    for (int s = 0; s < slots; ++s)
      if (s != victim_slot)
        for (const auto& l : Lines(dir, s, "begin"))
          if (Num(l, "i") == 1) ++n;
    return n >= ranks_ - 1;
  };
  if (!WaitUntil(began, milliseconds(60000)))
    return Status::DeadlineExceeded("the survivors never began the all-reduce");
  const long long killed = NowUs();
  kill(agent, SIGKILL);
  kill(victim, SIGKILL);
  auto afters = [&] {
    int n = 0;
    for (int s = 0; s < slots; ++s) n += static_cast<int>(Lines(dir, s, "after").size());
    return n;
  };
  if (!WaitUntil([&] { return afters() >= ranks_; }, milliseconds(120000)))
    return Status::DeadlineExceeded("the next epoch never completed an all-reduce (see " + dir +
                                    ")");
  double abort_ms = 0, rebuild_ms = 0, from_kill_ms = 0;
  long long first_event = LLONG_MAX, last_ready = 0;
  for (int s = 0; s < slots; ++s) {
    auto ends = Lines(dir, s, "end");
    auto events = Lines(dir, s, "event");
    auto readies = Lines(dir, s, "ready");
    if (!readies.empty()) last_ready = std::max(last_ready, Num(readies.back(), "t"));
    if (ends.empty()) continue;  // the victim or the spare
    const long long ev = events.empty() ? LLONG_MAX : Num(events.front(), "t");
    first_event = std::min(first_event, ev);
    if (ends.back().at("code") != "ABORTED")
      return Status::Internal("a survivor's call ended with " + ends.back().at("code"));
    // From the earlier of the failure event and the communicator's own detection (its abort
    // flag), and, as an upper bound, from the kill.
    long long learned = ev;
    if (Num(ends.back(), "aborted_at") > 0)
      learned = std::min(learned, Num(ends.back(), "aborted_at"));
    abort_ms = std::max(abort_ms, (Num(ends.back(), "t") - learned) / 1000.0);
    from_kill_ms = std::max(from_kill_ms, (Num(ends.back(), "t") - killed) / 1000.0);
  }
  rebuild_ms = (last_ready - first_event) / 1000.0;
  (*result)["abort_ms"] = abort_ms;
  (*result)["abort_from_kill_ms"] = from_kill_ms;
  (*result)["rebuild_ms"] = rebuild_ms;
  (void)job.Wait(milliseconds(60000));
  (void)RemoveTree(dir);
  return Status::Ok();
}

Status CommCommand::Single(uint64_t bytes, nlohmann::json* result) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  BenchJob job(dir, 1);
  RTFT_RETURN_IF_ERROR(job.Start(JobArgs(1, 0, "single", dir, std::to_string(bytes))));
  RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(300000)));
  const auto lines = Lines(dir, 0, "single");
  if (lines.empty()) return Status::Internal("the one-rank job reported nothing (see " + dir + ")");
  (*result)["abort_call_ms"] = Real(lines[0], "abort_call_ms");
  (*result)["abort_ms"] = Real(lines[0], "abort_ms");
  (*result)["rebuild_ms"] = Real(lines[0], "rebuild_ms");
  (*result)["note"] = "one rank: Abort() of a communicator and a new one built (no peer to kill)";
  (void)RemoveTree(dir);
  return Status::Ok();
}

// `ranks_` ranks, no spare: the victim's slot is killed at its fault point; each survivor revokes
// and shrinks NCCL's communicator at the failure event (NcclShrinkProbe).
Status CommCommand::Shrink(uint64_t bytes, const std::string& path, JsonLines* out) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  BenchJob job(dir, ranks_);
  std::vector<std::string> args = JobArgs(ranks_, 0, "shrink", dir, std::to_string(bytes));
  args.insert(std::find(args.begin(), args.end(), "--"), {"--on-spares-exhausted", "shrink"});
  const int victim = ranks_ - 1;
  args.insert(args.end(), {"--victim", std::to_string(victim), "--victim-fault",
                           "bench.shrink.victim:hang", "--shrink-path", path});
  Progress("comm: shrink job (" + path + "), " + std::to_string(ranks_) + " ranks, " +
           FormatBytes(bytes));
  RTFT_RETURN_IF_ERROR(job.Start(args));
  if (!WaitUntil([&] { return job.FaultSlot() >= 0; }, milliseconds(120000)))
    return Status::DeadlineExceeded("the victim never reached its fault point (see " + dir + ")");
  const int slot = job.FaultSlot();
  const pid_t app = SlotProcess(job.Marker(), slot, "rtft-bench");
  const pid_t agent = app > 0 ? AgentOf(app) : 0;
  if (agent <= 0) return Status::Internal("the victim's dp-launch was not found");
  kill(agent, SIGKILL);
  kill(app, SIGKILL);
  std::vector<Fields> lines;
  auto done = [&] {
    lines.clear();
    int errors = 0;
    for (int s = 0; s < ranks_; ++s) {
      for (const auto& l : Lines(dir, s, "shrink")) lines.push_back(l);
      errors += static_cast<int>(Lines(dir, s, "error").size());
    }
    return errors > 0 || static_cast<int>(lines.size()) >= ranks_ - 1;
  };
  if (!WaitUntil(done, milliseconds(120000)) || static_cast<int>(lines.size()) < ranks_ - 1) {
    for (int s = 0; s < ranks_; ++s)
      for (const auto& e : Lines(dir, s, "error"))
        Progress("comm: slot " + std::to_string(s) + ": " + e.at("what"));
    return Status::Internal("the survivors did not all shrink (see " + dir + ")");
  }
  double revoke_ms = 0, shrink_ms = 0, check_ms = 0;
  for (const auto& l : lines) {
    revoke_ms = std::max(revoke_ms, Real(l, "revoke_ms"));
    shrink_ms = std::max(shrink_ms, Real(l, "shrink_ms"));
    check_ms = std::max(check_ms, Real(l, "check_ms"));
  }
  out->Emit({{"name", "comm"},
             {"phase", "shrink"},
             {"path", path == "revoke" ? "ncclCommRevoke + ncclCommShrink"
                                       : "ncclCommShrink(NCCL_SHRINK_ABORT)"},
             {"nccl_min", path == "revoke" ? "2.28" : "2.27"},
             {"backend", backend_},
             {"ranks", ranks_},
             {"world_after", Num(lines.front(), "world")},
             {"bytes", bytes},
             {"revoke_ms", revoke_ms},
             {"shrink_ms", shrink_ms},
             {"ready_ms", revoke_ms + shrink_ms},
             {"check_ms", check_ms},
             {"note", "from the failure event, slowest survivor"}});
  (void)job.Wait(milliseconds(60000));
  (void)RemoveTree(dir);
  return Status::Ok();
}

}  // namespace rtft::bench
