// Reference kernels: rms_norm, layer_norm, group_norm. The statistics of a row (or group) are
// computed over the whole row every time, in order from its first element, so any box of the
// output is bitwise equal to the same box of a full computation.
#include <cmath>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

namespace {

// The optional per-column (per-channel) parameters of a norm, loaded by their one coordinate.
struct Affine {
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;

  double apply(double normalised, int64_t column) const {
    const int64_t at[1] = {column};
    if (weight != nullptr) normalised *= load(*weight, at);
    if (bias != nullptr) normalised += load(*bias, at);
    return normalised;
  }
};

Affine affine_of(const KernelArgs& args, bool has_weight, bool has_bias) {
  Affine a;
  if (has_weight) a.weight = &args.inputs[1];
  if (has_bias) a.bias = &args.inputs[has_weight ? 2 : 1];
  return a;
}

// Calls f(index) once per row of `box` along the last axis, index pointing at the row's
// element 0 (a writable copy the callee may move along the row).
template <class F>
void for_each_row(const Box& box, F&& f) {
  if (box.empty()) return;
  const int last = box.rank() - 1;
  Box rows = box;
  rows[last] = Interval(0, 1);
  for_each_index(rows, [&](const int64_t* start) {
    int64_t i[kMaxRank];
    for (int d = 0; d < box.rank(); ++d) i[d] = start[d];
    f(i);
  });
}

// Mean and biased variance of the elements of `box`, in row-major order (two passes).
struct Moments {
  double mean = 0;
  double variance = 0;
};

Moments moments(const TensorView& x, const Box& box) {
  const double count = static_cast<double>(box.volume());
  double sum = 0;
  for_each_index(box, [&](const int64_t* i) { sum += load(x, i); });
  Moments m;
  m.mean = sum / count;
  double squares = 0;
  for_each_index(box, [&](const int64_t* i) {
    const double centred = load(x, i) - m.mean;
    squares += centred * centred;
  });
  m.variance = squares / count;
  return m;
}

}  // namespace

absl::Status rms_norm(const KernelArgs& args) {
  const int last = args.node.rank() - 1;
  const int64_t n = args.node.shape[last];
  const double eps = args.node.attrs_as<RmsNormAttrs>().eps;
  const Interval cols = args.box[last];
  const TensorView& x = args.inputs[0];
  const Affine affine = affine_of(args, args.inputs.size() > 1, false);
  for_each_row(args.box, [&](int64_t* i) {
    double squares = 0;
    for (int64_t k = 0; k < n; ++k) {
      i[last] = k;
      const double v = load(x, i);
      squares += v * v;
    }
    const double scale = 1.0 / std::sqrt(squares / static_cast<double>(n) + eps);
    for (int64_t k = cols.begin; k < cols.end; ++k) {
      i[last] = k;
      store(args.out, i, affine.apply(load(x, i) * scale, k));
    }
  });
  return absl::OkStatus();
}

absl::Status layer_norm(const KernelArgs& args) {
  const int last = args.node.rank() - 1;
  const LayerNormAttrs& a = args.node.attrs_as<LayerNormAttrs>();
  const double eps = a.eps;
  const Interval cols = args.box[last];
  const TensorView& x = args.inputs[0];
  const Affine affine = affine_of(args, a.has_weight, a.has_bias);
  for_each_row(args.box, [&](int64_t* i) {
    Box row = Box::of_rank(args.node.rank());
    for (int d = 0; d < last; ++d) row[d] = Interval(i[d], i[d] + 1);
    row[last] = Interval(0, args.node.shape[last]);
    const Moments m = moments(x, row);
    const double inv_std = 1.0 / std::sqrt(m.variance + eps);
    for (int64_t k = cols.begin; k < cols.end; ++k) {
      i[last] = k;
      store(args.out, i, affine.apply((load(x, i) - m.mean) * inv_std, k));
    }
  });
  return absl::OkStatus();
}

absl::Status group_norm(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const GroupNormAttrs& a = args.node.attrs_as<GroupNormAttrs>();
  const int64_t group_size = args.node.shape[1] / a.groups;
  const double eps = a.eps;
  const TensorView& x = args.inputs[0];
  const Affine affine = affine_of(args, a.has_weight, a.has_bias);
  // Box non-empty: channels exist, so group_size >= 1.
  for (int64_t n = box.begin(0); n < box.end(0); ++n) {
    for (int64_t g = box.begin(1) / group_size; g * group_size < box.end(1); ++g) {
      Box group = Box::full(args.node.shape);
      group[0] = Interval(n, n + 1);
      group[1] = Interval(g * group_size, (g + 1) * group_size);
      const Moments m = moments(x, group);
      const double inv_std = 1.0 / std::sqrt(m.variance + eps);
      for_each_index(box.intersect(group), [&](const int64_t* i) {
        store(args.out, i, affine.apply((load(x, i) - m.mean) * inv_std, i[1]));
      });
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::ref
