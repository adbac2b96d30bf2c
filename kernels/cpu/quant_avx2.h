// AVX2 block decoders of the weight dtypes (layouts in kernels/quant.cc): each turns one block
// into float vectors, 32 consecutive elements (four __m256 in element order) at a time, and
// hands them to a sink: sink(group, w) with w[p] holding elements 32 * group + 8p .. + 7 of the
// block. A decoder is a pure function of the block's bytes, so every caller (1-row decode,
// many-row prefill, gather) sees the same bits for the same block. Dense dtypes (f32, f16,
// bf16) use 32-element "blocks" and also decode a partial tail (masked, zero-filled lanes).
#pragma once

#include <cstring>

#include "engine/dtype.h"
#include "kernels/cpu/simd_avx2.h"

#if TESSERA_HAVE_AVX2_PATHS

#define TESSERA_AVX2_INLINE TESSERA_AVX2 __attribute__((always_inline)) inline

TESSERA_AVX2_BEGIN
namespace tessera::cpu::avx2 {

// Four vectors of 8 floats from 32 bytes held as a low and a high 16-byte half.
TESSERA_AVX2_INLINE void bytes_to_floats(__m128i lo, __m128i hi, bool is_signed, __m256* w) {
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 8
  for (int p = 0; p < 4; ++p)
    w[p] = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(parts[p])
                                        : _mm256_cvtepu8_epi32(parts[p]));
}
TESSERA_AVX2_INLINE void bytes_to_floats(__m256i v, bool is_signed, __m256* w) {
  bytes_to_floats(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1), is_signed, w);
}

// Byte j = 0xFF where bit j of x is set (32 bits -> 32 bytes).
TESSERA_AVX2_INLINE __m256i bytes_from_bits(uint32_t x) {
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuffle);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Low nibbles (elements 0..15) and high nibbles (16..31) of the 16 bytes at p.
TESSERA_AVX2_INLINE __m256i nibbles32(const uint8_t* p) {
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), _mm_and_si128(qs, mask));
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <DType kType>
struct Decoder;

template <>
struct Decoder<DType::F32> {
  static constexpr int64_t kBlock = 32, kBytes = 128;
  static constexpr bool kDense = true;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const auto* f = reinterpret_cast<const float*>(b);
    const __m256 w[4] = {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8), _mm256_loadu_ps(f + 16),
                         _mm256_loadu_ps(f + 24)};
    sink(0, w);
  }
  // Up to 8 elements starting at element `start` of a row (lanes outside `mask` are 0).
  TESSERA_AVX2_INLINE static __m256 partial(const uint8_t* row, int64_t start, __m256i mask) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + start, mask);
  }
};

template <>
struct Decoder<DType::F16> {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kDense = true;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    __m256 w[4];
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p)
      w[p] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * p)));
    sink(0, w);
  }
  TESSERA_AVX2_INLINE static __m256 partial(const uint8_t* row, int64_t start, __m256i mask) {
    alignas(16) uint16_t h[8] = {};
    const auto* src = reinterpret_cast<const uint16_t*>(row) + start;
    alignas(32) int32_t m[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(m), mask);
    for (int i = 0; i < 8; ++i)
      if (m[i] != 0) h[i] = src[i];
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }
};

template <>
struct Decoder<DType::BF16> {
  static constexpr int64_t kBlock = 32, kBytes = 64;
  static constexpr bool kDense = true;
  TESSERA_AVX2_INLINE static __m256 widen(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    __m256 w[4];
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p)
      w[p] = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * p)));
    sink(0, w);
  }
  TESSERA_AVX2_INLINE static __m256 partial(const uint8_t* row, int64_t start, __m256i mask) {
    alignas(16) uint16_t h[8] = {};
    const auto* src = reinterpret_cast<const uint16_t*>(row) + start;
    alignas(32) int32_t m[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(m), mask);
    for (int i = 0; i < 8; ++i)
      if (m[i] != 0) h[i] = src[i];
    return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  }
};

// Q8_0: y = q * d.
template <>
struct Decoder<DType::Q8_0> {
  static constexpr int64_t kBlock = 32, kBytes = 34;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    __m256 w[4];
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * p));
      w[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
    sink(0, w);
  }
};

