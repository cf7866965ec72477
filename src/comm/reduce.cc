#include "comm/reduce.h"

#include <cstdint>

#include "core/half.h"

namespace rtft::comm {
namespace {

template <typename T>
void Combine(ReduceOp op, const T* a, const T* b, T* out, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + b[i]);
      break;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) out[i] = a[i] > b[i] ? a[i] : b[i];
      break;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) out[i] = a[i] < b[i] ? a[i] : b[i];
      break;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void Combine16(ReduceOp op, const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    float r;
    switch (op) {
      case ReduceOp::kMax:
        r = x > y ? x : y;
        break;
      case ReduceOp::kMin:
        r = x < y ? x : y;
        break;
      default:
        r = x + y;
    }
    out[i] = Store(r);
  }
}

template <typename T>
void Divide(T* data, size_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / d);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void Divide16(uint16_t* data, size_t n, int divisor) {
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) data[i] = Store(Load(data[i]) / d);
}

}  // namespace

void ReduceInto(DType dtype, ReduceOp op, const void* a, const void* b, void* out, size_t n) {
  switch (dtype) {
    case DType::kFloat32:
      return Combine(op, static_cast<const float*>(a), static_cast<const float*>(b),
                     static_cast<float*>(out), n);
    case DType::kFloat16:
      return Combine16<HalfToFloat, FloatToHalf>(op, static_cast<const uint16_t*>(a),
                                                 static_cast<const uint16_t*>(b),
                                                 static_cast<uint16_t*>(out), n);
    case DType::kBFloat16:
      return Combine16<Bf16ToFloat, FloatToBf16>(op, static_cast<const uint16_t*>(a),
                                                 static_cast<const uint16_t*>(b),
                                                 static_cast<uint16_t*>(out), n);
    case DType::kInt8:
      return Combine(op, static_cast<const int8_t*>(a), static_cast<const int8_t*>(b),
                     static_cast<int8_t*>(out), n);
    case DType::kInt32:
      return Combine(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b),
                     static_cast<int32_t*>(out), n);
    case DType::kInt64:
      return Combine(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b),
                     static_cast<int64_t*>(out), n);
    case DType::kUInt8:
      return Combine(op, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                     static_cast<uint8_t*>(out), n);
    case DType::kFloat64:
      return Combine(op, static_cast<const double*>(a), static_cast<const double*>(b),
                     static_cast<double*>(out), n);
  }
}

void DivideBy(DType dtype, void* data, size_t n, int divisor) {
  switch (dtype) {
    case DType::kFloat32:
      return Divide(static_cast<float*>(data), n, divisor);
    case DType::kFloat16:
      return Divide16<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(data), n, divisor);
    case DType::kBFloat16:
      return Divide16<Bf16ToFloat, FloatToBf16>(static_cast<uint16_t*>(data), n, divisor);
    case DType::kInt8:
      return Divide(static_cast<int8_t*>(data), n, divisor);
    case DType::kInt32:
      return Divide(static_cast<int32_t*>(data), n, divisor);
    case DType::kInt64:
      return Divide(static_cast<int64_t*>(data), n, divisor);
    case DType::kUInt8:
      return Divide(static_cast<uint8_t*>(data), n, divisor);
    case DType::kFloat64:
      return Divide(static_cast<double*>(data), n, divisor);
  }
}

}  // namespace rtft::comm
