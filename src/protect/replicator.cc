#include "protect/replicator.h"

#include <algorithm>
#include <chrono>

#include "core/fault_point.h"
#include "core/logging.h"

namespace rtft::protect {
namespace {

// What precedes a replica on the wire (checksum 0) and what follows it (its checksum).
struct WireHeader {
  uint64_t step;
  uint64_t bytes;
  uint64_t checksum;
};

// The steps (or calls) a replicator remembers as done: enough for the waits of two steps.
constexpr size_t kRemembered = 8;

void Remember(std::vector<uint64_t>* v, uint64_t x) {
  v->push_back(x);
  if (v->size() > kRemembered) v->erase(v->begin());
}

}  // namespace

Replicator::Replicator(std::vector<std::unique_ptr<Communicator>> streams, Snapshot* l1,
                       ReplicaStore* l2)
    : streams_(std::move(streams)),
      comm_(streams_[0].get()),
      rank_(comm_->rank()),
      world_(comm_->world_size()),
      l1_(l1),
      l2_(l2) {}

StatusOr<std::unique_ptr<Replicator>> Replicator::Start(
    std::vector<std::unique_ptr<Communicator>> streams, Snapshot* l1, ReplicaStore* l2,
    std::shared_ptr<ReplicaCounters> counters) {
  if (streams.empty() || std::find(streams.begin(), streams.end(), nullptr) != streams.end())
    return Status::InvalidArgument("the replicator needs at least one communicator");
  for (const auto& c : streams)
    if (c->rank() != streams[0]->rank() || c->world_size() != streams[0]->world_size())
      return Status::InvalidArgument("the replicator's communicators span different ranks");
  std::unique_ptr<Replicator> r(new Replicator(std::move(streams), l1, l2));
  r->counters_ = counters ? std::move(counters) : std::make_shared<ReplicaCounters>();
  if (r->streams_.size() > 1)
    r->pool_ = std::make_unique<ThreadPool>(static_cast<int>(r->streams_.size() - 1), "rtft-l2");
  RTFT_ASSIGN_OR_RETURN(r->thread_, Thread::Start("rtft-replicator", [p = r.get()] { p->Run(); }));
  return r;
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  AbortAll();
  thread_.Join();
}

void Replicator::AbortAll() {
  for (auto& c : streams_) c->Abort();
}

void Replicator::Expect(uint64_t max_replica_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_in_ = max_replica_bytes;
}

void Replicator::Submit(uint64_t step) {
  Submit(step, l1_->header(step)->object_bytes, std::shared_future<Status>());
}

void Replicator::Submit(uint64_t step, uint64_t object_bytes, std::shared_future<Status> sealed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Item item;
    item.step = step;
    item.sealed = std::move(sealed);
    item.object_bytes = object_bytes;
    queue_.push_back(std::move(item));
    Remember(&submitted_, step);
    ++steps_submitted_;
  }
  cv_.notify_all();
}

Status Replicator::Wait(uint64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  // A step this replicator was never given (one of an earlier epoch) has no replica of its own
  // to wait for, but the replicas still in flight read L1 areas the caller may overwrite next:
  // it waits for every step given so far.
  const bool given = std::find(submitted_.begin(), submitted_.end(), step) != submitted_.end();
  auto done = [&] {
    if (!given) return steps_finished_ == steps_submitted_;
    return std::find(done_.begin(), done_.end(), step) != done_.end() ||
           (!done_.empty() && done_.back() > step);
  };
  cv_.wait(lock, [&] { return !error_.ok() || stop_ || done(); });
  if (!error_.ok()) return error_;
  return done() ? Status::Ok() : Status::Aborted("replication stopped");
}

Status Replicator::Call(Work work) {
  auto result = std::make_shared<Status>(Status::Unavailable("not run"));
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  const size_t ticket = ++calls_queued_;
  Item item;
  item.work = std::move(work);
  item.result = result;
  queue_.push_back(std::move(item));
  cv_.notify_all();
  cv_.wait(lock, [&] { return calls_done_ >= ticket || stop_ || !error_.ok(); });
  if (calls_done_ >= ticket) return *result;
  return error_.ok() ? Status::Aborted("replication stopped") : error_;
}

