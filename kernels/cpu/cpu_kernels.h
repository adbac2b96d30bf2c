// Optimised CPU kernels. Each is checked against its reference kernel (tests/kernels).
//
// Exactness (DESIGN.md section 1): an optimised kernel computes every output element with the
// same sequence of floating-point operations whatever box it is asked for and however the box
// is split across threads; its values are only close (not bitwise equal) to the reference's.
// The instruction set is chosen once per process (runtime dispatch), so every box of a node is
// computed by the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/view.h"

namespace tessera::cpu {

// Instruction sets with their own code paths, in increasing order. Portable code is plain C++
// (any target); AVX2 means AVX2 + FMA + F16C; AVX-512 means F, BW, VL and DQ on top (used by
// linear and conv2d; the other kernels run their AVX2 code under it); AVX-512 VNNI adds the int8
// dot product instructions (used by linear's integer path, linear_q8.h); AMX adds the AMX-INT8
// tiles (Intel Sapphire Rapids on), with the kernel's permission to use them (Linux grants it
// per process on request): linear's integer path runs prefill's sums on them.
enum class Isa { Portable, Avx2, Avx512, Avx512Vnni, Amx };

// The best instruction set of this CPU, decided once per process. TESSERA_CPU_ISA=portable,
// =avx2, =avx512 or =avx512vnni in the environment caps it.
Isa detected_isa();
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);

// How many bytes ahead of the weight block it works on a one-row (decode) integer linear tile
// software-prefetches its packed weights (linear_q8.h), or 0 for none: decode streams every
// weight from memory once, and a single core's hardware prefetchers alone keep too few lines in
// flight on some CPUs. Decided once per process from the CPU: AMD family 1Ah (Zen 5) 6 KiB
// (kernels_bench one-row decode, weights streamed: 27-32 -> 41-44 GB/s for Q8_0 and Q4_1, 16 ->
// 36-40 for Q5_K and Q6_K, against a plain read's 42-47); every other CPU 0 (on Zen 4 prefetches
// inside the stream measured 6-30% slower; Intel's CPUs were not measured).
// TESSERA_STREAM_PREFETCH=bytes in the environment overrides it (0: none); the setter is for
// tests and benchmarks, which compare both ways in one process. Results never depend on it.
int64_t stream_prefetch_distance();
void set_stream_prefetch_distance(int64_t bytes);

// Whether the AVX-512 kernels that have both forms run their 512-bit one (two 256-bit halves'
// work per instruction) rather than the 256-bit one with AVX-512's 32 registers; both give the
// same bits. Decided once per process from the CPU: false on AMD family 19h (Zen 4), whose cores
// split each 512-bit operation into two 256-bit ones (decode attention, SmolLM2-135M f16 K/V
// with the keys in cache, kernels_bench: 39-40 us at context 1024 with the 512-bit form, 33-34
// with the 256-bit one; inside a decode step 46-53 against 40-46), true on every other CPU with
// AVX-512 (Zen 5 runs them at full width: 26.4 against 28.4 us). TESSERA_WIDE_VECTORS=0 or =1 in
// the environment overrides it; the setter is for tests and benchmarks.
bool wide_vectors();
void set_wide_vectors(bool wide);

