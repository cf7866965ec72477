#include "protect/replicator.h"

#include <algorithm>

#include "core/fault_point.h"

namespace rtft::protect {
namespace {

// What precedes a replica on the wire.
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

Replicator::Replicator(std::unique_ptr<Communicator> comm, Snapshot* l1, ReplicaStore* l2)
    : comm_(std::move(comm)), rank_(comm_->rank()), world_(comm_->world_size()), l1_(l1), l2_(l2) {}

StatusOr<std::unique_ptr<Replicator>> Replicator::Start(std::unique_ptr<Communicator> comm,
                                                        Snapshot* l1, ReplicaStore* l2) {
  std::unique_ptr<Replicator> r(new Replicator(std::move(comm), l1, l2));
  RTFT_ASSIGN_OR_RETURN(r->thread_, Thread::Start("rtft-replicator", [p = r.get()] { p->Run(); }));
  return r;
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_->Abort();
  thread_.Join();
}

void Replicator::Expect(uint64_t max_replica_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_in_ = max_replica_bytes;
}

void Replicator::Submit(uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({step, nullptr, nullptr});
    Remember(&submitted_, step);
  }
  cv_.notify_all();
}

Status Replicator::Wait(uint64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  // A step this replicator was never given (one of an earlier epoch) has nothing to wait for.
  if (std::find(submitted_.begin(), submitted_.end(), step) == submitted_.end()) return error_;
  auto done = [&] {
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
  queue_.push_back({0, std::move(work), result});
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
  } else if (s.ok()) {
    Remember(&done_, item.step);
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
    const Status s = RunGuarded(
        "the replicator", [&] { return item.work ? item.work(comm_.get()) : Exchange(item.step); });
    Finish(item, s);
    if (!s.ok() && !item.work) return;
  }
}

// Rank r sends its replica range of `step` to r + 1 and receives r - 1's. A send completes when
// its receiver takes it, so even ranks send first and odd ranks receive first: the ring never
// waits on itself.
Status Replicator::Exchange(uint64_t step) {
  const int right = (rank_ + 1) % world_, left = (rank_ + world_ - 1) % world_;
  const Layout& layout = l1_->layout();
  const AreaHeader* area = l1_->header(step);
  const char* mine = l1_->payload(step) + layout.shard_begin;
  // The capture computed the range's checksum as it copied it.
  WireHeader out{step, layout.replica_bytes(area->object_bytes), area->replica_checksum};
  auto send = [&]() -> Status {
    FaultPoint("protect.l2.send");
    RTFT_RETURN_IF_ERROR(comm_->Send(&out, sizeof(out), DType::kUInt8, right));
    return comm_->Send(mine, out.bytes, DType::kUInt8, right);
  };
  auto recv = [&]() -> Status {
    WireHeader in{};
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
    RTFT_ASSIGN_OR_RETURN(char* dst, l2_->Prepare(step, in.bytes));
    RTFT_RETURN_IF_ERROR(comm_->Recv(dst, in.bytes, DType::kUInt8, left));
    l2_->Seal(step, left, comm_->epoch(), in.bytes, in.checksum);
    return Status::Ok();
  };
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? send() : recv());
  RTFT_RETURN_IF_ERROR(rank_ % 2 == 0 ? recv() : send());
  // Every rank has now sealed its neighbour's replica of `step`: only from here on may a rank's
  // next capture drop step - 1 from its snapshot (docs/protect.md, "Why the barrier").
  return comm_->Barrier();
}

}  // namespace rtft::protect
