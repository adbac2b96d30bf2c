// AVX2 and AVX-512 micro-kernels of the f32 conv2d (contract in conv2d_internal.h): register
// blocks of output channels x vectors of output pixels, one broadcast weight per channel and
// tap, one FMA per accumulator and tap, taps in the order (c, kh, kw). The block loop is
// conv2d_block.inc, compiled once per instruction set in its own target region.
#include "kernels/cpu/conv2d_internal.h"
#include "kernels/cpu/simd_avx2.h"

#if defined(__x86_64__)
#include <cstddef>
#include <utility>

namespace tessera::cpu::conv {

TESSERA_AVX2_BEGIN
namespace avx2 {
namespace {

// 16 registers: up to 6 x 2 accumulators, 2 inputs and a broadcast.
using Vec = __m256;
constexpr int kLanes = 8, kMaxChannels = 6, kMaxVectors = 2;
inline Vec zero() {
  return _mm256_setzero_ps();
}
inline Vec load(const float* p) {
  return _mm256_loadu_ps(p);
}
inline Vec broadcast(const float* p) {
  return _mm256_broadcast_ss(p);
}
inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline Vec add(Vec a, Vec b) {
  return _mm256_add_ps(a, b);
}
inline Vec relu0(Vec a) {
  return _mm256_max_ps(a, _mm256_setzero_ps());  // the second operand for NaN and for two zeros
}
inline void store(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline void store_partial(float* p, Vec v, int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes), v);
}

#include "kernels/cpu/conv2d_block.inc"

}  // namespace
}  // namespace avx2
TESSERA_AVX2_END

TESSERA_AVX512_BEGIN
namespace avx512 {
namespace {

// 32 registers: up to 8 x 3 accumulators, 3 inputs and a broadcast.
using Vec = __m512;
constexpr int kLanes = 16, kMaxChannels = 8, kMaxVectors = 3;
inline Vec zero() {
  return _mm512_setzero_ps();
}
inline Vec load(const float* p) {
  return _mm512_loadu_ps(p);
}
inline Vec broadcast(const float* p) {
  return _mm512_set1_ps(*p);
}
inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline Vec add(Vec a, Vec b) {
  return _mm512_add_ps(a, b);
}
inline Vec relu0(Vec a) {
  return _mm512_max_ps(a, _mm512_setzero_ps());  // the second operand for NaN and for two zeros
}
inline void store(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline void store_partial(float* p, Vec v, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}

#include "kernels/cpu/conv2d_block.inc"

}  // namespace
}  // namespace avx512
TESSERA_AVX512_END

const MicroTable& avx2_micro_table() {
  static const MicroTable table = [] {
    MicroTable t = avx2::make_table();
    t.pairs = avx2_pairs();
    return t;
  }();
  return table;
}

const MicroTable& avx512_micro_table() {
  static const MicroTable table = [] {
    MicroTable t = avx512::make_table();
    t.pairs = avx512_pairs();
    return t;
  }();
  return table;
}

}  // namespace tessera::cpu::conv

#endif  // __x86_64__
