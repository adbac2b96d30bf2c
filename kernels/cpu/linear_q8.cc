// The integer linear path (linear_q8.h): activation quantisation, the portable panel kernel, the
// SIMD panel kernels (linear_q8_simd.inc over 16 lanes: two 256-bit halves on AVX2, one 512-bit
// register on AVX-512 VNNI), the AMX one (linear_q8_amx.inc) and the driver that quantises x rows
// in chunks of 64 and walks groups of 4 panels. Packing GGUF rows into panels: linear_q8_pack.cc.
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

namespace {

// The largest |x[k * step]| of block [k0, k0 + block).
float block_amax(const float* x, int64_t step, int64_t k0, int64_t block) {
  float a = 0.0f;
  for (int64_t k = k0; k < k0 + block; ++k) a = std::max(a, std::fabs(x[k * step]));
  return a;
}

// The 32-sums and scaled sums of block [k0, k0 + block) of a quantised row from its 16-sums and
// its scale.
void finish_block_sums(const RowLayout& layout, int64_t k0, std::byte* dst) {
  const float d = reinterpret_cast<const float*>(dst + layout.d_offset)[k0 / layout.block];
  auto* sums = reinterpret_cast<int32_t*>(dst + layout.sums_offset);
  const auto* sums16 = reinterpret_cast<const int32_t*>(dst + layout.sums16_offset);
  auto* scaled_sums = reinterpret_cast<float*>(dst + layout.scaled_sums_offset);
  for (int64_t k = k0; k < k0 + layout.block; k += 32) {
    sums[k / 32] = sums16[k / 16] + sums16[k / 16 + 1];
    scaled_sums[k / 32] = d * static_cast<float>(sums[k / 32]);
  }
}

}  // namespace

void quantize_row_portable(const float* x, int64_t step, const RowLayout& layout, std::byte* dst) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + layout.d_offset);
  auto* sums16 = reinterpret_cast<int32_t*>(dst + layout.sums16_offset);
  for (int64_t k0 = 0; k0 < layout.depth; k0 += layout.block) {
    const float a = block_amax(x, step, k0, layout.block);
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
    finish_block_sums(layout, k0, dst);
  }
}

namespace {

// v = 255 q + r with r in [-127, 127]: q from the float quotient (exact operands: |v| < 2^24),
// rounded to nearest even, then r brought into range (the vector twin does the same steps).
inline int32_t split255(int32_t v, int32_t& r) {
  int32_t q = static_cast<int32_t>(std::nearbyint(static_cast<float>(v) / 255.0f));
  r = v - 255 * q;
  if (r > 127) r -= 255, ++q;
  if (r < -127) r += 255, --q;
  return q;
}

// The x row's sums of block [k0, k0 + block) per 32 elements, from its digit rows' sums (X =
// 65025 h + 255 m + l, exact in int32: |X| <= kDigitRange): float(sum X) in the high row's
// scaled sums (the K-quants' min term) and s * float(sum X) in the low row's (Q4_1's, Q5_1's),
// as linear_q8.h has them.
void digit_offset_sums(const RowLayout& layout, int64_t k0, std::byte* const dst[3]) {
  const auto sums = [&](int i) { return reinterpret_cast<const int32_t*>(dst[i] + layout.sums_offset); };
  const auto scaled_sums = [&](int i) { return reinterpret_cast<float*>(dst[i] + layout.scaled_sums_offset); };
  const float s = reinterpret_cast<const float*>(dst[2] + layout.d_offset)[k0 / layout.block];
  for (int64_t j = k0 / 32; j < (k0 + layout.block) / 32; ++j) {
    const float total = static_cast<float>(65025 * sums(0)[j] + 255 * sums(1)[j] + sums(2)[j]);
    scaled_sums(0)[j] = total;
    scaled_sums(2)[j] = s * total;
  }
}

}  // namespace

