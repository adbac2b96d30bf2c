// Rotary embeddings with their own exact region rules, and their decompositions: rope (one
// position per row) and rope_multi (Flux: one position per row and axis).
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

void set_empty(const Graph& g, const Node& node, std::span<Box> inputs) {
  for (size_t k = 0; k < inputs.size(); ++k)
    inputs[k] = Box::of_rank(input_node(g, node, static_cast<int>(k)).rank());
}

// ---- decompositions, as HF / diffusers write rotary embeddings --------------------------------
// Angles are computed in f32 (positions cast, inv_freq = 1 / base^(arange(0, n, 2) / n)) and
// cos/sin cast to x's dtype; out = x * cos + rotate(x) * sin over the rotated columns, the
// other columns concatenated unchanged.

// [T] integer positions times freq_scale times inv_freq of `dims` rotated dims: [T, dims / 2].
Tensor rope_angles(Tensor positions, int64_t dims, double base, double freq_scale) {
  Graph& g = *positions.graph;
  const int64_t t = positions.dim(0);
  const Tensor exponent =
      arange(g, dims / 2, 0, 2, DType::F32) / g.scalar(static_cast<float>(dims));
  const Tensor inv_freq = g.scalar(1.0f) / pow(g.scalar(static_cast<float>(base)), exponent);
  Tensor pos = reshape(cast(positions, DType::F32), {t, 1});
  if (freq_scale != 1.0) pos = pos * g.scalar(static_cast<float>(freq_scale));
  return pos * inv_freq;
}

// [T, n] -> [T, 2n], each column twice in a row (torch.repeat_interleave(2, -1)).
Tensor repeat_interleave2(Tensor x) {
  const int64_t t = x.dim(0), n = x.dim(1);
  return reshape(expand(reshape(x, {t, n, 1}), {t, n, 2}), {t, 2 * n});
}

// x [..., T, H, R] rotated by angles [T, R] (pairs laid out as `rotate` pairs them).
Tensor rotate(Tensor x, Tensor angles, Tensor rotated_half) {
  const Shape per_row = {angles.dim(0), 1, angles.dim(1)};
  Tensor c = reshape(cos(angles), per_row), s = reshape(sin(angles), per_row);
  if (x.dtype() != DType::F32) {
    c = cast(c, x.dtype());
    s = cast(s, x.dtype());
  }
  return x * c + rotated_half * s;
}

// Interleaved pairs (2i, 2i + 1) of x [..., R] -> (-x_{2i+1}, x_{2i}) (rotate_every_two).
Tensor rotate_every_two(Tensor x) {
  const Shape shape = x.shape();  // a copy: adding nodes may move the graph's arena
  const int64_t r = shape.back();
  const Tensor odd_negated = neg(slice(x, -1, 1, r, 2));
  const Tensor even = slice(x, -1, 0, r, 2);
  const Tensor pairs[] = {odd_negated, even};
  return reshape(stack(pairs, -1), shape);
}

// Half-split pairs (i, i + R / 2) -> (-x_{i + R/2}, x_i) (HF rotate_half).
Tensor rotate_half(Tensor x) {
  const int64_t r = x.dim(-1);
  const Tensor halves[] = {neg(slice(x, -1, r / 2, r)), slice(x, -1, 0, r / 2)};
  return concat(halves, -1);
}

// The first `rotated` columns of x through `rotate_part`, the rest unchanged.
template <class F>
Tensor rotate_prefix(Tensor x, int64_t rotated, F&& rotate_part) {
  const int64_t d = x.dim(-1);
  if (rotated == d) return rotate_part(x);
  const Tensor parts[] = {rotate_part(slice(x, -1, 0, rotated)), slice(x, -1, rotated, d)};
  return concat(parts, -1);
}

}  // namespace

