#include "checkpoint/layout/json_fields.h"

#include <limits>

#include "core/checksum.h"

namespace rtft {
namespace {

using nlohmann::json;

const char* TypeName(const json& j) {
  if (j.is_number_float()) return "a fractional number";
  if (j.is_number()) return "an integer";
  return j.type_name();
}

}  // namespace

Status CheckJsonDepth(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        return Status::DataLoss("manifest nests deeper than " + std::to_string(max_depth) +
                                " levels (at byte " + std::to_string(i) + ")");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::Ok();
}

JsonFields::JsonFields(const json& object, std::string where)
    : object_(object), where_(std::move(where)) {}

Status JsonFields::Error(const std::string& key, const std::string& problem) const {
  return Status::DataLoss("manifest field '" + where_ + key + "' " + problem);
}

bool JsonFields::Has(const char* key) const {
  return object_.is_object() && object_.find(key) != object_.end();
}

StatusOr<const json*> JsonFields::Find(const char* key) const {
  if (!object_.is_object())
    return Status::DataLoss("manifest entry '" + where_ + "' is not an object");
  auto it = object_.find(key);
  if (it == object_.end()) return Error(key, "is missing");
  return &*it;
}

Status JsonFields::Uint(const char* key, uint64_t max, uint64_t* out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  // nlohmann stores non-negative integers as unsigned, negative ones as signed, anything with a
  // fraction or an exponent as float: only the first kind is accepted.
  if (!j->is_number_unsigned())
    return Error(key, std::string("must be a non-negative integer, not ") + TypeName(*j));
  const uint64_t v = j->get<uint64_t>();
  if (v > max) return Error(key, "is " + std::to_string(v) + ", more than " + std::to_string(max));
  *out = v;
  return Status::Ok();
}

Status JsonFields::Int(const char* key, int64_t min, int64_t max, int64_t* out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  if (!j->is_number_integer())
    return Error(key, std::string("must be an integer, not ") + TypeName(*j));
  if (j->is_number_unsigned() && j->get<uint64_t>() > static_cast<uint64_t>(max))
    return Error(key,
                 "is " + std::to_string(j->get<uint64_t>()) + ", more than " + std::to_string(max));
  const int64_t v = j->get<int64_t>();
  if (v < min || v > max)
    return Error(key, "is " + std::to_string(v) + ", outside " + std::to_string(min) + ".." +
                          std::to_string(max));
  *out = v;
  return Status::Ok();
}

Status JsonFields::String(const char* key, std::string* out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  if (!j->is_string()) return Error(key, std::string("must be a string, not ") + TypeName(*j));
  *out = j->get<std::string>();
  return Status::Ok();
}

Status JsonFields::Bool(const char* key, bool* out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  if (!j->is_boolean())
    return Error(key, std::string("must be true or false, not ") + TypeName(*j));
  *out = j->get<bool>();
  return Status::Ok();
}

Status JsonFields::Object(const char* key, const json** out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  if (!j->is_object()) return Error(key, std::string("must be an object, not ") + TypeName(*j));
  *out = j;
  return Status::Ok();
}

Status JsonFields::List(const char* key, const json** out) const {
  RTFT_ASSIGN_OR_RETURN(const json* j, Find(key));
  if (!j->is_array()) return Error(key, std::string("must be a list, not ") + TypeName(*j));
  *out = j;
  return Status::Ok();
}

Status JsonFields::Dims(const char* key, std::vector<int64_t>* out) const {
  const json* list = nullptr;
  RTFT_RETURN_IF_ERROR(List(key, &list));
  if (list->size() > kMaxTensorRank)
    return Error(key, "has " + std::to_string(list->size()) + " dimensions, more than " +
                          std::to_string(kMaxTensorRank));
  out->clear();
  for (size_t d = 0; d < list->size(); ++d) {
    const json& v = (*list)[d];
    const std::string name = std::string(key) + "[" + std::to_string(d) + "]";
    if (!v.is_number_unsigned())
      return Error(name, std::string("must be a non-negative integer, not ") + TypeName(v));
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error(name, "is too large");
    out->push_back(v.get<int64_t>());
  }
  return Status::Ok();
}

Status JsonFields::Checksum(const char* key, uint64_t* out) const {
  std::string hex;
  RTFT_RETURN_IF_ERROR(String(key, &hex));
  if (!ChecksumFromHex(hex, out)) return Error(key, "is not a checksum (16 hex digits)");
  return Status::Ok();
}

Status JsonFields::Checksums(const char* key, uint64_t count, std::vector<uint64_t>* out) const {
  const json* list = nullptr;
  RTFT_RETURN_IF_ERROR(List(key, &list));
  if (list->size() != count)
    return Error(key, "has " + std::to_string(list->size()) + " checksums, not the " +
                          std::to_string(count) + " its size needs");
  out->clear();
  out->reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const json& v = (*list)[i];
    uint64_t sum = 0;
    if (!v.is_string() || !ChecksumFromHex(v.get_ref<const std::string&>(), &sum))
      return Error(std::string(key) + "[" + std::to_string(i) + "]",
                   "is not a checksum (16 hex digits)");
    out->push_back(sum);
  }
  return Status::Ok();
}

}  // namespace rtft
