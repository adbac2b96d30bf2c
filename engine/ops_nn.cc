// Neural-network ops with their own region rules: conv2d, pool2d, upsample (nearest).
// Attention (engine/ops_attention.cc) and rope, rope_multi (engine/ops_rope.cc) have their own
// files.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}
int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// [lo, hi) clamped to [0, size); an empty result stays a well-formed empty interval.
Interval clip(int64_t lo, int64_t hi, int64_t size) {
  const int64_t begin = std::clamp<int64_t>(lo, 0, size);
  return Interval(begin, std::clamp<int64_t>(hi, begin, size));
}

// One spatial axis of a sliding window (conv2d, pool2d): output o reads the taps
// o * stride - pad + i * dilation for i in [0, kernel); taps outside the input are padding.
struct Window {
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t pad = 0;
  int64_t dilation = 1;
};

// floor((in + 2p - d(k-1) - 1) / s) + 1, or 0 when not even one window fits. Throws Error when
// the padded input or the dilated window does not fit int64 (the rules then cannot overflow).
int64_t window_output_size(std::string_view op, int64_t in, const Window& w) {
  const int64_t padded = checked_add(op, "padded input", in, checked_mul(op, "padding", 2, w.pad));
  const int64_t reach = checked_mul(op, "dilated window", w.dilation, w.kernel - 1);
  const int64_t span = padded - reach - 1;
  return span < 0 ? 0 : span / w.stride + 1;
}

// Output positions with at least one tap inside `dirty`. Per tap i the positions form the
// interval [ceil((b + p - i d) / s), ceil((e + p - i d) / s)); the result is the smallest interval
// holding all of them (with stride or dilation > 1 the union can have gaps, which we cover
// rather than split into up to `kernel` boxes per axis).
Interval window_forward(Interval dirty, const Window& w, int64_t out_size) {
  Interval result;
  for (int64_t i = 0; i < w.kernel; ++i) {
    const int64_t shift = w.pad - i * w.dilation;
    Interval hit = clip(ceil_div(dirty.begin + shift, w.stride),
                        ceil_div(dirty.end + shift, w.stride), out_size);
    if (hit.empty()) continue;
    result = result.empty()
                 ? hit
                 : Interval(std::min(result.begin, hit.begin), std::max(result.end, hit.end));
  }
  return result;
}

// Input positions read by the outputs in `out`: from the first tap of the first output to the
// last tap of the last output, clipped to the input (padding is never read).
Interval window_needed(Interval out, const Window& w, int64_t in_size) {
  if (out.empty()) return Interval();
  return clip(out.begin * w.stride - w.pad,
              (out.end - 1) * w.stride - w.pad + (w.kernel - 1) * w.dilation + 1, in_size);
}

void set_empty(const Graph& g, const Node& node, std::span<Box> inputs) {
  for (size_t k = 0; k < inputs.size(); ++k)
    inputs[k] = Box::of_rank(input_node(g, node, static_cast<int>(k)).rank());
}

}  // namespace