void Replicator::Finish(const Item& item, const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (item.work) {
    *item.result = s;
    ++calls_done_;
  } else {
    ++steps_finished_;
    if (s.ok()) Remember(&done_, item.step);
  }
  // A failed exchange leaves the epoch's communicator unusable: the replicator stops there.
  if (!s.ok() && !item.work) error_ = s;
  cv_.notify_all();
}

// Never throws (the thread's guard catches what a bug would throw); an exchange's error stops the
// thread and is reported by Wait and Call.
void Replicator::Run() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const Status s =
        RunGuarded("the replicator", [&] { return item.work ? item.work(comm_) : Exchange(item); });
    Finish(item, s);
    if (!s.ok() && !item.work) return;
  }
}

// Rank r sends its replica range of `step` to r + 1 and receives r - 1's: the headers on the first
// stream, then one stripe on each, then the checksums on the first (each rank's once its capture
// has hashed the area: the bytes travel while they are hashed). A send completes when its
// receiver takes it, so on each stream one side of every link sends first and the other receives
// first (even ranks send first on even streams, odd ranks on odd ones): no stream's ring waits on
// itself, and with two streams or more both directions of a link are busy at once.
Status Replicator::Exchange(const Item& item) {
  const uint64_t step = item.step;
  const auto begin = std::chrono::steady_clock::now();
  const int right = (rank_ + 1) % world_, left = (rank_ + world_ - 1) % world_;
  const Layout& layout = l1_->layout();
  const AreaHeader* area = l1_->header(step);
  const char* mine = l1_->payload(step) + layout.replica_begin();
  WireHeader out{step, layout.replica_bytes(item.object_bytes), 0};
  WireHeader in{};
  auto send = [&]() -> Status {
    FaultPoint("protect.l2.send");
    return comm_->Send(&out, sizeof(out), DType::kUInt8, right);
  };
  auto recv = [&]() -> Status {
    RTFT_RETURN_IF_ERROR(comm_->Recv(&in, sizeof(in), DType::kUInt8, left));
    if (in.step != step)
      return Status::DataLoss("rank " + std::to_string(left) + " replicated step " +
                              std::to_string(in.step) + " while this rank is at " +
                              std::to_string(step));
    uint64_t max_in = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      max_in = max_in_;
    }
    if (in.bytes > max_in)
      return Status::DataLoss("rank " + std::to_string(left) + " sent a replica of " +
                              std::to_string(in.bytes) + " bytes, more than its state's " +
                              std::to_string(max_in));
    return Status::Ok();
  };
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? send() : recv());
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? recv() : send());
  const auto headed = std::chrono::steady_clock::now();
  RTFT_ASSIGN_OR_RETURN(char* dst, l2_->Prepare(step, in.bytes));
  std::mutex mu;
  Status failed;
  auto stripe = [&](size_t j) {
    const Status s =
        RunGuarded("an L2 stripe", [&] { return Stripe(j, mine, out.bytes, dst, in.bytes); });
    if (s.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failed.ok()) failed = s;
    }
    AbortAll();  // the other stripes wait for peers that will not come: they return
  };
  if (pool_) {
    pool_->ParallelFor(streams_.size(), stripe);
  } else {
    stripe(0);
  }
  RTFT_RETURN_IF_ERROR(failed);
  const auto striped = std::chrono::steady_clock::now();
  // The checksums: this rank's once its capture is over. A capture that failed sends none (the
  // neighbour then waits until the epoch is aborted, as for a replica never begun).
  if (item.sealed.valid()) RTFT_RETURN_IF_ERROR(item.sealed.get());
  const auto sealed_at = std::chrono::steady_clock::now();
  if (area->state != kComplete || area->step != step || area->object_bytes != item.object_bytes)
    return Status::Internal("the L1 area of step " + std::to_string(step) +
                            " was not sealed when its capture ended");
  WireHeader out_sum{step, out.bytes, area->replica_checksum};
  WireHeader in_sum{};
  auto send_sum = [&] { return comm_->Send(&out_sum, sizeof(out_sum), DType::kUInt8, right); };
  auto recv_sum = [&]() -> Status {
    RTFT_RETURN_IF_ERROR(comm_->Recv(&in_sum, sizeof(in_sum), DType::kUInt8, left));
    if (in_sum.step != step || in_sum.bytes != in.bytes)
      return Status::DataLoss("rank " + std::to_string(left) + " ended its replica of step " +
                              std::to_string(step) + " with the checksum of step " +
                              std::to_string(in_sum.step) + " (" + std::to_string(in_sum.bytes) +
                              " bytes)");
    return Status::Ok();
  };
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? send_sum() : recv_sum());
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? recv_sum() : send_sum());
  l2_->Seal(step, left, comm_->epoch(), in.bytes, in_sum.checksum);
  // Every rank has now sealed its neighbour's replica of `step`: only from here on may a rank's
  // next capture drop step - 1 from its snapshot (docs/protect.md, "Why the barrier"). The
  // barrier is the gather of every rank's checksum of its replicated tensors: each sends its own
  // once sealed and has everyone's when it returns, which is a barrier too; a copy that differs
  // from the majority's is corrupt (docs/protect.md, "Silent data corruption").
  const auto summed = std::chrono::steady_clock::now();
  if (check_ && world_ > 1) {
    RTFT_RETURN_IF_ERROR(Compare(step, area->checksum));
  } else {
    RTFT_RETURN_IF_ERROR(comm_->Barrier());
  }
  const auto end = std::chrono::steady_clock::now();
  counters_->bytes += out.bytes + in.bytes;
  counters_->micros += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(end - begin).count());
  using Ms = std::chrono::duration<double, std::milli>;
  RTFT_LOG(kDebug, kLogRuntime) << "L2 step " << step << " at "
                                << Ms(begin.time_since_epoch()).count() << " ms: headers "
                                << Ms(headed - begin).count() << " ms, stripes "
                                << Ms(striped - headed).count() << " ms ("
                                << (out.bytes + in.bytes) / 1e6 << " MB), own seal "
                                << Ms(sealed_at - striped).count() << " ms, checksums "
                                << Ms(summed - sealed_at).count() << " ms, barrier "
                                << Ms(end - summed).count() << " ms";
  return Status::Ok();
}

