// The integer linear path (linear_q8.h): activation quantisation, packing GGUF rows into 16-row
// panels, the portable panel kernel, the SIMD panel kernels (linear_q8_simd.inc over 16 lanes:
// two 256-bit halves on AVX2, one 512-bit register on AVX-512 VNNI) and the driver that
// quantises x rows in chunks of 64 and walks groups of 4 panels.
#include "kernels/cpu/linear_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_avx512.h"

namespace tessera::cpu::q8 {

namespace {

constexpr int64_t kChunkRows = 64;  // x rows quantised at a time (bounds the scratch)

int64_t align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

RowLayout::RowLayout(int64_t depth_, int64_t block_) : depth(depth_), block(block_) {
  d_offset = align64(depth);
  sums_offset = d_offset + align64(4 * (depth / block));
  sums16_offset = sums_offset + align64(4 * (depth / 32));
  scaled_sums_offset = sums16_offset + align64(4 * (depth / 16));
  row_bytes = scaled_sums_offset + align64(4 * (depth / 32));
}

void quantize_row_portable(const float* x, int64_t step, const RowLayout& layout, std::byte* dst) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + layout.d_offset);
  auto* sums = reinterpret_cast<int32_t*>(dst + layout.sums_offset);
  auto* sums16 = reinterpret_cast<int32_t*>(dst + layout.sums16_offset);
  auto* scaled_sums = reinterpret_cast<float*>(dst + layout.scaled_sums_offset);
  for (int64_t k0 = 0; k0 < layout.depth; k0 += layout.block) {
    float a = 0.0f;
    for (int64_t k = k0; k < k0 + layout.block; ++k) a = std::max(a, std::fabs(x[k * step]));
    d[k0 / layout.block] = a / 127.0f;
    const float id = a != 0.0f ? 127.0f / a : 0.0f;
    for (int64_t k = k0; k < k0 + layout.block; k += 16) {
      int32_t total = 0;
      for (int64_t i = k; i < k + 16; ++i) {
        const float scaled = x[i * step] * id;
        const int v = static_cast<int>(std::nearbyint(scaled));
        q[i] = static_cast<int8_t>(v);
        total += v;
      }
      sums16[k / 16] = total;
    }
    for (int64_t k = k0; k < k0 + layout.block; k += 32) {
      sums[k / 32] = sums16[k / 16] + sums16[k / 16 + 1];
      scaled_sums[k / 32] = d[k0 / layout.block] * static_cast<float>(sums[k / 32]);
    }
  }
}

// ---- packing (linear_q8.h): GGUF blocks -> panels of 16 rows --------------------------------

