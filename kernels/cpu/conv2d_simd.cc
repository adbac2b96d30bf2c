// AVX2 and AVX-512 micro-kernels of the f32 conv2d (contract in conv2d_internal.h): register
// blocks of output channels x vectors of output pixels, one broadcast weight per channel and
// tap, one FMA per accumulator and tap, taps in the order (c, kh, kw). The block loop is
// conv2d_block.inc, compiled once per instruction set in its own target region.
#include "kernels/cpu/conv2d_internal.h"
#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_f32.h"

#if defined(__x86_64__)
#include <cstddef>
#include <utility>

namespace tessera::cpu::conv {

TESSERA_AVX2_BEGIN
namespace avx2 {
namespace {

// 16 registers: up to 6 x 2 accumulators, 2 inputs and a broadcast.
using namespace f32::avx2;
constexpr int kMaxChannels = 6, kMaxVectors = 2;

#include "kernels/cpu/conv2d_block.inc"

}  // namespace
}  // namespace avx2
TESSERA_AVX2_END

TESSERA_AVX512_BEGIN
namespace avx512 {
namespace {

// 32 registers: up to 8 x 3 accumulators, 3 inputs and a broadcast.
using namespace f32::avx512;
constexpr int kMaxChannels = 8, kMaxVectors = 3;

#include "kernels/cpu/conv2d_block.inc"

}  // namespace
}  // namespace avx512
TESSERA_AVX512_END

const MicroTable& avx2_micro_table() {
  static const MicroTable table = [] {
    MicroTable t = avx2::make_table();
    t.pairs = avx2_pairs();
    const WinogradOps& ops = avx2_winograd_ops();
    for (int k = 0; k < 3; ++k) t.gemm[k] = ops.gemm[k];
    t.gemm_ocb = ops.ocb;
    t.gemm_vectors = ops.gemm_vectors;
    return t;
  }();
  return table;
}

const MicroTable& avx512_micro_table() {
  static const MicroTable table = [] {
    MicroTable t = avx512::make_table();
    t.pairs = avx512_pairs();
    const WinogradOps& ops = avx512_winograd_ops();
    for (int k = 0; k < 3; ++k) t.gemm[k] = ops.gemm[k];
    t.gemm_ocb = ops.ocb;
    t.gemm_vectors = ops.gemm_vectors;
    return t;
  }();
  return table;
}

}  // namespace tessera::cpu::conv

#endif  // __x86_64__
