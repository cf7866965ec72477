// rt-ft's collectives over Gloo pairs: pipelined rings with a fixed reduction order
// (docs/comm.md, "Algorithms"). A ring step moves one block per rank to its right neighbour;
// blocks are cut into segments, and a segment is forwarded as soon as it arrived (and was
// reduced), so the steps overlap like a pipeline.
#include <algorithm>
#include <cstring>
#include <memory>

#include "comm/gloo/gloo_comm.h"
#include "comm/gloo/transfer.h"
#include "comm/reduce.h"
#include "core/fault_point.h"

namespace rtft::comm::gloo_backend {
namespace {

// Payload receives posted ahead of the one a call waits for (and staging segments of a reduction).
constexpr size_t kWindow = 4;

// One ring pass: `steps` steps, the first `reduce_steps` of which reduce. At step s this rank
// sends block (r - s - 1 - offset) and receives block (r - s - 2 - offset), both mod N, where
// offset is `step_offset`; block b is [off[b], off[b] + len[b]) bytes of the buffers.
struct Ring {
  int steps = 0, reduce_steps = 0, step_offset = 0;
  std::vector<size_t> off, len;
  const char* in = nullptr;          // this rank's contribution (reduce steps)
  const char* first_send = nullptr;  // base of the block sent at step 0
  char* out = nullptr;               // base of the blocks received or reduced
  // Reduce-scatter: the last reduce step writes block r to `final_dst`, earlier ones alternate
  // between the two halves of `scratch` (each as large as the largest block).
  bool scatter = false;
  char* final_dst = nullptr;
  char* scratch = nullptr;
  size_t scratch_half = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool divide = false;  // kAvg: divide the last reduce step's result by N
};

int Mod(long v, int n) { return static_cast<int>(((v % n) + n) % n); }

// Scratch memory of a call, left uninitialized: every byte is received or written before it is
// read, and zeroing megabytes per call showed up in profiles.
std::unique_ptr<char[]> Scratch(size_t bytes) {
  return std::unique_ptr<char[]>(bytes > 0 ? new char[bytes] : nullptr);
}

size_t Segments(size_t bytes, size_t seg) { return bytes == 0 ? 1 : (bytes + seg - 1) / seg; }

Status RunRing(Call& call, const Ring& ring) {
  GlooComm* comm = call.comm();
  const int n = comm->world_size(), r = comm->rank();
  const int left = Mod(r - 1, n), right = Mod(r + 1, n);
  const size_t seg = comm->segment_bytes();
  const size_t esize = DTypeSize(ring.dtype);
  const size_t window = kWindow;
  auto send_block = [&](int s) { return Mod(long(r) - s - 1 - ring.step_offset, n); };
  auto recv_block = [&](int s) { return Mod(long(r) - s - 2 - ring.step_offset, n); };
  // Where step s's result for a block lands (before it is forwarded at step s + 1).
  auto dest = [&](int s, int b) -> char* {
    if (s >= ring.reduce_steps || !ring.scatter) return ring.out + ring.off[b];
    if (s == ring.reduce_steps - 1) return ring.final_dst;
    return ring.scratch + (s % 2) * ring.scratch_half;
  };

  const auto staging = Scratch(ring.reduce_steps > 0 ? window * seg : 0);
  std::vector<Receiver::Msg> plan;
  for (int s = 0; s < ring.steps; ++s) {
    const int b = recv_block(s);
    const size_t len = ring.len[b], nseg = Segments(len, seg);
    for (size_t j = 0; j < nseg; ++j) {
      const size_t bytes = std::min(seg, len - std::min(len, j * seg));
      char* dst = s < ring.reduce_steps ? staging.get() + (plan.size() % window) * seg
                                        : dest(s, b) + j * seg;
      plan.push_back({dst, bytes});
    }
  }
  Receiver rx(&call, left, std::move(plan), window);

  // send_ids[s % 3][j]: the send of step s's segment j. Reduce-scatter waits for it before
  // the scratch half that send read is written again, two steps later.
  std::vector<std::vector<size_t>> send_ids(3);
  {
    const int b = send_block(0);
    const size_t len = ring.len[b];
    send_ids[0].resize(Segments(len, seg));
    for (size_t j = 0; j < send_ids[0].size(); ++j) {
      const size_t o = std::min(len, j * seg), bytes = std::min(seg, len - o);
      RTFT_ASSIGN_OR_RETURN(send_ids[0][j],
                            call.Send(right, ring.first_send + ring.off[b] + o, bytes));
    }
  }
  size_t m = 0;
  for (int s = 0; s < ring.steps; ++s) {
    const int b = recv_block(s);
    const size_t len = ring.len[b], nseg = Segments(len, seg);
    send_ids[(s + 1) % 3].assign(nseg, 0);
    for (size_t j = 0; j < nseg; ++j, ++m) {
      const size_t o = std::min(len, j * seg), bytes = std::min(seg, len - o);
      char* result = dest(s, b) + o;
      if (ring.scatter && s >= 2 && s < ring.reduce_steps - 1) {
        const auto& before = send_ids[(s - 1) % 3];  // read this half; blocks may differ in size
        RTFT_RETURN_IF_ERROR(call.WaitSent(before[std::min(j, before.size() - 1)]));
      }
      FaultPoint("comm.gloo.ring_segment");
      // The same counted on watched communicators only (the application's collectives, not
      // rt-ft's own on other threads), so that `@k` lands in the same call however the threads
      // interleave (docs/testing.md).
      if (call.comm()->watched()) FaultPoint("comm.gloo.watched_segment");
      RTFT_RETURN_IF_ERROR(rx.Next());
      if (s < ring.reduce_steps) {
        const char* got = staging.get() + (m % window) * seg;
        ReduceInto(ring.dtype, ring.op, got, ring.in + ring.off[b] + o, result, bytes / esize);
        if (ring.divide && s == ring.reduce_steps - 1)
          DivideBy(ring.dtype, result, bytes / esize, n);
      }
      if (s + 1 < ring.steps) {
        RTFT_ASSIGN_OR_RETURN(send_ids[(s + 1) % 3][j], call.Send(right, result, bytes));
      }
    }
  }
  return Status::Ok();
}

// Blocks of `count` elements split as evenly as possible (the first count % n get one more).
void EvenBlocks(size_t count, int n, size_t esize, std::vector<size_t>* off,
                std::vector<size_t>* len) {
  off->resize(n);
  len->resize(n);
  size_t at = 0;
  for (int b = 0; b < n; ++b) {
    const size_t elems = count / n + (static_cast<size_t>(b) < count % n ? 1 : 0);
    (*off)[b] = at * esize;
    (*len)[b] = elems * esize;
    at += elems;
  }
}

StatusOr<size_t> CountsBlocks(const std::vector<size_t>& counts, int n, DType dtype,
                              std::vector<size_t>* off, std::vector<size_t>* len) {
  if (counts.size() != static_cast<size_t>(n))
    return Status::InvalidArgument("counts has " + std::to_string(counts.size()) + " entries for " +
                                   std::to_string(n) + " ranks");
  off->resize(n);
  len->resize(n);
  size_t at = 0;
  for (int b = 0; b < n; ++b) {
    RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(counts[b], dtype, "counts"));
    if (at + bytes < at) return Status::InvalidArgument("counts overflow the byte count");
    (*off)[b] = at;
    (*len)[b] = bytes;
    at += bytes;
  }
  return at;
}

Status NeedBuffers(size_t bytes, const void* a, const void* b) {
  if (bytes > 0 && (a == nullptr || b == nullptr))
    return Status::InvalidArgument("a null buffer for a non-empty call");
  return Status::Ok();
}

}  // namespace