namespace {

// One GGUF block as integers: q[e] the element's unsigned integer value (Q8_0: w + 128), the
// block's f16 scale bits d (and m / dmin), and the K-quants' integer sub-scales and mins.
struct Unpacked {
  uint8_t q[256];
  uint16_t d = 0, m = 0;
  int8_t scale[16];
  uint8_t min[8];
};

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

void unpack_block(DType dtype, const uint8_t* w, Unpacked& u) {
  switch (dtype) {
    case DType::Q8_0:
      u.d = u16(w);
      for (int e = 0; e < 32; ++e) u.q[e] = static_cast<uint8_t>(static_cast<int8_t>(w[2 + e]) + 128);
      return;
    case DType::Q4_0:
    case DType::Q4_1: {
      // Q4_1 has m after d; then both hold the nibbles.
      const int at = dtype == DType::Q4_1 ? 4 : 2;
      u.d = u16(w);
      if (dtype == DType::Q4_1) u.m = u16(w + 2);
      for (int j = 0; j < 16; ++j) {
        u.q[j] = static_cast<uint8_t>(w[at + j] & 0x0F);
        u.q[j + 16] = static_cast<uint8_t>(w[at + j] >> 4);
      }
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      // Q5_1 has m after d; then both hold qh (bit j: bit 4 of element j) and the nibbles.
      const int at = dtype == DType::Q5_1 ? 4 : 2;
      u.d = u16(w);
      if (dtype == DType::Q5_1) u.m = u16(w + 2);
      uint32_t qh;
      std::memcpy(&qh, w + at, 4);
      for (int j = 0; j < 16; ++j) {
        u.q[j] = static_cast<uint8_t>((w[at + 4 + j] & 0x0F) | (((qh >> j) & 1) << 4));
        u.q[j + 16] = static_cast<uint8_t>((w[at + 4 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // Q5_K holds 32 bytes of fifth bits (bit s of byte l: element 32 s + l) before the nibbles.
      const bool five = dtype == DType::Q5_K;
      u.d = u16(w);
      u.m = u16(w + 2);
      int scale[8], min[8];
      k_scale_min(w + 4, scale, min);
      for (int s = 0; s < 8; ++s) {
        u.scale[s] = static_cast<int8_t>(scale[s]);
        u.min[s] = static_cast<uint8_t>(min[s]);
        const uint8_t* chunk = w + (five ? 48 : 16) + 32 * (s / 2);
        for (int l = 0; l < 32; ++l)
          u.q[32 * s + l] = static_cast<uint8_t>(((chunk[l] >> (4 * (s % 2))) & 0x0F) |
                                                 (five ? ((w[16 + l] >> s) & 1) << 4 : 0));
      }
      return;
    }
    case DType::Q6_K: {
      u.d = u16(w + 208);
      for (int j = 0; j < 16; ++j) u.scale[j] = static_cast<int8_t>(w[192 + j]);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w + 64 * half;
        const uint8_t* qh = w + 128 + 32 * half;
        uint8_t* q = u.q + 128 * half;
        for (int l = 0; l < 32; ++l) {
          q[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
          q[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
          q[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          q[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      return;
    }
    default:
      return;
  }
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Nibble vectors of `elements` values of row r in a block's integer part `ints`: vector c, byte
// 4r + i = q[8c + i] | q[8c + 4 + i] << 4.
void put_nibbles(DType dtype, uint8_t* ints, int r, const uint8_t* q, int elements) {
  for (int c = 0; c < elements / 8; ++c)
    for (int i = 0; i < 4; ++i)
      ints[nibble_vector_at(dtype, c) + 4 * r + i] =
          static_cast<uint8_t>((q[8 * c + i] & 0x0F) | ((q[8 * c + 4 + i] & 0x0F) << 4));
}

// Fifth bits of `elements` values of row r: bit 4r + i of the 8 bytes of part t = bit 4 of
// q[4t + i].
// (Row r's four bits of a part are one nibble of its byte r / 2.)
void put_bit4(DType dtype, uint8_t* ints, int r, const uint8_t* q, int elements) {
  for (int t = 0; t < elements / 4; ++t) {
    const int nibble = ((q[4 * t] >> 4) & 1) | ((q[4 * t + 1] >> 3) & 2) | ((q[4 * t + 2] >> 2) & 4) | ((q[4 * t + 3] >> 1) & 8);
    ints[bit4_part_at(dtype, t) + r / 2] |= static_cast<uint8_t>(nibble << (4 * (r % 2)));
  }
}

// Row r's block in its panel: integer part at `ints`, scale part at `scales` (linear_q8.h).
void put_block(DType dtype, const Unpacked& u, int r, uint8_t* ints, uint8_t* scales) {
  switch (dtype) {
    case DType::Q8_0:
      put16(scales + 2 * r, u.d);
      for (int t = 0; t < 8; ++t)
        for (int i = 0; i < 4; ++i) ints[64 * t + 4 * r + i] = u.q[4 * t + i];
      return;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      put16(scales + 2 * r, u.d);
      if (dtype == DType::Q4_1 || dtype == DType::Q5_1) put16(scales + 32 + 2 * r, u.m);
      put_nibbles(dtype, ints, r, u.q, 32);
      if (dtype == DType::Q5_0 || dtype == DType::Q5_1) put_bit4(dtype, ints, r, u.q, 32);
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      put16(scales + 2 * r, u.d);
      put16(scales + 32 + 2 * r, u.m);
      for (int s = 0; s < 8; ++s) {
        scales[64 + 16 * s + r] = static_cast<uint8_t>(u.scale[s]);
        scales[192 + 16 * s + r] = u.min[s];
      }
      put_nibbles(dtype, ints, r, u.q, 256);
      if (dtype == DType::Q5_K) put_bit4(dtype, ints, r, u.q, 256);
      return;
    case DType::Q6_K:
      put16(scales + 2 * r, u.d);
      for (int j = 0; j < 16; ++j) scales[32 + 16 * j + r] = static_cast<uint8_t>(u.scale[j]);
      put_nibbles(dtype, ints, r, u.q, 256);
      for (int h = 0; h < 16; ++h)
        for (int i = 0; i < 4; ++i) {
          uint8_t bits = 0;
          for (int m = 0; m < 4; ++m) bits = static_cast<uint8_t>(bits | (((u.q[16 * h + 4 * m + i] >> 4) & 3) << (2 * m)));
          ints[high_vector_at(h) + 4 * r + i] = bits;
        }
      return;
    default:
      return;
  }
}

}  // namespace

int64_t quad_bytes(DType dtype, int64_t panels, int64_t k) {
  const int64_t block = dtype_block_size(dtype);
  if (panel_int_bytes(dtype) == 0 || block <= 0 || k % block != 0) return 0;
  return k / block * quad_block_stride(dtype, panels);
}

int64_t packed_bytes(DType dtype, int64_t n, int64_t k) {
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows, rest = panels % kQuadPanels;
  return panels / kQuadPanels * quad_bytes(dtype, kQuadPanels, k) + (rest != 0 ? quad_bytes(dtype, rest, k) : 0);
}

void pack_panel(DType dtype, const uint8_t* rows, int64_t row_bytes, int64_t first_lane, int64_t count, int64_t k,
                uint8_t* quad, int64_t panels, int64_t g) {
  const int64_t blocks = k / dtype_block_size(dtype), block_bytes = dtype_block_bytes(dtype);
  const Quad view = quad_view(dtype, quad, panels);
  uint8_t* scales = quad + g * panel_scale_bytes(dtype);
  uint8_t* ints = quad + view.ints_at + g * panel_int_bytes(dtype);
  Unpacked u;
  for (int64_t r = 0; r < count; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      unpack_block(dtype, rows + r * row_bytes + b * block_bytes, u);
      put_block(dtype, u, static_cast<int>(first_lane + r), ints + b * view.block_stride, scales + b * view.block_stride);
    }
}

void pack_weight(DType dtype, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t row_bytes = dtype_bytes(dtype, k), full_quad = quad_bytes(dtype, kQuadPanels, k);
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  std::memset(dst, 0, static_cast<size_t>(packed_bytes(dtype, n, k)));
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t quad = p / kQuadPanels, in_quad = std::min(kQuadPanels, panels - quad * kQuadPanels);
    pack_panel(dtype, w + p * kPanelRows * row_bytes, row_bytes, 0, std::min(kPanelRows, n - p * kPanelRows), k,
               dst + quad * full_quad, in_quad, p % kQuadPanels);
  }
}

// ---- portable: the same integers and float operations, one output element at a time --------

namespace {

// Element e's nibble in a block's integer part `ints` (linear_q8.h) of row r.
int nibble(DType dtype, const uint8_t* ints, int r, int e) {
  const uint8_t byte = ints[nibble_vector_at(dtype, e / 8) + 4 * r + (e % 4)];
  return (e % 8) < 4 ? byte & 0x0F : byte >> 4;
}

// Element e's fifth bit in a block's integer part of row r.
int bit4(DType dtype, const uint8_t* ints, int r, int e) {
  const int bit = 4 * r + e % 4;
  return (ints[bit4_part_at(dtype, e / 4) + bit / 8] >> (bit % 8)) & 1;
}

float half_at(const uint8_t* p) { return half_to_float(u16(p)); }

template <DType kType>
void micro_portable(const Quad& quad, int first, int count, const QRow* x, int rows, int64_t blocks, float* out, uint8_t*) {
  for (int xr = 0; xr < rows; ++xr)
    for (int g = 0; g < count; ++g)
      for (int r = 0; r < kPanelRows; ++r) {
        const QRow& a = x[xr];
        float acc = 0.0f, macc = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) {
          const uint8_t* scales = quad.base + b * quad.block_stride + (first + g) * panel_scale_bytes(kType);
          const uint8_t* ints = quad.base + b * quad.block_stride + quad.ints_at + (first + g) * panel_int_bytes(kType);
          int32_t sum = 0, mins = 0;
          if constexpr (activation_block(kType) == 32) {
            const int8_t* q = a.q + 32 * b;
            for (int e = 0; e < 32; ++e) {
              int w;
              if constexpr (kType == DType::Q8_0) {
                w = ints[64 * (e / 4) + 4 * r + e % 4] - 128;
              } else if constexpr (kType == DType::Q5_0 || kType == DType::Q5_1) {
                w = (nibble(kType, ints, r, e) | (bit4(kType, ints, r, e) << 4)) - (kType == DType::Q5_0 ? 16 : 0);
              } else {
                w = nibble(kType, ints, r, e) - (kType == DType::Q4_0 ? 8 : 0);
              }
              sum += w * q[e];
            }
          } else if constexpr (kType == DType::Q4_K || kType == DType::Q5_K) {
            const int8_t* q = a.q + 256 * b;
            for (int s = 0; s < 8; ++s) {
              int32_t part = 0;
              for (int e = 32 * s; e < 32 * s + 32; ++e)
                part += (nibble(kType, ints, r, e) | (kType == DType::Q5_K ? bit4(kType, ints, r, e) << 4 : 0)) * q[e];
              sum += scales[64 + 16 * s + r] * part;
              mins += scales[192 + 16 * s + r] * a.sums[8 * b + s];
            }
          } else {  // Q6_K
            const int8_t* q = a.q + 256 * b;
            for (int j = 0; j < 16; ++j) {
              int32_t part = 0;
              for (int e = 16 * j; e < 16 * j + 16; ++e) {
                const int m = (e % 16) / 4, i = e % 4;
                const int high = (ints[high_vector_at(j) + 4 * r + i] >> (2 * m)) & 3;
                part += ((nibble(kType, ints, r, e) | (high << 4)) - 32) * q[e];
              }
              sum += static_cast<int8_t>(scales[32 + 16 * j + r]) * part;
            }
          }
          acc = std::fma(static_cast<float>(sum), half_at(scales + 2 * r) * a.d[b], acc);
          if constexpr (kType == DType::Q4_1 || kType == DType::Q5_1)
            macc = std::fma(half_at(scales + 32 + 2 * r), a.scaled_sums[b], macc);
          if constexpr (kType == DType::Q4_K || kType == DType::Q5_K)
            macc = std::fma(-(half_at(scales + 32 + 2 * r) * a.d[b]), static_cast<float>(mins), macc);
        }
        out[(xr * count + g) * kPanelRows + r] = has_min(kType) ? acc + macc : acc;
      }
}

}  // namespace
}  // namespace tessera::cpu::q8

// ---- SIMD: one body (linear_q8_simd.inc) over 16 int32 lanes, one lane per panel row ----------

#if TESSERA_HAVE_AVX2_PATHS

TESSERA_AVX2_BEGIN
namespace tessera::cpu::q8::avx2_path {
namespace {
// 16 lanes as two 256-bit halves (rows 0-7, rows 8-15 of a panel).
struct VI {
  __m256i a, b;
};
struct VF {
  __m256 a, b;
};
using VB = VI;  // 64 bytes: 4 bytes per lane
TESSERA_INLINE VI vzero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
TESSERA_INLINE VI vset1(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
TESSERA_INLINE VI vadd(VI x, VI y) { return {_mm256_add_epi32(x.a, y.a), _mm256_add_epi32(x.b, y.b)}; }
TESSERA_INLINE VI vmullo(VI x, VI y) { return {_mm256_mullo_epi32(x.a, y.a), _mm256_mullo_epi32(x.b, y.b)}; }
TESSERA_INLINE VF vcvt(VI x) { return {_mm256_cvtepi32_ps(x.a), _mm256_cvtepi32_ps(x.b)}; }
TESSERA_INLINE VF vzerof() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
TESSERA_INLINE VF vset1f(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
TESSERA_INLINE VF vmul(VF x, VF y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
TESSERA_INLINE VF vneg(VF x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  return {_mm256_xor_ps(x.a, sign), _mm256_xor_ps(x.b, sign)};
}
TESSERA_INLINE VF vaddf(VF x, VF y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
TESSERA_INLINE VF vfma(VF x, VF y, VF z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
TESSERA_INLINE void vstoref(float* p, VF x) {
  _mm256_storeu_ps(p, x.a);
  _mm256_storeu_ps(p + 8, x.b);
}
// 16 f16 values -> floats; 16 bytes -> int32 lanes.
TESSERA_INLINE VF load_halves(const uint8_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
}
TESSERA_INLINE VI load_u8(const uint8_t* p) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
}
TESSERA_INLINE VI load_i8(const uint8_t* p) {
  return {_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
}
// 64 weight bytes, loaded in program order (see vload in linear_q8_simd.inc).
TESSERA_INLINE VB vload(const uint8_t* p) {
  VB v;
  asm volatile("vmovdqu %1, %0" : "=x"(v.a) : "m"(*reinterpret_cast<const __m256i*>(p)));
  asm volatile("vmovdqu %1, %0" : "=x"(v.b) : "m"(*reinterpret_cast<const __m256i*>(p + 32)));
  return v;
}
TESSERA_INLINE void vstore(uint8_t* p, VB v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v.a);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32), v.b);
}
TESSERA_INLINE VB lo4(VB x) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(x.a, m), _mm256_and_si256(x.b, m)};
}
TESSERA_INLINE VB hi4(VB x) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(_mm256_srli_epi16(x.a, 4), m), _mm256_and_si256(_mm256_srli_epi16(x.b, 4), m)};
}
// maddubs saturates pairs of u * x at int16: the high nibbles are shifted down (hi4).
constexpr bool kScaledHighNibbles = false;
TESSERA_INLINE VB hi4_scaled(VB x) { return hi4(x); }  // never called (kScaledHighNibbles is false)
TESSERA_INLINE VI vsra4(VI x) { return x; }            // never called
TESSERA_INLINE VB vload_nibbles(const uint8_t* p) { return vload(p); }
// Bits 4-5 of every byte: bits 2m, 2m + 1 of h.
TESSERA_INLINE VB high2(VB h, int m) {
  const __m256i mask = _mm256_set1_epi8(0x30);
  auto one = [&](__m256i v) {
    return _mm256_and_si256(m <= 2 ? _mm256_slli_epi16(v, 4 - 2 * m) : _mm256_srli_epi16(v, 2), mask);
  };
  return {one(h.a), one(h.b)};
}
TESSERA_INLINE VB vor(VB x, VB y) { return {_mm256_or_si256(x.a, y.a), _mm256_or_si256(x.b, y.b)}; }
// Byte j |= 16 where bit j of the 64 bits at p is set (Q5_0's fifth bit).
TESSERA_INLINE VB add_bit4(VB x, const uint8_t* p) {
  const __m256i b16 = _mm256_set1_epi8(0x10);
  return {_mm256_or_si256(x.a, _mm256_and_si256(avx2::bytes_from_bits(avx2::load_u32(p)), b16)),
          _mm256_or_si256(x.b, _mm256_and_si256(avx2::bytes_from_bits(avx2::load_u32(p + 4)), b16))};
}
// acc + per lane sum_i u[4l + i] * x4[i]: unsigned u < 128 (no int16 pair saturates).
TESSERA_INLINE VI dot(VI acc, VB u, const int8_t* x4) {
  int32_t v;
  std::memcpy(&v, x4, 4);
  const __m256i x = _mm256_set1_epi32(v), ones = _mm256_set1_epi16(1);
  return {_mm256_add_epi32(acc.a, _mm256_madd_epi16(_mm256_maddubs_epi16(u.a, x), ones)),
          _mm256_add_epi32(acc.b, _mm256_madd_epi16(_mm256_maddubs_epi16(u.b, x), ones))};
}
// Q8_0: u = w + 128. acc + sum_i w[4l + i] * x4[i] (|w| against x with w's sign: exact pairs).
constexpr bool kQ8Offset = false;
TESSERA_INLINE VI dot_q8(VI acc, VB u, const int8_t* x4) {
  int32_t v;
  std::memcpy(&v, x4, 4);
  const __m256i x = _mm256_set1_epi32(v), ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  auto one = [&](__m256i acc_half, __m256i u_half) {
    const __m256i w = _mm256_xor_si256(u_half, flip);
    return _mm256_add_epi32(acc_half, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), ones));
  };
  return {one(acc.a, u.a), one(acc.b, u.b)};
}
constexpr int kMaxTileRows = 2;  // 16 registers
#include "kernels/cpu/linear_q8_simd.inc"
}  // namespace
}  // namespace tessera::cpu::q8::avx2_path
TESSERA_AVX2_END

#if defined(__clang__)
#define TESSERA_VNNI_BEGIN \
  TESSERA_CLANG_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#define TESSERA_VNNI_END _Pragma("clang attribute pop")
#else
#define TESSERA_VNNI_BEGIN                                                                   \
  _Pragma("GCC push_options")                                                                \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c\")") \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define TESSERA_VNNI_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif

TESSERA_VNNI_BEGIN
namespace tessera::cpu::q8::vnni_path {
namespace {
using VI = __m512i;
using VF = __m512;
using VB = __m512i;
TESSERA_INLINE VI vzero() { return _mm512_setzero_si512(); }
TESSERA_INLINE VI vset1(int32_t v) { return _mm512_set1_epi32(v); }
TESSERA_INLINE VI vadd(VI x, VI y) { return _mm512_add_epi32(x, y); }
TESSERA_INLINE VI vmullo(VI x, VI y) { return _mm512_mullo_epi32(x, y); }
TESSERA_INLINE VF vcvt(VI x) { return _mm512_cvtepi32_ps(x); }
TESSERA_INLINE VF vzerof() { return _mm512_setzero_ps(); }
TESSERA_INLINE VF vset1f(float v) { return _mm512_set1_ps(v); }
TESSERA_INLINE VF vmul(VF x, VF y) { return _mm512_mul_ps(x, y); }
TESSERA_INLINE VF vneg(VF x) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))); }
TESSERA_INLINE VF vaddf(VF x, VF y) { return _mm512_add_ps(x, y); }
TESSERA_INLINE VF vfma(VF x, VF y, VF z) { return _mm512_fmadd_ps(x, y, z); }
TESSERA_INLINE void vstoref(float* p, VF x) { _mm512_storeu_ps(p, x); }
TESSERA_INLINE VF load_halves(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
TESSERA_INLINE VI load_u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
TESSERA_INLINE VI load_i8(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// 64 weight bytes, loaded in program order (see vload in linear_q8_simd.inc) as two 256-bit
// halves: Q8_0's one-row decode streamed at 71-90% of a plain read with one 512-bit load per
// vector, 89-104% with two (kernels_bench, alternating builds, Zen 4); the other types were at
// 86-100% either way.
TESSERA_INLINE VB vload(const uint8_t* p) {
  __m256i a, b;
  asm volatile("vmovdqu64 %1, %0" : "=v"(a) : "m"(*reinterpret_cast<const __m256i*>(p)));
  asm volatile("vmovdqu64 %1, %0" : "=v"(b) : "m"(*reinterpret_cast<const __m256i*>(p + 32)));
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}
TESSERA_INLINE void vstore(uint8_t* p, VB v) { _mm512_storeu_si512(p, v); }
TESSERA_INLINE VB lo4(VB x) { return _mm512_and_si512(x, _mm512_set1_epi8(0x0F)); }
TESSERA_INLINE VB hi4(VB x) { return _mm512_and_si512(_mm512_srli_epi16(x, 4), _mm512_set1_epi8(0x0F)); }
// vpdpbusd sums u * x in int32 without saturating: a high nibble can stay in place (16 * hi,
// one and instead of a shift and an and) in a sum of its own, shifted down by 4 at the end
// (exact: every term is a multiple of 16).
constexpr bool kScaledHighNibbles = true;
TESSERA_INLINE VB hi4_scaled(VB x) { return _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(0xF0))); }
TESSERA_INLINE VI vsra4(VI x) { return _mm512_srai_epi32(x, 4); }
// 64 bytes of the types other than Q8_0 in one load (in program order, as vload): halves
// gained nothing for them (86-100% of a plain read either way) and cost a shuffle per vector.
// With the scaled high nibbles, one-row decode with the weights in cache (kernels_bench --hot)
// went from ~11.5 to ~8.8 us for Q4_1 and Q4_K 576 x 1536, Q4_0 10.3 -> 7.8, Q6_K 17.3 -> 14.7,
// Q5_0 and Q5_1 ~6% faster; streamed from memory, 1-3 points more of a plain read's rate.
TESSERA_INLINE VB vload_nibbles(const uint8_t* p) {
  VB v;
  asm volatile("vmovdqu64 %1, %0" : "=v"(v) : "m"(*reinterpret_cast<const __m512i_u*>(p)));
  return v;
}
TESSERA_INLINE VB high2(VB h, int m) {
  return _mm512_and_si512(m <= 2 ? _mm512_slli_epi16(h, static_cast<unsigned>(4 - 2 * m)) : _mm512_srli_epi16(h, 2),
                          _mm512_set1_epi8(0x30));
}
TESSERA_INLINE VB vor(VB x, VB y) { return _mm512_or_si512(x, y); }
TESSERA_INLINE VB add_bit4(VB x, const uint8_t* p) {
  uint64_t bits;
  std::memcpy(&bits, p, 8);
  return _mm512_mask_add_epi8(x, _cvtu64_mask64(bits), x, _mm512_set1_epi8(0x10));
}
TESSERA_INLINE VI dot(VI acc, VB u, const int8_t* x4) {
  int32_t v;
  std::memcpy(&v, x4, 4);
  return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(v));
}
// Q8_0: u = w + 128 against x directly; the caller starts the block's sum at -128 * sum(x).
constexpr bool kQ8Offset = true;
TESSERA_INLINE VI dot_q8(VI acc, VB u, const int8_t* x4) { return dot(acc, u, x4); }
constexpr int kMaxTileRows = 4;  // 32 registers
#include "kernels/cpu/linear_q8_simd.inc"
}  // namespace
}  // namespace tessera::cpu::q8::vnni_path
TESSERA_VNNI_END