// ---- conv2d(x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] optional, residual
// [N, O, OH, OW] optional) -> [N, O, OH, OW]
// Conv2dAttrs {stride, pad, dilation (h and w), groups, residual, relu}; bias present with 3
// inputs (4 with a residual); zero padding;
// OH = floor((H + 2 pad_h - dil_h (KH - 1) - 1) / stride_h) + 1 (same for OW). Output channel o
// reads the input channels of its group, o / (O / groups). The kernel accumulates in double in
// the order (c, kh, kw), then adds the bias.
// Rules: spatial dirt spreads over the receptive field (the smallest interval of outputs with a
// tap inside the dirt), channel dirt over every output channel of the groups it touches; a dirty
// weight or bias row dirties that output channel everywhere. A conv of Conv2dAttrs::tile 4
// (conv2d_output_tile) aligns output rows and columns to its 4x4 tiles in both rules. The epilogue (Conv2dAttrs) is
// elementwise: residual dirt is output dirt at the same place, an output box needs the same box
// of the residual.
namespace {

struct ConvGeometry {
  Window h, w;
  int64_t groups = 1;
  int64_t in_per_group = 1;   // C / groups
  int64_t out_per_group = 1;  // O / groups
};

ConvGeometry conv_geometry(const Graph& g, const Node& node) {
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  const Shape& weight = input_node(g, node, 1).shape;
  ConvGeometry c;
  c.h = Window{weight[2], a.stride_h, a.pad_h, a.dilation_h};
  c.w = Window{weight[3], a.stride_w, a.pad_w, a.dilation_w};
  c.groups = a.groups;
  c.in_per_group = weight[1];
  c.out_per_group = weight[0] / c.groups;
  return c;
}

// `i` widened to whole tiles of `tile` (multiples of it, the last clamped to `size`).
Interval tile_aligned(Interval i, int64_t tile, int64_t size) {
  if (tile == 1 || i.empty()) return i;
  return Interval(i.begin / tile * tile, std::min((i.end + tile - 1) / tile * tile, size));
}

void conv2d_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const Shape& s = node.shape;
  if (input == node.attrs_as<Conv2dAttrs>().residual_input(node.inputs.size())) {
    out.add(dirty);
    return;
  }
  if (input != 0) {  // weight or bias: dim 0 is the output channel
    out.add(Box{{0, s[0]}, dirty[0], {0, s[2]}, {0, s[3]}});
    return;
  }
  const ConvGeometry c = conv_geometry(g, node);
  const int64_t g0 = dirty[1].begin / c.in_per_group, g1 = (dirty[1].end - 1) / c.in_per_group + 1;
  const int64_t tile = conv2d_output_tile(g, node);
  out.add(Box{dirty[0],
              {g0 * c.out_per_group, g1 * c.out_per_group},
              tile_aligned(window_forward(dirty[2], c.h, s[2]), tile, s[2]),
              tile_aligned(window_forward(dirty[3], c.w, s[3]), tile, s[3])});
}

void conv2d_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const ConvGeometry c = conv_geometry(g, node);
  const Shape& x = input_node(g, node, 0).shape;
  const Shape& weight = input_node(g, node, 1).shape;
  const int64_t g0 = out[1].begin / c.out_per_group, g1 = (out[1].end - 1) / c.out_per_group + 1;
  const int64_t tile = conv2d_output_tile(g, node);
  inputs[0] = Box{out[0],
                  {g0 * c.in_per_group, g1 * c.in_per_group},
                  window_needed(tile_aligned(out[2], tile, node.shape[2]), c.h, x[2]),
                  window_needed(tile_aligned(out[3], tile, node.shape[3]), c.w, x[3])};
  inputs[1] = Box{out[1], {0, weight[1]}, {0, weight[2]}, {0, weight[3]}};
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  if (a.has_bias(inputs.size())) inputs[2] = Box{out[1]};
  if (const int r = a.residual_input(inputs.size()); r >= 0) inputs[static_cast<size_t>(r)] = out;
}

