// The reader fuzzer's input format: a recipe for a checkpoint file rather than its bytes, so that
// mutations stay a valid HDF5 file (byte-level garbage mostly exercises libhdf5 itself) while
// what rt-ft reads varies: the format-version attribute's class, size and dataspace, the
// manifest dataset's link kind, type, dataspace, layout and storage, the tensor datasets, and the
// manifest JSON. Seeds are real engine-written files turned into recipes (EncodeRecipe).
//
// Bytes, in order (a missing byte reads as 0):
//   mode                0 rank file, 1 MANIFEST.json text, 2 file manifest text only
//   rank file:
//     attr_kind attr_value(4, LE) attr_count
//     tensor_count, then per tensor: dtype rank dims(rank x 2, LE)
//     link_kind type_kind size_delta space_kind layout_kind written fix
//   the rest            the JSON text
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft::fuzz {

struct TensorRecipe {
  uint8_t dtype = 0;           // DType, modulo their number
  std::vector<uint16_t> dims;  // at most 3
};

struct Recipe {
  uint8_t mode = 0;
  uint8_t attr_kind = 0;  // 0 int32 scalar, 1 absent, 2 int32 list, 3 float64, 4 string,
                          // 5 int8 scalar, 6 int64 scalar, 7 int32 of rank 2
  int32_t attr_value = 1;
  uint8_t attr_count = 0;             // elements of a list attribute
  std::vector<TensorRecipe> tensors;  // at most 16
  uint8_t link_kind = 0;              // 0 hard, 1 absent, 2 soft, 3 external, 4 a group
  uint8_t type_kind = 0;    // 0 fixed string, 1 variable string, 2 int64, 3 nullterm, 4 UTF-8
  int8_t size_delta = 0;    // added to the string type's size
  uint8_t space_kind = 0;   // 0 scalar, 1 list of size_delta & 15 elements, 2 null
  uint8_t layout_kind = 0;  // 0 contiguous, 1 compact, 2 chunked (lists only), 3 late, unwritten
  uint8_t written = 0;      // 0 written, 1 never written
  uint8_t fix = 0;          // 1: tensor offsets made real; 2: checksums too (the reader accepts)
  std::string json;
};

Recipe DecodeRecipe(const uint8_t* data, size_t size);
std::string EncodeRecipe(const Recipe& recipe);

// Writes the rank file `recipe` describes into `file` through HDF5 (rt-ft's driver).
Status BuildRankFile(const Recipe& recipe, File* file);

}  // namespace rtft::fuzz
