// Scalar block dequantisers of the ggml formats (the oracle for optimised kernels; the layouts
// are described next to each function).
#include "kernels/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace tessera::quant {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

namespace {

constexpr int kQK = 32;     // elements per block of the legacy formats


// Plain types: one element per block.
}  // namespace

void dequantize_f32(const uint8_t* b, float* y) {
  std::memcpy(y, b, 4);
}
void dequantize_f16(const uint8_t* b, float* y) {
  y[0] = f16_at(b);
}
void dequantize_bf16(const uint8_t* b, float* y) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  y[0] = bf16_to_float(h);
}

// Q8_0, 34 bytes: f16 d, int8 q[32]. y = q * d.
void dequantize_q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void quantize_q8_0(const float* x, uint8_t* block) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t h = float_to_half(d);
  std::memcpy(block, &h, 2);
  for (int j = 0; j < kQK; ++j) {
    const float q = std::round(x[j] * id);
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::isnan(q) ? 0.0f : std::clamp(q, -127.0f, 127.0f)));
  }
}

// Q4_0, 18 bytes: f16 d, 16 bytes of nibbles. Byte j holds element j in its low nibble and
// element j + 16 in its high nibble. y = (q - 8) * d.
void dequantize_q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1, 20 bytes: f16 d, f16 m, nibbles as Q4_0. y = q * d + m.
void dequantize_q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Five-bit quants: low nibbles as Q4_0, bit j of the little-endian uint32 qh is bit 4 of
// element j.
namespace {
int five_bit(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

}  // namespace

// Q5_0, 22 bytes: f16 d, uint32 qh, 16 bytes of nibbles. y = (q - 16) * d.
void dequantize_q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(five_bit(b + 6, qh, j) - 16) * d;
}

// Q5_1, 24 bytes: f16 d, f16 m, uint32 qh, 16 bytes of nibbles. y = q * d + m.
void dequantize_q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(five_bit(b + 8, qh, j)) * d + m;
}

// The 12 scale bytes of Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins. Sub-blocks
// 0..3 keep theirs in the low 6 bits of bytes j (scale) and j + 4 (min); sub-blocks 4..7 keep
// the low 4 bits in byte j + 4 (scale low nibble, min high nibble) and the top 2 bits in the
// spare top bits of bytes j - 4 (scale) and j (min).
namespace {
void k_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

}  // namespace

// Q4_K, 144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles. Eight sub-blocks of
// 32; each 32-byte chunk c of the nibbles holds sub-block 2c (low) and 2c + 1 (high).
// y = (d * scale) * q - (dmin * min).
void dequantize_q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int sub = 0; sub < 8; ++sub) {
    int scale, min;
    k_scale_min(scales, sub, &scale, &min);
    const float d1 = d * static_cast<float>(scale);
    const float m1 = dmin * static_cast<float>(min);
    const uint8_t* chunk = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l)
      y[32 * sub + l] = d1 * static_cast<float>((chunk[l] >> shift) & 0x0F) - m1;
  }
}

// Q5_K, 176 bytes: f16 d, f16 dmin, 12 scale bytes, 32 bytes qh, 128 bytes of nibbles. As
// Q4_K, with bit `sub` of qh[l] as bit 4 of element l of sub-block `sub`.
void dequantize_q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int sub = 0; sub < 8; ++sub) {
    int scale, min;
    k_scale_min(scales, sub, &scale, &min);
    const float d1 = d * static_cast<float>(scale);
    const float m1 = dmin * static_cast<float>(min);
    const uint8_t* chunk = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((chunk[l] >> shift) & 0x0F) | (((qh[l] >> sub) & 1) << 4);
      y[32 * sub + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q6_K, 210 bytes: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), int8 scales[16],
// f16 d. Two halves of 128 elements; in half h, for l < 32 with L = ql + 64h, H = qh + 32h:
//   element l      : L[l] low,  H[l] bits 0-1      element l + 64 : L[l] high,      H[l] bits 4-5
//   element l + 32 : L[l+32] low, H[l] bits 2-3    element l + 96 : L[l+32] high,   H[l] bits 6-7
// y = (d * scales[element / 16]) * (q - 32).
void dequantize_q6_k(const uint8_t* b, float* y) {
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    float* out = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {
          (ql[l] & 0x0F) | ((qh[l] & 3) << 4), (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4),
          (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int element = 128 * half + 32 * k + l;
        const float scale = static_cast<float>(static_cast<int8_t>(b[192 + element / 16]));
        out[32 * k + l] = d * scale * static_cast<float>(q[k] - 32);
      }
    }
  }
}

BlockDequantizer block_dequantizer(DType dtype) {
  switch (dtype) {
    case DType::F32: return dequantize_f32;
    case DType::F16: return dequantize_f16;
    case DType::BF16: return dequantize_bf16;
    case DType::Q8_0: return dequantize_q8_0;
    case DType::Q4_0: return dequantize_q4_0;
    case DType::Q4_1: return dequantize_q4_1;
    case DType::Q5_0: return dequantize_q5_0;
    case DType::Q5_1: return dequantize_q5_1;
    case DType::Q4_K: return dequantize_q4_k;
    case DType::Q5_K: return dequantize_q5_k;
    case DType::Q6_K: return dequantize_q6_k;
    default: return nullptr;
  }
}

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  const BlockDequantizer fn = block_dequantizer(dtype);
  const int64_t block = dtype_block_size(dtype), bytes = dtype_block_bytes(dtype);
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / block; ++i) fn(p + i * bytes, dst + i * block);
}

}  // namespace tessera::quant
