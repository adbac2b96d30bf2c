// Reference kernels: reduce, cumsum, softmax. Every output element is computed from its whole
// reduced set (or row prefix) in row-major order starting at 0, whatever box is requested, so
// a partial computation is bitwise equal to the full one.
#include <cmath>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

namespace {

// True when v replaces the current extremum: the first value always does; a NaN wins and then
// stays (like torch); ties keep the first.
bool replaces(double v, double current, bool first, bool greater) {
  if (first) return true;
  if (std::isnan(current)) return false;
  return std::isnan(v) || (greater ? v > current : v < current);
}

// Accumulates one output element of a reduction over the values it visits in row-major order.
struct Accumulator {
  ReduceFn fn;
  int axis = 0;  // argmax/argmin: the reduced axis
  double value = 0;
  int64_t index = 0;
  int64_t count = 0;

  void add(double v, const int64_t* at) {
    const bool first = count++ == 0;
    switch (fn) {
      case ReduceFn::Sum:
      case ReduceFn::Mean:
        value = first ? v : value + v;
        break;
      case ReduceFn::Prod:
        value = first ? v : value * v;
        break;
      case ReduceFn::Max:
      case ReduceFn::Min:
        if (replaces(v, value, first, fn == ReduceFn::Max)) value = v;
        break;
      case ReduceFn::Argmax:
      case ReduceFn::Argmin:
        if (replaces(v, value, first, fn == ReduceFn::Argmax)) {
          value = v;
          index = at[axis];
        }
        break;
      case ReduceFn::Count:
        break;
    }
  }

  double result() const {
    switch (fn) {
      case ReduceFn::Sum:
        return count == 0 ? 0.0 : value;
      case ReduceFn::Prod:
        return count == 0 ? 1.0 : value;
      case ReduceFn::Mean:
        return (count == 0 ? 0.0 : value) / static_cast<double>(count);
      case ReduceFn::Argmax:
      case ReduceFn::Argmin:
        return static_cast<double>(index);
      default:
        return value;
    }
  }
};

// The box of rows through `box` along `axis`: `box` with the axis pinned to its first entry, so
// iterating it visits each row once.
Box row_starts(const Box& box, int axis) {
  Box rows = box;
  rows[axis] = Interval(box.begin(axis), box.begin(axis) + 1);
  return rows;
}

}  // namespace

absl::Status reduce(const KernelArgs& args) {
  const ReduceAttrs& a = args.node.attrs_as<ReduceAttrs>();
  const Shape& in_shape = args.inputs[0].shape;
  const int in_rank = static_cast<int>(in_shape.size());
  const bool keepdims = a.keepdims;
  bool reduced[kMaxRank] = {};
  for (int64_t axis : a.axes) reduced[axis] = true;
  const TensorView& x = args.inputs[0];
  for_each_index(args.box, [&](const int64_t* o) {
    // The input elements feeding output o: o's coordinates on kept axes, everything on reduced.
    Box source = Box::of_rank(in_rank);
    int od = 0;
    for (int d = 0; d < in_rank; ++d) {
      if (reduced[d]) {
        source[d] = Interval(0, in_shape[d]);
        if (keepdims) ++od;
      } else {
        source[d] = Interval(o[od], o[od] + 1);
        ++od;
      }
    }
    Accumulator acc{.fn = a.fn, .axis = a.axes.empty() ? 0 : static_cast<int>(a.axes[0])};
    for_each_index(source, [&](const int64_t* i) { acc.add(load(x, i), i); });
    store(args.out, o, acc.result());
  });
  return absl::OkStatus();
}

absl::Status cumsum(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const int axis = static_cast<int>(args.node.attrs_as<CumsumAttrs>().axis);
  const int rank = args.node.rank();
  const Interval along = args.box[axis];
  const TensorView& x = args.inputs[0];
  for_each_index(row_starts(args.box, axis), [&](const int64_t* start) {
    int64_t i[kMaxRank];
    for (int d = 0; d < rank; ++d) i[d] = start[d];
    // Always from element 0, so the prefix sums do not depend on where the box begins.
    double acc = 0;
    for (int64_t k = 0; k < along.end; ++k) {
      i[axis] = k;
      acc += load(x, i);
      if (k >= along.begin) store(args.out, i, acc);
    }
  });
  return absl::OkStatus();
}

absl::Status softmax(const KernelArgs& args) {
  if (args.box.empty()) return absl::OkStatus();
  const int axis = static_cast<int>(args.node.attrs_as<SoftmaxAttrs>().axis);
  const bool log = args.node.attrs_as<SoftmaxAttrs>().log;
  const int rank = args.node.rank();
  const int64_t n = args.node.shape[axis];
  const Interval along = args.box[axis];
  const TensorView& x = args.inputs[0];
  for_each_index(row_starts(args.box, axis), [&](const int64_t* start) {
    int64_t i[kMaxRank];
    for (int d = 0; d < rank; ++d) i[d] = start[d];
    // Statistics over the whole row every time. A NaN anywhere makes the sum, hence the row, NaN.
    double row_max = -INFINITY;
    for (int64_t k = 0; k < n; ++k) {
      i[axis] = k;
      row_max = std::fmax(row_max, load(x, i));
    }
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      i[axis] = k;
      sum += std::exp(load(x, i) - row_max);
    }
    const double log_sum = std::log(sum);
    for (int64_t k = along.begin; k < along.end; ++k) {
      i[axis] = k;
      const double shifted = load(x, i) - row_max;
      store(args.out, i, log ? shifted - log_sum : std::exp(shifted) / sum);
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
