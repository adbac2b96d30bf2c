// Linear: x [..., K] times the transpose of a weight matrix w [N, K] -> [..., N]. The weight
// keeps the row layout of GGUF/PyTorch files (one output feature per row), so quantised rows of
// K elements are used as stored and dequantised inside the kernel.
#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

// forward: x dirt (leading box, any K) -> those rows x all N; w dirt rows [n0, n1) -> all
// rows x [n0, n1). needed: x -> the leading box x all K; w -> rows of the box's N range x all K.
static void linear_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  Box b = Box::full(node.shape);
  const int last = node.rank() - 1;
  if (input == 0) {
    for (int d = 0; d < last; ++d) b[d] = dirty[d];
  } else {
    b[last] = dirty[0];
  }
  (void)g;
  out.add(b);
}

static void linear_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  const Node& x = input_node(g, node, 0);
  const int last = node.rank() - 1;
  Box bx = Box::full(x.shape);
  for (int d = 0; d < last; ++d) bx[d] = out[d];
  Box bw = Box::full(input_node(g, node, 1).shape);
  bw[0] = out[last];
  if (out.empty()) {
    bx = Box::of_rank(x.rank());
    bw = Box::of_rank(2);
  }
  inputs[0] = bx;
  inputs[1] = bw;
}

// Decomposition (float weights): matmul(x, transpose(weight)) as x @ w.T, the weight cast to
// x's dtype first when it differs; x of rank 1 is viewed as one row. A quantised weight has
// none: dequantisation happens inside the kernel and is not an op.
static Tensor linear_decompose(std::span<const Tensor> inputs, const Node& node) {
  const Tensor x = inputs[0];
  Tensor w = inputs[1];
  if (is_quantized(w.dtype())) return Tensor{};
  if (w.dtype() != x.dtype()) w = cast(w, x.dtype());
  const Tensor wt = transpose(w, 0, 1);
  if (x.rank() >= 2) return matmul(x, wt);
  return reshape(matmul(reshape(x, {1, x.dim(0)}), wt), node.shape);
}

std::string LinearAttrs::to_string() const { return "linear"; }

const OpDef kLinearDef{
    .name = "linear",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Node& w = input_node(g, node, 1);
          if (x.rank() < 1) fail("linear", "x must have rank >= 1");
          if (!is_float(x.dtype)) fail("linear", absl::StrCat("x must be float, got ", dtype_name(x.dtype)));
          if (w.rank() != 2) fail("linear", absl::StrCat("weight must be [N, K], got ", shape_string(w.shape)));
          if (!is_float(w.dtype) && !is_quantized(w.dtype))
            fail("linear", absl::StrCat("weight must be float or quantised, got ", dtype_name(w.dtype)));
          if (x.shape.back() != w.shape[1])
            fail("linear", absl::StrCat("x ", shape_string(x.shape), " and weight ", shape_string(w.shape),
                                        " disagree on K"));
          node.shape = x.shape;
          node.shape.back() = w.shape[0];
          node.dtype = x.dtype;
        },
    .forward = linear_forward,
    .needed = linear_needed,
    .decompose = linear_decompose,
};

Tensor linear(Tensor x, Tensor weight) {
  Graph& g = builder_graph("linear", {{"x", x}, {"weight", weight}});
  Tensor in[] = {x, weight};
  return g.add_node(in, LinearAttrs{});
}

}  // namespace tessera
