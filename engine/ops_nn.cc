// Neural-network ops with their own region rules: rope, conv2d, pool2d, upsample (nearest),
// rope_multi.
// Attention has its own file (engine/ops_attention.cc).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

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

// floor((in + 2p - d(k-1) - 1) / s) + 1, or 0 when not even one window fits.
int64_t window_output_size(int64_t in, const Window& w) {
  const int64_t span = in + 2 * w.pad - w.dilation * (w.kernel - 1) - 1;
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

// ---- rope(x [..., T, H, D] float, positions [T] i32/i64) ----------------------------------
// RopeAttrs {n_rot, base, mode, freq_scale}. Pair i in [0, n_rot / 2) turns by
// theta = pos[t] * freq_scale * base^(-2i / n_rot): HalfSplit pairs (i, i + n_rot / 2) (NeoX, HF
// rotate_half), Interleaved pairs (2i, 2i + 1) (GPT-J, llama.cpp normal mode).
// out_a = x_a cos - x_b sin, out_b = x_a sin + x_b cos, in double; dims >= n_rot pass through.
// Rules: a column depends on itself and its pair partner (exact: up to three column intervals);
// a position changes the rotated columns of its row, for every head and leading index.
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
};

Tensor rope(Tensor x, Tensor positions, int64_t n_rot, double base, RopeMode mode,
            double freq_scale) {
  if (x.graph == nullptr) fail("rope", "empty tensor");
  Tensor in[] = {x, positions};
  return x.graph->add_node(
      in, RopeAttrs{.n_rot = n_rot, .base = base, .mode = mode, .freq_scale = freq_scale});
}

// ---- conv2d(x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] optional) -> [N, O, OH, OW]
// Conv2dAttrs {stride, pad, dilation (h and w), groups}; bias present with 3 inputs; zero padding;
// OH = floor((H + 2 pad_h - dil_h (KH - 1) - 1) / stride_h) + 1 (same for OW). Output channel o
// reads the input channels of its group, o / (O / groups). The kernel accumulates in double in
// the order (c, kh, kw), then adds the bias.
// Rules: spatial dirt spreads over the receptive field (the smallest interval of outputs with a
// tap inside the dirt), channel dirt over every output channel of the groups it touches; a dirty
// weight or bias row dirties that output channel everywhere.
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

void conv2d_forward(const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const Shape& s = node.shape;
  if (input != 0) {  // weight or bias: dim 0 is the output channel
    out.add(Box{{0, s[0]}, dirty[0], {0, s[2]}, {0, s[3]}});
    return;
  }
  const ConvGeometry c = conv_geometry(g, node);
  const int64_t g0 = dirty[1].begin / c.in_per_group, g1 = (dirty[1].end - 1) / c.in_per_group + 1;
  out.add(Box{dirty[0],
              {g0 * c.out_per_group, g1 * c.out_per_group},
              window_forward(dirty[2], c.h, s[2]),
              window_forward(dirty[3], c.w, s[3])});
}

void conv2d_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) return set_empty(g, node, inputs);
  const ConvGeometry c = conv_geometry(g, node);
  const Shape& x = input_node(g, node, 0).shape;
  const Shape& weight = input_node(g, node, 1).shape;
  const int64_t g0 = out[1].begin / c.out_per_group, g1 = (out[1].end - 1) / c.out_per_group + 1;
  inputs[0] = Box{out[0],
                  {g0 * c.in_per_group, g1 * c.in_per_group},
                  window_needed(out[2], c.h, x[2]),
                  window_needed(out[3], c.w, x[3])};
  inputs[1] = Box{out[1], {0, weight[1]}, {0, weight[2]}, {0, weight[3]}};
  if (inputs.size() > 2) inputs[2] = Box{out[1]};
}

void conv2d_infer(const Graph& g, Node& node) {
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  const bool has_bias = node.inputs.size() == 3;
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
  const int64_t oh = window_output_size(x.shape[2], c.h), ow = window_output_size(x.shape[3], c.w);
  if (oh <= 0 || ow <= 0)
    fail("conv2d", absl::StrCat("input ", shape_string(x.shape), " too small for the kernel"));
  node.shape = Shape{x.shape[0], weight.shape[0], oh, ow};
  node.dtype = x.dtype;
}

}  // namespace

std::string Conv2dAttrs::to_string() const {
  const bool dilated = dilation_h != 1 || dilation_w != 1;
  return absl::StrCat("conv2d{stride=", stride_h, "x", stride_w, ",pad=", pad_h, "x", pad_w,
                      dilated ? absl::StrCat(",dilation=", dilation_h, "x", dilation_w) : "",
                      ",groups=", groups, "}");
}

const OpDef kConv2dDef{
    .name = "conv2d",
    .min_inputs = 2,
    .max_inputs = 3,
    .infer = conv2d_infer,
    .forward = conv2d_forward,
    .needed = conv2d_needed,
};

Tensor conv2d(Tensor x, Tensor weight, Tensor bias, const Conv2dParams& p) {
  if (x.graph == nullptr) fail("conv2d", "empty tensor");
  const bool has_bias = bias.graph != nullptr;
  Tensor in[] = {x, weight, bias};
  return x.graph->add_node(std::span<const Tensor>(in, has_bias ? 3 : 2), p);
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
  const int64_t oh = window_output_size(x.shape[2], w), ow = window_output_size(x.shape[3], w);
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
  if (x.graph == nullptr) fail("pool2d", "empty tensor");
  Tensor in[] = {x};
  return x.graph->add_node(
      in, Pool2dAttrs{.kind = kind, .kernel = kernel, .stride = stride, .padding = padding});
}

// ---- upsample(x [..., H, W]) -> [..., H * scale, W * scale], nearest neighbour ---------------
// UpsampleAttrs {scale}; out[i] = in[i / scale] on the last two dims; any dtype (a pure copy).
// Rules: [a, b) -> [a * scale, b * scale); needed [a / scale, (b - 1) / scale + 1).
namespace {

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
};

Tensor upsample_nearest(Tensor x, int64_t scale) {
  if (x.graph == nullptr) fail("upsample", "empty tensor");
  Tensor in[] = {x};
  return x.graph->add_node(in, UpsampleAttrs{scale});
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

void rope_multi_forward(const Graph&, const Node& node, int input, const Box& dirty,
                        Region& out) {
  if (dirty.empty()) return;
  const int rank = node.rank();
  const Ints& dims = node.attrs_as<RopeMultiAttrs>().axes_dims;
  if (input == 1) {
    Box b = Box::full(node.shape);
    b[rank - 3] = dirty[0];
    b[rank - 1] = Interval(rope_multi_offset(dims, dirty[1].begin),
                           rope_multi_offset(dims, dirty[1].end));
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
      fail("rope_multi", absl::StrCat("axes_dims must be even and > 0, got ", ints_string(a.axes_dims)));
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
};

Tensor rope_multi(Tensor x, Tensor positions, std::vector<int64_t> axes_dims, double base) {
  if (x.graph == nullptr) fail("rope_multi", "empty tensor");
  Tensor in[] = {x, positions};
  return x.graph->add_node(
      in, RopeMultiAttrs{.axes_dims = Ints(axes_dims.begin(), axes_dims.end()), .base = base});
}

}  // namespace tessera
