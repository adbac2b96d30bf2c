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

Graph& graph_of(std::string_view op, Tensor x) { return builder_graph(op, {{"x", x}}); }

Tensor add_movement(std::string_view op, Tensor x, OpAttrs attrs) {
  Tensor in[] = {x};
  return graph_of(op, x).add_node(in, std::move(attrs));
}

void expect_count(std::string_view op, size_t got, size_t count, const char* what) {
  if (got != count) fail(op, absl::StrCat("expects ", count, " ", what, ", got ", got));
}

// ---- slice helpers -------------------------------------------------------------------------
struct SliceAxis {
  int64_t start, stop, step;
};
SliceAxis slice_axis(const Node& node, int d) {
  const SliceAttrs& a = node.attrs_as<SliceAttrs>();
  return {a.start[d], a.stop[d], a.step[d]};
}

// a >= 0, b > 0 (written so that a + b cannot overflow, e.g. for a step of INT64_MAX).
int64_t ceil_div(int64_t a, int64_t b) {
  return a == 0 ? 0 : (a - 1) / b + 1;
}

// ---- concat helper -------------------------------------------------------------------------
// Offset of input i along the concat axis.
int64_t concat_offset(const Graph& g, const Node& node, int input) {
  const int axis = static_cast<int>(node.attrs_as<ConcatAttrs>().axis);
  int64_t offset = 0;
  for (int k = 0; k < input; ++k) offset += input_node(g, node, k).shape[axis];
  return offset;
}

}  // namespace

// ---- permute: PermuteAttrs {perm} (output dim i is input dim perm[i]) ----------------------
std::string PermuteAttrs::to_string() const { return "permute" + ints_string(perm); }

const OpDef kPermuteDef{
    .name = "permute",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Ints& perm = node.attrs_as<PermuteAttrs>().perm;
          expect_count("permute", perm.size(), x.shape.size(), "perm entries");
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
          const Ints& perm = node.attrs_as<PermuteAttrs>().perm;
          for (int i = 0; i < node.rank(); ++i) b[i] = dirty[static_cast<int>(perm[i])];
          out.add(b);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          Box b = Box::of_rank(node.rank());
          const Ints& perm = node.attrs_as<PermuteAttrs>().perm;
          for (int i = 0; i < node.rank(); ++i) b[static_cast<int>(perm[i])] = out[i];
          inputs[0] = b;
        },
};

Tensor permute(Tensor x, std::vector<int64_t> perm) {
  const int rank = graph_of("permute", x).node(x.id).rank();
  for (int64_t& p : perm) p = normalize_axis("permute", p, rank);
  return add_movement("permute", x, PermuteAttrs{Ints(perm.begin(), perm.end())});
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

// ---- slice: SliceAttrs {start, stop, step} per axis, 0 <= start <= stop <= dim, step >= 1.
// out[i] = in[start + i * step]; output dim = ceil((stop - start) / step).
std::string SliceAttrs::to_string() const {
  return absl::StrCat("slice{start=", ints_string(start), ",stop=", ints_string(stop),
                      ",step=", ints_string(step), "}");
}

const OpDef kSliceDef{
    .name = "slice",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const SliceAttrs& a = node.attrs_as<SliceAttrs>();
          const char* what = "[start, stop, step] entries (one per axis)";
          expect_count("slice", a.start.size(), x.shape.size(), what);
          expect_count("slice", a.stop.size(), x.shape.size(), what);
          expect_count("slice", a.step.size(), x.shape.size(), what);
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
  SliceAttrs attrs;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (d != a) {
      attrs.start.push_back(0);
      attrs.stop.push_back(shape[d]);
      attrs.step.push_back(1);
      continue;
    }
    // Bounds clamp into [0, dim] (an empty range when stop <= start), like Python slicing
    // without negative indices.
    const int64_t begin = std::clamp<int64_t>(start, 0, shape[d]);
    const int64_t end = std::clamp<int64_t>(stop, begin, shape[d]);
    attrs.start.push_back(begin);
    attrs.stop.push_back(end);
    attrs.step.push_back(step);
  }
  return add_movement("slice", x, std::move(attrs));
}

