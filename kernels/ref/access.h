// Scalar element access for reference kernels: every dtype is loaded as double (exact for
// f32/f16/bf16/i32 and for i64 below 2^53) and stored with the dtype's rounding.
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/dtype.h"
#include "kernels/quant.h"
#include "kernels/view.h"

namespace tessera::ref {

inline double load(const TensorView& v, const int64_t* index) {
  const int64_t o = v.offset(index);
  switch (v.dtype) {
    case DType::F32: return static_cast<const float*>(v.data)[o];
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(v.data)[o]);
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(v.data)[o]);
    case DType::I32: return static_cast<const int32_t*>(v.data)[o];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(v.data)[o]);
    case DType::Bool: return static_cast<const uint8_t*>(v.data)[o] ? 1.0 : 0.0;
    case DType::Q8_0: {  // whole blocks along a last axis of stride 1: element o % 32 of block o / 32
      const uint8_t* block = static_cast<const uint8_t*>(v.data) + o / 32 * 34;
      return static_cast<double>(quant::f16_at(block)) * static_cast<int8_t>(block[2 + o % 32]);
    }
    default: break;  // other quantised dtypes are read block-wise by linear and gather
  }
  return 0;
}

// Float -> integer conversion truncates towards zero, NaN gives 0, out of range saturates.
template <class I>
inline I to_integer(double x) {
  if (std::isnan(x)) return 0;
  if (x <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (x >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(x);
}

inline void store(const TensorView& v, const int64_t* index, double x) {
  const int64_t o = v.offset(index);
  switch (v.dtype) {
    case DType::F32: static_cast<float*>(v.data)[o] = static_cast<float>(x); break;
    case DType::F16: static_cast<uint16_t*>(v.data)[o] = float_to_half(static_cast<float>(x)); break;
    case DType::BF16: static_cast<uint16_t*>(v.data)[o] = float_to_bf16(static_cast<float>(x)); break;
    case DType::I32: static_cast<int32_t*>(v.data)[o] = to_integer<int32_t>(x); break;
    case DType::I64: static_cast<int64_t*>(v.data)[o] = to_integer<int64_t>(x); break;
    case DType::Bool: static_cast<uint8_t*>(v.data)[o] = x != 0 ? 1 : 0; break;
    default: break;
  }
}

// Rounds a double to the precision of a float dtype (identity for integer dtypes), so that
// intermediate results of composite ops match what storing them would give.
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::F32: return static_cast<float>(x);
    case DType::F16: return half_to_float(float_to_half(static_cast<float>(x)));
    case DType::BF16: return bf16_to_float(float_to_bf16(static_cast<float>(x)));
    default: return x;
  }
}

// Calls f(index) for every index of `box` in row-major order. index has kMaxRank entries.
template <class F>
inline void for_each_index(const Box& box, F&& f) {
  if (box.empty()) return;
  int64_t index[kMaxRank];
  const int rank = box.rank();
  for (int i = 0; i < rank; ++i) index[i] = box.begin(i);
  while (true) {
    f(static_cast<const int64_t*>(index));
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.begin(d);
    }
    if (d < 0) return;
  }
}

}  // namespace tessera::ref
