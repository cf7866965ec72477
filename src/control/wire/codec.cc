#include "control/wire/codec.h"

#include <cstring>
#include <exception>
#include <limits>
#include <set>

#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxDepth = 3;  // body map, list, element

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Builds the DOM through nlohmann's own SAX builder, but refuses nesting deeper than the
// protocol uses and containers that claim more elements than bytes are left, so a hostile body
// costs neither stack nor memory beyond a small multiple of its size.
class BoundedSax {
 public:
  BoundedSax(json* root, size_t body_bytes) : dom_(*root, false), budget_(body_bytes) {}
  const std::string& error() const { return error_; }

  bool null() { return Count() && dom_.null(); }
  bool boolean(bool v) { return Count() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return Count() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Count() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return Count() && dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return Count() && dom_.string(v); }
  bool binary(json::binary_t& v) { return Count() && dom_.binary(v); }
  bool start_object(std::size_t n) { return Open(n) && dom_.start_object(n); }
  bool key(json::string_t& v) { return dom_.key(v); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return Open(n) && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    if (error_.empty()) error_ = "MessagePack: " + std::string(e.what());
    return false;
  }

 private:
  bool Count() {
    if (values_++ < budget_) return true;
    if (error_.empty()) error_ = "more values than body bytes";
    return false;
  }
  bool Open(std::size_t n) {
    if (!Count()) return false;
    if (++depth_ > kMaxDepth) {
      error_ = "nesting deeper than " + std::to_string(kMaxDepth);
      return false;
    }
    if (n != static_cast<std::size_t>(-1) && n > budget_) {
      error_ = "container claims " + std::to_string(n) + " elements in a " +
               std::to_string(budget_) + "-byte body";
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t budget_;
  size_t values_ = 0;
  size_t depth_ = 0;
  std::string error_;
};

bool IntInRange(const json& v, int64_t min, int64_t max) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
           static_cast<int64_t>(u) >= min && static_cast<int64_t>(u) <= max;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return i >= min && i <= max;
  }
  return false;
}

Status CheckField(const FieldSpec& f, const json& v) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string("field '") + f.name + "': " + why);
  };
  switch (f.kind) {
    case FieldSpec::Kind::kInt:
      if (!IntInRange(v, f.min, f.max))
        return bad("not an integer in [" + std::to_string(f.min) + ", " + std::to_string(f.max) +
                   "]");
      return Status::Ok();
    case FieldSpec::Kind::kBool:
      return v.is_boolean() ? Status::Ok() : bad("not a boolean");
    case FieldSpec::Kind::kString:
      if (!v.is_string()) return bad("not a string");
      if (v.get_ref<const std::string&>().size() > f.max_len)
        return bad("longer than " + std::to_string(f.max_len) + " bytes");
      return Status::Ok();
    case FieldSpec::Kind::kBytes:
      if (!v.is_binary() || v.get_binary().has_subtype()) return bad("not a byte string");
      if (v.get_binary().size() > f.max_len)
        return bad("longer than " + std::to_string(f.max_len) + " bytes");
      return Status::Ok();
    case FieldSpec::Kind::kIntList:
      if (!v.is_array()) return bad("not a list");
      if (v.size() > f.max_len) return bad("more than " + std::to_string(f.max_len) + " elements");
      for (const auto& e : v) {
        if (!IntInRange(e, f.min, f.max))
          return bad("element not an integer in [" + std::to_string(f.min) + ", " +
                     std::to_string(f.max) + "]");
      }
      return Status::Ok();
    case FieldSpec::Kind::kBytesList:
      if (!v.is_array()) return bad("not a list");
      if (v.size() > f.max_len) return bad("more than " + std::to_string(f.max_len) + " elements");
      for (const auto& e : v) {
        if (!e.is_binary() || e.get_binary().has_subtype()) return bad("element not a byte string");
        if (e.get_binary().size() > static_cast<size_t>(f.max))
          return bad("element longer than " + std::to_string(f.max) + " bytes");
      }
      return Status::Ok();
  }
  return bad("unknown kind");
}

}  // namespace

