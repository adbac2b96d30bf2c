// Movement ops: permute, slice, pad, concat, repeat, flip, expand, and the composites transpose
// (permute), split (slices) and stack (reshapes + concat); reshape lives in ops_reshape.cc.
// Every output element is a copy of one input element (or the pad value), so each rule is an
// exact coordinate map (repeat widens to full axes only past kMaxRepeatBoxes boxes).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

// More boxes than this from one repeat forward: widen the axes with most copies to full.
constexpr int64_t kMaxRepeatBoxes = 64;

Graph& graph_of(std::string_view op, Tensor x) {
  if (x.graph == nullptr) fail(op, "empty tensor");
  return *x.graph;
}

Tensor add_movement(OpKind kind, std::string_view op, Tensor x, Attrs attrs) {
  Tensor in[] = {x};
  return graph_of(op, x).add_node(kind, in, std::move(attrs));
}

void expect_ints(std::string_view op, const Node& node, size_t count, const char* what) {
  if (node.attrs.ints.size() != count)
    fail(op, absl::StrCat("expects ", count, " ", what, ", got ", node.attrs.ints.size()));
}

// ---- slice helpers: ints = [start, stop, step] per axis ------------------------------------
struct SliceAxis {
  int64_t start, stop, step;
};
SliceAxis slice_axis(const Node& node, int d) {
  const auto& v = node.attrs.ints;
  return {v[3 * d], v[3 * d + 1], v[3 * d + 2]};
}

// a >= 0, b > 0.
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- concat helper -------------------------------------------------------------------------
// Offset of input i along the concat axis.
int64_t concat_offset(const Graph& g, const Node& node, int input) {
  const int axis = static_cast<int>(node.attrs.ints[0]);
  int64_t offset = 0;
  for (int k = 0; k < input; ++k) offset += input_node(g, node, k).shape[axis];
  return offset;
}

}  // namespace

// ---- permute: ints = perm (output dim i is input dim perm[i]) ------------------------------
const OpDef kPermuteDef{
    .name = "permute",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const auto& perm = node.attrs.ints;
          expect_ints("permute", node, x.shape.size(), "perm entries");
          bool seen[kMaxRank] = {};
          node.shape.resize(perm.size());
          for (size_t i = 0; i < perm.size(); ++i) {
            if (perm[i] < 0 || perm[i] >= x.rank())
              fail("permute",
                   absl::StrCat("perm entry ", perm[i], " out of range for rank ", x.rank()));
            if (seen[perm[i]]) fail("permute", absl::StrCat("perm repeats axis ", perm[i]));
            seen[perm[i]] = true;
            node.shape[i] = x.shape[perm[i]];
          }
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          Box b = Box::of_rank(node.rank());
          for (int i = 0; i < node.rank(); ++i) b[i] = dirty[static_cast<int>(node.attrs.ints[i])];
          out.add(b);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          Box b = Box::of_rank(node.rank());
          for (int i = 0; i < node.rank(); ++i) b[static_cast<int>(node.attrs.ints[i])] = out[i];
          inputs[0] = b;
        },
};

Tensor permute(Tensor x, std::vector<int64_t> perm) {
  const int rank = graph_of("permute", x).node(x.id).rank();
  for (int64_t& p : perm) p = normalize_axis("permute", p, rank);
  return add_movement(OpKind::Permute, "permute", x, Attrs{.ints = {perm.begin(), perm.end()}});
}

Tensor transpose(Tensor x, int64_t axis0, int64_t axis1) {
  const int rank = graph_of("transpose", x).node(x.id).rank();
  const int a = normalize_axis("transpose", axis0, rank);
  const int b = normalize_axis("transpose", axis1, rank);
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return permute(x, std::move(perm));
}

