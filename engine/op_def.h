// The op table: one definition block per op kind (arity, dtype and shape rule, forward and
// needed region rules). Reference kernels live in kernels/ref; optimised kernels elsewhere.
//
// Rule contracts (see DESIGN.md section 2):
// - forward(input i, dirty box) adds to `out` every output element that can change when only
//   elements inside `dirty` of input i change (sound; exact where the structure allows).
// - needed(output box) sets, per input, a box such that the op's output on `out` depends only on
//   those input elements (an empty box means the input is not read).
#pragma once

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
};

const OpDef& op_def(OpKind kind);

// The definition blocks, one per kind of the op list (k##Kind##Def, in engine/ops_*.cc).
#define TESSERA_OP_DEF_DECL(kind, name) extern const OpDef k##kind##Def;
TESSERA_OPS(TESSERA_OP_DEF_DECL)
#undef TESSERA_OP_DEF_DECL

// The op's display name: its attributes' to_string() ("unary.exp", "input.ids",
// "conv2d{stride=2x2,pad=1x1,groups=1}", "matmul").
std::string op_display_name(const Node& node);

// Helpers shared by rule definitions.
const Node& input_node(const Graph& graph, const Node& node, int i);
// Normalises a possibly negative axis against rank; throws Error("[op] ...") when out of range.
int normalize_axis(std::string_view op, int64_t axis, int rank);
[[noreturn]] void fail(std::string_view op, std::string_view message);
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
