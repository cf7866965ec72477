#include "comm/gloo/frame.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/checksum.h"

namespace rtft::comm::gloo_backend {
namespace {

uint64_t HeaderSum(const Frame& f) { return Xxh3(&f, offsetof(Frame, check)); }

std::string Describe(OpKind op, uint8_t dtype, uint8_t reduce, int32_t root, uint64_t bytes) {
  std::string s = OpKindName(op);
  if (op == OpKind::kAllReduce || op == OpKind::kReduceScatter)
    s += std::string("(") + ReduceOpName(static_cast<ReduceOp>(reduce)) + ")";
  if (op == OpKind::kBroadcast) s += " from root " + std::to_string(root);
  if (op != OpKind::kBarrier && op != OpKind::kHello && op != OpKind::kBye)
    s += std::string(" of ") + DTypeName(static_cast<DType>(dtype)) + ", a message of " +
         std::to_string(bytes) + " bytes";
  return s;
}

}  // namespace

uint64_t CommId(uint64_t epoch, const std::string& name) {
  const std::string key = std::to_string(epoch) + "/" + name;
  return Xxh3(key.data(), key.size());
}

void Seal(Frame* frame) { frame->check = HeaderSum(*frame); }

void PutToken(const std::string& token, Frame* f) {
  char t[16] = {};
  std::memcpy(t, token.data(), std::min<size_t>(token.size(), 16));
  std::memcpy(&f->call, t, 8);
  std::memcpy(&f->bytes, t + 8, 8);
}

Status CheckHello(const Frame& frame, const FrameExpect& expect, const std::string& token) {
  const std::string who = "the connection for rank " + std::to_string(expect.src);
  if (frame.magic != kFrameMagic || frame.check != HeaderSum(frame))
    return Status::Unavailable(who + " did not start with an rt-ft hello (a stray connection " +
                               "took its place?)");
  Frame expected_token;
  PutToken(token, &expected_token);
  if (frame.call != expected_token.call || frame.bytes != expected_token.bytes)
    return Status::Unavailable(who + " did not prove it is that rank (a stray connection took " +
                               "its place?)");
  Frame f = frame;
  f.call = 0;
  f.bytes = 0;
  Seal(&f);
  return CheckFrame(f, expect);
}

Status CheckFrame(const Frame& f, const FrameExpect& e) {
  if (f.magic != kFrameMagic || f.check != HeaderSum(f))
    return Status::DataLoss("rank " + std::to_string(e.src) +
                            " sent bytes that are not an rt-ft frame");
  if (f.version != kFrameVersion)
    return Status::InvalidArgument("rank " + std::to_string(e.src) + " speaks frame version " +
                                   std::to_string(f.version) + ", this rank " +
                                   std::to_string(kFrameVersion) + " (mixed rt-ft builds?)");
  if (f.comm_id != e.comm_id || f.src != static_cast<uint32_t>(e.src) ||
      f.dst != static_cast<uint32_t>(e.dst))
    return Status::DataLoss("rank " + std::to_string(e.src) +
                            " sent a frame of another communicator or rank");
  if (f.seq != e.seq)
    return Status::DataLoss("rank " + std::to_string(e.src) + " sent frame " +
                            std::to_string(f.seq) + ", expected " + std::to_string(e.seq));
  const OpKind op = static_cast<OpKind>(f.op);
  if (f.call != e.call || op != e.op || f.dtype != e.dtype || f.reduce != e.reduce ||
      f.root != e.root || f.bytes != e.bytes)
    return Status::InvalidArgument(
        "the ranks disagree on call " + std::to_string(e.call) + ": rank " + std::to_string(e.src) +
        " is in call " + std::to_string(f.call) + ", " +
        Describe(op, f.dtype, f.reduce, f.root, f.bytes) + "; this rank (" + std::to_string(e.dst) +
        ") in " + Describe(e.op, e.dtype, e.reduce, e.root, e.bytes) +
        " (every rank must make the same calls with the same sizes and types)");
  return Status::Ok();
}

}  // namespace rtft::comm::gloo_backend