// ---- rope(x [..., T, H, D] float, positions [T] i32/i64) ----------------------------------
// RopeAttrs {n_rot, base, mode, freq_scale}. Pair i in [0, n_rot / 2) turns by
// theta = pos[t] * freq_scale * base^(-2i / n_rot): HalfSplit pairs (i, i + n_rot / 2) (NeoX, HF
// rotate_half), Interleaved pairs (2i, 2i + 1) (GPT-J, llama.cpp normal mode).
// out_a = x_a cos - x_b sin, out_b = x_a sin + x_b cos, in double; dims >= n_rot pass through.
// Rules: a column depends on itself and its pair partner (exact: up to three column intervals);
// a position changes the rotated columns of its row, for every head and leading index.
// Decomposition: HalfSplit as HF Llama (emb = cat(freqs, freqs); x * cos + rotate_half(x) * sin),
// Interleaved as HF GPT-J (freqs repeat-interleaved; x * cos + rotate_every_two(x) * sin).
namespace {

// Columns paired with some column of `cols`, as up to two intervals (they may overlap `cols`).
std::array<Interval, 2> rope_partners(Interval cols, int64_t n_rot, RopeMode mode) {
  const int64_t half = n_rot / 2;
  if (mode == RopeMode::HalfSplit) {
    const Interval lower(cols.begin, std::min(cols.end, half));
    const Interval upper(std::max(cols.begin, half), std::min(cols.end, n_rot));
    return {lower.empty() ? Interval() : Interval(lower.begin + half, lower.end + half),
            upper.empty() ? Interval() : Interval(upper.begin - half, upper.end - half)};
  }
  // Interleaved: rounding the rotated part out to even boundaries adds exactly the partners.
  const Interval rotated(cols.begin, std::min(cols.end, n_rot));
  if (rotated.empty()) return {};
  return {Interval(rotated.begin & ~int64_t{1}, (rotated.end + 1) & ~int64_t{1}), Interval()};
}

void rope_forward(const Graph&, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const int rank = node.rank();
  const RopeAttrs& a = node.attrs_as<RopeAttrs>();
  const int64_t n_rot = a.n_rot;
  if (input == 1) {
    Box b = Box::full(node.shape);
    b[rank - 3] = dirty[0];
    b[rank - 1] = Interval(0, n_rot);
    out.add(b);
    return;
  }
  out.add(dirty);
  Box b = dirty;
  for (Interval cols : rope_partners(dirty[rank - 1], n_rot, a.mode)) {
    if (cols.empty()) continue;
    b[rank - 1] = cols;
    out.add(b);
  }
}

void rope_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const int rank = node.rank();
  const RopeAttrs& a = node.attrs_as<RopeAttrs>();
  const int64_t n_rot = a.n_rot;
  Box x = out;
  for (Interval cols : rope_partners(out[rank - 1], n_rot, a.mode))
    if (!cols.empty())
      x[rank - 1] =
          Interval(std::min(x[rank - 1].begin, cols.begin), std::max(x[rank - 1].end, cols.end));
  inputs[0] = x;
  // Pass-through columns do not read the positions.
  inputs[1] = out[rank - 1].begin < n_rot ? Box{out[rank - 3]} : Box::of_rank(1);
}

void rope_infer(const Graph& g, Node& node) {
  const RopeAttrs& a = node.attrs_as<RopeAttrs>();
  const Node& x = input_node(g, node, 0);
  const Node& positions = input_node(g, node, 1);
  if (x.rank() < 3)
    fail("rope",
         absl::StrCat("x must have rank >= 3 ([..., T, H, D]), got ", shape_string(x.shape)));
  if (!is_float(x.dtype)) fail("rope", absl::StrCat("x must be float, got ", dtype_name(x.dtype)));
  if (!is_integer(positions.dtype))
    fail("rope", absl::StrCat("positions must be i32 or i64, got ", dtype_name(positions.dtype)));
  const int64_t t = x.shape[static_cast<size_t>(x.rank() - 3)];
  if (positions.rank() != 1 || positions.shape[0] != t)
    fail("rope",
         absl::StrCat("positions must have shape [", t, "], got ", shape_string(positions.shape)));
  const int64_t n_rot = a.n_rot;
  const int64_t d = x.shape.back();
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > d)
    fail("rope", absl::StrCat("n_rot must be even and in [2, ", d, "], got ", n_rot));
  if (a.mode != RopeMode::HalfSplit && a.mode != RopeMode::Interleaved)
    fail("rope", absl::StrCat("unknown mode ", static_cast<int64_t>(a.mode)));
  if (!(a.base > 0) || !std::isfinite(a.base))
    fail("rope", absl::StrCat("base must be positive, got ", a.base));
  if (!std::isfinite(a.freq_scale)) fail("rope", "freq_scale must be finite");
  node.shape = x.shape;
  node.dtype = x.dtype;
}

