// Element types and shapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "regions/box.h"

namespace tessera {

// Plain element types, then block-quantised weight types (ggml layouts) that only linear and
// gather consume: a row of n elements is n / block_size blocks of block_bytes each.
enum class DType : uint8_t { F32, F16, BF16, I32, I64, Bool, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

// Bytes per element of a plain dtype (block bytes for quantised ones: use dtype_bytes).
int dtype_size(DType dtype);
bool is_quantized(DType dtype);
int64_t dtype_block_size(DType dtype);   // elements per block (1 for plain dtypes)
int64_t dtype_block_bytes(DType dtype);  // bytes per block
// Bytes of `elements` consecutive elements (whole blocks for quantised dtypes). Saturates at
// INT64_MAX when the size does not fit int64 (Graph rejects such shapes when a node is built).
int64_t dtype_bytes(DType dtype, int64_t elements);
const char* dtype_name(DType dtype);
bool is_float(DType dtype);    // f32, f16, bf16
bool is_integer(DType dtype);  // i32, i64

using Shape = absl::InlinedVector<int64_t, kMaxRank>;

// Element count; saturates at INT64_MAX when it does not fit int64 (dims must be >= 0).
int64_t shape_volume(const Shape& shape);
// Throws Error "[op] ..." unless the element count and the byte size of `shape` x `dtype` fit int64
// (dims must be >= 0). Graph checks every node with it, so any node's volume and bytes fit.
void check_shape_size(std::string_view op, const Shape& shape, DType dtype);
// a * b and a + b for sizes (a, b >= 0); throw Error "[op] <what> ... overflows int64" when the
// result does not fit. Shape inference uses them before the node's shape exists.
int64_t checked_mul(std::string_view op, std::string_view what, int64_t a, int64_t b);
int64_t checked_add(std::string_view op, std::string_view what, int64_t a, int64_t b);
std::string shape_string(const Shape& shape);
// Row-major strides in elements.
Shape row_major_strides(const Shape& shape);

// Scalar conversions used by every kernel that touches half types.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even

}  // namespace tessera