// ---- AMX (linear_q8.h): integer sums on tiles, the float sequence of the VNNI path ------------

#if defined(__clang__)
#define TESSERA_AMX_BEGIN \
  TESSERA_CLANG_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")
#define TESSERA_AMX_END _Pragma("clang attribute pop")
#else
#define TESSERA_AMX_BEGIN                                                                                    \
  _Pragma("GCC push_options")                                                                                \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8\")") \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define TESSERA_AMX_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif

namespace tessera::cpu::q8 {
namespace {
thread_local int64_t amx_calls = 0;  // amx_tile_calls()
}  // namespace
}  // namespace tessera::cpu::q8

TESSERA_AMX_BEGIN
namespace tessera::cpu::q8::amx_path {
namespace {
using vnni_path::VB;
using vnni_path::VF;
using vnni_path::VI;

// The tile configuration (palette 1). Four tile products are in flight at a time (a product's
// result waits for the one before it otherwise: the chain of tilezero, tdpbsud and tilestored
// on one tile made the path latency-bound): x rows (A, signed bytes) in tiles 0 and 1, weights
// (B, unsigned bytes, 16 lanes of 4) in tiles 2 and 3, the int32 sums (C) in tiles 4 to 7.
struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Elements per tile product: a 32-element block or K-quant sub-block, Q6_K's 16-element ones.
template <DType kType>
constexpr int kSub = kType == DType::Q6_K ? 16 : 32;
// x rows per pass: their accumulators stay in registers.
constexpr int kRows = 8;
constexpr int kInFlight = 4;  // tile products issued before their sums are read

void configure(TileConfig* config, int rows, int sub) {
  *config = TileConfig{};
  for (int t = 0; t < 2; ++t) {
    config->rows[t] = static_cast<uint8_t>(rows);
    config->colsb[t] = static_cast<uint16_t>(sub);
    config->rows[2 + t] = static_cast<uint8_t>(sub / 4);
    config->colsb[2 + t] = 64;
  }
  for (int t = 4; t < 8; ++t) {
    config->rows[t] = static_cast<uint8_t>(rows);
    config->colsb[t] = 64;
  }
  _tile_loadconfig(config);
}

// Product slot kT: C tile 4 + kT = A (x rows from `a`, a_stride apart) times B (`w`, 64-byte rows).
// (The intrinsics take tile numbers as literal tokens.)
#define TESSERA_AMX_PRODUCT(c_tile, a_tile, b_tile) \
  _tile_zero(c_tile);                               \
  _tile_loadd(a_tile, a, a_stride);                 \
  _tile_loadd(b_tile, w, 64);                       \
  _tile_dpbsud(c_tile, a_tile, b_tile)
template <int kT>
TESSERA_INLINE void product(const int8_t* a, int64_t a_stride, const uint8_t* w) {
  if constexpr (kT == 0) {
    TESSERA_AMX_PRODUCT(4, 0, 2);
  } else if constexpr (kT == 1) {
    TESSERA_AMX_PRODUCT(5, 1, 3);
  } else if constexpr (kT == 2) {
    TESSERA_AMX_PRODUCT(6, 0, 2);
  } else {
    TESSERA_AMX_PRODUCT(7, 1, 3);
  }
}
#undef TESSERA_AMX_PRODUCT

// Panel g's integer parts, every block, as plain unsigned bytes in the panel's 64-byte vectors
// (vector t of a block: elements 4t..4t+3 of each of the 16 rows): dec + 16 * (element of K).
template <DType kType>
void decode_panel(const Quad& quad, int g, int64_t blocks, uint8_t* dec) {
  using namespace vnni_path;
  constexpr int64_t kBlock = kType == DType::Q4_K || kType == DType::Q5_K || kType == DType::Q6_K ? 256 : 32;
  const uint8_t* block = quad.base + quad.ints_at + g * panel_int_bytes(kType);
  for (int64_t b = 0; b < blocks; ++b, block += quad.block_stride) {
    uint8_t* o = dec + b * kBlock * 16;
    if constexpr (kType == DType::Q4_0 || kType == DType::Q4_1 || kType == DType::Q5_0 || kType == DType::Q5_1) {
      for (int c = 0; c < 4; ++c) {
        const VB raw = vload_nibbles(block + 64 * c);
        VB u0 = lo4(raw), u1 = hi4(raw);
        if constexpr (kType == DType::Q5_0 || kType == DType::Q5_1) {
          u0 = add_bit4(u0, block + 256 + 8 * (2 * c));
          u1 = add_bit4(u1, block + 256 + 8 * (2 * c + 1));
        }
        vstore(o + 128 * c, u0);
        vstore(o + 128 * c + 64, u1);
      }
    } else if constexpr (kType == DType::Q4_K || kType == DType::Q5_K) {
      for (int sub = 0; sub < 8; ++sub) {
        const uint8_t* part = block + nibble_vector_at(kType, 4 * sub);
        for (int c = 0; c < 4; ++c) {
          const VB raw = vload_nibbles(part + 64 * c);
          VB u0 = lo4(raw), u1 = hi4(raw);
          if constexpr (kType == DType::Q5_K) {
            u0 = add_bit4(u0, part + 256 + 16 * c);
            u1 = add_bit4(u1, part + 256 + 16 * c + 8);
          }
          vstore(o + 512 * sub + 128 * c, u0);
          vstore(o + 512 * sub + 128 * c + 64, u1);
        }
      }
    } else if constexpr (kType == DType::Q6_K) {
      for (int j = 0; j < 16; ++j) {
        const VB h = vload_nibbles(block + high_vector_at(j));
        for (int half = 0; half < 2; ++half) {
          const VB raw = vload_nibbles(block + nibble_vector_at(DType::Q6_K, 2 * j + half));
          vstore(o + 256 * j + 128 * half, vor(lo4(raw), high2(h, 2 * half)));
          vstore(o + 256 * j + 128 * half + 64, vor(hi4(raw), high2(h, 2 * half + 1)));
        }
      }
    }
  }
}

// Up to kRows x rows (x[0..kRows), the ones past `rows` repeating the last) against panel g:
// out[r * out_stride + lane] for r < rows. The A tiles are x[0].q onwards, rows a_stride apart;
// `c` holds kInFlight int32 tiles.
template <DType kType>
void panel_rows(const Quad& quad, int g, const QRow* x, int rows, int64_t a_stride, int64_t blocks, const uint8_t* dec,
                int32_t* c, float* out, int64_t out_stride) {
  using namespace vnni_path;
  constexpr int64_t kBlock = kType == DType::Q4_K || kType == DType::Q5_K || kType == DType::Q6_K ? 256 : 32;
  constexpr int kSubs = static_cast<int>(kBlock) / kSub<kType>;
  VF acc[kRows], macc[kRows];
  VI total[kRows], mins[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) acc[r] = macc[r] = vzerof();
  const int64_t products = blocks * kSubs;
  // Product p: elements [p * kSub, (p + 1) * kSub) of K, of block p / kSubs.
  auto weights = [&](int64_t p) {
    if constexpr (kType == DType::Q8_0)
      return quad.base + p * quad.block_stride + quad.ints_at + g * panel_int_bytes(kType);
    else
      return dec + 16 * kSub<kType> * p;
  };
  const int8_t* a = x[0].q;
  for (int64_t p0 = 0; p0 < products; p0 += kInFlight) {
    const int64_t in_flight = std::min<int64_t>(kInFlight, products - p0);
    product<0>(a + kSub<kType> * p0, a_stride, weights(p0));
    if (in_flight > 1) product<1>(a + kSub<kType> * (p0 + 1), a_stride, weights(p0 + 1));
    if (in_flight > 2) product<2>(a + kSub<kType> * (p0 + 2), a_stride, weights(p0 + 2));
    if (in_flight > 3) product<3>(a + kSub<kType> * (p0 + 3), a_stride, weights(p0 + 3));
    _tile_stored(4, c, 64);
    if (in_flight > 1) _tile_stored(5, c + 256, 64);
    if (in_flight > 2) _tile_stored(6, c + 512, 64);
    if (in_flight > 3) _tile_stored(7, c + 768, 64);
    for (int64_t i = 0; i < in_flight; ++i) {
      const int64_t p = p0 + i, b = p / kSubs;
      const int sub = static_cast<int>(p % kSubs);
      const int32_t* sums = c + 256 * i;
      const uint8_t* scales = quad.base + b * quad.block_stride + g * panel_scale_bytes(kType);
      if (sub == 0)
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) total[r] = mins[r] = vzero();
      if constexpr (kType == DType::Q4_K || kType == DType::Q5_K) {
        const VI scale = load_u8(scales + 64 + 16 * sub), min = load_u8(scales + 192 + 16 * sub);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          total[r] = vadd(total[r], vmullo(_mm512_load_si512(sums + 16 * r), scale));
          mins[r] = vadd(mins[r], vmullo(min, vset1(x[r].sums[8 * b + sub])));
        }
      } else if constexpr (kType == DType::Q6_K) {
        const VI scale = load_i8(scales + 32 + 16 * sub);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r)
          total[r] = vadd(total[r], vmullo(vadd(vset1(-32 * x[r].sums16[16 * b + sub]), _mm512_load_si512(sums + 16 * r)), scale));
      } else {
        constexpr int kOffset = kType == DType::Q8_0 ? -128 : kType == DType::Q4_0 ? -8 : kType == DType::Q5_0 ? -16 : 0;
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const VI s = _mm512_load_si512(sums + 16 * r);
          total[r] = kOffset != 0 ? vadd(vset1(kOffset * x[r].sums[b]), s) : s;
        }
      }
      if (sub != kSubs - 1) continue;
      // The block's float sequence (linear_q8.h).
      const VF d = load_halves(scales);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const VF dx = vset1f(x[r].d[b]);
        acc[r] = vfma(vcvt(total[r]), vmul(d, dx), acc[r]);
        if constexpr (kType == DType::Q4_1 || kType == DType::Q5_1)
          macc[r] = vfma(load_halves(scales + 32), vset1f(x[r].scaled_sums[b]), macc[r]);
        if constexpr (kType == DType::Q4_K || kType == DType::Q5_K)
          macc[r] = vfma(vneg(vmul(load_halves(scales + 32), dx)), vcvt(mins[r]), macc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
    if (r < rows) vstoref(out + r * out_stride, has_min(kType) ? vaddf(acc[r], macc[r]) : acc[r]);
}

template <DType kType>
void micro(const Quad& quad, int first, int count, const QRow* x, int rows, int64_t blocks, float* out, uint8_t* work) {
  if (rows < kAmxMinRows || work == nullptr) return vnni_path::micro<kType>(quad, first, count, x, rows, blocks, out);
  // The quantised rows sit a constant stride apart (the driver's chunk): one A tile per pass.
  const int64_t a_stride = x[1].q - x[0].q;
  for (int r = 2; r < rows; ++r)
    if (x[r].q - x[r - 1].q != a_stride) return vnni_path::micro<kType>(quad, first, count, x, rows, blocks, out);
  constexpr int64_t kBlock = kType == DType::Q4_K || kType == DType::Q5_K || kType == DType::Q6_K ? 256 : 32;
  const int64_t k = blocks * kBlock;
  uint8_t* dec = work;
  auto* c = reinterpret_cast<int32_t*>(work + 16 * k);
  auto* config = reinterpret_cast<TileConfig*>(work + 16 * k + kInFlight * 16 * 64);
  const int64_t out_stride = 16 * count;
  amx_calls += 1;
  int configured = 0;
  for (int gi = 0; gi < count; ++gi) {
    if constexpr (kType != DType::Q8_0) decode_panel<kType>(quad, first + gi, blocks, dec);
    for (int r0 = 0; r0 < rows; r0 += kRows) {
      const int n = std::min(kRows, rows - r0);
      if (n != configured) {
        configure(config, n, kSub<kType>);
        configured = n;
      }
      QRow xs[kRows];
      for (int r = 0; r < kRows; ++r) xs[r] = x[r0 + std::min(r, n - 1)];
      panel_rows<kType>(quad, first + gi, xs, n, a_stride, blocks, dec, c, out + r0 * out_stride + 16 * gi, out_stride);
    }
  }
  _tile_release();
}

}  // namespace
}  // namespace tessera::cpu::q8::amx_path
TESSERA_AMX_END