Tensor rope_decompose(std::span<const Tensor> inputs, const Node& node) {
  const RopeAttrs& a = node.attrs_as<RopeAttrs>();
  const Tensor freqs = rope_angles(inputs[1], a.n_rot, a.base, a.freq_scale);
  return rotate_prefix(inputs[0], a.n_rot, [&](Tensor x) {
    if (a.mode == RopeMode::HalfSplit) {
      const Tensor both[] = {freqs, freqs};
      return rotate(x, concat(both, -1), rotate_half(x));
    }
    return rotate(x, repeat_interleave2(freqs), rotate_every_two(x));
  });
}

}  // namespace

std::string RopeAttrs::to_string() const {
  return absl::StrCat("rope{n_rot=", n_rot, ",base=", base,
                      mode == RopeMode::HalfSplit ? ",half_split" : ",interleaved",
                      freq_scale != 1.0 ? absl::StrCat(",freq_scale=", freq_scale) : "", "}");
}

const OpDef kRopeDef{
    .name = "rope",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = rope_infer,
    .forward = rope_forward,
    .needed = rope_needed,
    .decompose = rope_decompose,
};

Tensor rope(Tensor x, Tensor positions, int64_t n_rot, double base, RopeMode mode,
            double freq_scale) {
  Graph& g = builder_graph("rope", {{"x", x}, {"positions", positions}});
  Tensor in[] = {x, positions};
  return g.add_node(
      in, RopeAttrs{.n_rot = n_rot, .base = base, .mode = mode, .freq_scale = freq_scale});
}

// ---- rope_multi(x [..., T, H, D] float, positions [T, A] i32/i64) --------------------------
// RopeMultiAttrs {axes_dims d_0..d_{A-1} (each even, > 0, sum R <= D), base}. Axis a owns the
// columns [o_a, o_a + d_a), o_a = sum_{j<a} d_j; its pair i (columns o_a + 2i, o_a + 2i + 1)
// turns by theta = pos[t, a] * base^(-2i / d_a) like interleaved rope (Flux / diffusers
// apply_rotary_emb with real/unbind on the last dim); columns >= R pass through.
// Rules: every o_a is even, so over [0, R) the pairs are the even-aligned column pairs: a column
// depends on itself and its partner (rounding the rotated part out to even bounds is exact).
// Position element (t, a) changes the columns of axis a in row t, for every head and leading
// index; an output box reads the positions of its rows and of the axes its columns touch.
namespace {

// Axes [first, last) whose column blocks meet the columns `cols` (empty when none do).
std::pair<int64_t, int64_t> rope_multi_axes(const Ints& dims, Interval cols) {
  int64_t first = -1, last = -1, offset = 0;
  for (int64_t a = 0; a < static_cast<int64_t>(dims.size()); ++a) {
    if (cols.begin < offset + dims[a] && offset < cols.end) {
      if (first < 0) first = a;
      last = a + 1;
    }
    offset += dims[a];
  }
  return first < 0 ? std::pair<int64_t, int64_t>{0, 0} : std::pair{first, last};
}

int64_t rope_multi_offset(const Ints& dims, int64_t axis) {
  int64_t offset = 0;
  for (int64_t a = 0; a < axis; ++a) offset += dims[a];
  return offset;
}

// Columns of `cols` widened by their pair partners inside the rotated part [0, rotated).
Interval rope_multi_pairs(Interval cols, int64_t rotated) {
  const Interval inside(cols.begin, std::min(cols.end, rotated));
  if (inside.empty()) return cols;
  return Interval(std::min(cols.begin, inside.begin & ~int64_t{1}),
                  std::max(cols.end, (inside.end + 1) & ~int64_t{1}));
}

void rope_multi_forward(const Graph&, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const int rank = node.rank();
  const Ints& dims = node.attrs_as<RopeMultiAttrs>().axes_dims;
  if (input == 1) {
    Box b = Box::full(node.shape);
    b[rank - 3] = dirty[0];
    b[rank - 1] =
        Interval(rope_multi_offset(dims, dirty[1].begin), rope_multi_offset(dims, dirty[1].end));
    out.add(b);
    return;
  }
  Box b = dirty;
  b[rank - 1] = rope_multi_pairs(dirty[rank - 1], rope_multi_offset(dims, std::ssize(dims)));
  out.add(b);
}

void rope_multi_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const int rank = node.rank();
  const Ints& dims = node.attrs_as<RopeMultiAttrs>().axes_dims;
  Box x = out;
  x[rank - 1] = rope_multi_pairs(out[rank - 1], rope_multi_offset(dims, std::ssize(dims)));
  inputs[0] = x;
  const auto [first, last] = rope_multi_axes(dims, out[rank - 1]);
  // Pass-through columns do not read the positions.
  inputs[1] = first < last ? Box{out[rank - 3], {first, last}} : Box::of_rank(2);
}

