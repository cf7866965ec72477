// The Gloo backend: Gloo's TCP transport (one pair per peer it talks to, unbound buffers) under
// rt-ft's own ring collectives, whose every wait Abort() can interrupt. Gloo's own collectives
// cannot be aborted from another thread, so only the transport is used (docs/comm.md). A
// communicator connects every pair when it is made, or only its two ring neighbours and any other
// pair at its first send or receive (RTFT_COMM_GLOO_PAIRS; docs/comm.md, "Which pairs connect").
// No Gloo type leaves src/comm/gloo/.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/comm_internal.h"
#include "comm/gloo/frame.h"
#include "core/thread.h"

namespace rtft::comm::gloo_backend {

class GlooComm;

// Gloo tags ("slots") of the message kinds on a pair. Messages of one slot on one pair are
// matched in order.
constexpr uint64_t kSlotHello = 1;
constexpr uint64_t kSlotFrame = 2;
constexpr uint64_t kSlotBye = 4;
// A payload's slot carries its size. Gloo ends the process when a payload is larger than the
// receive it matched, so a receive can only ever match a payload of its own size: a receive may
// then be posted before the payload's frame arrived (no round trip per message), and ranks that
// disagree on a size leave both unmatched until the frame check reports the disagreement.
constexpr uint64_t PayloadSlot(uint64_t bytes) { return (uint64_t{1} << 63) | bytes; }

// An unbound buffer that Abort() can reach: registered with its communicator while it lives, so
// that an abort wakes whichever wait is on it.
class Buf {
 public:
  Buf(GlooComm* comm, std::unique_ptr<gloo::transport::UnboundBuffer> ub);
  ~Buf();
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  gloo::transport::UnboundBuffer* get() const { return ub_.get(); }

 private:
  GlooComm* comm_;
  std::unique_ptr<gloo::transport::UnboundBuffer> ub_;
};

class GlooComm final : public Communicator {
 public:
  static StatusOr<std::unique_ptr<Communicator>> Create(const ResolvedOptions& options);
  ~GlooComm() override;

