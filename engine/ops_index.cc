// Index-shaped ops: matmul, gather, triangle masks, and the generators arange and rand.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

void no_forward(const Graph&, const Node&, int, const Box&, Region&) {}
void no_needed(const Graph&, const Node&, const Box&, std::span<Box>) {}

// The leading `count` dims of a shape or box (the batch dims of matmul, the index dims of gather).
Shape leading_dims(const Shape& shape, int count) {
  return Shape(shape.begin(), shape.begin() + count);
}
Box leading_box(const Box& box, int count) {
  Box b = Box::of_rank(count);
  for (int d = 0; d < count; ++d) b[d] = box[d];
  return b;
}

// Numpy broadcasting compatibility (trailing dims equal or 1).
bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

}  // namespace

// ---- matmul(a [..., M, K], b [..., K, N]) -> [..., M, N] ------------------------------------
// No attrs. Both ranks >= 2, same float dtype; the batch dims (all but the last two) broadcast
// numpy-style, so a [B, M, K] x b [K, N] is a batched product with one shared b.
// Rules: a row of a feeds one row of C (every column); a column of b feeds one column of C
// (every row); K is reduced, so K-dirt anywhere in a row/column dirties the whole of it. Batch
// dims follow broadcasting (a broadcast batch dim of an input widens to full).
namespace {

void matmul_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const Node& x = input_node(g, node, input);
  const int out_batch = node.rank() - 2, x_batch = x.rank() - 2;
  Box in_batch =
      broadcast_forward(leading_dims(x.shape, x_batch), leading_dims(node.shape, out_batch),
                        leading_box(dirty, x_batch));
  Box b = Box::full(node.shape);
  for (int d = 0; d < out_batch; ++d) b[d] = in_batch[d];
  if (input == 0)
    b[out_batch] = dirty[x_batch];  // rows of a -> rows of C
  else
    b[out_batch + 1] = dirty[x_batch + 1];  // cols of b -> cols of C
  out.add(b);
}

void matmul_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  const int out_batch = node.rank() - 2;
  for (int i = 0; i < 2; ++i) {
    const Node& x = input_node(g, node, i);
    if (out.empty()) {
      inputs[static_cast<size_t>(i)] = Box::of_rank(x.rank());
      continue;
    }
    const int x_batch = x.rank() - 2;
    Box batch = broadcast_needed(leading_dims(x.shape, x_batch),
                                 leading_dims(node.shape, out_batch), leading_box(out, out_batch));
    Box b = Box::full(x.shape);  // all K
    for (int d = 0; d < x_batch; ++d) b[d] = batch[d];
    if (i == 0)
      b[x_batch] = out[out_batch];  // rows of the box
    else
      b[x_batch + 1] = out[out_batch + 1];  // cols of the box
    inputs[static_cast<size_t>(i)] = b;
  }
}

}  // namespace

std::string MatmulAttrs::to_string() const { return "matmul"; }

const OpDef kMatmulDef{
    .name = "matmul",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& a = input_node(g, node, 0);
          const Node& b = input_node(g, node, 1);
          if (a.rank() < 2 || b.rank() < 2)
            fail("matmul", absl::StrCat("inputs need rank >= 2, got ", shape_string(a.shape),
                                        " and ", shape_string(b.shape)));
          if (a.dtype != b.dtype)
            fail("matmul", absl::StrCat("dtype mismatch: ", dtype_name(a.dtype), " vs ",
                                        dtype_name(b.dtype)));
          if (!is_float(a.dtype))
            fail("matmul", absl::StrCat("needs float inputs, got ", dtype_name(a.dtype)));
          const int64_t k_a = a.shape[static_cast<size_t>(a.rank() - 1)];
          const int64_t k_b = b.shape[static_cast<size_t>(b.rank() - 2)];
          if (k_a != k_b)
            fail("matmul", absl::StrCat("inner dimensions differ: ", shape_string(a.shape), " x ",
                                        shape_string(b.shape), " (K ", k_a, " vs ", k_b, ")"));
          const Shape batch_a = leading_dims(a.shape, a.rank() - 2);
          const Shape batch_b = leading_dims(b.shape, b.rank() - 2);
          if (!broadcastable(batch_a, batch_b))
            fail("matmul", absl::StrCat("batch dims of ", shape_string(a.shape), " and ",
                                        shape_string(b.shape), " do not broadcast"));
          Shape shape = broadcast_shapes("matmul", batch_a, batch_b);
          shape.push_back(a.shape[static_cast<size_t>(a.rank() - 2)]);
          shape.push_back(b.shape[static_cast<size_t>(b.rank() - 1)]);
          node.shape = std::move(shape);
          node.dtype = a.dtype;
        },
    .forward = matmul_forward,
    .needed = matmul_needed,
};