void conv2d_infer(const Graph& g, Node& node) {
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  if (a.residual != ConvResidual::None && a.residual != ConvResidual::ConvFirst && a.residual != ConvResidual::ResidualFirst)
    fail("conv2d", "unknown residual order");
  if (a.residual != ConvResidual::None && node.inputs.size() < 3)
    fail("conv2d", "a residual epilogue needs the residual as the last input");
  if (a.residual == ConvResidual::None && node.inputs.size() > 3)
    fail("conv2d", "4 inputs need a residual epilogue (Conv2dAttrs::residual)");
  if (a.tile != 1 && a.tile != 4) fail("conv2d", absl::StrCat("tile must be 1 or 4, got ", a.tile));
  const bool has_bias = a.has_bias(node.inputs.size());
  const Node& x = input_node(g, node, 0);
  const Node& weight = input_node(g, node, 1);
  if (x.rank() != 4)
    fail("conv2d", absl::StrCat("x must be [N, C, H, W], got ", shape_string(x.shape)));
  if (weight.rank() != 4)
    fail("conv2d",
         absl::StrCat("weight must be [O, C / groups, KH, KW], got ", shape_string(weight.shape)));
  if (!is_float(x.dtype))
    fail("conv2d", absl::StrCat("x must be float, got ", dtype_name(x.dtype)));
  if (weight.dtype != x.dtype)
    fail("conv2d", absl::StrCat("dtype mismatch: x ", dtype_name(x.dtype), ", weight ",
                                dtype_name(weight.dtype)));
  if (a.stride_h < 1 || a.stride_w < 1) fail("conv2d", "stride must be >= 1");
  if (a.pad_h < 0 || a.pad_w < 0) fail("conv2d", "padding must be >= 0");
  if (a.dilation_h < 1 || a.dilation_w < 1) fail("conv2d", "dilation must be >= 1");
  const int64_t groups = a.groups;
  if (groups < 1) fail("conv2d", "groups must be >= 1");
  if (x.shape[1] % groups != 0)
    fail("conv2d",
         absl::StrCat("input channels ", x.shape[1], " not divisible by groups ", groups));
  if (weight.shape[0] % groups != 0)
    fail("conv2d",
         absl::StrCat("output channels ", weight.shape[0], " not divisible by groups ", groups));
  if (weight.shape[1] != x.shape[1] / groups)
    fail("conv2d", absl::StrCat("weight ", shape_string(weight.shape), " must have ",
                                x.shape[1] / groups, " input channels per group"));
  if (weight.shape[2] < 1 || weight.shape[3] < 1) fail("conv2d", "kernel must be at least 1x1");
  if (has_bias) {
    const Node& bias = input_node(g, node, 2);
    if (bias.dtype != x.dtype)
      fail("conv2d", absl::StrCat("dtype mismatch: x ", dtype_name(x.dtype), ", bias ",
                                  dtype_name(bias.dtype)));
    if (bias.rank() != 1 || bias.shape[0] != weight.shape[0])
      fail("conv2d",
           absl::StrCat("bias must be [", weight.shape[0], "], got ", shape_string(bias.shape)));
  }
  const ConvGeometry c = conv_geometry(g, node);
  const int64_t oh = window_output_size("conv2d", x.shape[2], c.h);
  const int64_t ow = window_output_size("conv2d", x.shape[3], c.w);
  if (oh <= 0 || ow <= 0)
    fail("conv2d", absl::StrCat("input ", shape_string(x.shape), " too small for the kernel"));
  node.shape = Shape{x.shape[0], weight.shape[0], oh, ow};
  node.dtype = x.dtype;
  if (const int r = a.residual_input(node.inputs.size()); r >= 0) {
    const Node& residual = input_node(g, node, r);
    if (residual.dtype != x.dtype || residual.shape != node.shape)
      fail("conv2d", absl::StrCat("residual must be ", dtype_name(x.dtype), " ", shape_string(node.shape), ", got ",
                                  dtype_name(residual.dtype), " ", shape_string(residual.shape)));
  }
}

// The epilogue written out: the plain conv, the residual's add, relu. A plain conv has none.
Tensor conv2d_decompose(std::span<const Tensor> inputs, const Node& node) {
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  if (!a.has_epilogue()) return Tensor{};
  Conv2dAttrs plain = a;
  plain.residual = ConvResidual::None;
  plain.relu = false;
  Tensor y = conv2d(inputs[0], inputs[1], a.has_bias(inputs.size()) ? inputs[2] : Tensor{}, plain);
  if (const int r = a.residual_input(inputs.size()); r >= 0) {
    const Tensor residual = inputs[static_cast<size_t>(r)];
    y = a.residual == ConvResidual::ConvFirst ? add(y, residual) : add(residual, y);
  }
  return a.relu ? relu(y) : y;
}

}  // namespace

bool conv2d_tiles_allowed(const Graph& g, const Node& node) {
  if (node.kind != OpKind::Conv2d || node.dtype != DType::F32) return false;
  for (NodeId in : node.inputs)
    if (g.node(in).dtype != DType::F32) return false;
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  const Shape& w = input_node(g, node, 1).shape;
  return a.stride_h == 1 && a.stride_w == 1 && a.dilation_h == 1 && a.dilation_w == 1 && a.groups == 1 &&
         w[2] == 3 && w[3] == 3 && w[0] >= 8 && w[1] >= 8;
}

int64_t conv2d_output_tile(const Graph& g, const Node& node) {
  return conv2d_tiles_allowed(g, node) && node.attrs_as<Conv2dAttrs>().tile == 4 ? 4 : 1;
}

