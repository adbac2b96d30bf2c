// Reductions and scans along axes: reduce (sum, mean, max, min, prod, argmax, argmin), cumsum,
// softmax / log_softmax.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

// Checks that an attribute holds a normalised axis of a tensor of `rank`.
int checked_axis(std::string_view op, int64_t axis, int rank) {
  if (axis < 0 || axis >= rank)
    fail(op, absl::StrCat("axis ", axis, " out of range for rank ", rank,
                          " (attrs hold normalised axes)"));
  return static_cast<int>(axis);
}

// Dirty box -> the same box with `axis` replaced by `along` (for scans and rows).
void along_axis_forward(int axis, Interval along, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  Box b = dirty;
  b[axis] = along;
  out.add(b);
}

}  // namespace

// ---- reduce: ReduceAttrs {fn, axes (normalised, sorted, unique), keepdims} --------------------
// Sum/mean/max/min/prod keep the input dtype (mean: float only); argmax/argmin reduce exactly one
// axis and give i64. No bool inputs. max/min propagate NaN; argmax/argmin pick the first NaN
// (NaN wins, like torch), otherwise the first extremum. An empty axes list in the attrs reduces
// nothing (only a rank-0 input gets one: the builder expands "no axes" to every axis).
// Rules: dirty box -> reduced axes collapse ([0, 1) with keepdims, dropped otherwise); output
// box -> same box on kept axes, full extent on reduced axes.
namespace {

struct ReduceAxes {
  bool reduced[kMaxRank] = {};
  bool keepdims = false;
};

ReduceAxes reduce_axes(const Node& node) {
  const ReduceAttrs& a = node.attrs_as<ReduceAttrs>();
  ReduceAxes r;
  r.keepdims = a.keepdims;
  for (int64_t axis : a.axes) r.reduced[axis] = true;
  return r;
}

void reduce_forward(const Graph& g, const Node& node, int, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const ReduceAxes r = reduce_axes(node);
  const int in_rank = input_node(g, node, 0).rank();
  Box b = Box::of_rank(node.rank());
  int od = 0;
  for (int d = 0; d < in_rank; ++d) {
    if (r.reduced[d] && !r.keepdims) continue;
    b[od++] = r.reduced[d] ? Interval(0, 1) : dirty[d];
  }
  out.add(b);
}

void reduce_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  const Node& x = input_node(g, node, 0);
  if (out.empty()) {
    inputs[0] = Box::of_rank(x.rank());
    return;
  }
  const ReduceAxes r = reduce_axes(node);
  Box b = Box::full(x.shape);
  int od = 0;
  for (int d = 0; d < x.rank(); ++d) {
    if (!r.reduced[d]) b[d] = out[od];
    if (!r.reduced[d] || r.keepdims) ++od;
  }
  inputs[0] = b;
}

std::string reduce_name(ReduceFn fn) {
  return "reduce." + std::string(fn_name(fn));
}

}  // namespace

