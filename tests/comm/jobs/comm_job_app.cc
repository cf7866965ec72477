// The application of the communicator job tests (job_test.cc) and of `rtft-bench comm`'s
// failure runs: it runs under mpirun + dp-launch, makes Gloo communicators with
// Runtime::CreateCommunicator and writes what happens as `kind key=value ... t=<us>` lines to
// <RTFT_TEST_DIR>/slot-<S>.log. Settings (environment):
//   RTFT_TEST_DIR      log directory (required)
//   RTFT_TEST_MODE     verify: every collective against the reference, then exit
//                      fail: all-reduces of RTFT_TEST_ELEMENTS floats until one fails; then wait
//                      for the failure event, build the next epoch's communicator and check one
//                      all-reduce on it (a spare activated meanwhile joins that one)
//   RTFT_TEST_VICTIM   the rank that arms RTFT_TEST_VICTIM_FAULT (a named fault point,
//                      docs/testing.md) before its second all-reduce
//   RTFT_TEST_CALL_TIMEOUT_MS  deadline of each all-reduce (default: RTFT_COMM_TIMEOUT_MS)
#include <execinfo.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>

#include "comm/comm_test_util.h"
#include "rtft/runtime.h"
#include "rtft/testing.h"

namespace {

using rtft::CommBackend;
using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;

std::mutex g_mu;
FILE* g_log = stderr;

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

void Log(const std::string& line, long long t = 0) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(g_log, "%s pid=%d t=%lld\n", line.c_str(), static_cast<int>(getpid()),
               t ? t : NowUs());
  std::fflush(g_log);
}

long Env(const char* name, long def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : def;
}

std::string Code(const Status& s) { return rtft::StatusCodeName(s.code()); }

// One all-reduce of `n` floats whose result every rank can check: rank r contributes r + 1.
bool CheckedAllReduce(rtft::Communicator& comm, size_t n, Status* status) {
  const int world = comm.world_size();
  std::vector<float> in(n, static_cast<float>(comm.rank() + 1)), out(n);
  *status = comm.AllReduce(in.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum);
  if (!status->ok()) return false;
  const float want = static_cast<float>(world * (world + 1) / 2);
  for (float v : out)
    if (v != want) return false;
  return true;
}

// Every collective against comm_test_util.h's reference, for this job's world size.
std::string Verify(rtft::Communicator& comm) {
  using namespace rtft::comm::test;
  const int n = comm.world_size(), r = comm.rank();
  for (DType d :
       {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kUInt8, DType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      const size_t count = 100003;
      std::vector<std::vector<char>> in(n);
      for (int k = 0; k < n; ++k) in[k] = Input(k, count, d);
      std::vector<char> out(in[r].size());
      Status s = comm.AllReduce(in[r].data(), out.data(), count, d, op);
      if (!s.ok()) return "all-reduce " + s.ToString();
      if (out != ReferenceAllReduce(in, count, d, op))
        return std::string("all-reduce ") + rtft::DTypeName(d) + " " + rtft::ReduceOpName(op);
      std::vector<size_t> counts(n);
      for (int k = 0; k < n; ++k) counts[k] = 1000 + 37 * k;
      size_t total = 0, start = 0;
      for (int k = 0; k < n; ++k) total += counts[k];
      for (int k = 0; k < r; ++k) start += counts[k];
      for (int k = 0; k < n; ++k) in[k] = Input(k + 5, total, d);
      std::vector<char> mine(counts[r] * rtft::DTypeSize(d)), want(mine.size());
      s = comm.ReduceScatterV(in[r].data(), mine.data(), counts, d, op);
      if (!s.ok()) return "reduce-scatter-v " + s.ToString();
      for (size_t i = 0; i < counts[r]; ++i) ReduceElement(in, d, op, r, start + i, want.data(), i);
      if (mine != want) return std::string("reduce-scatter-v ") + rtft::DTypeName(d);
      std::vector<char> all(total * rtft::DTypeSize(d)), expect;
      s = comm.AllGatherV(mine.data(), all.data(), counts, d);
      if (!s.ok()) return "all-gather-v " + s.ToString();
      for (int k = 0; k < n; ++k) {
        std::vector<char> w(counts[k] * rtft::DTypeSize(d));
        size_t st = 0;
        for (int j = 0; j < k; ++j) st += counts[j];
        for (size_t i = 0; i < counts[k]; ++i) ReduceElement(in, d, op, k, st + i, w.data(), i);
        expect.insert(expect.end(), w.begin(), w.end());
      }
      if (all != expect) return std::string("all-gather-v ") + rtft::DTypeName(d);
    }
  }
  for (int root = 0; root < n; ++root) {
    std::vector<char> data = rtft::comm::test::Input(root + 100, 77777, DType::kInt32);
    std::vector<char> buf = r == root ? data : std::vector<char>(data.size());
    Status s = comm.Broadcast(buf.data(), 77777, DType::kInt32, root);
    if (!s.ok() || buf != data) return "broadcast " + s.ToString();
  }
  Status s = comm.Barrier();
  return s.ok() ? "" : "barrier " + s.ToString();
}

}  // namespace

