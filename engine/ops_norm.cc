// Normalisations with their own exact rules: rms_norm, layer_norm (over the last axis) and
// group_norm (over groups of channels and all spatial positions).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

void check_eps(std::string_view op, double eps) {
  if (!(eps >= 0) || std::isinf(eps))
    fail(op, absl::StrCat("eps must be finite and >= 0, got ", eps));
}

// Checks an affine parameter (weight or bias) against the normalised tensor: shape [size] and
// the same dtype.
void check_param(std::string_view op, std::string_view what, const Node& param, const Node& x,
                 int64_t size) {
  if (param.shape != Shape{size})
    fail(op, absl::StrCat(std::string(what), " shape ", shape_string(param.shape), " must be [",
                          size, "]"));
  if (param.dtype != x.dtype)
    fail(op, absl::StrCat(std::string(what), " dtype ", dtype_name(param.dtype),
                          " differs from input dtype ", dtype_name(x.dtype)));
}

// Checks x of a norm over the last axis: float, rank >= 1.
void check_row_input(std::string_view op, const Node& x) {
  if (!is_float(x.dtype))
    fail(op, absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
  if (x.rank() < 1) fail(op, "requires rank >= 1");
}

// ---- row norms (rms_norm, layer_norm): input 0 is x, the others are per-column parameters --
// forward: x dirt -> the whole rows; parameter dirt in cols [a, b) -> every row, cols [a, b)
// (exact: the row statistics do not depend on the parameters).
void row_norm_forward(const Graph&, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  const int last = node.rank() - 1;
  Box b = Box::full(node.shape);
  if (input == 0) {
    b = dirty;
    b[last] = Interval(0, node.shape[last]);
  } else {
    b[last] = dirty[0];
  }
  out.add(b);
}

// needed: x -> the box's rows in full; parameters -> the box's cols.
void row_norm_needed(const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
  const int last = node.rank() - 1;
  if (out.empty()) {
    inputs[0] = Box::of_rank(node.rank());
    for (size_t k = 1; k < inputs.size(); ++k) inputs[k] = Box::of_rank(1);
    return;
  }
  inputs[0] = out;
  inputs[0][last] = Interval(0, node.shape[last]);
  for (size_t k = 1; k < inputs.size(); ++k) inputs[k] = Box{out[last]};
}

// Checks that the presence flags of an optional-parameter norm agree with the number of inputs.
void check_presence(std::string_view op, const Node& node, bool has_weight, bool has_bias) {
  if (node.inputs.size() != size_t{1} + has_weight + has_bias)
    fail(op, "presence flags disagree with the number of inputs");
}

std::string eps_string(const char* op, double eps) { return absl::StrCat(op, "{eps=", eps, "}"); }

// Inputs of a norm: x, then weight and bias when present.
std::vector<Tensor> norm_inputs(std::string_view op, Tensor x, Tensor weight, Tensor bias) {
  builder_graph(op, {{"x", x}, {"weight", weight, true}, {"bias", bias, true}});
  std::vector<Tensor> in = {x};
  if (weight.graph != nullptr) in.push_back(weight);
  if (bias.graph != nullptr) in.push_back(bias);
  return in;
}

// Scalar of a norm's dtype.
Tensor scalar_like(Tensor x, double value) {
  return x.graph->scalar(static_cast<float>(value), x.dtype());
}

// (x - mean) * rsqrt(biased variance + eps) with statistics over `axis`.
Tensor standardize(Tensor x, int64_t axis, double eps) {
  const Tensor centred = x - mean(x, {axis}, true);
  return centred * rsqrt(mean(centred * centred, {axis}, true) + scalar_like(x, eps));
}

}  // namespace

// ---- rms_norm(x, weight?): RmsNormAttrs {eps} ---------------------------------------------
// x * 1 / sqrt(mean(x^2 over the last axis) + eps) * weight; weight [D] optional (present when
// there are two inputs), same float dtype as x.
// Decomposition: x * rsqrt(mean(x * x, -1, keepdims) + eps) * weight.
std::string RmsNormAttrs::to_string() const { return eps_string("rmsnorm", eps); }

