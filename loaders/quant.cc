#include "loaders/quant.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/error.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

constexpr int kQK = 32;     // elements per block of the legacy formats
constexpr int kQK_K = 256;  // elements per super-block of the k-quants

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Plain types: one element per block.
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
int five_bit(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

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
void k_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

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

// Sizes follow ggml's type_traits (and gguf-py's GGML_QUANT_SIZES).
constexpr std::array<GgmlTypeTraits, 34> kTraits = {{
    {GgmlType::F32, "f32", 1, 4, dequantize_f32},
    {GgmlType::F16, "f16", 1, 2, dequantize_f16},
    {GgmlType::Q4_0, "q4_0", kQK, 2 + 16, dequantize_q4_0},
    {GgmlType::Q4_1, "q4_1", kQK, 2 + 2 + 16, dequantize_q4_1},
    {GgmlType::Q5_0, "q5_0", kQK, 2 + 4 + 16, dequantize_q5_0},
    {GgmlType::Q5_1, "q5_1", kQK, 2 + 2 + 4 + 16, dequantize_q5_1},
    {GgmlType::Q8_0, "q8_0", kQK, 2 + 32, dequantize_q8_0},
    {GgmlType::Q8_1, "q8_1", kQK, 4 + 4 + 32, nullptr},
    {GgmlType::Q2_K, "q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, nullptr},
    {GgmlType::Q3_K, "q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, nullptr},
    {GgmlType::Q4_K, "q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2, dequantize_q4_k},
    {GgmlType::Q5_K, "q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 8 + kQK_K / 2, dequantize_q5_k},
    {GgmlType::Q6_K, "q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2, dequantize_q6_k},
    {GgmlType::Q8_K, "q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, nullptr},
    {GgmlType::IQ2_XXS, "iq2_xxs", kQK_K, 2 + kQK_K / 4, nullptr},
    {GgmlType::IQ2_XS, "iq2_xs", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, nullptr},
    {GgmlType::IQ3_XXS, "iq3_xxs", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, nullptr},
    {GgmlType::IQ1_S, "iq1_s", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, nullptr},
    {GgmlType::IQ4_NL, "iq4_nl", kQK, 2 + 16, nullptr},
    {GgmlType::IQ3_S, "iq3_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, nullptr},
    {GgmlType::IQ2_S, "iq2_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, nullptr},
    {GgmlType::IQ4_XS, "iq4_xs", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, nullptr},
    {GgmlType::I8, "i8", 1, 1, nullptr},
    {GgmlType::I16, "i16", 1, 2, nullptr},
    {GgmlType::I32, "i32", 1, 4, nullptr},
    {GgmlType::I64, "i64", 1, 8, nullptr},
    {GgmlType::F64, "f64", 1, 8, nullptr},
    {GgmlType::IQ1_M, "iq1_m", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, nullptr},
    {GgmlType::BF16, "bf16", 1, 2, dequantize_bf16},
    {GgmlType::TQ1_0, "tq1_0", kQK_K, 2 + 4 * 13, nullptr},
    {GgmlType::TQ2_0, "tq2_0", kQK_K, 2 + 64, nullptr},
    {GgmlType::MXFP4, "mxfp4", kQK, 1 + 16, nullptr},
    {GgmlType::NVFP4, "nvfp4", 64, 4 + 32, nullptr},
    {GgmlType::Q1_0, "q1_0", 128, 2 + 16, nullptr},
}};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const GgmlTypeTraits& traits : kTraits) {
    if (static_cast<uint32_t>(traits.type) == id) return &traits;
  }
  return nullptr;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr)
    throw Error(absl::StrCat("[quant] unknown ggml type ", static_cast<uint32_t>(type)));
  return *traits;
}

int64_t ggml_row_size(GgmlType type, int64_t n) {
  const GgmlTypeTraits& traits = ggml_traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    throw Error(absl::StrCat("[quant] ", traits.name, " row of ", n,
                             " elements is not a whole number of ", traits.block_size,
                             "-element blocks"));
  }
  const int64_t blocks = n / traits.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / traits.block_bytes) {
    throw Error(
        absl::StrCat("[quant] ", traits.name, " row of ", n, " elements overflows int64 bytes"));
  }
  return blocks * traits.block_bytes;
}

std::optional<DType> ggml_type_dtype(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return DType::F32;
    case GgmlType::F16:
      return DType::F16;
    case GgmlType::BF16:
      return DType::BF16;
    case GgmlType::I32:
      return DType::I32;
    case GgmlType::I64:
      return DType::I64;
    default:
      return std::nullopt;
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits& traits = ggml_traits(type);
  if (traits.dequantize_block == nullptr) {
    throw Error(absl::StrCat("[quant] no dequantiser for ggml type ", traits.name));
  }
  ggml_row_size(type, n);  // validates n
  const auto* block = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / traits.block_size; ++i) {
    traits.dequantize_block(block, dst + i * traits.block_size);
    block += traits.block_bytes;
  }
}

}  // namespace tessera