// Q4_0: y = (q - 8) * d.
template <>
struct Decoder<DType::Q4_0> {
  static constexpr int64_t kBlock = 32, kBytes = 18;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    __m256 w[4];
    bytes_to_floats(_mm_sub_epi8(_mm_and_si128(qs, mask), eight),
                    _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), eight), true, w);
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) w[p] = _mm256_mul_ps(w[p], d);
    sink(0, w);
  }
};

// Q4_1: y = q * d + m (one fused rounding).
template <>
struct Decoder<DType::Q4_1> {
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m256 d = _mm256_set1_ps(half_to_float(b)), m = _mm256_set1_ps(half_to_float(b + 2));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m256 w[4];
    bytes_to_floats(_mm_and_si128(qs, mask), _mm_and_si128(_mm_srli_epi16(qs, 4), mask), false, w);
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) w[p] = _mm256_fmadd_ps(w[p], d, m);
    sink(0, w);
  }
};

// Q5_0: y = (q - 16) * d, bit 4 of element j in bit j of qh.
template <>
struct Decoder<DType::Q5_0> {
  static constexpr int64_t kBlock = 32, kBytes = 22;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    const __m256i high = _mm256_and_si256(bytes_from_bits(load_u32(b + 2)), _mm256_set1_epi8(0x10));
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + 6), high), _mm256_set1_epi8(16));
    __m256 w[4];
    bytes_to_floats(q, true, w);
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) w[p] = _mm256_mul_ps(w[p], d);
    sink(0, w);
  }
};

// Q5_1: y = q * d + m (one fused rounding).
template <>
struct Decoder<DType::Q5_1> {
  static constexpr int64_t kBlock = 32, kBytes = 24;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    const __m256 d = _mm256_set1_ps(half_to_float(b)), m = _mm256_set1_ps(half_to_float(b + 2));
    const __m256i high = _mm256_and_si256(bytes_from_bits(load_u32(b + 4)), _mm256_set1_epi8(0x10));
    __m256 w[4];
    bytes_to_floats(_mm256_or_si256(nibbles32(b + 8), high), false, w);
#pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) w[p] = _mm256_fmadd_ps(w[p], d, m);
    sink(0, w);
  }
};

// The eight (d * scale, dmin * min) pairs of a Q4_K / Q5_K super-block, as kernels/quant.cc.
TESSERA_AVX2_INLINE void k_scales(const uint8_t* b, float* d1, float* m1) {
  // The 12 bytes as three little-endian words, unpacked four 6-bit values per word (the
  // layout above): scales 0-3, scales 4-7, mins 0-3, mins 4-7.
  uint32_t word[3];
  std::memcpy(word, b + 4, 12);
  const uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
  const uint32_t unpacked[4] = {word[0] & six, (word[2] & four) | (((word[0] >> 6) & two) << 4),
                                word[1] & six,
                                ((word[2] >> 4) & four) | (((word[1] >> 6) & two) << 4)};
  __m128i bytes;
  std::memcpy(&bytes, unpacked, 16);
  const __m256 scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
  _mm256_storeu_ps(d1, _mm256_mul_ps(_mm256_set1_ps(half_to_float(b)), scales));
  _mm256_storeu_ps(m1, _mm256_mul_ps(_mm256_set1_ps(half_to_float(b + 2)), mins));
}

// y = (d * scale) * q - dmin * min, one fused rounding.
TESSERA_AVX2_INLINE void scale_sub_block(__m256i q, float d1, float m1, __m256* w) {
  bytes_to_floats(q, false, w);
  const __m256 d = _mm256_set1_ps(d1), m = _mm256_set1_ps(m1);
#pragma GCC unroll 8
  for (int p = 0; p < 4; ++p) w[p] = _mm256_fmsub_ps(w[p], d, m);
}

