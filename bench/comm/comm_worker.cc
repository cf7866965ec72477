// The ranks of `rtft-bench comm`: the bench runs itself under `mpirun --enable-recovery
// dp-launch` with --worker, and each rank measures from inside the job (comm_bench.h).
#include "bench/comm/comm_worker.h"
#include "core/build_config.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#if RTFT_WITH_NCCL
#include <cuda_runtime_api.h>
#endif

#include "bench/comm/comm_direct.h"
#include "core/params.h"
#include "rtft/runtime.h"
#include "rtft/testing.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

// Appends `kind key=value ... pid= t=` to this slot's log.
class SlotLog {
 public:
  explicit SlotLog(const std::string& dir) {
    const std::string slot = ParamIsSet(Param::kSlot) ? ParamString(Param::kSlot) : "0";
    path_ = dir + "/slot-" + slot + ".log";
  }
  void Line(const std::string& text, long long t = 0) {
    std::ofstream out(path_, std::ios::app);
    out << text << " pid=" << getpid() << " t=" << (t ? t : NowUs()) << "\n";
  }

 private:
  std::string path_;
};

// Buffers in the backend's memory: host for Gloo, the rank's GPU for NCCL.
class Buffers {
 public:
  Buffers(CommBackend backend, size_t count) : backend_(backend), count_(count) {}
  ~Buffers() {
#if RTFT_WITH_NCCL
    if (backend_ == CommBackend::kNccl) {
      if (send_) cudaFree(send_);
      if (recv_) cudaFree(recv_);
    }
#endif
  }
  Status Allocate() {
    if (backend_ == CommBackend::kGloo) {
      host_send_.assign(count_, 1.0f);
      host_recv_.assign(count_, 0.0f);
      send_ = host_send_.data();
      recv_ = host_recv_.data();
      return Status::Ok();
    }
#if RTFT_WITH_NCCL
    if (cudaMalloc(reinterpret_cast<void**>(&send_), count_ * 4) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&recv_), count_ * 4) != cudaSuccess)
      return Status::ResourceExhausted("cudaMalloc of the benchmark's buffers");
    cudaMemset(send_, 0, count_ * 4);
    return Status::Ok();
#else
    return Status::Unimplemented("no NCCL in this build");
#endif
  }
  float* send() const { return send_; }
  float* recv() const { return recv_; }

 private:
  CommBackend backend_;
  size_t count_;
  std::vector<float> host_send_, host_recv_;
  float* send_ = nullptr;
  float* recv_ = nullptr;
};

// The stream rt-ft's NCCL calls go on: a non-blocking one of its own, as the direct baseline's
// (the legacy default stream would order them behind every other stream of the device).
void* BenchStream(CommBackend backend) {
#if RTFT_WITH_NCCL
  if (backend == CommBackend::kNccl) {
    static cudaStream_t stream = [] {
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      return s;
    }();
    return stream;
  }
#endif
  (void)backend;
  return nullptr;
}

// `times` all-reduces, then one Wait (for NCCL: `times` launches on the stream, then the wait, as
// nccl-tests measures; Gloo's calls complete one by one).
Status RtftAllReduce(Communicator& comm, const Buffers& b, size_t count, int times = 1) {
  CallOptions call;
  call.stream = BenchStream(comm.backend());
  for (int i = 0; i < times; ++i)
    RTFT_RETURN_IF_ERROR(
        comm.AllReduce(b.send(), b.recv(), count, DType::kFloat32, ReduceOp::kSum, call));
  return comm.Wait(call.stream, milliseconds(0));
}

