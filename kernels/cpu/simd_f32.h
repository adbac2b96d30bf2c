// The f32 vector primitives the conv2d kernels' per-instruction-set code shares (the direct
// micro-kernels in conv2d_simd.cc, the Winograd steps in conv2d_winograd_simd.cc): one namespace
// per instruction set, compiled in that set's target region; code for a set brings its
// primitives in with a using-directive and adds its own. The row loops built on them are one
// text, simd_f32_rows.inc. Call them only after cpu::isa_supported() for the set.
#pragma once

#include <cstdint>

#include "kernels/cpu/simd_avx2.h"

#if TESSERA_HAVE_AVX2_PATHS
namespace tessera::cpu::f32 {

TESSERA_AVX2_BEGIN
namespace avx2 {
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec set1(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
// max(a, 0) takes the second operand for NaN and for two zeros: NaN and -0 to +0, as unary relu.
inline Vec relu0(Vec a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
// The first n < kLanes lanes (the others read as zero / left unwritten).
inline Vec load_partial(const float* p, int64_t n) { return _mm256_maskload_ps(p, cpu::avx2::tail_mask(n)); }
inline void store_partial(float* p, Vec v, int64_t n) { _mm256_maskstore_ps(p, cpu::avx2::tail_mask(n), v); }
#include "kernels/cpu/simd_f32_rows.inc"
}  // namespace avx2
TESSERA_AVX2_END

TESSERA_AVX512_BEGIN
namespace avx512 {
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec set1(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec relu0(Vec a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }  // as avx2::relu0
inline Vec load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
inline void store_partial(float* p, Vec v, int64_t n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
#include "kernels/cpu/simd_f32_rows.inc"
}  // namespace avx512
TESSERA_AVX512_END

}  // namespace tessera::cpu::f32
#endif  // TESSERA_HAVE_AVX2_PATHS
