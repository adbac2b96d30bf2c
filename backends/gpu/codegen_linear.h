// Tiled matmul and linear kernels (f32 and GGUF block-quantised weights) for the GPU
// generators: OpenCL C (codegen_linear.cc, also the CUDA source through its prelude) and GLSL 450
// (codegen_linear_glsl.cc). Both emit one kernel body text, written in the common subset of the
// two languages over a few dialect macros (IDX, PF, TOF, TOI, X, Y, STORE, BARRIER, TQ_B).
//
// Work division (KernelShape::Tiles, kTileLocalSize work items per work-group): a launch over a
// box whose M extent (axis rank - 2; 1 for rank-1 outputs) is below kTileMinRows runs one work
// item per output element (the "row path", right for decode steps); otherwise one work-group per
// 32 x 32 tile of (M, N) per index of the leading axes, 8 x 8 work items of 4 x 4 outputs each,
// staging 32-long K chunks of A (or x) and B (or the decoded weight rows) in local memory.
// Both paths compute every output element as acc = acc + a[k] * b[k] for k = 0, 1, ..., K - 1
// from acc = 0 in f32 without contraction: the tiles only decide who computes an element and
// where its operands are staged, never the order of its sum, so any box (either path) is bitwise
// equal to the same elements of any other box on the same device.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "backends/gpu/codegen.h"
#include "engine/graph.h"

namespace tessera::gpu::detail {

// Whether linear weights of `dtype` are decoded on the device (the GGUF block types).
bool has_block_decoder(DType dtype);

// The tiled dot kernel (matmul, linear with f32 or quantised weights) of `node`.
absl::StatusOr<GeneratedKernel> tiled_dot_opencl(const Graph& graph, const Node& node);
absl::StatusOr<GeneratedKernel> tiled_dot_glsl(const Graph& graph, const Node& node);

// Dialect-neutral pieces shared by both generators (codegen_linear.cc).
// Macros over TQ_B(o) (the byte at byte offset o of the weight buffer): f16 fields, signed
// bytes, nibbles and K-quant scales; needs tq_half() from the dialect's preamble.
extern const char* const kBlockMacros;
// tq_half(uint bits): an f16 bit pattern as float, exactly (integer decoding, no intrinsics).
extern const char* const kHalfFunction;
// The kernel body for work-group `grp` (see the layout comment in codegen_linear.cc); `weight`
// is the dtype of input 1 (F32 for matmul and f32 linear).
std::string tiled_body(DType weight);
// A Tiles kernel of `node` named `name` with this source.
GeneratedKernel tiled_kernel(const Node& node, std::string name, std::string source);

}  // namespace tessera::gpu::detail
