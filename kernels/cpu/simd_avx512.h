// AVX-512 twins of simd_avx2.h's vector math: the same operations per lane, so the same bits
// lane for lane.
#pragma once

#include "kernels/cpu/simd_avx2.h"

#if TESSERA_HAVE_AVX2_PATHS

TESSERA_AVX512_BEGIN
namespace tessera::cpu::avx512 {

// avx2::pow2 on sixteen lanes: 2^n for integer-valued n in [-126, 127].
inline __m512 pow2(__m512 n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}

// avx2::exp on sixteen lanes.
inline __m512 exp(__m512 x) {
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512 half_n = _mm512_roundscale_ps(_mm512_mul_ps(n, _mm512_set1_ps(0.5f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 result = _mm512_mul_ps(_mm512_mul_ps(p, pow2(half_n)), pow2(_mm512_sub_ps(n, half_n)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), result, x);  // NaN stays NaN
}

}  // namespace tessera::cpu::avx512
TESSERA_AVX512_END

#endif  // TESSERA_HAVE_AVX2_PATHS
