// Element types and shapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "regions/box.h"

namespace tessera {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, Bool };

// Bytes per element.
int dtype_size(DType dtype);
const char* dtype_name(DType dtype);
bool is_float(DType dtype);    // f32, f16, bf16
bool is_integer(DType dtype);  // i32, i64

using Shape = absl::InlinedVector<int64_t, kMaxRank>;

int64_t shape_volume(const Shape& shape);
std::string shape_string(const Shape& shape);
// Row-major strides in elements.
Shape row_major_strides(const Shape& shape);

// Scalar conversions used by every kernel that touches half types.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even

}  // namespace tessera
