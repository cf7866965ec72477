// One call's traffic over the Gloo pairs: framed sends that never block, and in-order receives
// from one peer that post a payload only after its frame was checked. Every wait is bounded by
// the call's deadline and ends at once when the communicator is aborted.
#pragma once

#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "comm/gloo/gloo_comm.h"
#include "comm/gloo/sigpipe_guard.h"

namespace rtft::comm::gloo_backend {

class Call {
 public:
  Call(GlooComm* comm, OpKind op, DType dtype, ReduceOp reduce, int root,
       const CallOptions& options);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  GlooComm* comm() const { return comm_; }
  Clock::time_point deadline() const { return deadline_; }
  // The frame this rank expects from `src` next, for a payload of `bytes`.
  FrameExpect Expect(int src, uint64_t bytes);

  // Posts a frame and the payload [data, data + bytes) to `peer`; returns an id for WaitSent.
  StatusOr<size_t> Send(int peer, const void* data, size_t bytes);
  // Waits until the sends up to `id` (in posting order) have left this rank.
  Status WaitSent(size_t id);
  Status WaitAllSent();
  // Ends the call with `s`: on success waits for the sends; on failure the communicator is
  // broken and the pairs this call used are closed, so no Gloo thread touches its buffers after
  // the call returns. Must be called before the call's receivers go.
  Status Finish(Status s);

  void Used(int peer) { used_.insert(peer); }

 private:
  SigpipeGuard sigpipe_;  // for the call's whole length: any Gloo call may write
  struct OutMsg {
    int peer = -1;
    Frame frame;
    std::unique_ptr<Buf> head, payload;
  };
  GlooComm* comm_;
  const OpKind op_;
  const DType dtype_;
  const ReduceOp reduce_;
  const int root_;
  const uint64_t number_;
  const Clock::time_point deadline_;
  std::deque<std::unique_ptr<OutMsg>> sends_;  // not yet known to have left
  size_t sends_posted_ = 0, sends_done_ = 0;
  std::set<int> used_;
  const bool watched_;  // counted in the process's ProgressMonitor (comm/watch.h)
};

// Receives a planned sequence of messages from one peer, in order, with up to `window` payload
// receives posted ahead.
class Receiver {
 public:
  struct Msg {
    void* dst;     // where the payload lands
    size_t bytes;  // its exact size; the peer's frame must say the same
  };
  Receiver(Call* call, int peer, std::vector<Msg> plan, size_t window);
  ~Receiver();
  // Waits until the next message of the plan is in place.
  Status Next();
  size_t done() const { return next_; }

 private:
  Status PostHeader(size_t m);
  Status PostPayload(size_t m);

  Call* call_;
  const int peer_;
  const std::vector<Msg> plan_;
  const size_t window_;
  std::vector<Frame> frames_;  // one landing slot per header posted ahead
  std::vector<std::unique_ptr<Buf>> frame_bufs_;
  std::deque<std::unique_ptr<Buf>> payloads_;  // messages [next_, payloads_posted_)
  size_t next_ = 0, headers_posted_ = 0, payloads_posted_ = 0;
};

}  // namespace rtft::comm::gloo_backend
