// ggml tensor types as stored in GGUF files: block geometry for every known type, and scalar
// reference dequantisers for the common ones (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K).
//
// A quantised row of n elements is n / block_size consecutive blocks of block_bytes each. All
// multi-byte fields are little-endian and blocks carry no alignment guarantee. The layouts
// (ggml's block_q4_0 ... block_q6_k) are described next to each dequantiser in quant.cc.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/dtype.h"

namespace tessera {

// ggml type ids (the `type` field of a GGUF tensor info). Gaps are ids ggml has retired.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;     // ggml's spelling, e.g. "q4_K"
  int64_t block_size;   // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  // Decodes one block into block_size floats; null when no reference dequantiser exists.
  void (*dequantize_block)(const uint8_t* block, float* out);
};

// Traits of a raw type id; nullptr when the id is not a known ggml type.
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
// Traits of a known type (never null for an enumerator of GgmlType).
const GgmlTypeTraits& ggml_traits(GgmlType type);

inline const char* ggml_type_name(GgmlType type) {
  return ggml_traits(type).name;
}
inline int64_t ggml_block_size(GgmlType type) {
  return ggml_traits(type).block_size;
}
inline int64_t ggml_block_bytes(GgmlType type) {
  return ggml_traits(type).block_bytes;
}
inline bool ggml_can_dequantize(GgmlType type) {
  return ggml_traits(type).dequantize_block != nullptr;
}

// Bytes of a row of n elements. Throws Error ("[quant] ...") when n is negative, not a
// multiple of the block size, or the size overflows int64.
int64_t ggml_row_size(GgmlType type, int64_t n);

// The engine dtype that stores this type unchanged (F32, F16, BF16, I32, I64), if any.
std::optional<DType> ggml_type_dtype(GgmlType type);

// Decodes n elements (a whole number of blocks, i.e. ggml_row_size(type, n) bytes at src) into
// dst. Throws Error ("[quant] ...") when the type has no dequantiser or n is not a multiple of
// the block size; never reads outside those bytes.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace tessera
