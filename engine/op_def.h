// The op table: one definition block per op kind (arity, dtype and shape rule, forward and
// needed region rules). Reference kernels live in kernels/ref; optimised kernels elsewhere.
//
// Rule contracts (see DESIGN.md section 2):
// - forward(input i, dirty box) adds to `out` every output element that can change when only
//   elements inside `dirty` of input i change (sound; exact where the structure allows).
// - needed(output box) sets, per input, a box such that the op's output on `out` depends only on
//   those input elements (an empty box means the input is not read).
// - decompose(inputs, node) (composite ops only; see `decompose` below).
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>

#include "engine/graph.h"
#include "regions/region.h"

namespace tessera {

struct OpDef {
  const char* name = "";
  int min_inputs = 0;
  int max_inputs = 0;
  // Validates inputs and attributes and sets node.shape and node.dtype. Throws Error.
  void (*infer)(const Graph& graph, Node& node) = nullptr;
  void (*forward)(const Graph& graph, const Node& node, int input, const Box& dirty,
                  Region& out) = nullptr;
  void (*needed)(const Graph& graph, const Node& node, const Box& out,
                 std::span<Box> inputs) = nullptr;
  // Composite ops: adds the op's decomposition into primitive ops to the graph of inputs[0] and
  // returns its result, which has node.shape and node.dtype. `inputs` are the node's inputs, in
  // order, as tensors of that graph (of the node's shapes and dtypes); the node (possibly of
  // another graph; callers pass a copy, see below) supplies only attributes, shape and dtype.
  // Returns Tensor{} (graph == nullptr) when this node has no decomposition (a primitive unary
  // function, a quantised linear weight). nullptr for primitive ops. Throws Error like the
  // builders it calls.
  Tensor (*decompose)(std::span<const Tensor> inputs, const Node& node) = nullptr;
};

const OpDef& op_def(OpKind kind);

// The decomposition of `node` built over `inputs` (see OpDef::decompose): the reference
// semantics of a composite op written with primitives, the way a user writes it in PyTorch. It
// is the oracle for fused kernels, the fallback for a backend without one and the pattern the
// fusion pass matches. Decompositions use only primitive ops, except that attention's uses the
// softmax op and silu's the sigmoid function (composites themselves): a pass that fuses
// bottom-up has already fused those when it reaches the outer pattern. Constants are the
// reference kernel's, rounded to the node's dtype by Graph::scalar.
// Ops with one: softmax/log_softmax, rms_norm, layer_norm, group_norm, rope, rope_multi,
// upsample, attention, linear with a float weight, conv2d with an epilogue (relu, residual; a
// plain conv2d has none), and the unary functions sigmoid, silu,
// gelu_tanh and gelu_erf (through the erf primitive). Rotary angles are computed in f32 (as HF
// does), where the reference kernels use double: values agree within kernel tolerance, not bitwise.
// `node` may belong to the graph of `inputs` (it is copied first: that graph grows).
// Returns Tensor{} when the op has none. Throws Error("[op] ...") when `inputs` do not match
// the node's arity, or when the result's shape or dtype differs from the node's.
Tensor decompose(const Node& node, std::span<const Tensor> inputs);

// The definition blocks, one per kind of the op list (k##Kind##Def, in engine/ops_*.cc).
#define TESSERA_OP_DEF_DECL(kind, name) extern const OpDef k##kind##Def;
TESSERA_OPS(TESSERA_OP_DEF_DECL)
#undef TESSERA_OP_DEF_DECL

// conv2d's output tile: 4 for a conv whose Conv2dAttrs::tile is 4 and that the CPU backend's
// F(4x4, 3x3) Winograd kernel takes (f32, a 3x3 kernel, stride 1, dilation 1, one group, at
// least 8 input and output channels), else 1. Such a conv is computed in 4x4 tiles at multiples
// of 4 of the whole output, and an output's bits depend on its tile's whole 6x6 input window,
// not only on its own 3x3: conv2d's rules align output rows and columns to the tile (dirt
// spreads over whole tiles, a box needs its tiles' windows), so that any box computes the full
// output's bits.
int64_t conv2d_output_tile(const Graph& graph, const Node& node);
// Whether `node` is a conv the 4x4 kernel takes (the conditions above but the tile attribute).
bool conv2d_tiles_allowed(const Graph& graph, const Node& node);

// The op's display name: its attributes' to_string() ("unary.exp", "input.ids",
// "conv2d{stride=2x2,pad=1x1,groups=1}", "matmul").
std::string op_display_name(const Node& node);

// Helpers shared by rule definitions.
const Node& input_node(const Graph& graph, const Node& node, int i);
// Normalises a possibly negative axis against rank; throws Error("[op] ...") when out of range.
int normalize_axis(std::string_view op, int64_t axis, int rank);
[[noreturn]] void fail(std::string_view op, std::string_view message);
// `box` grown along its last axis to whole blocks of a quantised dtype (unchanged for plain
// dtypes): a quantised value (a q8_0 cast's output) is computed and kept by whole blocks.
Box whole_blocks(const Box& box, DType dtype, int64_t last_dim);

// A builder's tensor argument, named for error messages. An optional one (a norm's weight, a
// conv's bias) may be Tensor{}, meaning absent.
struct TensorArg {
  std::string_view name;
  Tensor tensor;
  bool optional = false;
};
// Validates a builder's tensor arguments before it adds anything: each must be a node of one
// graph. Returns that graph. Throws Error("[op] argument 'name' ...") naming the first bad one
// (an empty Tensor{}, a handle that is not a node of its graph, a tensor of another graph).
Graph& builder_graph(std::string_view op, std::initializer_list<TensorArg> args);
// The same for a list argument (concat, stack, fused_elementwise): elements named "name[i]".
Graph& builder_graph(std::string_view op, std::string_view name, std::span<const Tensor> list);
// "[1,2,3]": lists inside attribute strings.
std::string ints_string(const Ints& values);

}  // namespace tessera

namespace tessera {

// Numpy broadcasting of two shapes; throws Error("[op] ...") when incompatible.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// Output box -> the box of a broadcast input it reads (size-1 dims map to [0, 1)).
Box broadcast_needed(const Shape& input, const Shape& output, const Box& out_box);
// Dirty box of a broadcast input -> output box it can change (broadcast dims widen to full).
Box broadcast_forward(const Shape& input, const Shape& output, const Box& dirty);
// Shared rules for elementwise-shaped ops: output box = input box.
void identity_forward(const Graph&, const Node&, int, const Box& dirty, Region& out);
void identity_needed(const Graph&, const Node&, const Box& out, std::span<Box> inputs);

}  // namespace tessera