std::string Conv2dAttrs::to_string() const {
  const bool dilated = dilation_h != 1 || dilation_w != 1;
  return absl::StrCat("conv2d{stride=", stride_h, "x", stride_w, ",pad=", pad_h, "x", pad_w,
                      dilated ? absl::StrCat(",dilation=", dilation_h, "x", dilation_w) : "",
                      ",groups=", groups,
                      residual == ConvResidual::ConvFirst       ? ",+residual"
                      : residual == ConvResidual::ResidualFirst ? ",residual+"
                                                                : "",
                      relu ? ",relu" : "", tile != 1 ? absl::StrCat(",tile=", tile) : "", "}");
}

const OpDef kConv2dDef{
    .name = "conv2d",
    .min_inputs = 2,
    .max_inputs = 4,
    .infer = conv2d_infer,
    .forward = conv2d_forward,
    .needed = conv2d_needed,
    .decompose = conv2d_decompose,
};

Tensor conv2d(Tensor x, Tensor weight, Tensor bias, const Conv2dParams& p) {
  if (p.residual != ConvResidual::None)
    fail("conv2d", "a residual epilogue takes the residual tensor (the conv2d overload with `residual`)");
  Graph& g = builder_graph("conv2d", {{"x", x}, {"weight", weight}, {"bias", bias, true}});
  const bool has_bias = bias.graph != nullptr;
  Tensor in[] = {x, weight, bias};
  return g.add_node(std::span<const Tensor>(in, has_bias ? 3 : 2), p);
}

Tensor conv2d(Tensor x, Tensor weight, Tensor bias, Tensor residual, Conv2dParams p) {
  Graph& g = builder_graph("conv2d", {{"x", x}, {"weight", weight}, {"bias", bias, true}, {"residual", residual}});
  if (p.residual == ConvResidual::None) p.residual = ConvResidual::ConvFirst;
  std::vector<Tensor> in = {x, weight};
  if (bias.graph != nullptr) in.push_back(bias);
  in.push_back(residual);
  return g.add_node(in, p);
}

// ---- pool2d(x [N, C, H, W] float) -> [N, C, OH, OW] ----------------------------------------
// Pool2dAttrs {kind, kernel, stride, padding}; square window, no dilation,
// OH = floor((H + 2 padding - kernel) / stride) + 1. Max ignores padding; avg counts it
// (count_include_pad: divisor kernel * kernel). padding < kernel, so every window holds an input
// element. Rules: those of a depthwise conv; channels map to themselves.
namespace {

Window pool_window(const Node& node) {
  const Pool2dAttrs& a = node.attrs_as<Pool2dAttrs>();
  return Window{a.kernel, a.stride, a.padding, 1};
}

void pool2d_forward(const Graph&, const Node& node, int, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const Window w = pool_window(node);
  out.add(Box{dirty[0], dirty[1], window_forward(dirty[2], w, node.shape[2]),
              window_forward(dirty[3], w, node.shape[3])});
}

void pool2d_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const Window w = pool_window(node);
  const Shape& x = input_node(g, node, 0).shape;
  inputs[0] = Box{out[0], out[1], window_needed(out[2], w, x[2]), window_needed(out[3], w, x[3])};
}

void pool2d_infer(const Graph& g, Node& node) {
  const Pool2dAttrs& a = node.attrs_as<Pool2dAttrs>();
  if (a.kind != PoolKind::Max && a.kind != PoolKind::Avg)
    fail("pool2d", absl::StrCat("unknown kind ", static_cast<int64_t>(a.kind)));
  const Node& x = input_node(g, node, 0);
  if (x.rank() != 4)
    fail("pool2d", absl::StrCat("x must be [N, C, H, W], got ", shape_string(x.shape)));
  if (!is_float(x.dtype))
    fail("pool2d", absl::StrCat("x must be float, got ", dtype_name(x.dtype)));
  if (a.kernel < 1) fail("pool2d", "kernel must be >= 1");
  if (a.stride < 1) fail("pool2d", "stride must be >= 1");
  if (a.padding < 0 || a.padding >= a.kernel) fail("pool2d", "padding must be in [0, kernel)");
  const Window w = pool_window(node);
  const int64_t oh = window_output_size("pool2d", x.shape[2], w);
  const int64_t ow = window_output_size("pool2d", x.shape[3], w);
  if (oh <= 0 || ow <= 0)
    fail("pool2d", absl::StrCat("input ", shape_string(x.shape), " too small for the kernel"));
  node.shape = Shape{x.shape[0], x.shape[1], oh, ow};
  node.dtype = x.dtype;
}

}  // namespace

