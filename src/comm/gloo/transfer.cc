#include "comm/gloo/transfer.h"

#include <algorithm>

#include "core/progress.h"

namespace rtft::comm::gloo_backend {

Call::Call(GlooComm* comm, OpKind op, DType dtype, ReduceOp reduce, int root,
           const CallOptions& options)
    : comm_(comm),
      op_(op),
      dtype_(dtype),
      reduce_(reduce),
      root_(root),
      // Collectives are numbered so that ranks in different collectives notice; point-to-point
      // calls differ between ranks by nature and carry 0 (the per-pair sequence still orders
      // them).
      number_(op == OpKind::kSendRecv ? 0 : comm->BeginCall()),
      deadline_(comm->CallDeadline(options)),
      watched_(comm->watched()) {
  if (watched_) ProgressMonitor::Get().BeginCall();
}

Call::~Call() {
  if (watched_) ProgressMonitor::Get().EndCall();
}

FrameExpect Call::Expect(int src, uint64_t bytes) {
  FrameExpect e;
  e.comm_id = comm_->comm_id();
  e.seq = comm_->NextRecvSeq(src);
  e.call = number_;
  e.bytes = bytes;
  e.op = op_;
  e.src = src;
  e.dst = comm_->rank();
  e.dtype = static_cast<uint8_t>(dtype_);
  e.reduce = static_cast<uint8_t>(reduce_);
  e.root = root_;
  return e;
}

StatusOr<size_t> Call::Send(int peer, const void* data, size_t bytes) {
  used_.insert(peer);
  RTFT_RETURN_IF_ERROR(comm_->Reach(peer, deadline_));
  auto msg = std::make_unique<OutMsg>();
  msg->peer = peer;
  Frame& f = msg->frame;
  f.op = static_cast<uint16_t>(op_);
  f.comm_id = comm_->comm_id();
  f.seq = comm_->NextSendSeq(peer);
  f.call = number_;
  f.bytes = bytes;
  f.src = static_cast<uint32_t>(comm_->rank());
  f.dst = static_cast<uint32_t>(peer);
  f.dtype = static_cast<uint8_t>(dtype_);
  f.reduce = static_cast<uint8_t>(reduce_);
  f.root = root_;
  Seal(&f);
  RTFT_ASSIGN_OR_RETURN(msg->head, comm_->NewBuf(&msg->frame, sizeof(Frame)));
  if (bytes > 0) {
    RTFT_ASSIGN_OR_RETURN(msg->payload, comm_->NewBuf(data, bytes));
  }
  try {
    msg->head->get()->send(peer, kSlotFrame, 0, sizeof(Frame));
    if (bytes > 0) msg->payload->get()->send(peer, PayloadSlot(bytes), 0, bytes);
  } catch (const std::exception& e) {
    comm_->Abort(std::string("sending to rank ") + std::to_string(peer) + ": " + e.what());
    return comm_->Usable();
  }
  sends_.push_back(std::move(msg));
  return sends_posted_++;
}

Status Call::WaitSent(size_t id) {
  while (sends_done_ <= id && !sends_.empty()) {
    OutMsg& m = *sends_.front();
    const WaitingOn waiting(comm_->JobRankOf(m.peer));
    RTFT_RETURN_IF_ERROR(comm_->WaitSend(m.head.get(), deadline_));
    if (m.payload) RTFT_RETURN_IF_ERROR(comm_->WaitSend(m.payload.get(), deadline_));
    sends_.pop_front();
    ++sends_done_;
  }
  return Status::Ok();
}

Status Call::WaitAllSent() {
  if (sends_posted_ == 0) return Status::Ok();
  return WaitSent(sends_posted_ - 1);
}

Status Call::Finish(Status s) {
  if (s.ok()) s = WaitAllSent();
  if (s.ok()) return s;
  return comm_->Break(s, used_);
}

Receiver::Receiver(Call* call, int peer, std::vector<Msg> plan, size_t window)
    : call_(call),
      peer_(peer),
      plan_(std::move(plan)),
      window_(std::max<size_t>(1, window)),
      frames_(window_ + 2),
      frame_bufs_(window_ + 2) {
  call_->Used(peer);
}

Receiver::~Receiver() = default;

Status Receiver::PostHeader(size_t m) {
  const size_t slot = m % frames_.size();
  if (!frame_bufs_[slot]) {
    RTFT_ASSIGN_OR_RETURN(frame_bufs_[slot], call_->comm()->NewBuf(&frames_[slot], sizeof(Frame)));
  }
  try {
    frame_bufs_[slot]->get()->recv(peer_, kSlotFrame, 0, sizeof(Frame));
  } catch (const std::exception& e) {
    call_->comm()->Abort(std::string("receiving from rank ") + std::to_string(peer_) + ": " +
                         e.what());
    return call_->comm()->Usable();
  }
  return Status::Ok();
}

Status Receiver::PostPayload(size_t m) {
  const Msg& msg = plan_[m];
  std::unique_ptr<Buf> payload;
  if (msg.bytes > 0) {
    RTFT_ASSIGN_OR_RETURN(payload, call_->comm()->NewBuf(msg.dst, msg.bytes));
    try {
      payload->get()->recv(peer_, PayloadSlot(msg.bytes), 0, msg.bytes);
    } catch (const std::exception& e) {
      call_->comm()->Abort(std::string("receiving from rank ") + std::to_string(peer_) + ": " +
                           e.what());
      return call_->comm()->Usable();
    }
  }
  payloads_.push_back(std::move(payload));
  return Status::Ok();
}

// Message k: its frame is checked before its payload is waited for. Frames and payloads of the
// messages after it are posted ahead, so a rank never waits for a round trip between messages;
// nothing here waits for anything but message k, so no rank waits on a message that depends on
// one it has not forwarded yet.
Status Receiver::Next() {
  if (next_ >= plan_.size()) return Status::Internal("Receiver::Next past its plan");
  RTFT_RETURN_IF_ERROR(call_->comm()->Reach(peer_, call_->deadline()));
  while (headers_posted_ < std::min(plan_.size(), next_ + frames_.size()))
    RTFT_RETURN_IF_ERROR(PostHeader(headers_posted_++));
  while (payloads_posted_ < std::min(plan_.size(), next_ + window_)) {
    RTFT_RETURN_IF_ERROR(PostPayload(payloads_posted_));
    ++payloads_posted_;
  }
  const size_t slot = next_ % frames_.size();
  const WaitingOn waiting(call_->comm()->JobRankOf(peer_));
  RTFT_RETURN_IF_ERROR(call_->comm()->WaitRecv(frame_bufs_[slot].get(), call_->deadline()));
  RTFT_RETURN_IF_ERROR(CheckFrame(frames_[slot], call_->Expect(peer_, plan_[next_].bytes)));
  std::unique_ptr<Buf> payload = std::move(payloads_.front());
  payloads_.pop_front();
  if (payload) RTFT_RETURN_IF_ERROR(call_->comm()->WaitRecv(payload.get(), call_->deadline()));
  ++next_;
  return Status::Ok();
}

}  // namespace rtft::comm::gloo_backend
