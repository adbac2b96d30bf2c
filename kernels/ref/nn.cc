// Reference kernels: rope, conv2d, pool2d, upsample (nearest), rope_multi. Semantics and
// attributes are documented at the definition blocks in engine/ops_nn.cc. Every kernel reads only inside
// the boxes its op's needed rule names (input views may hold just those boxes).
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ops.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

absl::Status rope(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& positions = args.inputs[1];
  const int rank = args.node.rank();
  const RopeAttrs& a = args.node.attrs_as<RopeAttrs>();
  const int64_t n_rot = a.n_rot;
  const RopeMode mode = a.mode;
  const double base = a.base, freq_scale = a.freq_scale;
  const int64_t half = n_rot / 2;
  int64_t partner[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    const int64_t d = i[rank - 1];
    if (d >= n_rot) {
      store(args.out, i, load(x, i));
      return;
    }
    // `first`: this column is x_a of its pair, otherwise x_b.
    const bool first = mode == RopeMode::HalfSplit ? d < half : d % 2 == 0;
    const int64_t pair = mode == RopeMode::HalfSplit ? (first ? d : d - half) : d / 2;
    const int64_t step = mode == RopeMode::HalfSplit ? half : 1;
    std::memcpy(partner, i, sizeof(int64_t) * static_cast<size_t>(rank));
    partner[rank - 1] = first ? d + step : d - step;
    const int64_t t = i[rank - 3];
    const double theta =
        load(positions, &t) * freq_scale *
        std::pow(base, -2.0 * static_cast<double>(pair) / static_cast<double>(n_rot));
    const double c = std::cos(theta), s = std::sin(theta);
    const double self = load(x, i), other = load(x, partner);
    store(args.out, i, first ? self * c - other * s : other * s + self * c);
  });
  return absl::OkStatus();
}

absl::Status conv2d(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& weight = args.inputs[1];
  const Conv2dAttrs& a = args.node.attrs_as<Conv2dAttrs>();
  const int64_t stride_h = a.stride_h, stride_w = a.stride_w, pad_h = a.pad_h, pad_w = a.pad_w,
                dil_h = a.dilation_h, dil_w = a.dilation_w;
  const int64_t groups = a.groups;
  const bool has_bias = a.has_bias(args.inputs.size());
  const int residual = a.residual_input(args.inputs.size());
  const Shape& xs = args.inputs[0].shape;
  const Shape& ws = args.inputs[1].shape;
  const int64_t height = xs[2], width = xs[3];
  const int64_t in_per_group = ws[1], kh_size = ws[2], kw_size = ws[3];
  const int64_t out_per_group = ws[0] / groups;
  for_each_index(args.box, [&](const int64_t* i) {
    const int64_t o = i[1], oh = i[2], ow = i[3];
    const int64_t c0 = (o / out_per_group) * in_per_group;
    int64_t xi[4] = {i[0], 0, 0, 0}, wi[4] = {o, 0, 0, 0};
    double acc = 0;
    for (int64_t c = 0; c < in_per_group; ++c) {
      xi[1] = c0 + c;
      wi[1] = c;
      for (int64_t kh = 0; kh < kh_size; ++kh) {
        xi[2] = oh * stride_h - pad_h + kh * dil_h;
        if (xi[2] < 0 || xi[2] >= height) continue;  // zero padding
        wi[2] = kh;
        for (int64_t kw = 0; kw < kw_size; ++kw) {
          xi[3] = ow * stride_w - pad_w + kw * dil_w;
          if (xi[3] < 0 || xi[3] >= width) continue;
          wi[3] = kw;
          acc += load(x, xi) * load(weight, wi);
        }
      }
    }
    if (has_bias) acc += load(args.inputs[2], &o);
    if (a.has_epilogue()) {
      // The decomposition's steps, each rounded to the dtype as its own kernel would store it.
      acc = round_to(args.out.dtype, acc);
      if (residual >= 0) {
        const double r = load(args.inputs[static_cast<size_t>(residual)], i);
        acc = round_to(args.out.dtype, a.residual == ConvResidual::ConvFirst ? acc + r : r + acc);
      }
      if (a.relu) acc = acc > 0 ? acc : 0.0;
    }
    store(args.out, i, acc);
  });
  return absl::OkStatus();
}

absl::Status pool2d(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const Pool2dAttrs& a = args.node.attrs_as<Pool2dAttrs>();
  const PoolKind kind = a.kind;
  const int64_t kernel = a.kernel, stride = a.stride, padding = a.padding;
  const Shape& xs = args.inputs[0].shape;
  const double divisor = static_cast<double>(kernel * kernel);
  for_each_index(args.box, [&](const int64_t* i) {
    int64_t xi[4] = {i[0], i[1], 0, 0};
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t kh = 0; kh < kernel; ++kh) {
      xi[2] = i[2] * stride - padding + kh;
      if (xi[2] < 0 || xi[2] >= xs[2]) continue;
      for (int64_t kw = 0; kw < kernel; ++kw) {
        xi[3] = i[3] * stride - padding + kw;
        if (xi[3] < 0 || xi[3] >= xs[3]) continue;
        const double v = load(x, xi);
        if (!std::isnan(max) && (v > max || std::isnan(v))) max = v;  // NaN propagates
        sum += v;
      }
    }
    store(args.out, i, kind == PoolKind::Max ? max : sum / divisor);
  });
  return absl::OkStatus();
}

absl::Status upsample(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const int rank = args.node.rank();
  const int64_t scale = args.node.attrs_as<UpsampleAttrs>().scale;
  const size_t size = static_cast<size_t>(dtype_size(x.dtype));
  int64_t src[kMaxRank];
  // A byte copy: exact for every dtype, including i64 beyond 2^53.
  for_each_index(args.box, [&](const int64_t* i) {
    std::memcpy(src, i, sizeof(int64_t) * static_cast<size_t>(rank));
    src[rank - 2] /= scale;
    src[rank - 1] /= scale;
    std::memcpy(
        static_cast<std::byte*>(args.out.data) + args.out.offset(i) * static_cast<int64_t>(size),
        static_cast<const std::byte*>(x.data) + x.offset(src) * static_cast<int64_t>(size), size);
  });
  return absl::OkStatus();
}

absl::Status rope_multi(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& positions = args.inputs[1];
  const int rank = args.node.rank();
  const RopeMultiAttrs& a = args.node.attrs_as<RopeMultiAttrs>();
  int64_t rotated = 0;
  for (int64_t d : a.axes_dims) rotated += d;
  int64_t partner[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    const int64_t col = i[rank - 1];
    if (col >= rotated) {
      store(args.out, i, load(x, i));
      return;
    }
    // The axis owning this column, and the pair index within the axis' block.
    int64_t axis = 0, offset = 0;
    while (col >= offset + a.axes_dims[axis]) offset += a.axes_dims[axis++];
    const int64_t dim = a.axes_dims[axis], pair = (col - offset) / 2;
    const bool first = (col - offset) % 2 == 0;
    std::memcpy(partner, i, sizeof(int64_t) * static_cast<size_t>(rank));
    partner[rank - 1] = first ? col + 1 : col - 1;
    const int64_t at[2] = {i[rank - 3], axis};
    const double theta = load(positions, at) *
                         std::pow(a.base, -2.0 * static_cast<double>(pair) / static_cast<double>(dim));
    const double c = std::cos(theta), s = std::sin(theta);
    const double self = load(x, i), other = load(x, partner);
    store(args.out, i, first ? self * c - other * s : other * s + self * c);
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