void OnCrash(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char head[64];
  const int len = std::snprintf(head, sizeof(head), "crash signal=%d\n", sig);
  if (g_log) {
    (void)!write(fileno(g_log), head, len);
    backtrace_symbols_fd(frames, n, fileno(g_log));
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

int main() {
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) signal(sig, OnCrash);
  const char* dir = std::getenv("RTFT_TEST_DIR");
  if (!dir) return 2;
  const char* slot = std::getenv("RTFT_SLOT");
  g_log = std::fopen((std::string(dir) + "/slot-" + (slot ? slot : "0") + ".log").c_str(), "a");
  if (!g_log) return 2;
  auto rt_or = rtft::Runtime::Create();
  if (!rt_or.ok()) {
    Log("error create " + rt_or.status().ToString());
    return 3;
  }
  auto& rt = *rt_or;
  std::atomic<long long> event_us{0};
  std::atomic<uint64_t> event_epoch{0};
  rt->Subscribe([&](const rtft::FailureEvent& e) {
    if (event_us == 0) event_us = NowUs();
    event_epoch = e.epoch;
    Log("event epoch=" + std::to_string(e.epoch) + " rank=" + std::to_string(e.rank) +
        " shutdown=" + std::to_string(e.shutdown));
  });
  const rtft::RuntimeInfo info = rt->info();
  Log("start role=" + std::string(rtft::RuntimeRoleName(info.role)) +
      " rank=" + std::to_string(info.rank) + " world=" + std::to_string(info.world_size) +
      " epoch=" + std::to_string(info.epoch));
  rtft::CommOptions options;
  options.backend = CommBackend::kGloo;
  const std::string mode = std::getenv("RTFT_TEST_MODE") ? std::getenv("RTFT_TEST_MODE") : "";
  if (mode != "verify" && mode != "fail") return 2;
  // A spare or restarted process goes straight to the next epoch's communicator.
  if (info.role == rtft::RuntimeRole::kInitial || info.role == rtft::RuntimeRole::kStandalone) {
    auto comm_or = rt->CreateCommunicator("test", options);
    if (!comm_or.ok()) {
      Log("error comm " + comm_or.status().ToString());
      return 4;
    }
    auto comm = std::move(*comm_or);
    Log("comm rank=" + std::to_string(comm->rank()) + " epoch=" + std::to_string(comm->epoch()));
    if (mode == "verify") {
      const std::string bad = Verify(*comm);
      Log(bad.empty() ? "verify ok=1" : "verify ok=0 what=" + bad);
      return bad.empty() ? 0 : 1;
    }
    const size_t n = static_cast<size_t>(Env("RTFT_TEST_ELEMENTS", 16 << 20));
    const long victim = Env("RTFT_TEST_VICTIM", -1);
    rtft::CallOptions call;
    call.timeout = std::chrono::milliseconds(Env("RTFT_TEST_CALL_TIMEOUT_MS", 0));
    std::vector<float> in(n, 1.0f), out(n);
    for (int i = 0;; ++i) {
      if (i == 1 && comm->rank() == victim) {
        const char* fault = std::getenv("RTFT_TEST_VICTIM_FAULT");
        rtft::ArmFaults(fault ? fault : "comm.gloo.ring_segment@3:hang");
      }
      Log("allreduce-begin i=" + std::to_string(i));
      const long long t0 = NowUs();
      const Status s =
          comm->AllReduce(in.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, call);
      const long long t1 = NowUs();
      if (s.ok()) {
        Log("allreduce-end i=" + std::to_string(i) + " ok=1", t1);
        continue;
      }
      std::string why = s.message();
      for (char& c : why)
        if (c == ' ') c = '_';
      Log("allreduce-end i=" + std::to_string(i) + " ok=0 code=" + Code(s) +
              " took_ms=" + std::to_string((t1 - t0) / 1000) + " why=" + why,
          t1);
      break;
    }
    // Wait for the failure event (the deadline case may see it late or never).
    const long wait_ms = Env("RTFT_TEST_EVENT_WAIT_MS", 20000);
    for (long k = 0; k < wait_ms / 5 && event_us == 0; ++k) usleep(5000);
    if (event_us == 0) {
      Log("no-event");
      return 0;
    }
  }
  const long long t_build = NowUs();
  auto next = rt->CreateCommunicator("test", options);
  if (!next.ok()) {
    Log("error rebuild " + next.status().ToString());
    return 5;
  }
  const long long t_ready = NowUs();
  Log("rebuilt epoch=" + std::to_string((*next)->epoch()) + " rank=" +
          std::to_string((*next)->rank()) + " world=" + std::to_string((*next)->world_size()) +
          " build_ms=" + std::to_string((t_ready - t_build) / 1000) +
          " since_event_ms=" + std::to_string(event_us ? (t_ready - event_us) / 1000 : -1),
      t_ready);
  Status s;
  const bool good = CheckedAllReduce(**next, 1 << 20, &s);
  Log("after ok=" + std::to_string(good) + " code=" + Code(s));
  // No rank leaves while a peer is still inside the checked call: a closed connection would
  // abort its end of the collective (the barrier's own result does not matter).
  if (good) (void)(*next)->Barrier();
  return good ? 0 : 1;
}
