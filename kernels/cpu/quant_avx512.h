// AVX-512 (F, BW, VL, DQ) block decoders of the weight dtypes: the 512-bit twins of
// quant_avx2.h. sink(group, w) receives elements 32 * group + 16p .. + 15 of the block in w[p],
// p = 0, 1. Pure functions of the block's bytes, like their AVX2 twins (which they need not
// match bit for bit: the instruction set is fixed per process).
#pragma once

#include <cstring>

#include "engine/dtype.h"
#include "kernels/cpu/quant_avx2.h"  // k_scales
#include "kernels/cpu/simd_avx2.h"

#if TESSERA_HAVE_AVX2_PATHS

#define TESSERA_INLINE __attribute__((always_inline)) inline

TESSERA_AVX512_BEGIN
namespace tessera::cpu::avx512 {

TESSERA_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

TESSERA_INLINE __m512 i8_to_floats(__m128i bytes) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}
TESSERA_INLINE __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Lanes of q (dwords) where `bits` is set get 16 added: bit 4 of a five-bit quant.
TESSERA_INLINE __m512i add_high_bit(__m512i q, __mmask16 bits) {
  return _mm512_mask_add_epi32(q, bits, q, _mm512_set1_epi32(16));
}

// Four- and five-bit quants take at most 32 values per (sub-)block, so the dequantised values
// are computed once into a 16- or 32-entry table (the same fma / mul per value as a direct
// dequantisation, hence the same bits) and looked up with one permute per 16 elements, instead
// of an int-to-float conversion and an fma each. vpermps reads the low 4 bits of an index,
// vpermt2ps the low 5.
TESSERA_INLINE __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
// 16 bytes as dword indices: the low nibble sits in bits 0-3 (bits 4-7 hold the high nibble).
TESSERA_INLINE __m512i byte_indices(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(load16(p));
}
TESSERA_INLINE __m512i high_nibble_indices(__m512i bytes) {
  return _mm512_srli_epi32(bytes, 4);
}
TESSERA_INLINE __m512i low_nibble_indices(__m512i bytes) {
  return _mm512_and_si512(bytes, _mm512_set1_epi32(15));
}
TESSERA_INLINE __m512 lookup16(__m512i index, __m512 table) {
  return _mm512_permutexvar_ps(index, table);
}
TESSERA_INLINE __m512 lookup32(__m512i index, __m512 low, __m512 high) {
  return _mm512_permutex2var_ps(low, index, high);
}

template <DType kType>
struct Decoder;

template <>
struct Decoder<DType::F32> {
  static constexpr int64_t kBlock = 32, kBytes = 128;
  static constexpr bool kDense = true;
  static constexpr int kScales = 0;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const auto* f = reinterpret_cast<const float*>(b);
    const __m512 w[2] = {_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)};
    sink(0, w);
  }
  // Up to 16 elements from element `start` of a row (lanes outside `mask` are 0).
  TESSERA_INLINE static __m512 partial(const uint8_t* row, int64_t start, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + start);
  }
};

template <>
struct Decoder<DType::F16> {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kDense = true;
  static constexpr int kScales = 0;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m512 w[2] = {
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))),
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32)))};
    sink(0, w);
  }
  TESSERA_INLINE static __m512 partial(const uint8_t* row, int64_t start, __mmask16 mask) {
    return _mm512_cvtph_ps(
        _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + start));
  }
};

template <>
struct Decoder<DType::BF16> {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kDense = true;
  static constexpr int kScales = 0;
  TESSERA_INLINE static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m512 w[2] = {widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))),
                         widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32)))};
    sink(0, w);
  }
  TESSERA_INLINE static __m512 partial(const uint8_t* row, int64_t start, __mmask16 mask) {
    return widen(_mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + start));
  }
};

template <>
struct Decoder<DType::Q8_0> {  // y = q * d
  static constexpr int64_t kBlock = 32, kBytes = 34;
  static constexpr bool kDense = false;
  static constexpr int kScales = 1;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    decode_scaled(b, _mm512_set1_ps(half_at(b)), _mm512_setzero_ps(), sink);
  }
  template <class Sink>
  TESSERA_INLINE static void decode_scaled(const uint8_t* b, __m512 d, __m512, Sink&& sink) {
    const __m512 w[2] = {_mm512_mul_ps(i8_to_floats(load16(b + 2)), d),
                         _mm512_mul_ps(i8_to_floats(load16(b + 18)), d)};
    sink(0, w);
  }
};