// ---- pad: PadAttrs {before, after (per axis, >= 0), value} ----------------------------------
// out[i] = in[i - before] where that lies inside the input, else value.
std::string PadAttrs::to_string() const {
  return absl::StrCat("pad{before=", ints_string(before), ",after=", ints_string(after),
                      ",value=", value, "}");
}

const OpDef kPadDef{
    .name = "pad",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const int rank = x.rank();
          const PadAttrs& a = node.attrs_as<PadAttrs>();
          expect_count("pad", a.before.size(), x.shape.size(), "before amounts (one per axis)");
          expect_count("pad", a.after.size(), x.shape.size(), "after amounts (one per axis)");
          node.shape.resize(x.shape.size());
          for (int d = 0; d < rank; ++d) {
            const int64_t before = a.before[d], after = a.after[d];
            if (before < 0 || after < 0)
              fail("pad", absl::StrCat("negative pad on axis ", d, ": ", before, ", ", after));
            node.shape[d] = checked_add("pad", absl::StrCat("axis ", d), checked_add("pad", "before", before, x.shape[d]), after);
          }
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          const Ints& before = node.attrs_as<PadAttrs>().before;
          Box b = dirty;
          for (int d = 0; d < node.rank(); ++d)
            b[d] = Interval(dirty.begin(d) + before[d], dirty.end(d) + before[d]);
          out.add(b);
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const Shape& in_shape = input_node(g, node, 0).shape;
          Box b = Box::of_rank(node.rank());
          for (int d = 0; d < node.rank(); ++d) {
            const int64_t before = node.attrs_as<PadAttrs>().before[d];
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
  return add_movement("pad", x,
                      PadAttrs{.before = Ints(before.begin(), before.end()),
                               .after = Ints(after.begin(), after.end()),
                               .value = value});
}

// ---- concat: 1..64 inputs, ConcatAttrs {axis} (normalised). Same dtype and rank, same dims except
// on axis; input k occupies [offset_k, offset_k + dim_k) of the output axis.
std::string ConcatAttrs::to_string() const { return absl::StrCat("concat{axis=", axis, "}"); }

const OpDef kConcatDef{
    .name = "concat",
    .min_inputs = 1,
    .max_inputs = 64,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& first = input_node(g, node, 0);
          const int64_t axis = node.attrs_as<ConcatAttrs>().axis;
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
            node.shape[axis] = checked_add("concat", "concatenated axis", node.shape[axis], x.shape[axis]);
          }
          node.dtype = first.dtype;
        },
    .forward =
        [](const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs_as<ConcatAttrs>().axis);
          const int64_t offset = concat_offset(g, node, input);
          Box b = dirty;
          b[axis] = Interval(dirty.begin(axis) + offset, dirty.end(axis) + offset);
          out.add(b);
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs_as<ConcatAttrs>().axis);
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
  Graph& g = builder_graph("concat", "xs", xs);
  const int a = normalize_axis("concat", axis, g.node(xs[0].id).rank());
  return g.add_node(xs, ConcatAttrs{a});
}

std::vector<Tensor> split(Tensor x, int64_t axis, std::vector<int64_t> sizes) {
  const Shape& shape = graph_of("split", x).node(x.id).shape;
  const int a = normalize_axis("split", axis, static_cast<int>(shape.size()));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split", absl::StrCat("negative size ", s));
    total = checked_add("split", "sizes", total, s);
  }
  if (total != shape[a])
    fail("split", absl::StrCat("sizes sum to ", total, " but axis ", a, " has ", shape[a]));
  GraphRollback rollback(graph_of("split", x));  // a failing slice removes the earlier ones
  std::vector<Tensor> parts;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, a, offset, offset + s));
    offset += s;
  }
  return parts;
}