bool Replicator::Disagreed(uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Corruption& c : corrupt_)
    if (c.step == step) return true;
  return false;
}

std::optional<Corruption> Replicator::TakeCorruption() {
  std::lock_guard<std::mutex> lock(mu_);
  if (corrupt_.empty()) return std::nullopt;
  Corruption c = std::move(corrupt_.front());
  corrupt_.pop_front();
  return c;
}

Status Replicator::Stripe(size_t j, const char* send, uint64_t send_bytes, char* recv,
                          uint64_t recv_bytes) {
  const int right = (rank_ + 1) % world_, left = (rank_ + world_ - 1) % world_;
  const size_t k = streams_.size();
  // Stripe j of n bytes: [j * per, (j + 1) * per), per rounded up to whole pages.
  auto cut = [&](uint64_t n) {
    const uint64_t per = ((n + k - 1) / k + kAlign - 1) / kAlign * kAlign;
    const uint64_t begin = std::min<uint64_t>(n, j * per);
    return std::make_pair(begin, std::min<uint64_t>(n, begin + per) - begin);
  };
  const auto [out_at, out_n] = cut(send_bytes);
  const auto [in_at, in_n] = cut(recv_bytes);
  Communicator* c = streams_[j].get();
  auto tx = [&] { return c->Send(send + out_at, out_n, DType::kUInt8, right); };
  auto rx = [&] { return c->Recv(recv + in_at, in_n, DType::kUInt8, left); };
  const bool send_first = (rank_ % 2 == 0) == (j % 2 == 0);
  RTFT_RETURN_IF_ERROR(send_first ? tx() : rx());
  return send_first ? rx() : tx();
}

}  // namespace rtft::protect
