// Kernel source generation for GPU backends: OpenCL C (the opencl plugin) and GLSL 450 compute
// shaders (the vulkan plugin), the same kernels with the same operations and argument meaning.
// Independent of any GPU runtime, so it is built and tested everywhere.
//
// Every generated kernel computes the elements of one output box, one work item per element
// (elementwise), per row along an axis (softmax, rms_norm), per group (group_norm), per block of
// output channels (conv2d) or per tile (matmul, linear: see codegen_linear.h), with the same
// operations in the same order whatever the box: a sub-box is bitwise equal to the same elements
// of a full computation on the same device. Sizes, box offsets and strides are kernel arguments,
// so one compiled kernel serves every box, bucket and view of its op (the source depends only on
// the op, its attributes, its dtypes and the ranks).
//
// Kernel arguments, in order (the host side fills them with GpuLaunchLayout):
//   out (global float*), long out_base, long8 out_strides,
//   long8 begin, long8 extent, long items (work_items: elements, rows or tile groups times
//   local_size), long depth,
//   per input k: in_k (global const float*), long in_k_base, long8 in_k_strides, long in_k_red,
//                long8 in_k_shape
// `shape` is input k's full shape (1 past its rank), whatever part of it the view holds: what a
// kernel needs beyond the box (group_norm's groups span channels and all spatial positions,
// conv2d and pool2d bound their padding by the input's height and width, concat finds the input
// of a position along its axis).
// Input buffers of a quantised dtype (linear's weight) are raw bytes: `__global const uchar*` in
// OpenCL C and CUDA, a `uint` buffer read as little-endian bytes in GLSL; their base is a BYTE
// offset (address_unit), and linear's weight has strides[rank - 1] = the bytes of one weight
// row (whole blocks of K elements; blocks keep their GGUF layout and are decoded in the kernel)
// and red = 1.
// Strides are per OUTPUT axis (zero where an input is broadcast or does not vary with that
// axis); `red` is the input's stride along the reduction of matmul / linear (K). Bases are
// element offsets such that element index i of the output reads base + sum_d i[d] * strides[d].
// Exceptions: rope / rope_multi positions (i32 or i64 inputs) vary along the output's row axis
// (rank - 3), red being rope_multi's stride between position axes; attention's q, k and v
// carry their own strides axis by axis (keys walk the row axis, the head index is divided by
// the group), k's red is the number of keys S and v's the group Hq / Hkv. conv2d's x and weight,
// reduce's input and group_norm's x carry their own strides axis by axis; conv2d's bias and
// group_norm's weight and bias vary along output axis 1 (channels); gather's ids vary along the
// leading output axes and its table along the rest, red being the table's row stride; reshape's
// input carries its own strides axis by axis.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph.h"
#include "kernels/view.h"

namespace tessera::gpu {

enum class KernelShape : uint8_t {
  Elements,  // one work item per output element of the box
  Rows,      // one work item per row along `axis` (the whole row is read, the box's part written)
  Groups,    // one work item per (axis 0 index, group of `depth` entries along axis 1) the box meets
  Blocks,    // one work item per `depth` consecutive entries of the box along `axis`, per position
             // of the other axes (the last block may be partial)
  Tiles,     // work-groups of exactly `local_size` work items (tiles of the box, codegen_linear.h)
};

struct GeneratedKernel {
  std::string name;    // the kernel function's name in `source`
  std::string source;  // OpenCL C 1.2 or GLSL 450
  KernelShape shape = KernelShape::Elements;
  int axis = -1;       // Rows: the output axis of a row
  int rank = 0;        // output rank (1..8)
  int64_t depth = 0;   // the `depth` argument: K of matmul / linear, the row length of Rows
  int local_size = 0;  // Tiles: the work-group size every launch must use (0: any)
};

// Tiles kernels: work items per work-group, and the smallest M extent of a box for which a
// launch runs 32 x 32 tiles (below it, one work item per output element; see work_items).
inline constexpr int kTileLocalSize = 64;
inline constexpr int64_t kTileMinRows = 16;

// The kernel of `node`, or Unimplemented naming what is missing (the session then runs the node
// on its host fallback). Supported: f32 unary, binary (arithmetic), fused_elementwise, matmul,
// linear with f32 or GGUF block-quantised weights (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K,
// q6_K), softmax / log_softmax, rms_norm, layer_norm, slice, permute, expand, rope and
// rope_multi (i32 / i64 positions), attention (one work item per output element), conv2d (any
// stride, padding, dilation, groups), pool2d, upsample, concat (up to 6 inputs), group_norm,
// reduce (sum, mean, prod, max, min) and gather of f32 rows by i32 / i64 ids (an id out of range
// gives NaN: kernels cannot fail), reshape. See codegen_nn.cc and codegen_linear.cc.
absl::StatusOr<GeneratedKernel> generate_opencl(const Graph& graph, const Node& node);

// The same kernel in CUDA C (codegen_cuda.cc), for NVRTC: same name, arguments and semantics
// (compile with --fmad=false, as the OpenCL source forbids contraction).
absl::StatusOr<GeneratedKernel> generate_cuda(const Graph& graph, const Node& node);
// The same kernel as a GLSL 450 compute shader (entry point "main", local size kGlslLocalSize).
// Buffers are storage buffers of descriptor set 0, one binding each: 0 the int32 parameter
// array, 1 the output, 2 + k input k. A push constant (one int32) is the index in the parameter
// array where the dispatch's parameters start (see append_glsl_params). Element offsets are
// int32 and relative to each buffer's bound range. Invocations loop over the work items, so any
// number of work groups covers a box.
absl::StatusOr<GeneratedKernel> generate_glsl(const Graph& graph, const Node& node);
inline constexpr int kGlslLocalSize = 64;

// One input's addressing for a launch (see the argument list above).
struct InputLayout {
  int64_t base = 0;
  std::array<int64_t, 8> strides{};
  int64_t red = 0;
  std::array<int64_t, 8> shape{};  // the input's full shape, 1 past its rank
};

// How input `input` of `node` is addressed through `view` (whose data pointer is already
// translated to an element offset `element_offset` into its buffer).
InputLayout input_layout(const Node& node, int input, const KernelInput& view, int64_t element_offset, int out_rank);
// The output's base and strides for an output view at `element_offset` of its buffer.
InputLayout output_layout(const TensorView& view, int64_t element_offset);
// The unit of a buffer's base and strides: bytes for quantised dtypes (byte-addressed), else
// the element size. A backend passes (byte offset of the view's data) / address_unit.
int64_t address_unit(DType dtype);
// Work items of a launch over `box` for a kernel of this shape (Tiles: a multiple of
// local_size, the groups times the group size).
int64_t work_items(const GeneratedKernel& kernel, const Box& box);

// Appends the parameters of one GLSL dispatch to `params`: items, depth, out base, out strides
// [8], box begin [8], box extent [8] (1 past the rank), then per input base, strides [8], red,
// shape [8].
// OutOfRange (nothing appended) when a value does not fit int32.
absl::Status append_glsl_params(const InputLayout& out, const Box& box, int64_t items, int64_t depth,
                                std::span<const InputLayout> inputs, std::vector<int32_t>& params);
inline constexpr int kGlslFixedParams = 27;  // before the first input's
inline constexpr int kGlslInputParams = 18;  // per input

}  // namespace tessera::gpu
