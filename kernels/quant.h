// ggml block formats: scalar dequantisers, one block at a time. Blocks are little-endian and
// carry no alignment guarantee. Used by the reference kernels of linear and gather, by the
// GGUF loader and as the oracle for optimised kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/dtype.h"

namespace tessera::quant {

using BlockDequantizer = void (*)(const uint8_t* block, float* out);

void dequantize_f32(const uint8_t* b, float* y);
void dequantize_f16(const uint8_t* b, float* y);
void dequantize_bf16(const uint8_t* b, float* y);
void dequantize_q8_0(const uint8_t* b, float* y);
void dequantize_q4_0(const uint8_t* b, float* y);
void dequantize_q4_1(const uint8_t* b, float* y);
void dequantize_q5_0(const uint8_t* b, float* y);
void dequantize_q5_1(const uint8_t* b, float* y);
void dequantize_q4_k(const uint8_t* b, float* y);
void dequantize_q5_k(const uint8_t* b, float* y);
void dequantize_q6_k(const uint8_t* b, float* y);

// The little-endian f16 at p (a block's scale) as a float.
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// One Q8_0 block from 32 floats, as ggml's quantize_row_q8_0: d = max |x| / 127 (NaNs ignored),
// q = round(x / d) (as x * (1 / d), halves away from zero; 0 where d is 0 or x is NaN), d stored
// as f16 (round to nearest even). dequantize_q8_0 of it gives q * d exactly.
void quantize_q8_0(const float* x, uint8_t* block);

// The dequantiser of one block of `dtype` (float and quantised dtypes); nullptr otherwise.
BlockDequantizer block_dequantizer(DType dtype);
// Decodes n elements (whole blocks) at src into dst. Precondition: block_dequantizer(dtype)
// is not null and n is a multiple of dtype_block_size(dtype).
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace tessera::quant
