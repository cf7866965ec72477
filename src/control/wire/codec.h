// The control-plane wire format (docs/control-protocol.md): a 16-byte header (magic, protocol
// version, message type, body length, the sender's generation) and a MessagePack map as the body,
// checked field by field against the message type's schema. Used by the coordinator, the agent
// client and the local link; the decoder is fuzzed (tests/control/fuzz/decode_fuzzer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtft/status.h"

namespace rtft::control {

constexpr uint8_t kProtocolVersion = 5;
constexpr size_t kHeaderBytes = 16;
constexpr size_t kMaxMessageBytes = size_t{1} << 20;  // header + body
constexpr char kMagic[4] = {'R', 'T', 'F', 'C'};

enum class MsgType : uint8_t;  // messages.h

// How one field of a body is checked. Integers: [min, max]. Strings and byte strings: at most
// max_len bytes. Integer lists: at most max_len elements, each in [min, max]. Byte-string lists:
// at most max_len elements, each at most max bytes.
struct FieldSpec {
  enum class Kind : uint8_t { kInt, kBool, kString, kBytes, kIntList, kBytesList };
  const char* name;
  Kind kind;
  bool required;
  int64_t min = 0;
  int64_t max = 0;
  size_t max_len = 0;
};
using Schema = std::vector<FieldSpec>;

// The coordinators' generation (fencing token): 1 for the job's first primary, one more at each
// takeover by a standby. A coordinator puts its own in every message, an agent the one it
// follows; the local link carries 0.
using Generation = uint32_t;

struct Message {
  MsgType type;
  nlohmann::json body;  // a map that satisfies the type's schema
  Generation gen = 0;
};

// Checks `body` against the schema of `type` and frames it. Fails (InvalidArgument) on a body
// that the receiver would reject, so a bug shows at the sender.
StatusOr<std::string> EncodeMessage(MsgType type, const nlohmann::json& body, Generation gen = 0);
// Never throws; every reason for rejection is in the returned status's message.
StatusOr<Message> DecodeMessage(const void* data, size_t size);

// Checks a decoded body against a schema (exposed for tests).
Status ValidateBody(const Schema& schema, const nlohmann::json& body);

}  // namespace rtft::control
