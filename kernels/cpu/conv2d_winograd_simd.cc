// The vector operations of the Winograd conv2d (conv2d_winograd.cc) per instruction set: the
// set's primitives, then the shared vector code (conv2d_winograd.inc) compiled in its target
// region.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_f32.h"

namespace tessera::cpu::conv {

#if TESSERA_HAVE_AVX2_PATHS
TESSERA_AVX2_BEGIN
namespace wino_avx2 {
namespace {

using namespace f32::avx2;
constexpr int kOcb = 6, kGemmVectors = 2;  // 6 x 2 accumulators, 2 inputs, a broadcast: 15 registers
// a0 b0 a1 b1 ... a7 b7 at p.
inline void interleave(Vec a, Vec b, float* p) {
  const Vec lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
  _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
// kept_lanes[m]: the indices of the lanes set in the 8-bit mask m, lowest first.
constexpr auto kept_lanes = [] {
  std::array<std::array<int32_t, 8>, 256> t{};
  for (int m = 0; m < 256; ++m)
    for (int lane = 0, k = 0; lane < 8; ++lane)
      if (m >> lane & 1) t[static_cast<size_t>(m)][static_cast<size_t>(k++)] = lane;
  return t;
}();
// The lanes of x set in `keep` (8 bits), in order, at p[0 .. popcount(keep)).
inline void store_kept(float* p, Vec x, uint32_t keep) {
  const __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kept_lanes[keep].data()));
  _mm256_maskstore_ps(p, avx2::tail_mask(std::popcount(keep)), _mm256_permutevar8x32_ps(x, lanes));
}
// The even and odd elements of a, b (16 floats) at even, odd.
inline void split(Vec a, Vec b, float* even, float* odd) {
  const __m256d e = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m256d o = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm256_storeu_ps(even, _mm256_castpd_ps(_mm256_permute4x64_pd(e, _MM_SHUFFLE(3, 1, 2, 0))));
  _mm256_storeu_ps(odd, _mm256_castpd_ps(_mm256_permute4x64_pd(o, _MM_SHUFFLE(3, 1, 2, 0))));
}
// The even and odd elements of a, b (16 floats), in registers.
inline void split_regs(Vec a, Vec b, Vec& even, Vec& odd) {
  const __m256d e = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m256d o = _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(e, _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(o, _MM_SHUFFLE(3, 1, 2, 0)));
}
// split() of the first `pairs` < kLanes pairs only.
inline void split_tail(const float* src, int64_t pairs, float* even, float* odd) {
  for (int64_t i = 0; i < pairs; ++i) {
    even[i] = src[2 * i];
    odd[i] = src[2 * i + 1];
  }
}

// Lanes [lo, hi) (clamped to the vector) of a vector at p, zeros elsewhere; the other lanes'
// memory is not read.
using LaneMask = __m256i;
inline LaneMask lane_range(int64_t lo, int64_t hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const auto clamp = [](int64_t x) { return static_cast<int>(std::clamp<int64_t>(x, -1, 8)); };
  return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(clamp(hi)), lane),
                          _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(clamp(lo) - 1)));
}
inline Vec load_lanes(const float* p, LaneMask m) { return _mm256_maskload_ps(p, m); }

#include "kernels/cpu/conv2d_winograd.inc"

}  // namespace
}  // namespace wino_avx2
TESSERA_AVX2_END

TESSERA_AVX512_BEGIN
namespace wino_avx512 {
namespace {

using namespace f32::avx512;
constexpr int kOcb = 8, kGemmVectors = 3;  // 8 x 3 accumulators, 3 inputs, a broadcast
inline void interleave(Vec a, Vec b, float* p) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, lo, b));
  _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(a, hi, b));
}
inline void store_kept(float* p, Vec x, uint32_t keep) {
  const auto kept = static_cast<__mmask16>((1u << std::popcount(keep)) - 1);
  _mm512_mask_storeu_ps(p, kept, _mm512_maskz_compress_ps(static_cast<__mmask16>(keep), x));
}
inline void split(Vec a, Vec b, float* even, float* odd) {
  const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  _mm512_storeu_ps(even, _mm512_permutex2var_ps(a, e, b));
  _mm512_storeu_ps(odd, _mm512_permutex2var_ps(a, o, b));
}
inline void split_regs(Vec a, Vec b, Vec& even, Vec& odd) {
  const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  even = _mm512_permutex2var_ps(a, e, b);
  odd = _mm512_permutex2var_ps(a, o, b);
}
// Masked loads and stores: the floats past the pairs are neither read nor written.
inline void split_tail(const float* src, int64_t pairs, float* even, float* odd) {
  const int64_t floats = 2 * pairs;
  const auto first = static_cast<__mmask16>((1u << std::min<int64_t>(floats, 16)) - 1);
  const auto second = static_cast<__mmask16>((1u << std::max<int64_t>(floats - 16, 0)) - 1);
  const Vec a = _mm512_maskz_loadu_ps(first, src), b = _mm512_maskz_loadu_ps(second, src + 16);
  const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const auto kept = static_cast<__mmask16>((1u << pairs) - 1);
  _mm512_mask_storeu_ps(even, kept, _mm512_permutex2var_ps(a, e, b));
  _mm512_mask_storeu_ps(odd, kept, _mm512_permutex2var_ps(a, o, b));
}

using LaneMask = __mmask16;
inline LaneMask lane_range(int64_t lo, int64_t hi) {
  const auto below = [](int64_t x) { return (1u << std::clamp<int64_t>(x, 0, 16)) - 1; };
  return static_cast<__mmask16>(below(hi) & ~below(lo));
}
inline Vec load_lanes(const float* p, LaneMask m) { return _mm512_maskz_loadu_ps(m, p); }

#include "kernels/cpu/conv2d_winograd.inc"

}  // namespace
}  // namespace wino_avx512
TESSERA_AVX512_END
#endif  // TESSERA_HAVE_AVX2_PATHS

#if defined(__x86_64__)
const WinogradOps& avx2_winograd_ops() { return wino_avx2::make_ops(); }
const WinogradOps& avx512_winograd_ops() { return wino_avx512::make_ops(); }
// From the raw operations: the micro tables take these pairs, and the Winograd kernel those
// tables' finish.
PairsFn avx2_pairs() { return wino_avx2::make_ops().deinterleave; }
PairsFn avx512_pairs() { return wino_avx512::make_ops().deinterleave; }
#endif

}  // namespace tessera::cpu::conv
