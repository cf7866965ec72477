// libFuzzer target for the control-plane decoder (docs/control-protocol.md). Properties: the
// decoder never crashes, hangs or leaks on any input; whatever it accepts converts to the
// domain structs without throwing and re-encodes to a message that decodes to the same body.
// The first input byte picks the mode: odd bytes feed the rest to the decoder as a whole frame,
// even bytes frame the rest behind a valid header (type from the second byte), so that the
// fuzzer spends its time inside the MessagePack body and the schema checks.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "control/coordinator/repl_ops.h"
#include "control/wire/codec.h"
#include "control/wire/delta.h"
#include "control/wire/gather.h"
#include "control/wire/messages.h"

namespace {

using rtft::control::DecodeMessage;
using rtft::control::EncodeMessage;
using rtft::control::Message;
using rtft::control::MsgType;

void Exercise(const Message& m) {
  namespace c = rtft::control;
  switch (m.type) {
    case MsgType::kEvent:
      (void)c::EventFrom(m.body, 0);
      (void)c::MembershipFrom(m.body);
      break;
    case MsgType::kLocalEvent:
      (void)c::LocalEventFrom(m.body);
      break;
    case MsgType::kAssign:
      (void)c::AssignmentFrom(m.body);
      break;
    case MsgType::kReport:
      (void)c::ReportFrom(m.body);
      break;
    case MsgType::kAck:
    case MsgType::kKvValue:
    case MsgType::kLocalKvReply:
      (void)c::StatusFrom(m.body);
      if (m.body.contains("value")) (void)c::BytesFrom(m.body["value"]);
      break;
    case MsgType::kKvPut:
      (void)c::BytesFrom(m.body["value"]);
      break;
    case MsgType::kEventDelta: {
      // Applied to an empty membership and to one of its own base epoch: a reason, or an event.
      c::Membership have;
      auto e = c::EventFromDelta(m.body, have, 0);
      if (!e.ok() && e.status().message().empty()) std::abort();
      have.epoch = m.body["base"].get<uint64_t>();
      e = c::EventFromDelta(m.body, have, 0);
      if (!e.ok() && e.status().message().empty()) std::abort();
      break;
    }
    case MsgType::kGather:
      (void)c::GatherFrom(m.body);
      break;
    case MsgType::kGatherValue:
    case MsgType::kLocalGatherReply:
      (void)c::GatherReplyFrom(m.body);
      break;
    case MsgType::kRepl: {
      // A change the standby applies: it reads, or is refused with a reason.
      auto change = c::ReplFrom(m.body);
      if (!change.ok() && change.status().message().empty()) std::abort();
      if (change.ok()) (void)c::ReplBody(0, *change);
      break;
    }
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::string frame;
  if (data[0] & 1) {
    frame.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    const size_t body = size - 2;
    frame.assign(rtft::control::kHeaderBytes, '\0');
    std::memcpy(frame.data(), rtft::control::kMagic, 4);
    frame[4] = static_cast<char>(rtft::control::kProtocolVersion);
    frame[5] = static_cast<char>(data[1]);
    for (int i = 0; i < 4; ++i) frame[8 + i] = static_cast<char>((body >> (8 * i)) & 0xff);
    frame.append(reinterpret_cast<const char*>(data + 2), body);
  }
  auto msg = DecodeMessage(frame.data(), frame.size());
  if (!msg.ok()) {
    if (msg.status().message().empty()) std::abort();  // every rejection says why
    return 0;
  }
  Exercise(*msg);
  auto again = EncodeMessage(msg->type, msg->body, msg->gen);
  if (!again.ok()) std::abort();
  auto back = DecodeMessage(again->data(), again->size());
  if (!back.ok() || back->type != msg->type || back->body != msg->body || back->gen != msg->gen)
    std::abort();
  return 0;
}
