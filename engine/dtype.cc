#include "engine/dtype.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/error.h"

namespace tessera {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    default: return static_cast<int>(dtype_block_bytes(dtype));
  }
}

bool is_quantized(DType dtype) { return dtype >= DType::Q8_0; }

int64_t dtype_block_size(DType dtype) {
  switch (dtype) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: return 32;
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return 256;
    default: return 1;
  }
}

int64_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::Q8_0: return 34;
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q5_0: return 22;
    case DType::Q5_1: return 24;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
    default: return dtype_size(dtype);
  }
}

int64_t dtype_bytes(DType dtype, int64_t elements) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements / dtype_block_size(dtype), dtype_block_bytes(dtype), &bytes)) return INT64_MAX;
  return bytes;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q4_K: return "q4_K";
    case DType::Q5_K: return "q5_K";
    case DType::Q6_K: return "q6_K";
  }
  return "?";
}

bool is_float(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}
bool is_integer(DType dtype) { return dtype == DType::I32 || dtype == DType::I64; }

int64_t shape_volume(const Shape& shape) {
  int64_t v = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(v, d, &v);
  }
  return overflow ? INT64_MAX : v;
}

void check_shape_size(std::string_view op, const Shape& shape, DType dtype) {
  const int64_t volume = shape_volume(shape);
  if (volume == INT64_MAX)
    throw Error(absl::StrCat("[", std::string(op), "] shape ", shape_string(shape), " has more elements than int64 can count"));
  if (dtype_bytes(dtype, volume) == INT64_MAX)
    throw Error(absl::StrCat("[", std::string(op), "] shape ", shape_string(shape), " of ", dtype_name(dtype),
                             " has a byte size that overflows int64"));
}

int64_t checked_mul(std::string_view op, std::string_view what, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw Error(absl::StrCat("[", std::string(op), "] ", std::string(what), ": ", a, " * ", b, " overflows int64"));
  return r;
}

int64_t checked_add(std::string_view op, std::string_view what, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw Error(absl::StrCat("[", std::string(op), "] ", std::string(what), ": ", a, " + ", b, " overflows int64"));
  return r;
}

std::string shape_string(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

Shape row_major_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {  // subnormal half or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    int shift = static_cast<int>(126 - e);  // half subnormal = mantissa * 2^-24
    uint32_t result = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t result = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace tessera