Status GlooComm::AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           const CallOptions& options) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "all-reduce"));
  RTFT_RETURN_IF_ERROR(NeedBuffers(bytes, send, recv));
  RTFT_RETURN_IF_ERROR(Usable());
  if (size_ == 1) {
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
    return Status::Ok();
  }
  Ring ring;
  ring.steps = 2 * (size_ - 1);
  ring.reduce_steps = size_ - 1;
  EvenBlocks(count, size_, DTypeSize(dtype), &ring.off, &ring.len);
  ring.in = static_cast<const char*>(send);
  ring.first_send = ring.in;
  ring.out = static_cast<char*>(recv);
  ring.dtype = dtype;
  ring.op = op;
  ring.divide = op == ReduceOp::kAvg;
  Call call(this, OpKind::kAllReduce, dtype, op, -1, options);
  return call.Finish(RunRing(call, ring));
}

Status GlooComm::ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               const CallOptions& options) {
  std::vector<size_t> counts(size_, count);
  return ReduceScatterV(send, recv, counts, dtype, op, options);
}

Status GlooComm::ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType dtype, ReduceOp op, const CallOptions& options) {
  Ring ring;
  RTFT_ASSIGN_OR_RETURN(size_t total, CountsBlocks(counts, size_, dtype, &ring.off, &ring.len));
  RTFT_RETURN_IF_ERROR(NeedBuffers(total, send, send));
  RTFT_RETURN_IF_ERROR(NeedBuffers(ring.len[rank_], recv, recv));
  RTFT_RETURN_IF_ERROR(Usable());
  if (size_ == 1) {
    if (total > 0 && send != recv) std::memmove(recv, send, total);
    return Status::Ok();
  }
  const size_t largest = *std::max_element(ring.len.begin(), ring.len.end());
  const auto scratch = Scratch(size_ > 2 ? 2 * largest : 0);
  ring.steps = ring.reduce_steps = size_ - 1;
  ring.in = static_cast<const char*>(send);
  ring.first_send = ring.in;
  ring.out = nullptr;
  ring.scatter = true;
  ring.final_dst = static_cast<char*>(recv);
  ring.scratch = scratch.get();
  ring.scratch_half = largest;
  ring.dtype = dtype;
  ring.op = op;
  ring.divide = op == ReduceOp::kAvg;
  Call call(this, OpKind::kReduceScatter, dtype, op, -1, options);
  return call.Finish(RunRing(call, ring));
}