template <>
struct Decoder<DType::Q4_0> {  // y = (q - 8) * d
  static constexpr int64_t kBlock = 32, kBytes = 18;
  static constexpr bool kDense = false;
  static constexpr int kScales = 1;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    decode_scaled(b, _mm512_set1_ps(half_at(b)), _mm512_setzero_ps(), sink);
  }
  template <class Sink>
  TESSERA_INLINE static void decode_scaled(const uint8_t* b, __m512 d, __m512, Sink&& sink) {
    const __m512 table = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8)), d);  // (q - 8) d
    const __m512i bytes = byte_indices(b + 2);
    const __m512 w[2] = {lookup16(bytes, table), lookup16(high_nibble_indices(bytes), table)};
    sink(0, w);
  }
};

template <>
struct Decoder<DType::Q4_1> {  // y = q * d + m, one rounding
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static constexpr bool kDense = false;
  static constexpr int kScales = 2;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    decode_scaled(b, _mm512_set1_ps(half_at(b)), _mm512_set1_ps(half_at(b + 2)), sink);
  }
  template <class Sink>
  TESSERA_INLINE static void decode_scaled(const uint8_t* b, __m512 d, __m512 m, Sink&& sink) {
    const __m512 table = _mm512_fmadd_ps(iota16(), d, m);
    const __m512i bytes = byte_indices(b + 4);
    const __m512 w[2] = {lookup16(bytes, table), lookup16(high_nibble_indices(bytes), table)};
    sink(0, w);
  }
};

template <>
struct Decoder<DType::Q5_0> {  // y = (q - 16) * d, bit 4 of element j in bit j of qh
  static constexpr int64_t kBlock = 32, kBytes = 22;
  static constexpr bool kDense = false;
  static constexpr int kScales = 1;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    decode_scaled(b, _mm512_set1_ps(half_at(b)), _mm512_setzero_ps(), sink);
  }
  template <class Sink>
  TESSERA_INLINE static void decode_scaled(const uint8_t* b, __m512 d, __m512, Sink&& sink) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const __m512 low = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(16)), d);  // q < 16
    const __m512 high = _mm512_mul_ps(iota16(), d);                                    // q >= 16
    const __m512i bytes = byte_indices(b + 6);
    const __m512 w[2] = {
        lookup32(add_high_bit(low_nibble_indices(bytes), static_cast<__mmask16>(qh)), low, high),
        lookup32(add_high_bit(high_nibble_indices(bytes), static_cast<__mmask16>(qh >> 16)), low,
                 high)};
    sink(0, w);
  }
};

template <>
struct Decoder<DType::Q5_1> {  // y = q * d + m, one rounding
  static constexpr int64_t kBlock = 32, kBytes = 24;
  static constexpr bool kDense = false;
  static constexpr int kScales = 2;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    decode_scaled(b, _mm512_set1_ps(half_at(b)), _mm512_set1_ps(half_at(b + 2)), sink);
  }
  template <class Sink>
  TESSERA_INLINE static void decode_scaled(const uint8_t* b, __m512 d, __m512 m, Sink&& sink) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    const __m512 low = _mm512_fmadd_ps(iota16(), d, m);
    const __m512 high = _mm512_fmadd_ps(_mm512_add_ps(iota16(), _mm512_set1_ps(16)), d, m);
    const __m512i bytes = byte_indices(b + 8);
    const __m512 w[2] = {
        lookup32(add_high_bit(low_nibble_indices(bytes), static_cast<__mmask16>(qh)), low, high),
        lookup32(add_high_bit(high_nibble_indices(bytes), static_cast<__mmask16>(qh >> 16)), low,
                 high)};
    sink(0, w);
  }
};

using avx2::k_scales;  // the eight (d * scale, dmin * min) pairs of a Q4_K / Q5_K block

// The values (d * scale) * q - dmin * min (one rounding) of a sub-block for q = first ..
// first + 15.
TESSERA_INLINE __m512 k_table(float d1, float m1, float first) {
  return _mm512_fmsub_ps(_mm512_add_ps(iota16(), _mm512_set1_ps(first)), _mm512_set1_ps(d1),
                         _mm512_set1_ps(m1));
}

template <>
struct Decoder<DType::Q4_K> {
  static constexpr int64_t kBlock = 256, kBytes = 144;
  static constexpr bool kDense = false;
  static constexpr int kScales = 0;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    float d1[8], m1[8];
    k_scales(b, d1, m1);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i bytes0 = byte_indices(b + 16 + 32 * c), bytes1 = byte_indices(b + 32 + 32 * c);
      const __m512 low = k_table(d1[2 * c], m1[2 * c], 0),
                   high = k_table(d1[2 * c + 1], m1[2 * c + 1], 0);
      const __m512 w0[2] = {lookup16(bytes0, low), lookup16(bytes1, low)};
      sink(2 * c, w0);
      const __m512 w1[2] = {lookup16(high_nibble_indices(bytes0), high),
                            lookup16(high_nibble_indices(bytes1), high)};
      sink(2 * c + 1, w1);
    }
  }
};

