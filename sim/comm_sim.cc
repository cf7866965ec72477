#include "sim/comm_sim.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>

#include "bench/common/bench_util.h"
#include "core/params.h"
#include "rtft/comm.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// The in-process store, counting the puts and the answered gets (a get that times out is a
// wait, not traffic) and their bytes.
class CountingStore final : public CommStore {
 public:
  Status Put(const std::string& key, const std::string& value) override {
    ++puts_;
    put_bytes_ += key.size() + value.size();
    return inner_->Put(key, value);
  }
  StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
    auto v = inner_->Get(key, deadline);
    if (v.ok()) {
      ++gets_;
      got_bytes_ += key.size() + v->size();
    }
    return v;
  }
  uint64_t puts() const { return puts_; }
  uint64_t gets() const { return gets_; }
  uint64_t put_bytes() const { return put_bytes_; }
  uint64_t got_bytes() const { return got_bytes_; }

 private:
  std::unique_ptr<CommStore> inner_ = NewLocalCommStore();
  std::atomic<uint64_t> puts_{0}, gets_{0}, put_bytes_{0}, got_bytes_{0};
};

struct Run {
  double create_s = 0, barrier_s = 0;
  uint64_t puts = 0, gets = 0, put_bytes = 0, got_bytes = 0;  // creation and first barrier
  uint64_t create_puts = 0, create_gets = 0, create_got_bytes = 0;
};

StatusOr<Run> RunOne(int n, int round) {
  CountingStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> errors(n);
  const auto t0 = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        CommOptions o;
        o.backend = CommBackend::kGloo;
        o.rank = r;
        o.world_size = n;
        o.epoch = 1;
        o.name = "sim" + std::to_string(round);
        o.store = &store;
        o.host = "127.0.0.1";
        o.create_timeout = milliseconds(600000);
        auto c = Communicator::Create(o);
        if (c.ok())
          comms[r] = std::move(*c);
        else
          errors[r] = c.status();
      });
    for (auto& t : threads) t.join();
  }
  Run run;
  run.create_s = SecondsSince(t0);
  for (int r = 0; r < n; ++r)
    if (!errors[r].ok()) return errors[r].Annotate("rank " + std::to_string(r));
  run.create_puts = store.puts();
  run.create_gets = store.gets();
  run.create_got_bytes = store.got_bytes();
  const auto t1 = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { errors[r] = comms[r]->Barrier(); });
    for (auto& t : threads) t.join();
  }
  run.barrier_s = SecondsSince(t1);
  for (int r = 0; r < n; ++r)
    if (!errors[r].ok()) return errors[r].Annotate("barrier, rank " + std::to_string(r));
  run.puts = store.puts();
  run.gets = store.gets();
  run.put_bytes = store.put_bytes();
  run.got_bytes = store.got_bytes();
  // Closed in parallel, as the ranks of a job would.
  std::vector<std::thread> closers;
  for (int r = 0; r < n; ++r) closers.emplace_back([&, r] { comms[r].reset(); });
  for (auto& t : closers) t.join();
  return run;
}

// The descriptors n ranks of one process hold once the first barrier connected its partners:
// one socket per pair and side, and a device's own (its epoll set) per rank.
uint64_t Descriptors(uint64_t n, const std::string& pairs) {
  uint64_t per_rank = n - 1;
  if (pairs == "ring") {
    std::set<uint64_t> partners = {1 % n, n - 1};  // rank 0's: its neighbours, the barrier's
    for (uint64_t d = 1; d < n; d *= 2) partners.insert({d % n, (n - d % n) % n});
    partners.erase(0);
    per_rank = partners.size();
  }
  return n * (per_rank + 2);
}

}  // namespace

Status RunCommSim(const CommSimOptions& o, JsonLines* out) {
  if (!CommBackendAvailable(CommBackend::kGloo))
    return Status::FailedPrecondition("this build has no Gloo backend");
  const uint64_t limit = RaiseFileLimit();
  const char* before = std::getenv("RTFT_COMM_GLOO_PAIRS");
  const std::string saved = before ? before : "";
  Status result;
  for (const std::string& pairs : o.pairs) {
    setenv("RTFT_COMM_GLOO_PAIRS", pairs.c_str(), 1);
    ReloadParams();
    for (uint64_t n : o.ranks) {
      if (pairs == "all" && n > 512) {
        Progress("comm --sim: " + std::to_string(n) +
                 " ranks, pairs all: skipped (a mesh is "
                 "refused above 512 ranks)");
        continue;
      }
      if (Descriptors(n, pairs) > limit * 9 / 10) {
        Progress("comm --sim: " + std::to_string(n) + " ranks, pairs " + pairs +
                 ": skipped (about " + std::to_string(Descriptors(n, pairs)) +
                 " descriptors in this process, the limit is " + std::to_string(limit) + ")");
        continue;
      }
      std::vector<double> create, barrier;
      Run last;
      for (int i = 0; i < o.repeats && result.ok(); ++i) {
        Progress("comm --sim: " + std::to_string(n) + " ranks, pairs " + pairs + ", run " +
                 std::to_string(i + 1) + "/" + std::to_string(o.repeats));
        auto run = RunOne(static_cast<int>(n), i);
        if (!run.ok()) {
          result = run.status().Annotate(std::to_string(n) + " ranks, pairs " + pairs);
          break;
        }
        last = *run;
        create.push_back(run->create_s);
        barrier.push_back(run->barrier_s);
      }
      if (!result.ok()) break;
      const double per = static_cast<double>(n);
      out->Emit({{"name", "comm_rendezvous"},
                 {"backend", "gloo"},
                 {"ranks", n},
                 {"pairs", pairs},
                 {"repeats", o.repeats},
                 {"create_s", Median(create)},
                 {"first_barrier_s", Median(barrier)},
                 {"create_puts_per_rank", last.create_puts / per},
                 {"create_gets_per_rank", last.create_gets / per},
                 {"create_bytes_read_per_rank", last.create_got_bytes / per},
                 {"puts_per_rank", last.puts / per},
                 {"gets_per_rank", last.gets / per},
                 {"bytes_read_per_rank", last.got_bytes / per},
                 {"store_records", last.puts},
                 {"store_bytes", last.put_bytes},
                 {"threads_of_one_machine", true}});
    }
    if (!result.ok()) break;
  }
  if (before)
    setenv("RTFT_COMM_GLOO_PAIRS", saved.c_str(), 1);
  else
    unsetenv("RTFT_COMM_GLOO_PAIRS");
  ReloadParams();
  return result;
}

}  // namespace rtft::bench