Tensor matmul(Tensor a, Tensor b) {
  Graph& g = builder_graph("matmul", {{"a", a}, {"b", b}});
  Tensor in[] = {a, b};
  return g.add_node(in, MatmulAttrs{});
}

// ---- gather(table [V, ...rest], ids [...idx]) -> [...idx, ...rest] ---------------------------
// No attrs. Embedding lookup along axis 0 of the table; ids are i32 or i64, and an id outside
// [0, V) fails the kernel with a status (never a crash).
// Rules: a dirty id position dirties its output row (all of rest). Which outputs read a dirty
// table row depends on the ids' values, so table dirt dirties every index position (only the
// dirty part of rest). needed: ids at the box's index part; the table's rows are
// data-dependent, so all of them, restricted to the box's rest part.
namespace {

void gather_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const int idx_rank = input_node(g, node, 1).rank();
  Box b = Box::full(node.shape);
  if (input == 0) {
    for (int d = 1; d < dirty.rank(); ++d) b[idx_rank + d - 1] = dirty[d];
  } else {
    for (int d = 0; d < idx_rank; ++d) b[d] = dirty[d];
  }
  out.add(b);
}

void gather_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  const Node& table = input_node(g, node, 0);
  const int idx_rank = input_node(g, node, 1).rank();
  if (out.empty()) {
    inputs[0] = Box::of_rank(table.rank());
    inputs[1] = Box::of_rank(idx_rank);
    return;
  }
  Box t = Box::full(table.shape);
  for (int d = 1; d < table.rank(); ++d) t[d] = out[idx_rank + d - 1];
  inputs[0] = t;
  inputs[1] = leading_box(out, idx_rank);
}

}  // namespace

std::string GatherAttrs::to_string() const { return "gather"; }

const OpDef kGatherDef{
    .name = "gather",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& table = input_node(g, node, 0);
          const Node& ids = input_node(g, node, 1);
          if (table.rank() < 1) fail("gather", "table must have rank >= 1");
          if (!is_integer(ids.dtype))
            fail("gather", absl::StrCat("ids must be i32 or i64, got ", dtype_name(ids.dtype)));
          Shape shape = ids.shape;
          shape.insert(shape.end(), table.shape.begin() + 1, table.shape.end());
          node.shape = std::move(shape);
          node.dtype = table.dtype;
          // Quantised tables ([V, D], whole blocks per row) are dequantised to f32 rows.
          if (is_quantized(table.dtype)) {
            if (table.rank() != 2) fail("gather", "a quantised table must be [V, D]");
            node.dtype = DType::F32;
          }
        },
    .forward = gather_forward,
    .needed = gather_needed,
};

Tensor embedding(Tensor table, Tensor ids) { return gather(table, ids); }

Tensor gather(Tensor table, Tensor ids) {
  Graph& g = builder_graph("gather", {{"table", table}, {"ids", ids}});
  Tensor in[] = {table, ids};
  return g.add_node(in, GatherAttrs{});
}

// ---- triangle(x): TriangleAttrs {upper, k} -------------------------------------------------------
// On the last two dims (row, col), upper keeps col - row >= k (triu), lower keeps col - row <= k
// (tril); every other element becomes zero. Elementwise in shape, so identity rules.
std::string TriangleAttrs::to_string() const {
  return absl::StrCat(upper ? "triu" : "tril", "{k=", k, "}");
}