template <>
struct Decoder<DType::Q4_K> {
  static constexpr int64_t kBlock = 256, kBytes = 144;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    float d1[8], m1[8];
    k_scales(b, d1, m1);
    const __m256i mask = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * c));
      __m256 w[4];
      scale_sub_block(_mm256_and_si256(v, mask), d1[2 * c], m1[2 * c], w);
      sink(2 * c, w);
      scale_sub_block(_mm256_and_si256(_mm256_srli_epi16(v, 4), mask), d1[2 * c + 1], m1[2 * c + 1],
                      w);
      sink(2 * c + 1, w);
    }
  }
};

template <>
struct Decoder<DType::Q5_K> {
  static constexpr int64_t kBlock = 256, kBytes = 176;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    float d1[8], m1[8];
    k_scales(b, d1, m1);
    const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
#pragma GCC unroll 8
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * c));
#pragma GCC unroll 8
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * c + half;
        // Bit `sub` of each qh byte, moved to bit 4 (16-bit shifts keep bit 0 of each byte).
        const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(sub)), one);
        const __m256i low =
            half == 0 ? _mm256_and_si256(v, mask) : _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        __m256 w[4];
        scale_sub_block(_mm256_or_si256(low, _mm256_slli_epi16(bit, 4)), d1[sub], m1[sub], w);
        sink(sub, w);
      }
    }
  }
};

// Q6_K: y = (d * scales[e / 16]) * (q - 32).
template <>
struct Decoder<DType::Q6_K> {
  static constexpr int64_t kBlock = 256, kBytes = 210;
  static constexpr bool kDense = false;
  template <class Sink>
  TESSERA_AVX2_INLINE static void decode(const uint8_t* b, Sink&& sink) {
    // d * scales[i] for the 16 scales at once (the same products as one at a time).
    alignas(32) float scales[16];
    const __m256 d = _mm256_set1_ps(half_to_float(b + 208));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    _mm256_store_ps(scales, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw))));
    _mm256_store_ps(
        scales + 8,
        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8)))));
    const __m256i low4 = _mm256_set1_epi8(0x0F), offset = _mm256_set1_epi8(32);
#pragma GCC unroll 8
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
#pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) {
        const int group = 4 * half + k;  // elements 32 * group .. + 31
        __m256 w[4];
        bytes_to_floats(_mm256_sub_epi8(q[k], offset), true, w);
        const __m256 s0 = _mm256_set1_ps(scales[2 * group]);
        const __m256 s1 = _mm256_set1_ps(scales[2 * group + 1]);
        w[0] = _mm256_mul_ps(w[0], s0);
        w[1] = _mm256_mul_ps(w[1], s0);
        w[2] = _mm256_mul_ps(w[2], s1);
        w[3] = _mm256_mul_ps(w[3], s1);
        sink(group, w);
      }
    }
  }
};

}  // namespace tessera::cpu::avx2
TESSERA_AVX2_END

namespace tessera::cpu {

// f(Decoder<type>{}) for a supported weight dtype (Decoder: the decoder template of one
// instruction set), a value-initialised result otherwise. f only names decoders (e.g. takes the
// address of a template instantiated with one); this is baseline code any CPU may run.
template <template <DType> class Decoder, class F>
auto select_decoder(DType type, F&& f) -> decltype(f(Decoder<DType::F32>{})) {
  switch (type) {
    case DType::F32:
      return f(Decoder<DType::F32>{});
    case DType::F16:
      return f(Decoder<DType::F16>{});
    case DType::BF16:
      return f(Decoder<DType::BF16>{});
    case DType::Q8_0:
      return f(Decoder<DType::Q8_0>{});
    case DType::Q4_0:
      return f(Decoder<DType::Q4_0>{});
    case DType::Q4_1:
      return f(Decoder<DType::Q4_1>{});
    case DType::Q5_0:
      return f(Decoder<DType::Q5_0>{});
    case DType::Q5_1:
      return f(Decoder<DType::Q5_1>{});
    case DType::Q4_K:
      return f(Decoder<DType::Q4_K>{});
    case DType::Q5_K:
      return f(Decoder<DType::Q5_K>{});
    case DType::Q6_K:
      return f(Decoder<DType::Q6_K>{});
    default:
      return {};
  }
}

}  // namespace tessera::cpu

#endif  // TESSERA_HAVE_AVX2_PATHS