Status GlooComm::AllGather(const void* send, void* recv, size_t count, DType dtype,
                           const CallOptions& options) {
  std::vector<size_t> counts(size_, count);
  return AllGatherV(send, recv, counts, dtype, options);
}

Status GlooComm::AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType dtype, const CallOptions& options) {
  Ring ring;
  RTFT_ASSIGN_OR_RETURN(size_t total, CountsBlocks(counts, size_, dtype, &ring.off, &ring.len));
  RTFT_RETURN_IF_ERROR(NeedBuffers(ring.len[rank_], send, send));
  RTFT_RETURN_IF_ERROR(NeedBuffers(total, recv, recv));
  RTFT_RETURN_IF_ERROR(Usable());
  char* out = static_cast<char*>(recv);
  if (ring.len[rank_] > 0 && send != out + ring.off[rank_])
    std::memmove(out + ring.off[rank_], send, ring.len[rank_]);
  if (size_ == 1) return Status::Ok();
  ring.steps = size_ - 1;
  ring.step_offset = size_ - 1;
  ring.first_send = out;
  ring.out = out;
  ring.dtype = dtype;
  Call call(this, OpKind::kAllGather, dtype, ReduceOp::kSum, -1, options);
  return call.Finish(RunRing(call, ring));
}

Status GlooComm::Broadcast(void* buffer, size_t count, DType dtype, int root,
                           const CallOptions& options) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "broadcast"));
  RTFT_RETURN_IF_ERROR(NeedBuffers(bytes, buffer, buffer));
  if (root < 0 || root >= size_)
    return Status::InvalidArgument("broadcast root " + std::to_string(root) + " outside 0.." +
                                   std::to_string(size_ - 1));
  RTFT_RETURN_IF_ERROR(Usable());
  if (size_ == 1) return Status::Ok();
  // A chain from the root: each rank forwards a segment as soon as it has it.
  const int pos = Mod(rank_ - root, size_);
  const int left = Mod(rank_ - 1, size_), right = Mod(rank_ + 1, size_);
  const size_t seg = segment_bytes_, nseg = Segments(bytes, seg);
  char* data = static_cast<char*>(buffer);
  Call call(this, OpKind::kBroadcast, dtype, ReduceOp::kSum, root, options);
  Status s;
  if (pos == 0) {
    for (size_t j = 0; j < nseg && s.ok(); ++j) {
      const size_t o = std::min(bytes, j * seg);
      s = call.Send(right, data + o, std::min(seg, bytes - o)).status();
    }
    return call.Finish(s);
  }
  std::vector<Receiver::Msg> plan;
  for (size_t j = 0; j < nseg; ++j) {
    const size_t o = std::min(bytes, j * seg);
    plan.push_back({data + o, std::min(seg, bytes - o)});
  }
  Receiver rx(&call, left, plan, kWindow);
  for (size_t j = 0; j < nseg && s.ok(); ++j) {
    s = rx.Next();
    if (s.ok() && pos < size_ - 1) s = call.Send(right, plan[j].dst, plan[j].bytes).status();
  }
  return call.Finish(s);
}