Tensor stack(std::span<const Tensor> xs, int64_t axis) {
  Graph& g = builder_graph("stack", "xs", xs);
  const Shape shape = g.node(xs[0].id).shape;
  const int a = normalize_axis("stack", axis, static_cast<int>(shape.size()) + 1);
  for (const Tensor& x : xs)
    if (x.shape() != shape)
      fail("stack",
           absl::StrCat("shape mismatch: ", shape_string(shape), " vs ", shape_string(x.shape())));
  Shape with_axis = shape;
  with_axis.insert(with_axis.begin() + a, 1);
  GraphRollback rollback(g);  // concat can still fail (mixed dtypes): no reshape stays behind
  std::vector<Tensor> parts;
  for (const Tensor& x : xs) parts.push_back(reshape(x, with_axis));
  return concat(parts, a);
}

// ---- repeat: RepeatAttrs {repeats} per axis (>= 1); out dim = dim * repeats, out[i] = in[i mod dim]
// (numpy tile / torch repeat at equal rank).
std::string RepeatAttrs::to_string() const { return "repeat" + ints_string(repeats); }

const OpDef kRepeatDef{
    .name = "repeat",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Ints& repeats = node.attrs_as<RepeatAttrs>().repeats;
          expect_count("repeat", repeats.size(), x.shape.size(), "repeat counts (one per axis)");
          node.shape = x.shape;
          for (int d = 0; d < x.rank(); ++d) {
            if (repeats[d] < 1)
              fail("repeat", absl::StrCat("repeats must be >= 1, got ", repeats[d]));
            node.shape[d] = checked_mul("repeat", absl::StrCat("axis ", d), node.shape[d], repeats[d]);
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
            copies[d] = whole[d] ? 1 : node.attrs_as<RepeatAttrs>().repeats[d];
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
  return add_movement("repeat", x, RepeatAttrs{Ints(repeats.begin(), repeats.end())});
}

// ---- flip: FlipAttrs {axes} to reverse (normalised, sorted, unique); out[i] = in[dim - 1 - i]
// on those axes.
static Interval flip_interval(const Interval& v, int64_t n) {
  return Interval(n - v.end, n - v.begin);
}

std::string FlipAttrs::to_string() const { return "flip" + ints_string(axes); }

const OpDef kFlipDef{
    .name = "flip",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Ints& axes = node.attrs_as<FlipAttrs>().axes;
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
          for (int64_t a : node.attrs_as<FlipAttrs>().axes)
            b[static_cast<int>(a)] = flip_interval(dirty[static_cast<int>(a)], node.shape[a]);
          out.add(b);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          Box b = out;
          for (int64_t a : node.attrs_as<FlipAttrs>().axes)
            b[static_cast<int>(a)] = flip_interval(out[static_cast<int>(a)], node.shape[a]);
          inputs[0] = b;
        },
};

Tensor flip(Tensor x, std::vector<int64_t> axes) {
  const int rank = graph_of("flip", x).node(x.id).rank();
  for (int64_t& a : axes) a = normalize_axis("flip", a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail("flip", "axis listed twice");
  return add_movement("flip", x, FlipAttrs{Ints(axes.begin(), axes.end())});
}

// ---- expand: ExpandAttrs {shape} (the target); numpy broadcasting of size-1 dims and new leading dims.
std::string ExpandAttrs::to_string() const { return "expand" + shape_string(shape); }

const OpDef kExpandDef{
    .name = "expand",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          const Shape& shape = node.attrs_as<ExpandAttrs>().shape;
          if (shape.size() > kMaxRank)
            fail("expand", absl::StrCat("rank ", shape.size(), " exceeds ", kMaxRank));
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
  return add_movement("expand", x, ExpandAttrs{shape});
}

}  // namespace tessera