// How linear on block-quantised weights treats its activations, from TESSERA_LINEAR in the
// environment, read whenever a kernel is chosen (so a process can choose per session):
// - Int24 (the default, or "int24"): every activation block scaled to 24 bits and split into
//   three int8 digits, each weight block's integer sums taken against all three at once and
//   combined in float (linear_q8.h, digits_kernel): each activation is kept to 2^-23 of its
//   block's largest magnitude, so results are as close to transformers' as the f32 path's
//   (top-10 logits within 6.0e-5 and 2.6e-5 on the two models, the f32 path 6.4e-5 and 2.4e-5),
//   decoding at ~4.5x the f32 path's speed and 85-95% of the int8 path's.
// - F32 ("f32"): its only rounding is float arithmetic on the exactly dequantised weights; the
//   slowest (dequantising every weight to float is compute-bound).
// - Int8 ("int8"): activations quantised to int8 blocks and integer dot products, weights packed
//   once into 16-row panels. Fastest (README gives its figures beside llama.cpp's) and as
//   precise as llama.cpp's (top logits move by up to ~1.1; near-ties flip: SmolLM2-135M's chat
//   answer to "What is the capital of France?" starts "L'Étoile" under it and under llama.cpp,
//   "The capital of France is Paris" on the two precise paths, as in transformers), so opt-in.
enum class LinearPath { F32, Int8, Int24 };
LinearPath linear_path();

// The optimised kernel for this node, or nullptr when the reference kernel is used. Depends only
// on the node, its input nodes and detected_isa(), never on the views or the box.
KernelFn optimised_kernel(const Graph& graph, const Node& node);
// The same for a given instruction set (tests and benchmarks; isa_supported(isa) required).
KernelFn optimised_kernel_for(const Graph& graph, const Node& node, Isa isa);

// What `kernel` (this node's optimised kernel) wants prepared once before it runs, for
// KernelNode::prepared; nullptr when nothing. Linear with int8 activations and a constant weight:
// the weight packed into the kernel's panels (linear_q8.h), in transparent-huge-page memory; a
// Winograd conv2d with a constant weight: its transformed weights.
// It depends only on the weight's bytes, dtype and shape: callers may share it between nodes.
std::shared_ptr<const void> prepare_node_data(const Graph& graph, const Node& node, KernelFn kernel);
// Bytes of what prepare_node_data makes for the node (0: nothing).
int64_t prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel);
// The per-op parts: linear.cc (the int8 path's panels) and conv2d_winograd.cc (the
// Winograd path's transformed weights, conv::winograd_prepare).
std::shared_ptr<const void> linear_prepare_data(const Graph& graph, const Node& node, KernelFn kernel);
int64_t linear_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel);

// The group twin of an optimised kernel (GroupKernelFn, kernels/view.h), nullptr when it has
// none: linear's integer paths (linear.cc, linear_q8.h).
GroupKernelFn group_kernel(KernelFn kernel);
// The two phases of an optimised attention kernel (AttentionPhases, kernels/view.h) for `node`,
// empty when it has none: the AVX2 and AVX-512 paths over f32 or f16 K/V (attention.cc), the
// AVX-512 VNNI path over q8_0 K/V (attention_q8.cc).
AttentionPhases attention_phases(const Graph& graph, const Node& node, KernelFn kernel);
// For the phases of every attention kernel (attention.cc): tile k of `tiles` scores tiles of a
// row with `keys` visible keys starts at phase_key_cut(keys, k, tiles) (a multiple of 16) and
// ends where tile k + 1 starts; check_phase errs unless tile is one of tiles and the box is one
// query position (or empty).
int64_t phase_key_cut(int64_t keys, int k, int tiles);
absl::Status check_phase(const KernelArgs& args, int tile = 0, int tiles = 1);

