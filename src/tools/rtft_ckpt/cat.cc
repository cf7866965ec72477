// rtft-ckpt cat: a tensor's values as numbers, the last dimension on one line. 16-bit floats are
// widened to float32 for printing; floats print in the shortest form that reads back exactly in
// their own precision (float64 values as doubles, never narrowed to float32).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/read/reader.h"
#include "checkpoint/read/versions.h"
#include "tools/rtft_ckpt/commands.h"

namespace rtft::tools {
namespace {

float BFloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf, nan
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal half: normalize
    exponent = 113;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Shortest round trip (std::to_chars without a precision): 0.1 prints as 0.1, not 0.100000001.
template <typename F>
std::string FormatFloat(F f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::string(buf, r.ptr);
}

std::string Value(DType dtype, const char* p) {
  switch (dtype) {
    case DType::kFloat32:
      return FormatFloat(Load<float>(p));
    case DType::kFloat16:
      return FormatFloat(Float16ToFloat(Load<uint16_t>(p)));
    case DType::kBFloat16:
      return FormatFloat(BFloat16ToFloat(Load<uint16_t>(p)));
    case DType::kInt8:
      return std::to_string(Load<int8_t>(p));
    case DType::kInt32:
      return std::to_string(Load<int32_t>(p));
    case DType::kInt64:
      return std::to_string(Load<int64_t>(p));
    case DType::kUInt8:
      return std::to_string(Load<uint8_t>(p));
    case DType::kFloat64:
      return FormatFloat(Load<double>(p));
  }
  return "?";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int Fail(const Status& s) {
  std::fprintf(stderr, "rtft-ckpt: %s\n", s.message().c_str());
  return 1;
}

// Prints values [first, first + count) of `entry` (whose chunks holding them are verified),
// reading them in bounded pieces; `line` carries the current row across calls.
Status PrintValues(const CheckpointFileReader& reader, const TensorEntry& entry, uint64_t first,
                   uint64_t count, uint64_t row, std::string* line) {
  const size_t size = DTypeSize(entry.dtype);
  constexpr uint64_t kPieceValues = 1 << 16;
  std::vector<char> piece(std::min(count, kPieceValues) * size);
  for (uint64_t at = first; at < first + count;) {
    const uint64_t n = std::min(first + count - at, kPieceValues);
    RTFT_RETURN_IF_ERROR(reader.ReadTensorBytes(entry, at * size, piece.data(), n * size));
    for (uint64_t i = 0; i < n; ++i, ++at) {
      *line += (line->empty() ? "" : " ") + Value(entry.dtype, piece.data() + i * size);
      if ((at + 1) % row == 0) {
        std::printf("%s\n", line->c_str());
        line->clear();
      }
    }
  }
  return Status::Ok();
}

}  // namespace

int CatCommand(const std::string& file, const std::string& tensor, uint64_t limit) {
  auto io = CreateReadBackend();
  if (!io.ok()) return Fail(io.status());
  auto reader = CheckpointFileReader::Open(file, io->get(), /*follow_symlinks=*/true);
  if (!reader.ok()) return Fail(reader.status());
  const CheckpointFileReader& r = **reader;
  const TensorEntry* entry = r.manifest().FindTensor(tensor);
  if (!entry) return Fail(Status::NotFound("tensor '" + tensor + "' is not in " + file));

  std::string header =
      "# " + entry->name + " " + DTypeName(entry->dtype) + " " + ShapeText(entry->shape);
  if (entry->shard.sharded())
    header +=
        " at " + ShapeText(entry->shard.offset) + " of " + ShapeText(entry->shard.global_shape);
  std::printf("%s\n", header.c_str());
  const size_t size = DTypeSize(entry->dtype);
  const uint64_t count = entry->bytes / size;
  const uint64_t row = entry->shape.empty() || entry->shape.back() == 0 ? 1 : entry->shape.back();
  const uint64_t shown = limit == 0 ? count : std::min(limit, count);
  // Streamed chunk by chunk: only the chunks holding the values shown are read, each verified
  // before any of its values is printed, so memory stays bounded by a piece, not the tensor.
  const uint64_t per_chunk = std::max<uint64_t>(1, r.chunk_bytes() / size);
  std::string line;
  for (uint64_t c = 0, first = 0; first < shown; ++c, first += per_chunk) {
    Status s = r.VerifyTensorChunk(*entry, c);
    if (s.ok()) s = PrintValues(r, *entry, first, std::min(per_chunk, shown - first), row, &line);
    if (!s.ok()) return Fail(s);
  }
  if (!line.empty()) std::printf("%s\n", line.c_str());
  if (shown < count)
    std::printf("# ... %llu more values (--limit 0 prints all)\n",
                static_cast<unsigned long long>(count - shown));
  return 0;
}

}  // namespace rtft::tools
