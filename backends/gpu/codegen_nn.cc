// Kernels of the convolution-net, indexing and reshaping ops for every GPU language: conv2d,
// pool2d, upsample, concat, group_norm, reduce, gather and reshape. Each body is written once
// over a small language table (Lang: index type, accumulator declaration, output array, cast)
// and wrapped by the OpenCL C (codegen.cc, hence CUDA) or GLSL (codegen_glsl.cc) kernel frame.
//
// Determinism: every output element is accumulated in one fixed order whatever the box (conv2d:
// input channel, then kernel row, then kernel column, the bias last; group_norm: the group's
// elements row-major, two passes; reduce: the reduced axes row-major), so a sub-box is bitwise
// equal to the same elements of a full computation on the same device. Sizes come from the
// shape arguments, so sources depend on attributes and ranks only.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/gpu/codegen.h"
#include "backends/gpu/codegen_shared.h"
#include "engine/ops.h"

namespace tessera::gpu::detail {

const Lang kOpenClLang = {"long", "float", "out", "(float)", false, &kOpenCl};
const Lang kGlslLang = {"int", "precise float", "o_", "float", true, &kGlsl};

namespace {

constexpr int kConvTile = 8;  // output channels per conv2d work item
constexpr size_t kMaxConcatInputs = 6;  // bindings: parameters, output, inputs (8 on small GPUs)

std::string decode_all(const Lang& l) { return absl::StrCat("    ", l.index, " idx[8];\n    decode(g, b, e, -1, idx);\n"); }

std::string store(const Lang& l, const std::string& value) {
  return absl::StrCat("    ", l.out, "[at(out_base, os, idx)] = ", value, ";\n");
}

// conv2d over x [N, C, H, W], weight [O, C / groups, KH, KW], optional bias [O]: one work item
// per `tile` consecutive output channels of one output position (KernelShape::Blocks), so each
// input value read serves `tile` accumulators; consecutive items are consecutive output columns,
// so neighbouring items read neighbouring input columns and the same weights. Each channel's
// accumulator sees the same operations in the same order as alone: tiling never changes a value.
// A tile's channels past the box are computed on the box's last channel and not stored.
std::string conv2d(const Lang& l, const Node& node, int tile) {
  const Conv2dAttrs& a = node.attrs_as<Conv2dAttrs>();
  const std::string I = l.index;
  std::string s = absl::StrCat(
      "    const ", I, " blocks = (e[1] + ", tile - 1, ") / ", tile, ";\n",
      "    ", I, " eb[8], idx[8];\n",
      "    for (int d = 0; d < 8; ++d) eb[d] = e[d];\n",
      "    eb[1] = blocks;\n",
      "    decode(g, b, eb, -1, idx);\n",
      "    const ", I, " o0 = b[1] + (idx[1] - b[1]) * ", tile, ", o_last = b[1] + e[1] - 1;\n",
      "    const ", I, " H = sh0[2], W = sh0[3], CPG = sh1[1], KH = sh1[2], KW = sh1[3], OPG = sh1[0] / ", a.groups, ";\n",
      "    const ", I, " xb = in0_base + idx[0] * s0[0] + (o0 / OPG) * CPG * s0[1];\n",
      "    const ", I, " ih0 = idx[2] * ", a.stride_h, " - ", a.pad_h, ", iw0 = idx[3] * ", a.stride_w, " - ", a.pad_w, ";\n");
  for (int t = 0; t < tile; ++t)
    absl::StrAppend(&s, "    const ", I, " wb", t, " = in1_base + (o0 + ", t, " < o_last ? o0 + ", t, " : o_last) * s1[0];\n",
                    "    ", l.acc, " acc", t, " = 0.0f;\n");
  absl::StrAppend(&s, "    for (", I, " c = 0; c < CPG; ++c) {\n",
                  "      for (", I, " kh = 0; kh < KH; ++kh) {\n",
                  "        const ", I, " ih = ih0 + kh * ", a.dilation_h, ";\n",
                  "        if (ih < 0 || ih >= H) continue;\n",
                  "        const ", I, " xr = xb + c * s0[1] + ih * s0[2], wr = c * s1[1] + kh * s1[2];\n",
                  "        for (", I, " kw = 0; kw < KW; ++kw) {\n",
                  "          const ", I, " iw = iw0 + kw * ", a.dilation_w, ";\n",
                  "          if (iw < 0 || iw >= W) continue;\n",
                  "          const float x = in0[xr + iw * s0[3]];\n",
                  "          const ", I, " w = wr + kw * s1[3];\n");
  for (int t = 0; t < tile; ++t) absl::StrAppend(&s, "          acc", t, " = acc", t, " + x * in1[wb", t, " + w];\n");
  absl::StrAppend(&s, "        }\n      }\n    }\n");
  // The epilogue as the decomposition's kernels compute it: the residual added in float in the
  // add's operand order, then relu.
  const int residual = a.residual_input(node.inputs.size());
  const std::string r = absl::StrCat("in", residual, "[at(in", residual, "_base, s", residual, ", idx)]");
  for (int t = 0; t < tile; ++t) {
    const std::string acc = absl::StrCat("acc", t);
    absl::StrAppend(&s, "    if (o0 + ", t, " <= o_last) {\n      idx[1] = o0 + ", t, ";\n");
    if (a.has_bias(node.inputs.size())) absl::StrAppend(&s, "      ", acc, " = ", acc, " + in2[at(in2_base, s2, idx)];\n");
    if (residual >= 0)
      absl::StrAppend(&s, "      ", acc, " = ", a.residual == ConvResidual::ConvFirst ? absl::StrCat(acc, " + ", r) : absl::StrCat(r, " + ", acc),
                      ";\n");
    if (a.relu) absl::StrAppend(&s, "      ", acc, " = ", unary_expr(*l.dialect, UnaryFn::Relu, acc), ";\n");
    absl::StrAppend(&s, "  ", store(l, acc), "    }\n");
  }
  return s;
}

// pool2d (max propagates NaN; avg divides by kernel^2, padding included).
std::string pool2d(const Lang& l, const Node& node) {
  const Pool2dAttrs& a = node.attrs_as<Pool2dAttrs>();
  const std::string I = l.index;
  return absl::StrCat(decode_all(l), "    const ", I, " H = sh0[2], W = sh0[3];\n",
                      "    const ", I, " xb = in0_base + idx[0] * s0[0] + idx[1] * s0[1];\n",
                      "    ", l.acc, " m = -INFINITY;\n    ", l.acc, " sum = 0.0f;\n",
                      "    for (", I, " kh = 0; kh < ", a.kernel, "; ++kh) {\n",
                      "      const ", I, " ih = idx[2] * ", a.stride, " - ", a.padding, " + kh;\n",
                      "      if (ih < 0 || ih >= H) continue;\n",
                      "      for (", I, " kw = 0; kw < ", a.kernel, "; ++kw) {\n",
                      "        const ", I, " iw = idx[3] * ", a.stride, " - ", a.padding, " + kw;\n",
                      "        if (iw < 0 || iw >= W) continue;\n",
                      "        const float v = in0[xb + ih * s0[2] + iw * s0[3]];\n",
                      "        if (!isnan(m) && (v > m || isnan(v))) m = v;\n",
                      "        sum = sum + v;\n", "      }\n    }\n",
                      store(l, a.kind == PoolKind::Max ? "m" : absl::StrCat("sum / ", literal(static_cast<double>(a.kernel * a.kernel)))));
}

// upsample (nearest) of the last two axes.
std::string upsample(const Lang& l, const Node& node) {
  const int64_t scale = node.attrs_as<UpsampleAttrs>().scale;
  return absl::StrCat(decode_all(l), "    ", l.index, " src[8];\n", "    for (int d = 0; d < 8; ++d) src[d] = idx[d];\n",
                      "    src[R - 2] = src[R - 2] / ", scale, ";\n    src[R - 1] = src[R - 1] / ", scale, ";\n",
                      store(l, "in0[at(in0_base, s0, src)]"));
}

// reshape: the output element of row-major index L is the input element of row-major index L
// (the target shape is an attribute; the input's shape comes from its shape argument).
std::string reshape(const Lang& l, const Graph& graph, const Node& node) {
  const Shape& shape = node.attrs_as<ReshapeAttrs>().shape;
  const int in_rank = graph.node(node.inputs[0]).rank();
  const std::string I = l.index;
  std::string s = absl::StrCat(decode_all(l), "    ", I, " linear = 0;\n");
  for (size_t d = 0; d < shape.size(); ++d) absl::StrAppend(&s, "    linear = linear * ", shape[d], " + idx[", d, "];\n");
  absl::StrAppend(&s, "    ", I, " src = in0_base;\n");
  for (int d = in_rank - 1; d >= 0; --d)
    absl::StrAppend(&s, "    src = src + (linear % sh0[", d, "]) * s0[", d, "];\n    linear = linear / sh0[", d, "];\n");
  return s + store(l, "in0[src]");
}

// concat along `axis`: the input whose slab holds the position (slabs from the shape arguments).
std::string concat(const Lang& l, const Node& node) {
  const int64_t axis = node.attrs_as<ConcatAttrs>().axis;
  const std::string I = l.index;
  std::string s = absl::StrCat(decode_all(l), "    const ", I, " j = idx[", axis, "];\n    ", I, " start = 0;\n    float v = 0.0f;\n");
  for (size_t k = 0; k < node.inputs.size(); ++k)
    absl::StrAppend(&s, "    if (j >= start && j < start + sh", k, "[", axis, "]) { idx[", axis, "] = j - start; v = in", k, "[at(in", k,
                    "_base, s", k, ", idx)]; }\n    start = start + sh", k, "[", axis, "];\n");
  absl::StrAppend(&s, "    idx[", axis, "] = j;\n");
  return s + store(l, "v");
}

// Nested loops over axes [from, rank) of idx, axis d over [begin(d), end(d)), around `inner`.
template <class Begin, class End>
std::string loops(const Lang& l, int from, int rank, Begin begin, End end, const std::string& inner) {
  std::string open, close;
  for (int d = from; d < rank; ++d) {
    absl::StrAppend(&open, "    for (", l.index, " i", d, " = ", begin(d), "; i", d, " < ", end(d), "; ++i", d, ") {\n      idx[", d,
                    "] = i", d, ";\n");
    close += "    }\n";
  }
  return open + inner + close;
}

// group_norm over [N, C, spatial...]: one work item per (n, group) the box meets; mean, then the
// mean of centred squares over the whole group in row-major order, then the box's part written.
std::string group_norm(const Lang& l, const Node& node) {
  const GroupNormAttrs& a = node.attrs_as<GroupNormAttrs>();
  const int rank = node.rank();
  const std::string I = l.index, x = "in0[at(in0_base, s0, idx)]";
  std::string value = absl::StrCat("      ", l.acc, " y = (", x, " - mean) * inv_std;\n");
  if (a.has_weight) absl::StrAppend(&value, "      y = y * in1[at(in1_base, s1, idx)];\n");
  if (a.has_bias) {
    const int k = a.has_weight ? 2 : 1;
    absl::StrAppend(&value, "      y = y + in", k, "[at(in", k, "_base, s", k, ", idx)];\n");
  }
  // Statistics: channels c0 + [0, depth), all spatial positions; the write: the box's part.
  auto zero = [](int) { return std::string("0"); };
  auto full = [](int d) { return d == 1 ? std::string("depth") : absl::StrCat("sh0[", d, "]"); };
  auto box_begin = [](int d) { return d == 1 ? std::string("c_begin") : absl::StrCat("b[", d, "]"); };
  auto box_end = [](int d) { return d == 1 ? std::string("c_end") : absl::StrCat("b[", d, "] + e[", d, "]"); };
  return absl::StrCat(
      "    const ", I, " G0 = b[1] / depth, GN = (b[1] + e[1] - 1) / depth - G0 + 1;\n",
      "    const ", I, " c0 = (G0 + g % GN) * depth;\n", "    ", I, " idx[8];\n",
      "    for (int d = 0; d < 8; ++d) idx[d] = 0;\n", "    idx[0] = b[0] + g / GN;\n", "    ", I, " count = depth;\n",
      "    for (int d = 2; d < R; ++d) count = count * sh0[d];\n", "    ", l.acc, " sum = 0.0f;\n",
      loops(l, 1, rank, zero, full, absl::StrCat("      idx[1] = c0 + i1;\n      sum = sum + ", x, ";\n")),
      "    ", l.acc, " mean = sum / ", l.to_float, "(count);\n", "    ", l.acc, " ss = 0.0f;\n",
      loops(l, 1, rank, zero, full,
            absl::StrCat("      idx[1] = c0 + i1;\n      ", l.acc, " t = ", x, " - mean;\n      ss = ss + t * t;\n")),
      "    ", l.acc, " inv_std = 1.0f / sqrt(ss / ", l.to_float, "(count) + ", literal(a.eps), ");\n",
      "    const ", I, " c_begin = b[1] > c0 ? b[1] : c0, c_end = b[1] + e[1] < c0 + depth ? b[1] + e[1] : c0 + depth;\n",
      loops(l, 1, rank, box_begin, box_end, absl::StrCat(value, "      ", l.out, "[at(out_base, os, idx)] = y;\n")));
}

// reduce (sum, mean, prod, max, min) over the attribute's axes, in row-major order.
absl::StatusOr<std::string> reduce(const Lang& l, const Graph& graph, const Node& node) {
  const ReduceAttrs& a = node.attrs_as<ReduceAttrs>();
  if (a.fn != ReduceFn::Sum && a.fn != ReduceFn::Mean && a.fn != ReduceFn::Prod && a.fn != ReduceFn::Max && a.fn != ReduceFn::Min)
    return unsupported(node, absl::StrCat("reduce.", std::string(fn_name(a.fn))));
  const int in_rank = graph.node(node.inputs[0]).rank();
  std::vector<bool> reduced(static_cast<size_t>(in_rank), false);
  for (int64_t axis : a.axes) reduced[static_cast<size_t>(axis)] = true;
  const std::string I = l.index;
  std::string base = "in0_base", offset, open, close;
  int od = 0;
  for (int d = 0; d < in_rank; ++d) {
    if (!reduced[static_cast<size_t>(d)]) {
      absl::StrAppend(&base, " + idx[", od++, "] * s0[", d, "]");
      continue;
    }
    if (a.keepdims) ++od;
    absl::StrAppend(&open, "    for (", I, " r", d, " = 0; r", d, " < sh0[", d, "]; ++r", d, ") {\n");
    absl::StrAppend(&offset, " + r", d, " * s0[", d, "]");
    close += "    }\n";
  }
  const bool extremum = a.fn == ReduceFn::Max || a.fn == ReduceFn::Min;
  std::string update;
  switch (a.fn) {
    case ReduceFn::Prod: update = "      v = v * x;\n"; break;
    case ReduceFn::Max:
    case ReduceFn::Min:
      // The first value always replaces; a NaN wins and stays; ties keep the first.
      update = absl::StrCat("      if (first || (!isnan(v) && (isnan(x) || x ", a.fn == ReduceFn::Max ? ">" : "<", " v))) v = x;\n",
                            "      first = false;\n");
      break;
    default: update = "      v = v + x;\n"; break;
  }
  std::string s = absl::StrCat(decode_all(l), "    const ", I, " base = ", base, ";\n", "    ", l.acc, " v = ",
                               a.fn == ReduceFn::Prod ? "1.0f" : "0.0f", ";\n");
  if (extremum) absl::StrAppend(&s, "    ", l.glsl ? "bool" : "int", " first = ", l.glsl ? "true" : "1", ";\n");
  absl::StrAppend(&s, open, "      const float x = in0[base", offset, "];\n", update, close);
  if (a.fn == ReduceFn::Mean) {
    absl::StrAppend(&s, "    ", I, " count = 1;\n");
    for (int64_t axis : a.axes) absl::StrAppend(&s, "    count = count * sh0[", axis, "];\n");
    absl::StrAppend(&s, "    v = v / ", l.to_float, "(count);\n");
  }
  return s + store(l, "v");
}

// gather: the table row of each id (ids of the leading output axes, the row along the rest);
// an id out of range gives NaN.
std::string gather(const Lang& l, const Graph& graph, const Node& node) {
  const bool wide = graph.node(node.inputs[1]).dtype == DType::I64;
  std::string s = absl::StrCat(decode_all(l), "    const ", l.index, " o1 = at(in1_base, s1, idx);\n");
  if (!l.glsl) {
    absl::StrAppend(&s, "    const long id = (long)in1[o1];\n    const int ok = id >= 0 && id < sh0[0];\n");
  } else if (wide) {  // the low word, when the high word is its sign extension
    absl::StrAppend(&s, "    const int id = in1[2 * o1];\n    const bool ok = in1[2 * o1 + 1] == (id >> 31) && id >= 0 && id < sh0[0];\n");
  } else {
    absl::StrAppend(&s, "    const int id = in1[o1];\n    const bool ok = id >= 0 && id < sh0[0];\n");
  }
  absl::StrAppend(&s, "    float v = NAN;\n    if (ok) v = in0[at(in0_base, s0, idx) + id * in0_red];\n");
  return s + store(l, "v");
}

}  // namespace

absl::StatusOr<GeneratedKernel> nn_kernel(const Lang& lang, const Graph& graph, const Node& node, Form form) {
  GeneratedKernel k;
  k.rank = node.rank();
  absl::StatusOr<std::string> body;
  switch (form) {
    case Form::Conv2d: {
      // Tiles of output channels within one group (a tile reads one group's input channels).
      const int64_t groups = node.attrs_as<Conv2dAttrs>().groups;
      const int tile = groups == 1 ? kConvTile : 1;
      k.name = "tessera_conv2d", body = conv2d(lang, node, tile);
      k.shape = KernelShape::Blocks;
      k.axis = 1;
      k.depth = tile;
      break;
    }
    case Form::Pool2d: k.name = "tessera_pool2d", body = pool2d(lang, node); break;
    case Form::Upsample: k.name = "tessera_upsample", body = upsample(lang, node); break;
    case Form::Reshape: k.name = "tessera_reshape", body = reshape(lang, graph, node); break;
    case Form::Concat:
      if (node.inputs.size() > kMaxConcatInputs) return unsupported(node, absl::StrCat("more than ", kMaxConcatInputs, " inputs"));
      k.name = "tessera_concat", body = concat(lang, node);
      break;
    case Form::GroupNorm:
      if (k.rank < 2) return unsupported(node, "rank below 2");
      k.name = "tessera_group_norm", body = group_norm(lang, node);
      k.shape = KernelShape::Groups;
      k.axis = 1;
      k.depth = std::max<int64_t>(1, node.shape[1] / node.attrs_as<GroupNormAttrs>().groups);
      break;
    case Form::Reduce: k.name = "tessera_reduce", body = reduce(lang, graph, node); break;
    case Form::Gather: k.name = "tessera_gather", body = gather(lang, graph, node); break;
    default: return unsupported(node, "not a codegen_nn kernel");
  }
  if (!body.ok()) return body.status();
  if (lang.glsl) {
    k.name = "main";
    k.source = glsl_kernel(graph, node, *body, k.rank);
  } else {
    k.source = opencl_kernel(graph, node, k.name, *body, k.rank);
  }
  return k;
}

bool nn_input_strides(const Node& node, int input, const KernelInput& view, int out_rank, InputLayout& l) {
  const int r = view.rank();
  auto stride = [&](int d) { return view.strides[static_cast<size_t>(d)]; };
  auto own = [&]() {
    for (int d = 0; d < r; ++d) l.strides[static_cast<size_t>(d)] = stride(d);
    return true;
  };
  switch (node.kind) {
    case OpKind::Conv2d:
      if (input < 2 || input == node.attrs_as<Conv2dAttrs>().residual_input(node.inputs.size())) return own();
      l.strides[1] = stride(0);  // bias [O]: output channels
      return true;
    case OpKind::GroupNorm:
      if (input == 0) return false;
      l.strides[1] = stride(0);  // weight, bias [C]: channels
      return true;
    case OpKind::Reduce:
    case OpKind::Reshape:
      return own();
    case OpKind::Gather:
      if (input == 1) return own();  // ids: the leading output axes
      for (int d = 1; d < r; ++d) l.strides[static_cast<size_t>(out_rank - r + d)] = stride(d);
      l.red = stride(0);
      return true;
    default:
      return false;
  }
}

}  // namespace tessera::gpu::detail