// Per-op selectors (one per file of kernels/cpu), nullptr when the node is not covered.
KernelFn matmul_kernel(const Graph& graph, const Node& node, Isa isa);     // matmul.cc
KernelFn linear_kernel(const Graph& graph, const Node& node, Isa isa);     // linear.cc
// Linear with the activation path chosen explicitly (tests and benchmarks).
KernelFn linear_kernel_with(const Graph& graph, const Node& node, Isa isa, LinearPath path);
KernelFn attention_kernel(const Graph& graph, const Node& node, Isa isa);  // attention.cc
KernelFn attention_q8_kernel(const Graph& graph, const Node& node, Isa isa);  // attention_q8.cc
// The phases of a q8_0 attention kernel (attention_phases), if it has them.
AttentionPhases attention_q8_phases(const Graph& graph, const Node& node, KernelFn kernel);  // attention_q8.cc
KernelFn unary_kernel(const Graph& graph, const Node& node, Isa isa);      // elementwise.cc
KernelFn binary_kernel(const Graph& graph, const Node& node, Isa isa);     // elementwise.cc
KernelFn cast_kernel(const Graph& graph, const Node& node, Isa isa);       // elementwise.cc (float dtypes)
KernelFn fused_elementwise_kernel(const Graph& graph, const Node& node, Isa isa);  // fused.cc
KernelFn rms_norm_kernel(const Graph& graph, const Node& node, Isa isa);   // norm_rope.cc
KernelFn rope_kernel(const Graph& graph, const Node& node, Isa isa);       // norm_rope.cc
KernelFn reshape_kernel(const Graph& graph, const Node& node, Isa isa);    // copy.cc
KernelFn gather_kernel(const Graph& graph, const Node& node, Isa isa);     // copy.cc
KernelFn slice_kernel(const Graph& graph, const Node& node, Isa isa);      // movement.cc
KernelFn concat_kernel(const Graph& graph, const Node& node, Isa isa);     // movement.cc
KernelFn rope_multi_kernel(const Graph& graph, const Node& node, Isa isa); // movement.cc
KernelFn conv2d_kernel(const Graph& graph, const Node& node, Isa isa);     // conv2d.cc
KernelFn pool2d_kernel(const Graph& graph, const Node& node, Isa isa);     // conv_spatial.cc
KernelFn upsample_kernel(const Graph& graph, const Node& node, Isa isa);   // conv_spatial.cc
KernelFn layer_norm_kernel(const Graph& graph, const Node& node, Isa isa);  // norm_group.cc
KernelFn group_norm_kernel(const Graph& graph, const Node& node, Isa isa);  // norm_group.cc

// Scratch bounds of the kernels that use scratch (see kernel_scratch_bytes in kernels/view.h).
int64_t linear_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);     // linear.cc
int64_t attention_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);  // attention.cc
int64_t attention_q8_scratch_bytes(const Graph& graph, const Node& node);                // attention_q8.cc
int64_t rms_norm_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);   // norm_rope.cc
int64_t rope_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);       // norm_rope.cc
int64_t rope_multi_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);  // movement.cc
int64_t conv2d_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);     // conv2d.cc
// conv2d's weights prepared once from a constant (the Winograd kernels' transformed weights, the
// 1x1 gemm's transposed blocks; conv2d.cc), and their size.
int64_t conv2d_prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel);
std::shared_ptr<const void> conv2d_prepare(const Graph& graph, const Node& node, KernelFn kernel);

// Element i of an array of a float dtype (f32, f16, bf16) as a float; half types widen exactly.
inline float float_at(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::F16:
      return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Stores x as element i of an array of a float dtype; half types round to nearest even.
inline void store_float(DType dtype, void* base, int64_t i, float x) {
  switch (dtype) {
    case DType::F16:
      static_cast<uint16_t*>(base)[i] = float_to_half(x);
      break;
    case DType::BF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
      break;
    default:
      static_cast<float*>(base)[i] = x;
  }
}

// The address of element `index` of a view of any plain dtype, or of the block starting at
// element `index` of a quantised one (whole blocks along a last axis of stride 1).
inline const std::byte* element_address(const TensorView& view, const int64_t* index) {
  const int64_t offset = view.offset(index);
  if (is_quantized(view.dtype))
    return static_cast<const std::byte*>(view.data) + offset / dtype_block_size(view.dtype) * dtype_block_bytes(view.dtype);
  return static_cast<const std::byte*>(view.data) + offset * dtype_size(view.dtype);
}

// Bytes ScratchCarver::take<T>(count) uses.
template <class T>
constexpr int64_t scratch_take_bytes(int64_t count) {
  return (count * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64;
}

}  // namespace tessera::cpu