// ---- slice: ints = [start, stop, step] for every axis, 0 <= start <= stop <= dim, step >= 1.
// out[i] = in[start + i * step]; output dim = ceil((stop - start) / step).
const OpDef kSliceDef{
    .name = "slice",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          expect_ints("slice", node, 3 * x.shape.size(), "ints ([start, stop, step] per axis)");
          node.shape.resize(x.shape.size());
          for (int d = 0; d < x.rank(); ++d) {
            const SliceAxis s = slice_axis(node, d);
            if (s.step < 1) fail("slice", absl::StrCat("step must be >= 1, got ", s.step));
            if (s.start < 0 || s.start > s.stop || s.stop > x.shape[d])
              fail("slice", absl::StrCat("axis ", d, ": [", s.start, ", ", s.stop,
                                         ") is not a range inside [0, ", x.shape[d], "]"));
            node.shape[d] = ceil_div(s.stop - s.start, s.step);
          }
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          Box b = Box::of_rank(node.rank());
          for (int d = 0; d < node.rank(); ++d) {
            // Outputs i with start + i * step in [begin, end): exact, possibly none.
            const SliceAxis s = slice_axis(node, d);
            const int64_t lo = std::max(dirty.begin(d), s.start) - s.start;
            const int64_t hi = std::min(dirty.end(d), s.stop) - s.start;
            if (hi <= lo) return;
            b[d] = Interval(ceil_div(lo, s.step), std::min(ceil_div(hi, s.step), node.shape[d]));
            if (b[d].empty()) return;
          }
          out.add(b);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          Box b = Box::of_rank(node.rank());
          if (out.empty()) {
            inputs[0] = b;
            return;
          }
          for (int d = 0; d < node.rank(); ++d) {
            const SliceAxis s = slice_axis(node, d);
            b[d] =
                Interval(s.start + out.begin(d) * s.step, s.start + (out.end(d) - 1) * s.step + 1);
          }
          inputs[0] = b;
        },
};

Tensor slice(Tensor x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  const Shape& shape = graph_of("slice", x).node(x.id).shape;
  const int a = normalize_axis("slice", axis, static_cast<int>(shape.size()));
  Attrs attrs;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (d != a) {
      attrs.ints.insert(attrs.ints.end(), {0, shape[d], 1});
      continue;
    }
    // Bounds clamp into [0, dim] (an empty range when stop <= start), like Python slicing
    // without negative indices.
    const int64_t begin = std::clamp<int64_t>(start, 0, shape[d]);
    const int64_t end = std::clamp<int64_t>(stop, begin, shape[d]);
    attrs.ints.insert(attrs.ints.end(), {begin, end, step});
  }
  return add_movement(OpKind::Slice, "slice", x, std::move(attrs));
}

// ---- pad: ints = before[rank] then after[rank] (>= 0), floats = [value] ---------------------
// out[i] = in[i - before] where that lies inside the input, else value.
const OpDef kPadDef{
    .name = "pad",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const int rank = x.rank();
          expect_ints("pad", node, 2 * x.shape.size(), "pad amounts (before and after per axis)");
          if (node.attrs.floats.size() != 1) fail("pad", "expects one pad value");
          node.shape.resize(x.shape.size());
          for (int d = 0; d < rank; ++d) {
            const int64_t before = node.attrs.ints[d], after = node.attrs.ints[rank + d];
            if (before < 0 || after < 0)
              fail("pad", absl::StrCat("negative pad on axis ", d, ": ", before, ", ", after));
            node.shape[d] = before + x.shape[d] + after;
          }
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          Box b = dirty;
          for (int d = 0; d < node.rank(); ++d)
            b[d] = Interval(dirty.begin(d) + node.attrs.ints[d], dirty.end(d) + node.attrs.ints[d]);
          out.add(b);
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const Shape& in_shape = input_node(g, node, 0).shape;
          Box b = Box::of_rank(node.rank());
          for (int d = 0; d < node.rank(); ++d) {
            const int64_t before = node.attrs.ints[d];
            b[d] = Interval(std::max<int64_t>(out.begin(d) - before, 0),
                            std::min(out.end(d) - before, in_shape[d]));
          }
          // An output box made only of padding reads nothing.
          inputs[0] = b.empty() ? Box::of_rank(node.rank()) : b;
        },
};

Tensor pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after, float value) {
  const int rank = graph_of("pad", x).node(x.id).rank();
  if (static_cast<int>(before.size()) != rank || static_cast<int>(after.size()) != rank)
    fail("pad", absl::StrCat("expects ", rank, " before and after amounts, got ", before.size(),
                             " and ", after.size()));
  Attrs attrs{.floats = {value}};
  attrs.ints.assign(before.begin(), before.end());
  attrs.ints.insert(attrs.ints.end(), after.begin(), after.end());
  return add_movement(OpKind::Pad, "pad", x, std::move(attrs));
}

