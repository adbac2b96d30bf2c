// AVX2 + FMA + F16C building blocks shared by the optimised CPU kernels: fixed-order horizontal
// sums, tail masks and vectorised float functions (exp, tanh, erf). Every function is pure:
// the same input lanes always give the same output bits, whatever lane they sit in, which is
// what lets kernels process tails by padding them into a full vector (DESIGN.md section 1).
// Functions carry TESSERA_AVX2 and must only be called after cpu::isa_supported(Isa::Avx2).
// AVX2 code is compiled between TESSERA_AVX2_BEGIN and TESSERA_AVX2_END (a target region,
// which unlike the target attribute also covers lambdas); include every header before it.
// AVX-512 code likewise between TESSERA_AVX512_BEGIN and TESSERA_AVX512_END. GCC regions are
// "#pragma GCC target"; clang ignores those and gets "#pragma clang attribute" instead, which
// gives every function (lambdas included) declared in the region the same target attribute.
#pragma once

#if defined(__x86_64__)
#define TESSERA_HAVE_AVX2_PATHS 1
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define TESSERA_AVX2 __attribute__((target("avx2,fma,f16c")))
#if defined(__clang__)
#define TESSERA_PRAGMA(...) _Pragma(#__VA_ARGS__)
#define TESSERA_CLANG_TARGET_BEGIN(features) \
  TESSERA_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define TESSERA_AVX2_BEGIN TESSERA_CLANG_TARGET_BEGIN("avx2,fma,f16c")
#define TESSERA_AVX2_END _Pragma("clang attribute pop")
#define TESSERA_AVX512_BEGIN TESSERA_CLANG_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define TESSERA_AVX512_END _Pragma("clang attribute pop")
#else
#define TESSERA_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define TESSERA_AVX2_END _Pragma("GCC pop_options")
// GCC 12's AVX-512 headers build some results from _mm512_undefined_*() and then warn about
// it (-Wuninitialized) where they are inlined; the warning is silenced inside the region.
#define TESSERA_AVX512_BEGIN                                                      \
  _Pragma("GCC push_options")                                                     \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c\")") \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define TESSERA_AVX512_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif
// AVX-512 with VNNI (vpdpbusd), for code run only after cpu::isa_supported(Isa::Avx512Vnni).
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

TESSERA_AVX2_BEGIN
namespace tessera::cpu::avx2 {

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): one fixed order for every reduction.
TESSERA_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lanes [0, n) set, for masked loads and stores of a tail of n < 8 elements.
TESSERA_AVX2 inline __m256i tail_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

TESSERA_AVX2 inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 2^n for integer-valued n in [-126, 127].
TESSERA_AVX2 inline __m256 pow2(__m256 n) {
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(bits);
}

// exp(x) within ~2 ulp over the whole float range (Cephes polynomial on x - n ln2, scaled by
// 2^n in two steps so that overflow gives inf and small results go through the denormals).
TESSERA_AVX2 inline __m256 exp(__m256 x) {
  const __m256 clamped =
      _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), clamped);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256 half_n = _mm256_floor_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)));
  const __m256 result =
      _mm256_mul_ps(_mm256_mul_ps(p, pow2(half_n)), pow2(_mm256_sub_ps(n, half_n)));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// tanh(x): odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (exp(2|x|) + 1) above.
TESSERA_AVX2 inline __m256 tanh(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 s = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), x, x);
  const __m256 e = exp(_mm256_add_ps(a, a));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 large =
      _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 result = _mm256_blendv_ps(_mm256_or_ps(large, sign), small,
                                         _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// erf(x) with absolute error below 2e-7 (Abramowitz & Stegun 7.1.26 is 1.5e-7 before float
// rounding); used by gelu_erf, where the error is relative to 1 + erf.
TESSERA_AVX2 inline __m256 erf(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(a, _mm256_set1_ps(0.3275911f), one));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = exp(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
  const __m256 y = _mm256_fnmadd_ps(p, e, one);
  return _mm256_blendv_ps(_mm256_or_ps(y, sign), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// erf(x) with a small relative error everywhere (the erf primitive): the Maclaurin series
// 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), n <= 6 (truncation below 1e-9 relative), for
// |x| < 0.5, where erf's absolute error above would be large relative to erf(x) itself; erf
// above. Odd, so erf(-0) = -0.
TESSERA_AVX2 inline __m256 erf_relative(__m256 x) {
  const __m256 s = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(static_cast<float>(1.0 / (720.0 * 13.0)));
  p = _mm256_fmsub_ps(p, s, _mm256_set1_ps(static_cast<float>(1.0 / (120.0 * 11.0))));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(static_cast<float>(1.0 / (24.0 * 9.0))));
  p = _mm256_fmsub_ps(p, s, _mm256_set1_ps(static_cast<float>(1.0 / (6.0 * 7.0))));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(static_cast<float>(1.0 / (2.0 * 5.0))));
  p = _mm256_fmsub_ps(p, s, _mm256_set1_ps(static_cast<float>(1.0 / 3.0)));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.0f));
  const __m256 small = _mm256_mul_ps(_mm256_mul_ps(p, x), _mm256_set1_ps(1.12837916709551257f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  return _mm256_blendv_ps(erf(x), small, _mm256_cmp_ps(a, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
}

}  // namespace tessera::cpu::avx2
TESSERA_AVX2_END

#endif  // __x86_64__
