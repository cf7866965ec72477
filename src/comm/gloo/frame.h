// The frame that precedes every payload rt-ft sends over a Gloo pair (docs/comm.md, "Wire
// format"). Gloo's event loop ends the process when a message is larger than the receive posted
// for it, so a payload is only ever received after its frame said how large it is and rt-ft
// checked that against what this rank expects: size, sequence, call, operation and data type.
#pragma once

#include <cstdint>
#include <string>

#include "comm/comm_internal.h"

namespace rtft::comm::gloo_backend {

constexpr uint32_t kFrameMagic = 0x43465452;  // "RTFC"
constexpr uint16_t kFrameVersion = 1;

struct Frame {
  uint32_t magic = kFrameMagic;
  uint16_t version = kFrameVersion;
  uint16_t op = 0;       // OpKind
  uint64_t comm_id = 0;  // hash of (epoch, name): frames of another communicator are refused
  uint64_t seq = 0;      // per direction of a pair: 0, 1, 2, ...
  uint64_t call = 0;     // the communicator's call number
  uint64_t bytes = 0;    // payload bytes that follow (0: none)
  uint32_t src = 0;      // sending rank
  uint32_t dst = 0;      // receiving rank
  uint8_t dtype = 0;     // DType
  uint8_t reduce = 0;    // ReduceOp
  uint16_t reserved = 0;
  int32_t root = -1;   // broadcast root
  uint64_t check = 0;  // XXH3 of the bytes above
};
static_assert(sizeof(Frame) == 64, "the frame is 64 bytes on the wire");

// What the receiver of a frame expects; `bytes` must match exactly.
struct FrameExpect {
  uint64_t comm_id = 0;
  uint64_t seq = 0;
  uint64_t call = 0;
  uint64_t bytes = 0;
  OpKind op = OpKind::kHello;
  int src = 0;
  int dst = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;
  int32_t root = -1;
};

uint64_t CommId(uint64_t epoch, const std::string& name);
// The hello frame carries the sender's 16-byte token (published with its addresses) in `call`
// and `bytes`.
void PutToken(const std::string& token, Frame* frame);
// kUnavailable when the hello is not from the rank that published `token` (a stray connection
// took that rank's place); otherwise as CheckFrame.
Status CheckHello(const Frame& frame, const FrameExpect& expect, const std::string& token);
// Fills `check`.
void Seal(Frame* frame);
// kInvalidArgument naming what differs when a peer's frame disagrees with this rank's call (the
// ranks called different collectives, sizes or types); kDataLoss for a frame that is not one.
Status CheckFrame(const Frame& frame, const FrameExpect& expect);

}  // namespace rtft::comm::gloo_backend