std::string Pool2dAttrs::to_string() const {
  return absl::StrCat(kind == PoolKind::Max ? "max_pool2d" : "avg_pool2d", "{kernel=", kernel,
                      ",stride=", stride, ",pad=", padding, "}");
}

const OpDef kPool2dDef{
    .name = "pool2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .forward = pool2d_forward,
    .needed = pool2d_needed,
};

Tensor pool2d(Tensor x, PoolKind kind, int64_t kernel, int64_t stride, int64_t padding) {
  Graph& g = builder_graph("pool2d", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(
      in, Pool2dAttrs{.kind = kind, .kernel = kernel, .stride = stride, .padding = padding});
}

// ---- upsample(x [..., H, W]) -> [..., H * scale, W * scale], nearest neighbour ---------------
// UpsampleAttrs {scale}; out[i] = in[i / scale] on the last two dims; any dtype (a pure copy).
// Rules: [a, b) -> [a * scale, b * scale); needed [a / scale, (b - 1) / scale + 1).
// Decomposition: x[..., :, None, :, None] expanded to [..., H, scale, W, scale] and reshaped to
// the output (leading dims merged first when the rank would exceed kMaxRank).
namespace {

Tensor upsample_decompose(std::span<const Tensor> inputs, const Node& node) {
  const int64_t scale = node.attrs_as<UpsampleAttrs>().scale;
  Tensor x = inputs[0];
  Shape lead(x.shape().begin(), x.shape().end() - 2);
  const int64_t h = x.dim(-2), w = x.dim(-1);
  if (x.rank() + 2 > kMaxRank) lead = Shape{shape_volume(lead)};
  Shape spread = lead, tiled = lead;
  for (int64_t d : {h, w}) {
    spread.insert(spread.end(), {d, 1});
    tiled.insert(tiled.end(), {d, scale});
  }
  return reshape(expand(reshape(x, spread), tiled), node.shape);
}

void upsample_forward(const Graph&, const Node& node, int, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const int64_t scale = node.attrs_as<UpsampleAttrs>().scale;
  Box b = dirty;
  for (int d = node.rank() - 2; d < node.rank(); ++d)
    b[d] = Interval(dirty[d].begin * scale, dirty[d].end * scale);
  out.add(b);
}

void upsample_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const int64_t scale = node.attrs_as<UpsampleAttrs>().scale;
  Box b = out;
  for (int d = node.rank() - 2; d < node.rank(); ++d)
    b[d] = Interval(out[d].begin / scale, (out[d].end - 1) / scale + 1);
  inputs[0] = b;
}

}  // namespace

std::string UpsampleAttrs::to_string() const { return absl::StrCat("upsample{scale=", scale, "}"); }

const OpDef kUpsampleDef{
    .name = "upsample",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const int64_t scale = node.attrs_as<UpsampleAttrs>().scale;
          if (scale < 1) fail("upsample", absl::StrCat("scale must be >= 1, got ", scale));
          const Node& x = input_node(g, node, 0);
          if (x.rank() < 2)
            fail("upsample", absl::StrCat("x must have rank >= 2, got ", shape_string(x.shape)));
          node.shape = x.shape;
          for (size_t d = node.shape.size() - 2; d < node.shape.size(); ++d) {
            if (node.shape[d] > std::numeric_limits<int64_t>::max() / scale)
              fail("upsample",
                   absl::StrCat("output of ", shape_string(x.shape), " x", scale, " overflows"));
            node.shape[d] *= scale;
          }
          node.dtype = x.dtype;
        },
    .forward = upsample_forward,
    .needed = upsample_needed,
    .decompose = upsample_decompose,
};

Tensor upsample_nearest(Tensor x, int64_t scale) {
  Graph& g = builder_graph("upsample", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, UpsampleAttrs{scale});
}

}  // namespace tessera