void rope_multi_infer(const Graph& g, Node& node) {
  const RopeMultiAttrs& a = node.attrs_as<RopeMultiAttrs>();
  const Node& x = input_node(g, node, 0);
  const Node& positions = input_node(g, node, 1);
  if (x.rank() < 3)
    fail("rope_multi",
         absl::StrCat("x must have rank >= 3 ([..., T, H, D]), got ", shape_string(x.shape)));
  if (!is_float(x.dtype))
    fail("rope_multi", absl::StrCat("x must be float, got ", dtype_name(x.dtype)));
  if (!is_integer(positions.dtype))
    fail("rope_multi",
         absl::StrCat("positions must be i32 or i64, got ", dtype_name(positions.dtype)));
  if (a.axes_dims.empty()) fail("rope_multi", "needs at least one axis");
  const int64_t t = x.shape[static_cast<size_t>(x.rank() - 3)];
  const auto axes = static_cast<int64_t>(a.axes_dims.size());
  if (positions.shape != Shape{t, axes})
    fail("rope_multi", absl::StrCat("positions must have shape [", t, ", ", axes, "], got ",
                                    shape_string(positions.shape)));
  int64_t rotated = 0;
  for (int64_t d : a.axes_dims) {
    if (d <= 0 || d % 2 != 0)
      fail("rope_multi",
           absl::StrCat("axes_dims must be even and > 0, got ", ints_string(a.axes_dims)));
    rotated += d;
  }
  if (rotated > x.shape.back())
    fail("rope_multi", absl::StrCat("axes_dims ", ints_string(a.axes_dims), " sum to ", rotated,
                                    ", more than D = ", x.shape.back()));
  if (!(a.base > 0) || !std::isfinite(a.base))
    fail("rope_multi", absl::StrCat("base must be positive, got ", a.base));
  node.shape = x.shape;
  node.dtype = x.dtype;
}

Tensor rope_multi_decompose(std::span<const Tensor> inputs, const Node& node) {
  const RopeMultiAttrs& a = node.attrs_as<RopeMultiAttrs>();
  const Tensor positions = inputs[1];
  std::vector<Tensor> per_axis;
  int64_t rotated = 0;
  for (int64_t axis = 0; axis < std::ssize(a.axes_dims); ++axis) {
    const int64_t dims = a.axes_dims[static_cast<size_t>(axis)];
    const Tensor column = reshape(slice(positions, 1, axis, axis + 1), {positions.dim(0)});
    per_axis.push_back(repeat_interleave2(rope_angles(column, dims, a.base, 1.0)));
    rotated += dims;
  }
  const Tensor angles = per_axis.size() == 1 ? per_axis[0] : concat(per_axis, -1);
  return rotate_prefix(inputs[0], rotated,
                       [&](Tensor x) { return rotate(x, angles, rotate_every_two(x)); });
}

}  // namespace

std::string RopeMultiAttrs::to_string() const {
  return absl::StrCat("rope_multi{axes_dims=", ints_string(axes_dims), ",base=", base, "}");
}

const OpDef kRopeMultiDef{
    .name = "rope_multi",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = rope_multi_infer,
    .forward = rope_multi_forward,
    .needed = rope_multi_needed,
    .decompose = rope_multi_decompose,
};

Tensor rope_multi(Tensor x, Tensor positions, std::vector<int64_t> axes_dims, double base) {
  Graph& g = builder_graph("rope_multi", {{"x", x}, {"positions", positions}});
  Tensor in[] = {x, positions};
  return g.add_node(
      in, RopeMultiAttrs{.axes_dims = Ints(axes_dims.begin(), axes_dims.end()), .base = base});
}

}  // namespace tessera