template <>
struct Decoder<DType::Q5_K> {
  static constexpr int64_t kBlock = 256, kBytes = 176;
  static constexpr bool kDense = false;
  static constexpr int kScales = 0;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    float d1[8], m1[8];
    k_scales(b, d1, m1);
    const __m128i h0 = load16(b + 16), h1 = load16(b + 32);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i bytes0 = byte_indices(b + 48 + 32 * c), bytes1 = byte_indices(b + 64 + 32 * c);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * c + half;
        const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << sub));
        const __m512i l0 = half == 0 ? low_nibble_indices(bytes0) : high_nibble_indices(bytes0);
        const __m512i l1 = half == 0 ? low_nibble_indices(bytes1) : high_nibble_indices(bytes1);
        const __m512 low = k_table(d1[sub], m1[sub], 0), high = k_table(d1[sub], m1[sub], 16);
        const __m512 w[2] = {lookup32(add_high_bit(l0, _mm_test_epi8_mask(h0, bit)), low, high),
                             lookup32(add_high_bit(l1, _mm_test_epi8_mask(h1, bit)), low, high)};
        sink(sub, w);
      }
    }
  }
};

template <>
struct Decoder<DType::Q6_K> {  // y = (d * scales[e / 16]) * (q - 32)
  static constexpr int64_t kBlock = 256, kBytes = 210;
  static constexpr bool kDense = false;
  static constexpr int kScales = 0;
  template <class Sink>
  TESSERA_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    // d * scales[i] for the 16 scales at once (the same products as one at a time).
    alignas(64) float scales[16];
    _mm512_store_ps(scales,
                    _mm512_mul_ps(_mm512_set1_ps(half_at(b + 208)), i8_to_floats(load16(b + 192))));
    const __m256i low4 = _mm256_set1_epi8(0x0F), offset = _mm256_set1_epi8(32);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + 64 * half;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x03)), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x0C)), 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                          _mm256_and_si256(h, _mm256_set1_epi8(0x30))),
          _mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
              _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(static_cast<char>(0xC0))), 2)),
      };
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const int group = 4 * half + k;
        const __m256i centred = _mm256_sub_epi8(q[k], offset);
        const __m512 w[2] = {_mm512_mul_ps(i8_to_floats(_mm256_castsi256_si128(centred)),
                                           _mm512_set1_ps(scales[2 * group])),
                             _mm512_mul_ps(i8_to_floats(_mm256_extracti128_si256(centred, 1)),
                                           _mm512_set1_ps(scales[2 * group + 1]))};
        sink(group, w);
      }
    }
  }
};

// The f16 scale fields (d at byte 0, m at byte 2) of blocks first .. first + count - 1 (count
// <= 16) of a row of legacy blocks, converted to float into d[16] and m[16]. One gather
// replaces 16 scalar conversions (whose broadcasts would crowd port 5); the values are the
// same exact conversions.
template <class Dec>
TESSERA_INLINE void gather_scales(const uint8_t* first, int64_t count, float* d, float* m) {
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(Dec::kBytes)));
  const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
  const __m512i fields =
      _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, first, 1);
  _mm512_store_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(fields)));
  if constexpr (Dec::kScales > 1)
    _mm512_store_ps(m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(fields, 16))));
}

// The fixed horizontal sum of 16 lanes: lanes l and l + 8 first, then the AVX2 order.
TESSERA_INLINE float hsum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
  return avx2::hsum(_mm256_add_ps(lo, hi));
}

// One q8_0 block from 32 floats: quant::quantize_q8_0's bytes. Rounds half away from zero as
// std::round does: t = trunc(v), then one more step away from zero where |v - t| >= 0.5 (v - t
// is exact).
TESSERA_INLINE void quantize_q8_0(const float* x, uint8_t* out) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
  // NaNs compare false in max (as quantize_q8_0's amax ignores them): max(|a|, 0) keeps 0.
  const __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(a, abs_mask), _mm512_setzero_ps()),
                                 _mm512_max_ps(_mm512_and_ps(c, abs_mask), _mm512_setzero_ps()));
  const float amax = _mm512_reduce_max_ps(m);
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t h = float_to_half(d);
  std::memcpy(out, &h, 2);
  for (int half = 0; half < 2; ++half) {
    const __m512 v = _mm512_mul_ps(half == 0 ? a : c, _mm512_set1_ps(id));
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_sub_ps(v, t), abs_mask), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_andnot_ps(abs_mask, v));  // copysign(1, v)
    __m512 r = _mm512_mask_add_ps(t, up, t, one);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    // NaN lanes (v NaN: t NaN, max/min return the second operand) become 0.
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_setzero_ps());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 + 16 * half), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r)));
  }
}

}  // namespace tessera::cpu::avx512
TESSERA_AVX512_END

#endif  // TESSERA_HAVE_AVX2_PATHS
