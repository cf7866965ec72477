// Strict reading of the manifests' JSON (docs/format.md, "File manifest"): a manifest comes from a
// file, so from outside. A field must exist with exactly its type (an integer field refuses 1.5,
// 1e3 and "1"; an unsigned one refuses -1) and lie in its range, and the error names the field
// (e.g. "tensors[3].shape[1]") and what is wrong with it. Used by manifest.cc only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft {

// Deepest nesting a manifest has (object > list > entry > list) with room to spare; deeper text
// is refused before it is parsed, so nothing recursive ever sees it.
constexpr int kMaxJsonDepth = 8;
// More dimensions than any tensor library supports.
constexpr size_t kMaxTensorRank = 32;

// DataLoss when `text` nests objects and lists deeper than `max_depth` (one linear scan that
// skips strings).
Status CheckJsonDepth(const std::string& text, int max_depth = kMaxJsonDepth);

class JsonFields {
 public:
  // `object` must outlive this; `where` prefixes field names in errors ("" or "tensors[3].").
  JsonFields(const nlohmann::json& object, std::string where);

  bool Has(const char* key) const;
  Status Uint(const char* key, uint64_t max, uint64_t* out) const;
  Status Int(const char* key, int64_t min, int64_t max, int64_t* out) const;
  Status String(const char* key, std::string* out) const;
  Status Bool(const char* key, bool* out) const;
  // A list; its entries are read by the caller (with JsonFields of their own).
  Status List(const char* key, const nlohmann::json** out) const;
  // An object; its fields are read by the caller (with JsonFields of its own).
  Status Object(const char* key, const nlohmann::json** out) const;
  // Up to kMaxTensorRank integers, each in [0, INT64_MAX].
  Status Dims(const char* key, std::vector<int64_t>* out) const;
  // 16 lowercase hex digits (core/checksum.h).
  Status Checksum(const char* key, uint64_t* out) const;
  // Exactly `count` checksums.
  Status Checksums(const char* key, uint64_t count, std::vector<uint64_t>* out) const;

  // DataLoss "manifest field '<where><key>' <problem>".
  Status Error(const std::string& key, const std::string& problem) const;

 private:
  StatusOr<const nlohmann::json*> Find(const char* key) const;

  const nlohmann::json& object_;
  std::string where_;
};

}  // namespace rtft