void quantize_digits(const float* x, int64_t step, const RowLayout& layout, std::byte* const dst[3]) {
  const float range = static_cast<float>(kDigitRange);
  for (int64_t k0 = 0; k0 < layout.depth; k0 += layout.block) {
    const float a = block_amax(x, step, k0, layout.block), s = a / range;
    const float inverse = a != 0.0f ? range / a : 0.0f;
    const float scales[3] = {s * 65025.0f, s * 255.0f, s};
    for (int i = 0; i < 3; ++i) reinterpret_cast<float*>(dst[i] + layout.d_offset)[k0 / layout.block] = scales[i];
    for (int64_t k = k0; k < k0 + layout.block; k += 16) {
      int32_t total[3] = {};
      for (int64_t e = k; e < k + 16; ++e) {
        const float scaled = std::min(std::max(x[e * step] * inverse, -range), range);
        int32_t digit[3];  // high, middle, low
        const int32_t rest = split255(static_cast<int32_t>(std::nearbyint(scaled)), digit[2]);
        digit[0] = split255(rest, digit[1]);
        for (int i = 0; i < 3; ++i) {
          reinterpret_cast<int8_t*>(dst[i])[e] = static_cast<int8_t>(digit[i]);
          total[i] += digit[i];
        }
      }
      for (int i = 0; i < 3; ++i) reinterpret_cast<int32_t*>(dst[i] + layout.sums16_offset)[k / 16] = total[i];
    }
    for (int i = 0; i < 3; ++i) finish_block_sums(layout, k0, dst[i]);
    digit_offset_sums(layout, k0, dst);
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

float half_at(const uint8_t* p) { return half_to_float(u16_at(p)); }

// The exact integers of block b of weight row r (panel g of the quad) against quantised row a:
// S_b, and the K-quants' sum_s min_s * sum(q in s).
template <DType kType>
void block_integers(const Quad& quad, int g, int r, const QRow& a, int64_t b, int32_t& sum, int32_t& mins) {
  const uint8_t* scales = quad.base + b * quad.block_stride + g * panel_scale_bytes(kType);
  const uint8_t* ints = quad.base + b * quad.block_stride + quad.ints_at + g * panel_int_bytes(kType);
  sum = 0, mins = 0;
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
}

// int8's float(v[0]), int24's fma(float(v_h), 65025, fma(float(v_m), 255, float(v_l))).
template <int kDigits>
float digits_value(const int32_t* v) {
  if constexpr (kDigits == 1)
    return static_cast<float>(v[0]);
  else
    return std::fma(static_cast<float>(v[0]), 65025.0f,
                    std::fma(static_cast<float>(v[1]), 255.0f, static_cast<float>(v[2])));
}

template <DType kType, int kDigits = 1>
void micro_portable(const Quad& quad, int first, int count, const QRow* x, int rows, int64_t blocks, float* out, uint8_t*) {
  for (int xr = 0; xr < rows / kDigits; ++xr)
    for (int g = 0; g < count; ++g)
      for (int r = 0; r < kPanelRows; ++r) {
        const QRow* digits = x + kDigits * xr;
        const QRow& a = digits[kDigits - 1];  // its d and scaled sums are the x row's
        float acc = 0.0f, macc = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) {
          const uint8_t* scales = quad.base + b * quad.block_stride + (first + g) * panel_scale_bytes(kType);
          int32_t sum[kDigits], mins[kDigits];
          for (int i = 0; i < kDigits; ++i) block_integers<kType>(quad, first + g, r, digits[i], b, sum[i], mins[i]);
          acc = std::fma(digits_value<kDigits>(sum), half_at(scales + 2 * r) * a.d[b], acc);
          if constexpr (kType == DType::Q4_1 || kType == DType::Q5_1)
            macc = std::fma(half_at(scales + 32 + 2 * r), a.scaled_sums[b], macc);
          if constexpr (kType == DType::Q4_K || kType == DType::Q5_K) {
            float min_value = static_cast<float>(mins[0]);
            if constexpr (kDigits == 3) {  // sum_s min_s * float(sum X in s), the high row's sums
              min_value = 0.0f;
              for (int s = 0; s < 8; ++s)
                min_value = std::fma(static_cast<float>(scales[192 + 16 * s + r]), digits[0].scaled_sums[8 * b + s], min_value);
            }
            macc = std::fma(min_value, -half_at(scales + 32 + 2 * r) * a.d[b], macc);
          }
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
[[maybe_unused]] TESSERA_INLINE VI vsra4(VI x) { return x; }  // never called
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
  VI sum{_mm256_add_epi32(acc.a, _mm256_madd_epi16(_mm256_maddubs_epi16(u.a, x), ones)),
         _mm256_add_epi32(acc.b, _mm256_madd_epi16(_mm256_maddubs_epi16(u.b, x), ones))};
  // Opaque: the compiler would otherwise reassociate a block's integer additions into a tree,
  // holding every product at once (it spilled most of them to the stack).
  asm("" : "+x"(sum.a), "+x"(sum.b));
  return sum;
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
  VI sum{one(acc.a, u.a), one(acc.b, u.b)};
  asm("" : "+x"(sum.a), "+x"(sum.b));  // as in dot
  return sum;
}
constexpr int kMaxTileRows = 2;  // 16 registers
constexpr int kMaxDigitRows = 3;
#include "kernels/cpu/linear_q8_simd.inc"
}  // namespace
}  // namespace tessera::cpu::q8::avx2_path
TESSERA_AVX2_END

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
constexpr int kMaxDigitRows = 6;
#include "kernels/cpu/linear_q8_simd.inc"
}  // namespace
}  // namespace tessera::cpu::q8::vnni_path
TESSERA_VNNI_END