// ---- concat: 1..64 inputs, ints = [axis] (normalised). Same dtype and rank, same dims except
// on axis; input k occupies [offset_k, offset_k + dim_k) of the output axis.
const OpDef kConcatDef{
    .name = "concat",
    .min_inputs = 1,
    .max_inputs = 64,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& first = input_node(g, node, 0);
          expect_ints("concat", node, 1, "axis");
          const int64_t axis = node.attrs.ints[0];
          if (axis < 0 || axis >= first.rank())
            fail("concat", absl::StrCat("axis ", axis, " out of range for rank ", first.rank()));
          node.shape = first.shape;
          for (int k = 1; k < static_cast<int>(node.inputs.size()); ++k) {
            const Node& x = input_node(g, node, k);
            if (x.dtype != first.dtype)
              fail("concat", absl::StrCat("dtype mismatch: ", dtype_name(first.dtype), " vs ",
                                          dtype_name(x.dtype)));
            bool same = x.rank() == first.rank();
            for (int d = 0; same && d < x.rank(); ++d)
              same = d == axis || x.shape[d] == first.shape[d];
            if (!same)
              fail("concat", absl::StrCat("shape mismatch: ", shape_string(first.shape), " vs ",
                                          shape_string(x.shape), " outside axis ", axis));
            node.shape[axis] += x.shape[axis];
          }
          node.dtype = first.dtype;
        },
    .forward =
        [](const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          const int64_t offset = concat_offset(g, node, input);
          Box b = dirty;
          b[axis] = Interval(dirty.begin(axis) + offset, dirty.end(axis) + offset);
          out.add(b);
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          int64_t offset = 0;
          for (size_t k = 0; k < inputs.size(); ++k) {
            const int64_t n = input_node(g, node, static_cast<int>(k)).shape[axis];
            Box b = out;
            b[axis] = Interval(std::max(out.begin(axis), offset) - offset,
                               std::min(out.end(axis), offset + n) - offset);
            inputs[k] = b.empty() ? Box::of_rank(node.rank()) : b;  // untouched inputs: not read
            offset += n;
          }
        },
};

Tensor concat(std::span<const Tensor> xs, int64_t axis) {
  if (xs.empty()) fail("concat", "no inputs");
  Graph& g = graph_of("concat", xs[0]);
  const int a = normalize_axis("concat", axis, g.node(xs[0].id).rank());
  return g.add_node(OpKind::Concat, xs, Attrs{.ints = {a}});
}

std::vector<Tensor> split(Tensor x, int64_t axis, std::vector<int64_t> sizes) {
  const Shape& shape = graph_of("split", x).node(x.id).shape;
  const int a = normalize_axis("split", axis, static_cast<int>(shape.size()));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split", absl::StrCat("negative size ", s));
    total += s;
  }
  if (total != shape[a])
    fail("split", absl::StrCat("sizes sum to ", total, " but axis ", a, " has ", shape[a]));
  std::vector<Tensor> parts;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, a, offset, offset + s));
    offset += s;
  }
  return parts;
}

Tensor stack(std::span<const Tensor> xs, int64_t axis) {
  if (xs.empty()) fail("stack", "no inputs");
  const Shape shape = graph_of("stack", xs[0]).node(xs[0].id).shape;
  const int a = normalize_axis("stack", axis, static_cast<int>(shape.size()) + 1);
  Shape with_axis = shape;
  with_axis.insert(with_axis.begin() + a, 1);
  std::vector<Tensor> parts;
  for (const Tensor& x : xs) {
    if (x.graph != xs[0].graph) fail("stack", "inputs belong to different graphs");
    if (x.shape() != shape)
      fail("stack",
           absl::StrCat("shape mismatch: ", shape_string(shape), " vs ", shape_string(x.shape())));
    parts.push_back(reshape(x, with_axis));
  }
  return concat(parts, a);
}