const OpDef kTriangleDef{
    .name = "triangle",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          if (x.rank() < 2)
            fail("triangle", absl::StrCat("input needs rank >= 2, got ", shape_string(x.shape)));
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward = identity_forward,
    .needed = identity_needed,
};

Tensor triu(Tensor x, int64_t k) {
  Graph& g = builder_graph("triangle", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, TriangleAttrs{.upper = true, .k = k});
}

Tensor tril(Tensor x, int64_t k) {
  Graph& g = builder_graph("triangle", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, TriangleAttrs{.upper = false, .k = k});
}

// ---- arange: no inputs; ArangeAttrs {n, start, step, dtype} -------------------------------------
// Output [n]; element i is start + i * step computed in double, stored in dtype (integer dtypes
// truncate). Any dtype but bool. No inputs, so the rules are never called.
std::string ArangeAttrs::to_string() const {
  return absl::StrCat("arange{n=", n, ",start=", start, ",step=", step, ",dtype=", dtype_name(dtype), "}");
}

const OpDef kArangeDef{
    .name = "arange",
    .min_inputs = 0,
    .max_inputs = 0,
    .infer =
        [](const Graph&, Node& node) {
          const ArangeAttrs& a = node.attrs_as<ArangeAttrs>();
          if (a.n < 0) fail("arange", absl::StrCat("length must be >= 0, got ", a.n));
          if (a.dtype >= DType::Bool) fail("arange", "dtype must be a float or integer type");
          node.shape = Shape{a.n};
          node.dtype = a.dtype;
        },
    .forward = no_forward,
    .needed = no_needed,
};

Tensor arange(Graph& g, int64_t n, double start, double step, DType dtype) {
  return g.add_node({}, ArangeAttrs{.n = n, .start = start, .step = step, .dtype = dtype});
}

// ---- rand: no inputs; RandAttrs {dist, seed, dtype, shape} --------------------------------------
// Counter-based: the value of flat (row-major) element i depends only on (seed, i), so any box
// computes the same values. Uniform in [0, 1) or standard normal; float dtypes only. No inputs,
// so the rules are never called.
std::string RandAttrs::to_string() const {
  return absl::StrCat(dist == RandDist::Normal ? "randn" : "rand", "{seed=", seed,
                      ",dtype=", dtype_name(dtype), ",shape=", shape_string(shape), "}");
}

const OpDef kRandDef{
    .name = "rand",
    .min_inputs = 0,
    .max_inputs = 0,
    .infer =
        [](const Graph&, Node& node) {
          const RandAttrs& a = node.attrs_as<RandAttrs>();
          if (a.dist < RandDist::Uniform || a.dist > RandDist::Normal)
            fail("rand", "unknown distribution");
          if (a.dtype > DType::Bool) fail("rand", "unknown dtype");
          if (!is_float(a.dtype))
            fail("rand", absl::StrCat("dtype must be a float type, got ", dtype_name(a.dtype)));
          if (a.shape.size() > static_cast<size_t>(kMaxRank))
            fail("rand", absl::StrCat("rank ", a.shape.size(), " exceeds ", kMaxRank));
          node.shape = a.shape;
          node.dtype = a.dtype;
        },
    .forward = no_forward,
    .needed = no_needed,
};

static Tensor rand_node(Graph& g, RandDist dist, const Shape& shape, uint64_t seed, DType dtype) {
  return g.add_node({}, RandAttrs{.dist = dist, .seed = seed, .dtype = dtype, .shape = shape});
}

Tensor rand(Graph& g, const Shape& shape, uint64_t seed, DType dtype) {
  return rand_node(g, RandDist::Uniform, shape, seed, dtype);
}

Tensor randn(Graph& g, const Shape& shape, uint64_t seed, DType dtype) {
  return rand_node(g, RandDist::Normal, shape, seed, dtype);
}

}  // namespace tessera