// ---- AMX (linear_q8.h): integer sums on tiles, the float sequence of the VNNI path ------------

#include "kernels/cpu/linear_q8_amx.inc"

#endif  // TESSERA_HAVE_AVX2_PATHS

// ---- driver -----------------------------------------------------------------------------------

namespace tessera::cpu::q8 {
namespace {

// `rows` quantised rows (rows / 3 x rows for 24-bit activations) against panels [first, first +
// count) of a quad: out[(i * count + g) * 16 + lane] for x row i; `work`: amx_work_bytes(dtype,
// K) bytes of scratch (the AMX path's, when rows >= kAmxMinRows).
using MicroFn = void (*)(const Quad& quad, int first, int count, const QRow* x, int rows, int64_t blocks, float* out,
                         uint8_t* work);
using QuantizeFn = void (*)(const float* x, int64_t step, const RowLayout& layout, std::byte* dst);
using DigitsFn = void (*)(const float* x, int64_t step, const RowLayout& layout, std::byte* const dst[3]);

// Scratch for the panels of one quad (packed there when the backend prepared none).
int64_t group_bytes(DType dtype, int64_t depth) { return quad_bytes(dtype, kQuadPanels, depth); }

// Linears sharing their x rows (a group launch, linear_q8.h; or one linear): each chunk of x rows
// is quantised once, then each member's panels run against it in turn (members whose packed
// weights lie back to back make one stream). kDigitsQuantize: nullptr for int8 activations
// (kQuantize), else the split of 24-bit activations into three digit rows (quantize_digits or its
// vector twin; kQuantize unused). A member computes every element as it would alone.
template <DType kType, MicroFn kMicro, QuantizeFn kQuantize, DigitsFn kDigitsQuantize = nullptr>
absl::Status linear_q8_members(std::span<const KernelArgs> members) {
  constexpr int kDigits = kDigitsQuantize == nullptr ? 1 : 3;
  const KernelArgs* lead = nullptr;  // the first member with work: its x rows are every member's
  for (const KernelArgs& m : members)
    if (!m.box.empty()) {
      lead = &m;
      break;
    }
  if (lead == nullptr) return absl::OkStatus();
  const Box& box = lead->box;
  const KernelInput& x = lead->inputs[0];
  const int last = lead->node.rank() - 1;
  const int64_t depth = lead->inputs[1].shape[1];
  for (const KernelArgs& m : members)
    if (!m.box.empty() && (m.inputs[0].data != x.data || m.inputs[0].strides != x.strides || m.inputs[1].shape[1] != depth ||
                           !same_rows(m.box, box)))
      return absl::InvalidArgumentError("[linear] a group launch's members read different x rows");
  const BoxRows rows(box);
  const int64_t row_bytes = dtype_bytes(kType, depth);
  const int64_t blocks = depth / dtype_block_size(kType);
  const int64_t full_quad = quad_bytes(kType, kQuadPanels, depth);
  const RowLayout layout(depth, activation_block(kType));
  ScratchCarver carver(lead->scratch);
  constexpr int64_t kChunk = kChunkRows / kDigits;  // x rows quantised at a time
  const int64_t q_rows = std::min(kChunk, rows.count()) * kDigits;
  std::byte* quantised = carver.take<std::byte>(q_rows * layout.row_bytes);
  bool all_packed = true;
  for (const KernelArgs& m : members) all_packed = all_packed && m.node.prepared != nullptr;
  uint8_t* own_panels = !all_packed ? carver.take<uint8_t>(group_bytes(kType, depth)) : nullptr;
  uint8_t* work = q_rows >= kAmxMinRows ? carver.take<uint8_t>(amx_work_bytes(kType, depth)) : nullptr;
  if (quantised == nullptr || (!all_packed && own_panels == nullptr) || (q_rows >= kAmxMinRows && work == nullptr))
    return absl::InternalError("[linear] kernel scratch too small for quantised rows");
  const int64_t x_step = x.strides[last];
  int64_t index[kMaxRank];
  alignas(64) float results[kChunkRows * kPanelRows * kQuadPanels];
  QRow q[kChunkRows];
  for (int64_t c0 = 0; c0 < rows.count(); c0 += kChunk) {
    const int chunk = static_cast<int>(std::min(kChunk, rows.count() - c0));
    for (int r = 0; r < chunk; ++r) {
      rows.index(c0 + r, index);
      index[last] = 0;
      std::byte* dst = quantised + r * kDigits * layout.row_bytes;
      if constexpr (kDigits == 1) {
        kQuantize(x.at<const float>(index), x_step, layout, dst);
      } else {
        std::byte* const digit_rows[3] = {dst, dst + layout.row_bytes, dst + 2 * layout.row_bytes};
        kDigitsQuantize(x.at<const float>(index), x_step, layout, digit_rows);
      }
      for (int i = 0; i < kDigits; ++i) q[r * kDigits + i] = qrow(dst + i * layout.row_bytes, layout);
    }
    for (const KernelArgs& m : members) {
      if (m.box.empty()) continue;
      const KernelInput& w = m.inputs[1];
      const int64_t n_total = w.shape[0];
      const int64_t n_begin = m.box.begin(last), n_end = m.box.end(last);
      const auto* weights = static_cast<const uint8_t*>(w.data);
      const int64_t weight_begin = w.extent.begin(0), weight_end = w.extent.end(0);
      const int64_t all_panels = (n_total + kPanelRows - 1) / kPanelRows;
      // The backend's packed copy of the whole matrix, or panels packed here into scratch.
      const auto* packed = static_cast<const uint8_t*>(m.node.prepared);
      const TensorView& out = m.out;
      const int64_t out_step = out.strides[last];
      const int64_t last_panel = (n_end + kPanelRows - 1) / kPanelRows;
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
        const int64_t width = count * kPanelRows;
        // One x row whose box holds all the panels' columns, contiguous: the panels' results go
        // straight into the output (a decode step ran ~3200 256-byte copies a token otherwise,
        // each a libc call).
        if (chunk == 1 && out_step == 1 && n_begin <= p0 && p0 + width <= n_end) {
          rows.index(c0, index);
          index[last] = p0;
          kMicro(view, first, count, q, kDigits, blocks, out.at<float>(index), work);
          continue;
        }
        kMicro(view, first, count, q, chunk * kDigits, blocks, results, work);
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
  }
  return absl::OkStatus();
}

template <DType kType, MicroFn kMicro, QuantizeFn kQuantize, DigitsFn kDigitsQuantize = nullptr>
absl::Status linear_q8(const KernelArgs& args) {
  return linear_q8_members<kType, kMicro, kQuantize, kDigitsQuantize>(std::span<const KernelArgs>(&args, 1));
}

// A kernel and its group twin.
struct Entry {
  KernelFn one = nullptr;
  GroupKernelFn group = nullptr;
};
template <DType kType, MicroFn kMicro, QuantizeFn kQuantize, DigitsFn kDigitsQuantize = nullptr>
Entry entry() {
  return Entry{linear_q8<kType, kMicro, kQuantize, kDigitsQuantize>, linear_q8_members<kType, kMicro, kQuantize, kDigitsQuantize>};
}

template <DType kType>
Entry kernel_for(Isa isa) {
#if TESSERA_HAVE_AVX2_PATHS
  if constexpr (amx_tiles(kType)) {
    if (isa == Isa::Amx) return entry<kType, amx_path::micro<kType>, vnni_path::quantize_row>();
  }
  if (isa >= Isa::Avx512Vnni) return entry<kType, vnni_path::micro<kType>, vnni_path::quantize_row>();
  if (isa != Isa::Portable) return entry<kType, avx2_path::micro<kType>, avx2_path::quantize_row>();
#endif
  (void)isa;
  return entry<kType, micro_portable<kType>, quantize_row_portable>();
}

template <DType kType>
Entry digits_kernel_for(Isa isa) {
#if TESSERA_HAVE_AVX2_PATHS
  // (AMX: the VNNI tiles; amx_path takes int8 rows only, linear_q8.h.)
  if (isa >= Isa::Avx512Vnni)
    return entry<kType, vnni_path::micro<kType, 3>, vnni_path::quantize_row, vnni_path::quantize_digits_simd>();
  if (isa != Isa::Portable)
    return entry<kType, avx2_path::micro<kType, 3>, avx2_path::quantize_row, avx2_path::quantize_digits_simd>();
#endif
  (void)isa;
  return entry<kType, micro_portable<kType, 3>, quantize_row_portable, quantize_digits>();
}

// kernel_for or digits_kernel_for of `dtype`.
template <template <DType> class Pick>
Entry pick(DType dtype, Isa isa) {
  switch (dtype) {
    case DType::Q8_0:
      return Pick<DType::Q8_0>::fn(isa);
    case DType::Q4_0:
      return Pick<DType::Q4_0>::fn(isa);
    case DType::Q4_1:
      return Pick<DType::Q4_1>::fn(isa);
    case DType::Q5_0:
      return Pick<DType::Q5_0>::fn(isa);
    case DType::Q5_1:
      return Pick<DType::Q5_1>::fn(isa);
    case DType::Q4_K:
      return Pick<DType::Q4_K>::fn(isa);
    case DType::Q5_K:
      return Pick<DType::Q5_K>::fn(isa);
    case DType::Q6_K:
      return Pick<DType::Q6_K>::fn(isa);
    default:
      return Entry{};
  }
}
template <DType kType>
struct Int8Kernel {
  static Entry fn(Isa isa) { return kernel_for<kType>(isa); }
};
template <DType kType>
struct DigitsKernel {
  static Entry fn(Isa isa) { return digits_kernel_for<kType>(isa); }
};

}  // namespace

KernelFn kernel(DType dtype, Isa isa) { return pick<Int8Kernel>(dtype, isa).one; }

KernelFn digits_kernel(DType dtype, Isa isa) { return pick<DigitsKernel>(dtype, isa).one; }

GroupKernelFn group_kernel(KernelFn kernel) {
  if (kernel == nullptr) return nullptr;
  for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx}) {
      for (const Entry& e : {pick<Int8Kernel>(dtype, isa), pick<DigitsKernel>(dtype, isa)})
        if (e.one == kernel) return e.group;
    }
  return nullptr;
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