// ---- repeat: ints = repeats per axis (>= 1); out dim = dim * repeats, out[i] = in[i mod dim]
// (numpy tile / torch repeat at equal rank).
const OpDef kRepeatDef{
    .name = "repeat",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          expect_ints("repeat", node, x.shape.size(), "repeat counts (one per axis)");
          node.shape = x.shape;
          for (int d = 0; d < x.rank(); ++d) {
            if (node.attrs.ints[d] < 1)
              fail("repeat", absl::StrCat("repeats must be >= 1, got ", node.attrs.ints[d]));
            node.shape[d] *= node.attrs.ints[d];
          }
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph& g, const Node& node, int, const Box& dirty, Region& out) {
          if (dirty.empty()) return;
          const Shape& in_shape = input_node(g, node, 0).shape;
          const int rank = node.rank();
          // Copies along an axis: one per tile, or a single full interval when the dirty
          // interval covers the whole axis (the copies then touch).
          bool whole[kMaxRank] = {};
          int64_t copies[kMaxRank];
          int64_t total = 1;
          for (int d = 0; d < rank; ++d) {
            whole[d] = dirty[d] == Interval(0, in_shape[d]);
            copies[d] = whole[d] ? 1 : node.attrs.ints[d];
            total *= copies[d];
          }
          while (total > kMaxRepeatBoxes) {  // too many boxes: widen the worst axis to full (sound)
            const int worst = static_cast<int>(std::max_element(copies, copies + rank) - copies);
            total /= copies[worst];
            copies[worst] = 1;
            whole[worst] = true;
          }
          auto interval = [&](int d, int64_t r) {
            if (whole[d]) return Interval(0, node.shape[d]);
            return Interval(dirty.begin(d) + r * in_shape[d], dirty.end(d) + r * in_shape[d]);
          };
          int64_t r[kMaxRank] = {};
          while (true) {
            Box b = Box::of_rank(rank);
            for (int d = 0; d < rank; ++d) b[d] = interval(d, r[d]);
            out.add(b);
            int d = rank - 1;
            for (; d >= 0; --d) {
              if (++r[d] < copies[d]) break;
              r[d] = 0;
            }
            if (d < 0) break;
          }
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const Shape& in_shape = input_node(g, node, 0).shape;
          Box b = Box::of_rank(node.rank());
          if (!out.empty()) {
            for (int d = 0; d < node.rank(); ++d) {
              const int64_t n = in_shape[d], a = out.begin(d), e = out.end(d) - 1;
              // Within one tile the interval maps back as is; across a tile boundary it wraps.
              b[d] =
                  (e - a + 1 >= n || a / n != e / n) ? Interval(0, n) : Interval(a % n, e % n + 1);
            }
          }
          inputs[0] = b;
        },
};

Tensor repeat(Tensor x, std::vector<int64_t> repeats) {
  return add_movement(OpKind::Repeat, "repeat", x, Attrs{.ints = {repeats.begin(), repeats.end()}});
}

// ---- flip: ints = axes to reverse (normalised, sorted, unique); out[i] = in[dim - 1 - i] on
// those axes.
static Interval flip_interval(const Interval& v, int64_t n) {
  return Interval(n - v.end, n - v.begin);
}

const OpDef kFlipDef{
    .name = "flip",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const auto& axes = node.attrs.ints;
          for (size_t i = 0; i < axes.size(); ++i) {
            if (axes[i] < 0 || axes[i] >= x.rank())
              fail("flip", absl::StrCat("axis ", axes[i], " out of range for rank ", x.rank()));
            if (i > 0 && axes[i] <= axes[i - 1]) fail("flip", "axes must be sorted and unique");
          }
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          Box b = dirty;
          for (int64_t a : node.attrs.ints)
            b[static_cast<int>(a)] = flip_interval(dirty[static_cast<int>(a)], node.shape[a]);
          out.add(b);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          Box b = out;
          for (int64_t a : node.attrs.ints)
            b[static_cast<int>(a)] = flip_interval(out[static_cast<int>(a)], node.shape[a]);
          inputs[0] = b;
        },
};

Tensor flip(Tensor x, std::vector<int64_t> axes) {
  const int rank = graph_of("flip", x).node(x.id).rank();
  for (int64_t& a : axes) a = normalize_axis("flip", a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail("flip", "axis listed twice");
  return add_movement(OpKind::Flip, "flip", x, Attrs{.ints = {axes.begin(), axes.end()}});
}

// ---- expand: ints = target shape; numpy broadcasting of size-1 dims and new leading dims.
const OpDef kExpandDef{
    .name = "expand",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const auto& target = node.attrs.ints;
          if (target.size() > kMaxRank)
            fail("expand", absl::StrCat("rank ", target.size(), " exceeds ", kMaxRank));
          Shape shape(target.begin(), target.end());
          bool ok = shape.size() >= x.shape.size();
          const size_t offset = ok ? shape.size() - x.shape.size() : 0;
          for (size_t d = 0; ok && d < shape.size(); ++d) {
            ok = shape[d] >= 0;
            if (ok && d >= offset) ok = x.shape[d - offset] == shape[d] || x.shape[d - offset] == 1;
          }
          if (!ok)
            fail("expand", absl::StrCat("cannot expand ", shape_string(x.shape), " to ",
                                        shape_string(shape)));
          node.shape = shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph& g, const Node& node, int, const Box& dirty, Region& out) {
          if (dirty.empty()) return;  // broadcast_forward would widen it to full dims
          out.add(broadcast_forward(input_node(g, node, 0).shape, node.shape, dirty));
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          inputs[0] = broadcast_needed(input_node(g, node, 0).shape, node.shape, out);
        },
};

Tensor expand(Tensor x, const Shape& shape) {
  return add_movement(OpKind::Expand, "expand", x, Attrs{.ints = {shape.begin(), shape.end()}});
}

}  // namespace tessera