std::string_view fn_name(ReduceFn fn) {
  static constexpr std::string_view kNames[] = {"sum", "mean", "max", "min", "prod", "argmax", "argmin"};
  const auto i = static_cast<size_t>(fn);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string ReduceAttrs::to_string() const {
  return absl::StrCat(reduce_name(fn), "{axes=", ints_string(axes), ",keepdims=", keepdims ? 1 : 0, "}");
}

const OpDef kReduceDef{
    .name = "reduce",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const ReduceAttrs& a = node.attrs_as<ReduceAttrs>();
          const ReduceFn fn = a.fn;
          if (fn < ReduceFn::Sum || fn >= ReduceFn::Count) fail("reduce", "unknown function");
          const std::string name = reduce_name(fn);
          const bool is_arg = fn == ReduceFn::Argmax || fn == ReduceFn::Argmin;
          const Node& x = input_node(g, node, 0);
          if (x.dtype == DType::Bool) fail(name, "does not accept bool");
          if (fn == ReduceFn::Mean && !is_float(x.dtype))
            fail(name, absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
          for (size_t k = 0; k < a.axes.size(); ++k) {
            checked_axis(name, a.axes[k], x.rank());
            if (k > 0 && a.axes[k] <= a.axes[k - 1]) fail(name, "axes must be sorted and unique");
          }
          if (is_arg && a.axes.size() != 1) fail(name, "takes exactly one axis");
          // An extremum of nothing is undefined (torch rejects it too); sum/prod/mean of nothing
          // are 0, 1 and NaN.
          const bool needs_elements = is_arg || fn == ReduceFn::Max || fn == ReduceFn::Min;
          const ReduceAxes r = reduce_axes(node);
          Shape shape;
          for (int d = 0; d < x.rank(); ++d) {
            if (!r.reduced[d]) {
              shape.push_back(x.shape[d]);
              continue;
            }
            if (needs_elements && x.shape[d] == 0)
              fail(name, absl::StrCat("cannot reduce over axis ", d, " of size 0"));
            if (r.keepdims) shape.push_back(1);
          }
          node.shape = shape;
          node.dtype = is_arg ? DType::I64 : x.dtype;
        },
    .forward = reduce_forward,
    .needed = reduce_needed,
};

Tensor reduce(ReduceFn fn, Tensor x, std::vector<int64_t> axes, bool keepdims) {
  Graph& g = builder_graph("reduce", {{"x", x}});
  ReduceAttrs attrs{.fn = fn, .keepdims = keepdims};
  // An unknown function is reported by infer; only valid ones get their axes normalised here.
  if (fn >= ReduceFn::Sum && fn < ReduceFn::Count) {
    const std::string name = reduce_name(fn);
    const int rank = x.rank();
    if (axes.empty())
      for (int d = 0; d < rank; ++d) axes.push_back(d);
    for (int64_t& a : axes) a = normalize_axis(name, a, rank);
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(name, "duplicate axis");
  }
  attrs.axes.assign(axes.begin(), axes.end());
  Tensor in[] = {x};
  return g.add_node(in, std::move(attrs));
}
Tensor sum(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(ReduceFn::Sum, x, std::move(axes), keepdims);
}
Tensor mean(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(ReduceFn::Mean, x, std::move(axes), keepdims);
}
Tensor max(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(ReduceFn::Max, x, std::move(axes), keepdims);
}
Tensor min(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(ReduceFn::Min, x, std::move(axes), keepdims);
}
Tensor prod(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(ReduceFn::Prod, x, std::move(axes), keepdims);
}
Tensor argmax(Tensor x, int64_t axis, bool keepdims) {
  return reduce(ReduceFn::Argmax, x, {axis}, keepdims);
}
Tensor argmin(Tensor x, int64_t axis, bool keepdims) {
  return reduce(ReduceFn::Argmin, x, {axis}, keepdims);
}

// ---- cumsum: CumsumAttrs {axis (normalised)} ------------------------------------------------
// Inclusive prefix sum along one axis; keeps the dtype (no bool). Element k sums elements
// 0..k in order, whatever box computes it.
// Rules: dirty [b, e) along the axis -> [b, n); output [b, e) along the axis needs [0, e).
std::string CumsumAttrs::to_string() const { return absl::StrCat("cumsum{axis=", axis, "}"); }

const OpDef kCumsumDef{
    .name = "cumsum",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          if (x.dtype == DType::Bool) fail("cumsum", "does not accept bool");
          checked_axis("cumsum", node.attrs_as<CumsumAttrs>().axis, x.rank());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs_as<CumsumAttrs>().axis);
          along_axis_forward(axis, Interval(dirty.begin(axis), node.shape[axis]), dirty, out);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs_as<CumsumAttrs>().axis);
          inputs[0] = out;
          if (!out.empty()) inputs[0][axis] = Interval(0, out.end(axis));
        },
};

Tensor cumsum(Tensor x, int64_t axis) {
  Graph& g = builder_graph("cumsum", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, CumsumAttrs{normalize_axis("cumsum", axis, x.rank())});
}

// ---- softmax: SoftmaxAttrs {axis (normalised), log} -----------------------------------------
// exp(x - max) / sum(exp(x - max)) along the axis, or its log (x - max - log(sum)) when log is
// set. Float only. Row statistics always cover the whole row, in order.
// Rules: any dirt in a row -> the whole row (along the axis); output box needs full rows.
// Decomposition: shifted = x - max(x, axis, keepdims); softmax = exp(shifted) / sum(exp(shifted),
// axis, keepdims); log_softmax = shifted - log(sum(exp(shifted), axis, keepdims)).
std::string SoftmaxAttrs::to_string() const {
  return absl::StrCat(log ? "log_softmax" : "softmax", "{axis=", axis, "}");
}

const OpDef kSoftmaxDef{
    .name = "softmax",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& x = input_node(g, node, 0);
          if (!is_float(x.dtype))
            fail("softmax", absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
          checked_axis("softmax", node.attrs_as<SoftmaxAttrs>().axis, x.rank());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs_as<SoftmaxAttrs>().axis);
          along_axis_forward(axis, Interval(0, node.shape[axis]), dirty, out);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs_as<SoftmaxAttrs>().axis);
          inputs[0] = out;
          if (!out.empty()) inputs[0][axis] = Interval(0, node.shape[axis]);
        },
    .decompose =
        [](std::span<const Tensor> inputs, const Node& node) {
          const SoftmaxAttrs& a = node.attrs_as<SoftmaxAttrs>();
          const Tensor shifted = inputs[0] - max(inputs[0], {a.axis}, true);
          const Tensor e = exp(shifted);
          const Tensor total = sum(e, {a.axis}, true);
          return a.log ? shifted - log(total) : e / total;
        },
};

static Tensor softmax_node(Tensor x, int64_t axis, bool log) {
  Graph& g = builder_graph("softmax", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, SoftmaxAttrs{normalize_axis("softmax", axis, x.rank()), log});
}
Tensor softmax(Tensor x, int64_t axis) {
  return softmax_node(x, axis, false);
}
Tensor log_softmax(Tensor x, int64_t axis) {
  return softmax_node(x, axis, true);
}

}  // namespace tessera