  CommBackend backend() const override { return CommBackend::kGloo; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  uint64_t epoch() const override { return opts_.o.epoch; }
  const std::string& name() const override { return opts_.o.name; }

  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                   const CallOptions& call) override;
  Status Broadcast(void* buffer, size_t count, DType dtype, int root,
                   const CallOptions& call) override;
  Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                   const CallOptions& call) override;
  Status AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                    const CallOptions& call) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                       const CallOptions& call) override;
  Status ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType dtype, ReduceOp op, const CallOptions& call) override;
  Status Send(const void* buffer, size_t count, DType dtype, int peer,
              const CallOptions& call) override;
  Status Recv(void* buffer, size_t count, DType dtype, int peer, const CallOptions& call) override;
  Status Barrier(const CallOptions& call) override;
  Status Wait(void* stream, std::chrono::milliseconds timeout) override;
  void Abort() override { Abort("aborted by the application or a failure event"); }
  bool aborted() const override { return aborted_.load(); }

  // Used by the calls (transfer.cc, collectives.cc).
  void Abort(const std::string& reason);
  // A registered unbound buffer over [ptr, ptr + bytes).
  StatusOr<std::unique_ptr<Buf>> NewBuf(const void* ptr, size_t bytes);
  // Waits for one receive (or send) completion on `buf`: OK, kAborted (Abort() or a failed
  // peer) or kDeadlineExceeded (then Gloo has closed every pair).
  Status WaitRecv(Buf* buf, Clock::time_point deadline);
  Status WaitSend(Buf* buf, Clock::time_point deadline);
  // Connects the pair to `peer` unless it is connected (its first send or receive, when only
  // the ring neighbours connected at creation). On the calling thread only.
  Status Reach(int peer, Clock::time_point deadline) {
    return connected_[peer] ? Status::Ok() : ConnectPeers({peer}, deadline);
  }
  // The same for a set of peers that every rank names in the same call (rank a names b exactly
  // when b names a), connected together (docs/comm.md, "Connecting").
  Status ReachAll(const std::set<int>& peers, Clock::time_point deadline);
  uint64_t NextSendSeq(int peer) { return peers_[peer].send_seq++; }
  uint64_t NextRecvSeq(int peer) { return peers_[peer].recv_seq++; }
  uint64_t comm_id() const { return comm_id_; }
  size_t segment_bytes() const { return segment_bytes_; }
  // The state every call starts from: OK, or why the communicator is unusable.
  Status Usable() const;
  // A call failed: the communicator is unusable from now on. Closes the pairs the call used (no
  // Gloo thread touches the call's buffers once this returns) and returns `why`.
  Status Break(const Status& why, const std::set<int>& peers);
  // The number of the next collective (1, 2, ...).
  uint64_t BeginCall() { return ++calls_; }
  // Watched (comm/watch.h): its calls count in the process's ProgressMonitor. `job_ranks[i]` is
  // the job rank of this communicator's rank i. Before the first call.
  void WatchCalls(std::vector<int> job_ranks) { job_ranks_ = std::move(job_ranks); }
  bool watched() const { return !job_ranks_.empty(); }
  // The job rank of `peer` where the communicator is watched, else -1.
  int32_t JobRankOf(int peer) const {
    return watched() && peer >= 0 && static_cast<size_t>(peer) < job_ranks_.size()
               ? job_ranks_[peer]
               : -1;
  }
  Clock::time_point CallDeadline(const CallOptions& call) const {
    return DeadlineFrom(call.timeout, opts_.timeout);
  }

 private:
  friend class Buf;
  struct Peer {
    uint64_t send_seq = 0, recv_seq = 0;
    std::string token;  // the 16 random bytes the peer published with its addresses
  };

  explicit GlooComm(const ResolvedOptions& options);
  Status Connect();
  // Creates, publishes, connects and greets the pairs to `peers` (none of them connected yet),
  // then has the watcher listen to them.
  Status ConnectPeers(const std::vector<int>& peers, Clock::time_point deadline);
  // The address and token `peer` published for its pair to this rank.
  Status LookUp(int peer, Clock::time_point deadline, std::vector<char>* address);
  Status SayHello(const std::vector<int>& peers, Clock::time_point deadline);
  Status StartWatcher();
  Status Listen(int peer);  // the watcher's receive of `peer`'s goodbye
  std::set<int> Created() const;
  void Watch();
  void Register(gloo::transport::UnboundBuffer* ub);
  void Unregister(gloo::transport::UnboundBuffer* ub);
  void SayBye();
  void ClosePairs(const std::set<int>& peers);

  const ResolvedOptions opts_;
  const int rank_, size_;
  const uint64_t comm_id_;
  size_t segment_bytes_ = 0;
  std::string token_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::transport::Context> context_;
  std::vector<Peer> peers_;
  std::vector<char> connected_;  // per peer: greeted, and listened to (calling thread only)
  uint64_t calls_ = 0;
  std::vector<int> job_ranks_;  // WatchCalls'

  // Abort state: the live buffers and why the communicator stopped. Abort() holds mu_ only to
  // flag buffers; it never waits for a peer.
  mutable std::mutex mu_;
  std::set<gloo::transport::UnboundBuffer*> live_;
  std::atomic<bool> aborted_{false};
  Status broken_;
  std::set<int> created_;  // the peers whose pair exists: Abort() closes them (under mu_)
  bool closable_ = false;  // Abort() may start a closer (until the destructor runs)
  Thread closer_;          // Abort()'s, closing the pairs

  // The watcher: one receive per connected peer on kSlotBye, pending for the communicator's
  // life (a pair connected later adds its own). A peer
  // that closes its communicator cleanly completes it with a bye frame; a peer that dies fails it
  // (Gloo signals the error to the pending receive), which aborts this communicator at once.
  std::vector<Frame> bye_frames_;
  std::unique_ptr<Buf> bye_buf_;
  Thread watcher_;
  std::atomic<bool> watcher_stop_{false};

  AbortRegistry::Token abort_token_ = 0;
  bool subscribed_ = false;
};

}  // namespace rtft::comm::gloo_backend