Status ValidateBody(const Schema& schema, const json& body) {
  if (!body.is_object()) return Status::InvalidArgument("body is not a map");
  size_t known = 0;
  for (const auto& f : schema) {
    auto it = body.find(f.name);
    if (it == body.end()) {
      if (f.required) return Status::InvalidArgument(std::string("missing field '") + f.name + "'");
      continue;
    }
    ++known;
    RTFT_RETURN_IF_ERROR(CheckField(f, *it));
  }
  if (known != body.size()) {
    for (auto it = body.begin(); it != body.end(); ++it) {
      bool listed = false;
      for (const auto& f : schema) listed = listed || it.key() == f.name;
      if (!listed) return Status::InvalidArgument("unknown field '" + it.key().substr(0, 64) + "'");
    }
  }
  return Status::Ok();
}

StatusOr<std::string> EncodeMessage(MsgType type, const json& body, Generation gen) {
  const Schema* schema = SchemaFor(static_cast<uint8_t>(type));
  if (!schema) return Status::InvalidArgument("unknown message type");
  Status valid = ValidateBody(*schema, body);
  if (valid.ok()) valid = CheckMessageSemantics(type, body);
  if (!valid.ok()) return valid.Annotate(std::string("encoding ") + MsgTypeName(type));
  try {
    std::vector<uint8_t> packed = json::to_msgpack(body);
    if (kHeaderBytes + packed.size() > kMaxMessageBytes) {
      return Status::InvalidArgument(std::string(MsgTypeName(type)) + " of " +
                                     std::to_string(packed.size()) + " bytes exceeds the limit");
    }
    std::string out(kHeaderBytes + packed.size(), '\0');
    std::memcpy(out.data(), kMagic, 4);
    out[4] = static_cast<char>(kProtocolVersion);
    out[5] = static_cast<char>(type);
    PutU32(out.data() + 8, static_cast<uint32_t>(packed.size()));
    PutU32(out.data() + 12, gen);
    std::memcpy(out.data() + kHeaderBytes, packed.data(), packed.size());
    return out;
  } catch (const std::exception& e) {
    return Status::Internal(std::string("encoding ") + MsgTypeName(type) + ": " + e.what());
  }
}

StatusOr<Message> DecodeMessage(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size > kMaxMessageBytes)
    return Status::InvalidArgument("message of " + std::to_string(size) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kMaxMessageBytes));
  if (size < kHeaderBytes)
    return Status::InvalidArgument("message of " + std::to_string(size) +
                                   " bytes is shorter than the header");
  if (std::memcmp(p, kMagic, 4) != 0) return Status::InvalidArgument("bad magic");
  if (p[4] > kProtocolVersion)
    return Status::InvalidArgument("protocol version " + std::to_string(p[4]) +
                                   " is newer than this build's " +
                                   std::to_string(kProtocolVersion));
  if (p[4] < kProtocolVersion)
    return Status::InvalidArgument("protocol version " + std::to_string(p[4]) +
                                   " is not supported");
  if (p[6] != 0 || p[7] != 0) return Status::InvalidArgument("reserved header bytes not zero");
  const Schema* schema = SchemaFor(p[5]);
  if (!schema) return Status::InvalidArgument("unknown message type " + std::to_string(p[5]));
  const std::string type_name = MsgTypeName(static_cast<MsgType>(p[5]));
  const uint32_t body_len = GetU32(p + 8);
  if (body_len != size - kHeaderBytes)
    return Status::InvalidArgument(type_name + ": header says " + std::to_string(body_len) +
                                   " body bytes, frame has " + std::to_string(size - kHeaderBytes));
  Message msg{static_cast<MsgType>(p[5]), json(), GetU32(p + 12)};
  try {
    BoundedSax sax(&msg.body, body_len);
    const bool ok = json::sax_parse(p + kHeaderBytes, p + size, &sax, json::input_format_t::msgpack,
                                    /*strict=*/true);
    if (!ok) {
      return Status::InvalidArgument(type_name + ": " +
                                     (sax.error().empty() ? "malformed body" : sax.error()));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(type_name + ": " + e.what());
  }
  Status valid = ValidateBody(*schema, msg.body);
  if (valid.ok()) valid = CheckMessageSemantics(msg.type, msg.body);
  if (!valid.ok()) return valid.Annotate(type_name);
  return msg;
}

}  // namespace rtft::control
