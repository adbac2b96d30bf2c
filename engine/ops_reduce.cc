// Reductions and scans along axes: reduce (sum, mean, max, min, prod, argmax, argmin), cumsum,
// softmax / log_softmax.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

void check_tensor(std::string_view op, const Tensor& t) {
  if (t.graph == nullptr) fail(op, "empty tensor");
}

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

// ---- reduce: ints = [ReduceFn, keepdims (0/1), axes... (normalised, sorted, unique)] ----------
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
  ReduceAxes r;
  r.keepdims = node.attrs.ints[1] != 0;
  for (size_t k = 2; k < node.attrs.ints.size(); ++k) r.reduced[node.attrs.ints[k]] = true;
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
  Node probe;
  probe.kind = OpKind::Reduce;
  probe.attrs.ints = {static_cast<int64_t>(fn)};
  return op_display_name(probe);
}

}  // namespace

const OpDef kReduceDef{
    .name = "reduce",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const auto& ints = node.attrs.ints;
          if (ints.size() < 2 || ints[0] < 0 || ints[0] >= static_cast<int64_t>(ReduceFn::Count))
            fail("reduce", "unknown function");
          const std::string name = op_display_name(node);
          if (ints[1] != 0 && ints[1] != 1) fail(name, "keepdims must be 0 or 1");
          const auto fn = static_cast<ReduceFn>(ints[0]);
          const bool is_arg = fn == ReduceFn::Argmax || fn == ReduceFn::Argmin;
          const Node& x = input_node(g, node, 0);
          if (x.dtype == DType::Bool) fail(name, "does not accept bool");
          if (fn == ReduceFn::Mean && !is_float(x.dtype))
            fail(name, absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
          for (size_t k = 2; k < ints.size(); ++k) {
            checked_axis(name, ints[k], x.rank());
            if (k > 2 && ints[k] <= ints[k - 1]) fail(name, "axes must be sorted and unique");
          }
          if (is_arg && ints.size() != 3) fail(name, "takes exactly one axis");
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
  check_tensor("reduce", x);
  Attrs attrs{.ints = {static_cast<int64_t>(fn), keepdims ? 1 : 0}};
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
  attrs.ints.insert(attrs.ints.end(), axes.begin(), axes.end());
  Tensor in[] = {x};
  return x.graph->add_node(OpKind::Reduce, in, std::move(attrs));
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

// ---- cumsum: ints = [axis (normalised)] ---------------------------------------------------
// Inclusive prefix sum along one axis; keeps the dtype (no bool). Element k sums elements
// 0..k in order, whatever box computes it.
// Rules: dirty [b, e) along the axis -> [b, n); output [b, e) along the axis needs [0, e).
const OpDef kCumsumDef{
    .name = "cumsum",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          if (node.attrs.ints.size() != 1) fail("cumsum", "expects one attribute: the axis");
          const Node& x = input_node(g, node, 0);
          if (x.dtype == DType::Bool) fail("cumsum", "does not accept bool");
          checked_axis("cumsum", node.attrs.ints[0], x.rank());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          along_axis_forward(axis, Interval(dirty.begin(axis), node.shape[axis]), dirty, out);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          inputs[0] = out;
          if (!out.empty()) inputs[0][axis] = Interval(0, out.end(axis));
        },
};

Tensor cumsum(Tensor x, int64_t axis) {
  check_tensor("cumsum", x);
  Tensor in[] = {x};
  return x.graph->add_node(OpKind::Cumsum, in,
                           Attrs{.ints = {normalize_axis("cumsum", axis, x.rank())}});
}

// ---- softmax: ints = [axis (normalised), log (0/1)] ---------------------------------------
// exp(x - max) / sum(exp(x - max)) along the axis, or its log (x - max - log(sum)) when log is
// 1. Float only. Row statistics always cover the whole row, in order.
// Rules: any dirt in a row -> the whole row (along the axis); output box needs full rows.
const OpDef kSoftmaxDef{
    .name = "softmax",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const auto& ints = node.attrs.ints;
          if (ints.size() != 2) fail("softmax", "expects two attributes: axis and log");
          if (ints[1] != 0 && ints[1] != 1) fail("softmax", "log flag must be 0 or 1");
          const Node& x = input_node(g, node, 0);
          if (!is_float(x.dtype))
            fail("softmax", absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
          checked_axis("softmax", ints[0], x.rank());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward =
        [](const Graph&, const Node& node, int, const Box& dirty, Region& out) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          along_axis_forward(axis, Interval(0, node.shape[axis]), dirty, out);
        },
    .needed =
        [](const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
          const int axis = static_cast<int>(node.attrs.ints[0]);
          inputs[0] = out;
          if (!out.empty()) inputs[0][axis] = Interval(0, node.shape[axis]);
        },
};

static Tensor softmax_node(Tensor x, int64_t axis, bool log) {
  check_tensor("softmax", x);
  Tensor in[] = {x};
  return x.graph->add_node(OpKind::Softmax, in,
                           Attrs{.ints = {normalize_axis("softmax", axis, x.rank()), log ? 1 : 0}});
}
Tensor softmax(Tensor x, int64_t axis) {
  return softmax_node(x, axis, false);
}
Tensor log_softmax(Tensor x, int64_t axis) {
  return softmax_node(x, axis, true);
}

}  // namespace tessera