const OpDef kRmsNormDef{
    .name = "rmsnorm",
    .min_inputs = 1,
    .max_inputs = 2,
    .infer =
        [](const Graph& g, Node& node) {
          check_eps("rmsnorm", node.attrs_as<RmsNormAttrs>().eps);
          const Node& x = input_node(g, node, 0);
          check_row_input("rmsnorm", x);
          if (node.inputs.size() == 2)
            check_param("rmsnorm", "weight", input_node(g, node, 1), x, x.shape.back());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward = row_norm_forward,
    .needed = row_norm_needed,
    .decompose =
        [](std::span<const Tensor> inputs, const Node& node) {
          const Tensor x = inputs[0];
          const double eps = node.attrs_as<RmsNormAttrs>().eps;
          const Tensor y = x * rsqrt(mean(x * x, {-1}, true) + scalar_like(x, eps));
          return inputs.size() > 1 ? y * inputs[1] : y;
        },
};

Tensor rms_norm(Tensor x, Tensor weight, double eps) {
  std::vector<Tensor> in = norm_inputs("rmsnorm", x, weight, Tensor{});
  return x.graph->add_node(in, RmsNormAttrs{eps});
}

// ---- layer_norm(x, weight?, bias?): LayerNormAttrs {eps, has_weight, has_bias} ------------
// (x - mean) / sqrt(var + eps) * weight + bias over the last axis, biased variance (like
// torch). weight and bias [D], same float dtype as x; inputs are x, then the present ones.
// Decomposition: xc = x - mean(x, -1, keepdims); xc * rsqrt(mean(xc * xc, -1, keepdims) + eps)
// * weight + bias.
std::string LayerNormAttrs::to_string() const { return eps_string("layernorm", eps); }

const OpDef kLayerNormDef{
    .name = "layernorm",
    .min_inputs = 1,
    .max_inputs = 3,
    .infer =
        [](const Graph& g, Node& node) {
          const LayerNormAttrs& a = node.attrs_as<LayerNormAttrs>();
          check_presence("layernorm", node, a.has_weight, a.has_bias);
          check_eps("layernorm", a.eps);
          const Node& x = input_node(g, node, 0);
          check_row_input("layernorm", x);
          const int has_weight = a.has_weight ? 1 : 0;
          if (has_weight)
            check_param("layernorm", "weight", input_node(g, node, 1), x, x.shape.back());
          if (a.has_bias)
            check_param("layernorm", "bias", input_node(g, node, 1 + has_weight), x,
                        x.shape.back());
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward = row_norm_forward,
    .needed = row_norm_needed,
    .decompose =
        [](std::span<const Tensor> inputs, const Node& node) {
          const LayerNormAttrs& a = node.attrs_as<LayerNormAttrs>();
          Tensor y = standardize(inputs[0], -1, a.eps);
          if (a.has_weight) y = y * inputs[1];
          if (a.has_bias) y = y + inputs[a.has_weight ? 2 : 1];
          return y;
        },
};

Tensor layer_norm(Tensor x, Tensor weight, Tensor bias, double eps) {
  std::vector<Tensor> in = norm_inputs("layernorm", x, weight, bias);
  return x.graph->add_node(in, LayerNormAttrs{.eps = eps,
                                              .has_weight = weight.graph != nullptr,
                                              .has_bias = bias.graph != nullptr});
}

// ---- group_norm(x [N, C, ...spatial], weight?, bias?) --------------------------------------
// GroupNormAttrs {groups, eps, has_weight, has_bias}. Statistics (mean, biased variance) per
// (sample, group of C / groups channels) over the group's channels and all spatial positions;
// weight and bias [C], same float dtype as x; inputs are x, then the present ones.
// Rules: x dirt -> its samples, the whole groups its channels touch, all spatial positions;
// parameter dirt in channels [a, b) -> every sample, channels [a, b), all spatial positions.
// needed: x -> the box's samples, the whole groups of its channels, all spatial; parameters ->
// the box's channels.
// Decomposition (as torch's native group_norm): x reshaped to [N, groups, C / groups * spatial],
// standardised over the last axis like layer_norm, reshaped back; then * weight + bias viewed as
// [C, 1, ...] (one 1 per spatial dim).
namespace {

// Channels [a, b) widened to the whole groups they touch (groups of `size` channels).
Interval whole_groups(Interval channels, int64_t size) {
  if (channels.empty() || size <= 0) return channels;
  return Interval(channels.begin / size * size, ((channels.end - 1) / size + 1) * size);
}

int64_t group_size(const Node& node) {
  return node.shape[1] / node.attrs_as<GroupNormAttrs>().groups;
}

void group_norm_forward(const Graph&, const Node& node, int input, const Box& dirty, Region& out) {
  if (dirty.empty()) return;
  Box b = Box::full(node.shape);
  if (input == 0) {
    b[0] = dirty[0];
    b[1] = whole_groups(dirty[1], group_size(node));
  } else {
    b[1] = dirty[0];
  }
  out.add(b);
}

void group_norm_needed(const Graph&, const Node& node, const Box& out, std::span<Box> inputs) {
  if (out.empty()) {
    inputs[0] = Box::of_rank(node.rank());
    for (size_t k = 1; k < inputs.size(); ++k) inputs[k] = Box::of_rank(1);
    return;
  }
  inputs[0] = Box::full(node.shape);
  inputs[0][0] = out[0];
  inputs[0][1] = whole_groups(out[1], group_size(node));
  for (size_t k = 1; k < inputs.size(); ++k) inputs[k] = Box{out[1]};
}

Tensor group_norm_decompose(std::span<const Tensor> inputs, const Node& node) {
  const GroupNormAttrs& a = node.attrs_as<GroupNormAttrs>();
  const Tensor x = inputs[0];
  const Shape& shape = node.shape;
  const int64_t groups = shape[0] * a.groups;
  const Shape grouped = {shape[0], a.groups, shape_volume(shape) / std::max<int64_t>(1, groups)};
  Tensor y = reshape(standardize(reshape(x, grouped), -1, a.eps), shape);
  Shape per_channel(shape.size() - 1, 1);
  per_channel[0] = shape[1];
  if (a.has_weight) y = y * reshape(inputs[1], per_channel);
  if (a.has_bias) y = y + reshape(inputs[a.has_weight ? 2 : 1], per_channel);
  return y;
}

}  // namespace

std::string GroupNormAttrs::to_string() const {
  return absl::StrCat("groupnorm{groups=", groups, ",eps=", eps, "}");
}

const OpDef kGroupNormDef{
    .name = "groupnorm",
    .min_inputs = 1,
    .max_inputs = 3,
    .infer =
        [](const Graph& g, Node& node) {
          const GroupNormAttrs& a = node.attrs_as<GroupNormAttrs>();
          check_presence("groupnorm", node, a.has_weight, a.has_bias);
          check_eps("groupnorm", a.eps);
          const Node& x = input_node(g, node, 0);
          if (!is_float(x.dtype))
            fail("groupnorm", absl::StrCat("requires a float input, got ", dtype_name(x.dtype)));
          if (x.rank() < 2) fail("groupnorm", "requires x of shape [N, C, ...spatial]");
          const int64_t groups = a.groups;
          const int64_t channels = x.shape[1];
          if (groups < 1) fail("groupnorm", absl::StrCat("groups must be >= 1, got ", groups));
          if (channels % groups != 0)
            fail("groupnorm",
                 absl::StrCat(groups, " groups do not divide ", channels, " channels"));
          const int has_weight = a.has_weight ? 1 : 0;
          if (has_weight) check_param("groupnorm", "weight", input_node(g, node, 1), x, channels);
          if (a.has_bias)
            check_param("groupnorm", "bias", input_node(g, node, 1 + has_weight), x, channels);
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward = group_norm_forward,
    .needed = group_norm_needed,
    .decompose = group_norm_decompose,
};

Tensor group_norm(Tensor x, int64_t groups, Tensor weight, Tensor bias, double eps) {
  std::vector<Tensor> in = norm_inputs("groupnorm", x, weight, bias);
  return x.graph->add_node(in, GroupNormAttrs{.groups = groups,
                                              .eps = eps,
                                              .has_weight = weight.graph != nullptr,
                                              .has_bias = bias.graph != nullptr});
}

}  // namespace tessera