Status GlooComm::Send(const void* buffer, size_t count, DType dtype, int peer,
                      const CallOptions& options) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "send"));
  RTFT_RETURN_IF_ERROR(NeedBuffers(bytes, buffer, buffer));
  if (peer < 0 || peer >= size_ || peer == rank_)
    return Status::InvalidArgument("send to rank " + std::to_string(peer) + ": not a peer");
  RTFT_RETURN_IF_ERROR(Usable());
  const size_t seg = segment_bytes_, nseg = Segments(bytes, seg);
  const char* data = static_cast<const char*>(buffer);
  Call call(this, OpKind::kSendRecv, dtype, ReduceOp::kSum, -1, options);
  Status s;
  for (size_t j = 0; j < nseg && s.ok(); ++j) {
    const size_t o = std::min(bytes, j * seg);
    s = call.Send(peer, data + o, std::min(seg, bytes - o)).status();
  }
  return call.Finish(s);
}

Status GlooComm::Recv(void* buffer, size_t count, DType dtype, int peer,
                      const CallOptions& options) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "recv"));
  RTFT_RETURN_IF_ERROR(NeedBuffers(bytes, buffer, buffer));
  if (peer < 0 || peer >= size_ || peer == rank_)
    return Status::InvalidArgument("recv from rank " + std::to_string(peer) + ": not a peer");
  RTFT_RETURN_IF_ERROR(Usable());
  const size_t seg = segment_bytes_, nseg = Segments(bytes, seg);
  char* data = static_cast<char*>(buffer);
  std::vector<Receiver::Msg> plan;
  for (size_t j = 0; j < nseg; ++j) {
    const size_t o = std::min(bytes, j * seg);
    plan.push_back({data + o, std::min(seg, bytes - o)});
  }
  Call call(this, OpKind::kSendRecv, dtype, ReduceOp::kSum, -1, options);
  Receiver rx(&call, peer, plan, kWindow);
  Status s;
  for (size_t j = 0; j < nseg && s.ok(); ++j) s = rx.Next();
  return call.Finish(s);
}

// Dissemination: in round k every rank signals rank + 2^k and waits for rank - 2^k; after
// ceil(log2 N) rounds every rank has heard, directly or not, from every other.
Status GlooComm::Barrier(const CallOptions& options) {
  RTFT_RETURN_IF_ERROR(Usable());
  if (size_ == 1) return Status::Ok();
  Call call(this, OpKind::kBarrier, DType::kUInt8, ReduceOp::kSum, -1, options);
  // A dissemination barrier: rank r sends to r + 2^k and hears from r - 2^k. Where only the
  // ring's pairs connected at creation, the others connect together at the first barrier (each
  // rank waiting for its partner's first send would go round in a cycle).
  std::set<int> partners;
  for (int dist = 1; dist < size_; dist *= 2) {
    partners.insert(Mod(rank_ + dist, size_));
    partners.insert(Mod(rank_ - dist, size_));
  }
  for (int p : partners) call.Used(p);
  Status s = ReachAll(partners, call.deadline());
  std::vector<std::unique_ptr<Receiver>> rounds;
  for (int dist = 1; dist < size_ && s.ok(); dist *= 2) {
    s = call.Send(Mod(rank_ + dist, size_), nullptr, 0).status();
    if (!s.ok()) break;
    rounds.push_back(std::make_unique<Receiver>(&call, Mod(rank_ - dist, size_),
                                                std::vector<Receiver::Msg>{{nullptr, 0}}, 1));
    s = rounds.back()->Next();
  }
  return call.Finish(s);
}

}  // namespace rtft::comm::gloo_backend