#endif  // TESSERA_HAVE_AVX2_PATHS

// ---- driver -----------------------------------------------------------------------------------

namespace tessera::cpu::q8 {
namespace {

// `rows` x rows against panels [first, first + count) of a quad:
// out[(r * count + g) * 16 + lane]; `work`: amx_work_bytes(dtype, K) bytes of scratch (the AMX
// path's, when rows >= kAmxMinRows).
using MicroFn = void (*)(const Quad& quad, int first, int count, const QRow* x, int rows, int64_t blocks, float* out,
                         uint8_t* work);
using QuantizeFn = void (*)(const float* x, int64_t step, const RowLayout& layout, std::byte* dst);

// Scratch for the panels of one quad (packed there when the backend prepared none).
int64_t group_bytes(DType dtype, int64_t depth) { return quad_bytes(dtype, kQuadPanels, depth); }

template <DType kType, MicroFn kMicro, QuantizeFn kQuantize>
absl::Status linear_q8(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const KernelInput& x = args.inputs[0];
  const KernelInput& w = args.inputs[1];
  const BoxRows rows(box);
  const int last = args.node.rank() - 1;
  const int64_t depth = w.shape[1], n_total = w.shape[0];
  const int64_t n_begin = box.begin(last), n_end = box.end(last);
  const auto* weights = static_cast<const uint8_t*>(w.data);
  const int64_t weight_begin = w.extent.begin(0), weight_end = w.extent.end(0);
  const int64_t row_bytes = dtype_bytes(kType, depth);
  const int64_t blocks = depth / dtype_block_size(kType);
  const int64_t full_quad = quad_bytes(kType, kQuadPanels, depth);
  const int64_t all_panels = (n_total + kPanelRows - 1) / kPanelRows;
  // The backend's packed copy of the whole matrix, or panels packed here into scratch.
  const auto* packed = static_cast<const uint8_t*>(args.node.prepared);
  const RowLayout layout(depth, activation_block(kType));
  ScratchCarver carver(args.scratch);
  std::byte* quantised = carver.take<std::byte>(std::min(kChunkRows, rows.count()) * layout.row_bytes);
  uint8_t* own_panels = packed == nullptr ? carver.take<uint8_t>(group_bytes(kType, depth)) : nullptr;
  uint8_t* work = rows.count() >= kAmxMinRows ? carver.take<uint8_t>(amx_work_bytes(kType, depth)) : nullptr;
  if (quantised == nullptr || (packed == nullptr && own_panels == nullptr) || (rows.count() >= kAmxMinRows && work == nullptr))
    return absl::InternalError("[linear] kernel scratch too small for quantised rows");
  const int64_t x_step = x.strides[last];
  const TensorView& out = args.out;
  const int64_t out_step = out.strides[last];
  int64_t index[kMaxRank];
  alignas(64) float results[kChunkRows * kPanelRows * kQuadPanels];
  QRow q[kChunkRows];
  const int64_t last_panel = (n_end + kPanelRows - 1) / kPanelRows;
  for (int64_t c0 = 0; c0 < rows.count(); c0 += kChunkRows) {
    const int chunk = static_cast<int>(std::min(kChunkRows, rows.count() - c0));
    for (int r = 0; r < chunk; ++r) {
      rows.index(c0 + r, index);
      index[last] = 0;
      std::byte* dst = quantised + r * layout.row_bytes;
      kQuantize(x.at<const float>(index), x_step, layout, dst);
      q[r] = qrow(dst, layout);
    }
    // The box's part of each quad.
    for (int64_t p = n_begin / kPanelRows; p < last_panel;) {
      const int64_t quad = p / kQuadPanels, quad_panels = std::min(kQuadPanels, all_panels - quad * kQuadPanels);
      const int first = static_cast<int>(p - quad * kQuadPanels);
      const int count = static_cast<int>(std::min(quad * kQuadPanels + quad_panels, last_panel) - p);
      const int64_t p0 = p * kPanelRows;
      p += count;
      const uint8_t* base;
      if (packed != nullptr) {
        base = packed + quad * full_quad;
      } else {
        // Rows the view holds (the box's rows always are); the others stay zero.
        std::memset(own_panels, 0, static_cast<size_t>(full_quad));
        for (int g = first; g < first + count; ++g) {
          const int64_t g0 = p0 + (g - first) * kPanelRows;
          const int64_t lo = std::max(g0, weight_begin), hi = std::min({g0 + kPanelRows, weight_end, n_total});
          if (hi > lo)
            pack_panel(kType, weights + (lo - weight_begin) * row_bytes, row_bytes, lo - g0, hi - lo, depth,
                       own_panels, quad_panels, g);
        }
        base = own_panels;
      }
      const Quad view = quad_view(kType, base, quad_panels);
      kMicro(view, first, count, q, chunk, blocks, results, work);
      const int64_t width = count * kPanelRows;
      const int64_t j0 = std::max(n_begin, p0), j1 = std::min(n_end, p0 + width);
      for (int r = 0; r < chunk; ++r) {
        rows.index(c0 + r, index);
        index[last] = j0;
        float* o = out.at<float>(index);
        const float* from = results + r * width + (j0 - p0);
        if (out_step == 1)
          std::memcpy(o, from, static_cast<size_t>(j1 - j0) * sizeof(float));
        else
          for (int64_t j = 0; j < j1 - j0; ++j) o[j * out_step] = from[j];
      }
    }
  }
  return absl::OkStatus();
}

template <DType kType>
KernelFn kernel_for(Isa isa) {
#if TESSERA_HAVE_AVX2_PATHS
  if (isa == Isa::Amx) return linear_q8<kType, amx_path::micro<kType>, vnni_path::quantize_row>;
  if (isa == Isa::Avx512Vnni) return linear_q8<kType, vnni_path::micro<kType>, vnni_path::quantize_row>;
  if (isa != Isa::Portable) return linear_q8<kType, avx2_path::micro<kType>, avx2_path::quantize_row>;
#endif
  (void)isa;
  return linear_q8<kType, micro_portable<kType>, quantize_row_portable>;
}

}  // namespace

KernelFn kernel(DType dtype, Isa isa) {
  switch (dtype) {
    case DType::Q8_0:
      return kernel_for<DType::Q8_0>(isa);
    case DType::Q4_0:
      return kernel_for<DType::Q4_0>(isa);
    case DType::Q4_1:
      return kernel_for<DType::Q4_1>(isa);
    case DType::Q5_0:
      return kernel_for<DType::Q5_0>(isa);
    case DType::Q5_1:
      return kernel_for<DType::Q5_1>(isa);
    case DType::Q4_K:
      return kernel_for<DType::Q4_K>(isa);
    case DType::Q5_K:
      return kernel_for<DType::Q5_K>(isa);
    case DType::Q6_K:
      return kernel_for<DType::Q6_K>(isa);
    default:
      return nullptr;
  }
}

int64_t amx_tile_calls() {
#if TESSERA_HAVE_AVX2_PATHS
  return amx_calls;
#else
  return 0;
#endif
}

int64_t scratch_bytes(DType dtype, int64_t depth, int64_t rows) {
  const int64_t block = activation_block(dtype);
  if (block == 0 || depth % block != 0) return 0;
  return scratch_take_bytes<std::byte>(std::min(kChunkRows, rows) * RowLayout(depth, block).row_bytes) +
         scratch_take_bytes<uint8_t>(group_bytes(dtype, depth)) +
         (rows >= kAmxMinRows ? scratch_take_bytes<uint8_t>(amx_work_bytes(dtype, depth)) : 0);
}

}  // namespace tessera::cpu::q8