Status Bandwidth(const CommWorkerOptions& o, Runtime& rt, Communicator& comm, SlotLog& log) {
  const RuntimeInfo me = rt.current();
  RTFT_ASSIGN_OR_RETURN(auto direct,
                        NewDirectAllReduce(o.backend, me.rank, me.world_size, rt.comm_store(),
                                           "bench/direct/", me.rank % std::max(1, o.gpus)));
  // NCCL: also NCCL's own non-blocking mode without rt-ft, to tell its cost from rt-ft's.
  std::unique_ptr<DirectAllReduce> direct_nb;
  if (o.backend == CommBackend::kNccl) {
    RTFT_ASSIGN_OR_RETURN(
        direct_nb, NewDirectAllReduce(o.backend, me.rank, me.world_size, rt.comm_store(),
                                      "bench/direct-nb/", me.rank % std::max(1, o.gpus), true));
  }
  for (uint64_t bytes : o.bytes) {
    const size_t count = bytes / 4;
    Buffers b(o.backend, count);
    RTFT_RETURN_IF_ERROR(b.Allocate());
    const int iters = static_cast<int>(std::clamp<uint64_t>((512ull << 20) / bytes, 2, 50));
    // Streamed: `iters` calls back to back, one wait; synchronized: a wait after every call (what
    // a caller pays that needs each result before the next call).
    std::vector<double> rtft_s, direct_s, rtft_sync_s, direct_sync_s, nb_s, nb_sync_s;
    for (int w = 0; w < 2; ++w) {  // warm-up, both paths
      RTFT_RETURN_IF_ERROR(RtftAllReduce(comm, b, count));
      RTFT_RETURN_IF_ERROR(direct->Run(b.send(), b.recv(), count, 1));
    }
    // One path, `run(times)` being `times` calls and one wait: streamed, then synchronized, each
    // after a barrier, as seconds per call.
    auto measure = [&](const std::function<Status(int)>& run, std::vector<double>* streamed,
                       std::vector<double>* synchronized) -> Status {
      RTFT_RETURN_IF_ERROR(comm.Barrier(CallOptions{}));
      auto t0 = Clock::now();
      RTFT_RETURN_IF_ERROR(run(iters));
      streamed->push_back(SecondsSince(t0) / iters);
      RTFT_RETURN_IF_ERROR(comm.Barrier(CallOptions{}));
      t0 = Clock::now();
      for (int i = 0; i < iters; ++i) RTFT_RETURN_IF_ERROR(run(1));
      synchronized->push_back(SecondsSince(t0) / iters);
      return Status::Ok();
    };
    for (int round = 0; round < o.rounds; ++round) {
      RTFT_RETURN_IF_ERROR(
          measure([&](int t) { return RtftAllReduce(comm, b, count, t); }, &rtft_s, &rtft_sync_s));
      RTFT_RETURN_IF_ERROR(measure([&](int t) { return direct->Run(b.send(), b.recv(), count, t); },
                                   &direct_s, &direct_sync_s));
      if (direct_nb)
        RTFT_RETURN_IF_ERROR(
            measure([&](int t) { return direct_nb->Run(b.send(), b.recv(), count, t); }, &nb_s,
                    &nb_sync_s));
    }
    if (me.rank == 0) {
      char line[400];
      std::snprintf(line, sizeof(line),
                    "bw bytes=%llu iters=%d rtft_s=%.9f direct_s=%.9f rtft_sync_s=%.9f "
                    "direct_sync_s=%.9f nb_s=%.9f nb_sync_s=%.9f",
                    static_cast<unsigned long long>(bytes), iters, Median(rtft_s), Median(direct_s),
                    Median(rtft_sync_s), Median(direct_sync_s), nb_s.empty() ? 0.0 : Median(nb_s),
                    nb_sync_s.empty() ? 0.0 : Median(nb_sync_s));
      log.Line(line);
    }
  }
  return Status::Ok();
}

// Logs when the next epoch's communicator was ready, then checks one all-reduce on it.
Status Checked(StatusOr<std::unique_ptr<Communicator>> next, long long ready,
               const CommWorkerOptions& o, SlotLog& log) {
  if (!next.ok()) return next.status().Annotate("rebuilding");
  log.Line("ready epoch=" + std::to_string((*next)->epoch()), ready);
  Buffers b(o.backend, 1 << 16);
  RTFT_RETURN_IF_ERROR(b.Allocate());
  RTFT_RETURN_IF_ERROR(RtftAllReduce(**next, b, 1 << 16));
  log.Line("after ok=1");
  return Status::Ok();
}

// All-reduces until one fails (the victim hangs at a named fault point inside its second one
// and the bench kills its slot), then waits for the failure event and builds the next epoch's
// communicator; a spare activated by the event builds it directly.
Status Failure(const CommWorkerOptions& o, Runtime& rt, std::unique_ptr<Communicator> comm,
               const std::atomic<long long>& event_us, SlotLog& log) {
  CommOptions options;
  options.backend = o.backend;
  options.device = rt.current().rank % std::max(1, o.gpus);
  if (comm) {
    const size_t count = o.bytes.front() / 4;
    Buffers b(o.backend, count);
    RTFT_RETURN_IF_ERROR(b.Allocate());
    // When the communicator learns of the failure (its own detection or the failure event
    // through the registry, whichever is first) shows as its abort flag.
    std::atomic<long long> aborted_us{0};
    std::atomic<bool> stop{false};
    std::thread monitor([&] {
      while (!stop && !comm->aborted()) std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (!stop) aborted_us = NowUs();
    });
    for (int i = 0;; ++i) {
      if (i == 1 && comm->rank() == o.victim) ArmFaults(o.victim_fault.c_str());
      log.Line("begin i=" + std::to_string(i));
      const Status s = RtftAllReduce(*comm, b, count);
      const long long t = NowUs();
      if (!s.ok()) {
        stop = true;
        monitor.join();
        log.Line(std::string("end ok=0 code=") + StatusCodeName(s.code()) +
                     " aborted_at=" + std::to_string(aborted_us.load()),
                 t);
        break;
      }
    }
    // Build the next epoch's communicator before this one is freed: an NCCL abort (about half a
    // second with a dead peer) then runs while the new one is built.
    while (event_us == 0) std::this_thread::sleep_for(milliseconds(1));
    auto next = rt.CreateCommunicator("bench", options);
    const long long ready = NowUs();
    comm.reset();
    return Checked(std::move(next), ready, o, log);
  }
  return Checked(rt.CreateCommunicator("bench", options), NowUs(), o, log);
}

// A communicator of one rank (a single GPU): how long Abort() takes to return and the abort to
// finish, and how long the next epoch's communicator takes to build.
Status Single(const CommWorkerOptions& o, Runtime& rt, std::unique_ptr<Communicator> comm,
              SlotLog& log) {
  const size_t count = o.bytes.front() / 4;
  Buffers b(o.backend, count);
  RTFT_RETURN_IF_ERROR(b.Allocate());
  RTFT_RETURN_IF_ERROR(RtftAllReduce(*comm, b, count));
  const auto t0 = Clock::now();
  comm->Abort();
  const double abort_call_ms = SecondsSince(t0) * 1e3;
  comm.reset();  // waits for the abort to finish
  const double abort_done_ms = SecondsSince(t0) * 1e3;
  CommOptions options;
  options.backend = o.backend;
  options.epoch = rt.current().epoch + 1;
  options.name = "bench-next";
  options.store = rt.comm_store();
  const auto t1 = Clock::now();
  auto next = Communicator::Create(options);
  RTFT_RETURN_IF_ERROR(next.status());
  RTFT_RETURN_IF_ERROR(RtftAllReduce(**next, b, count));
  char line[160];
  std::snprintf(line, sizeof(line), "single abort_call_ms=%.3f abort_ms=%.3f rebuild_ms=%.3f",
                abort_call_ms, abort_done_ms, SecondsSince(t1) * 1e3);
  log.Line(line);
  return Status::Ok();
}

}  // namespace

int RunCommWorker(const CommWorkerOptions& o) {
  SlotLog log(o.dir);
  auto rt_or = Runtime::Create();
  if (!rt_or.ok()) {
    log.Line("error runtime=" + rt_or.status().ToString());
    return 3;
  }
  Runtime& rt = **rt_or;
  std::atomic<long long> event_us{0};
  rt.Subscribe([&](const FailureEvent& e) {
    if (event_us == 0) event_us = NowUs();
    log.Line("event epoch=" + std::to_string(e.epoch), event_us);
  });
  const RuntimeInfo me = rt.info();
#if RTFT_WITH_NCCL
  if (o.backend == CommBackend::kNccl && me.rank >= 0) cudaSetDevice(me.rank % std::max(1, o.gpus));
#endif
  std::unique_ptr<Communicator> comm;
  if ((me.role == RuntimeRole::kInitial || me.role == RuntimeRole::kStandalone) &&
      o.mode != "shrink") {
    CommOptions options;
    options.backend = o.backend;
    options.device = me.rank % std::max(1, o.gpus);
    auto c = rt.CreateCommunicator("bench", options);
    if (!c.ok()) {
      log.Line("error create=" + c.status().ToString());
      return 4;
    }
    comm = std::move(*c);
  }
  Status s;
  if (o.mode == "bw") {
    s = Bandwidth(o, rt, *comm, log);
  } else if (o.mode == "single") {
    s = Single(o, rt, std::move(comm), log);
  } else if (o.mode == "shrink") {
    if (me.role != RuntimeRole::kInitial) return 0;  // only the first ranks take part
    if (me.rank == o.victim) ArmFaults(o.victim_fault.c_str());
    s = NcclShrinkProbe(me.rank, me.world_size, o.victim, o.bytes.front(),
                        o.shrink_path == "revoke", rt.comm_store(), "bench/shrink/",
                        me.rank % std::max(1, o.gpus), event_us,
                        [&](const std::string& line) { log.Line(line); });
  } else {
    s = Failure(o, rt, std::move(comm), event_us, log);
  }
  if (!s.ok()) {
    std::string text = s.ToString();
    for (char& c : text)
      if (c == ' ') c = '_';
    log.Line("error what=" + text);
    return 1;
  }
  return 0;
}

}  // namespace rtft::bench
