// GLSL 450 compute shaders for the vulkan plugin: the kernels of codegen.cc (OpenCL C) with the
// same operations in the same order, parameters read from an int32 array instead of arguments.
// Float temporaries are `precise`, so no compiler contracts a multiply and an add into an FMA.
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/gpu/codegen.h"
#include "backends/gpu/codegen_linear.h"
#include "backends/gpu/codegen_shared.h"
#include "engine/ops.h"

namespace tessera::gpu {

namespace {

using detail::kGlsl;
using detail::literal;

// Buffers, the push constant and helpers: erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7;
// GLSL has none), pow with C's special cases (GLSL leaves negative bases, zeros, infinities and
// NaN undefined), index decoding, addressing.
std::string preamble(int rank, const std::vector<DType>& types) {
  const size_t inputs = types.size();
  std::string s = absl::StrCat(
      "#version 450\n"
      "layout(local_size_x = ",
      kGlslLocalSize,
      ") in;\n"
      "layout(push_constant) uniform Push { int first; } push;\n"
      "layout(std430, set = 0, binding = 0) readonly buffer Params { int P[]; };\n"
      "layout(std430, set = 0, binding = 1) buffer Out { float o_[]; };\n");
  for (size_t k = 0; k < inputs; ++k)
    absl::StrAppend(&s, "layout(std430, set = 0, binding = ", k + 2, ") readonly buffer In", k, " { ",
                    types[k] == DType::F32 ? "float" : "int", " in", k, "[]; };\n");
  absl::StrAppend(
      &s, "#define R ", rank,
      "\n"
      "#define NAN uintBitsToFloat(0x7fc00000u)\n"
      "#define INFINITY uintBitsToFloat(0x7f800000u)\n"
      "float tessera_erf(float x) {\n"
      "  const float t = 1.0f / (1.0f + 0.3275911f * abs(x));\n"
      "  const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t\n"
      "                   - 0.284496736f) * t + 0.254829592f) * t;\n"
      "  const float y = 1.0f - p * exp(-x * x);\n"
      "  return x < 0.0f ? -y : y;\n"
      "}\n"
      "float tessera_pow(float a, float b) {\n"
      "  if (b == 0.0f || a == 1.0f) return 1.0f;\n"
      "  if (isnan(a) || isnan(b)) return NAN;\n"
      "  const bool odd = b == floor(b) && mod(b, 2.0f) == 1.0f;\n"
      "  if (a == 0.0f) return b > 0.0f ? (odd ? a : 0.0f) : (odd ? 1.0f / a : INFINITY);\n"
      "  if (isinf(b)) return abs(a) == 1.0f ? 1.0f : ((abs(a) > 1.0f) == (b > 0.0f) ? INFINITY : 0.0f);\n"
      "  if (isinf(a)) {\n"
      "    const float m = b > 0.0f ? INFINITY : 0.0f;\n"
      "    return a < 0.0f && odd ? -m : m;\n"
      "  }\n"
      "  if (a > 0.0f) return pow(a, b);\n"
      "  if (b != floor(b)) return NAN;\n"
      "  return odd ? -pow(-a, b) : pow(-a, b);\n"
      "}\n"
      "int at(int base, int st[8], int idx[8]) {\n"
      "  int o = base;\n"
      "  for (int d = 0; d < R; ++d) o += idx[d] * st[d];\n"
      "  return o;\n"
      "}\n"
      "// Element g of the box (row-major), skipping axis `skip` (-1: none), which is set to 0.\n"
      "void decode(int g, int b[8], int e[8], int skip, out int idx[8]) {\n"
      "  for (int d = 7; d >= R; --d) idx[d] = 0;\n"
      "  for (int d = R - 1; d >= 0; --d) {\n"
      "    if (d == skip) { idx[d] = 0; continue; }\n"
      "    idx[d] = b[d] + g % e[d];\n"
      "    g /= e[d];\n"
      "  }\n"
      "}\n");
  return s;
}

// main(): loads the dispatch's parameters, then loops over its work items; `body` sees g (the
// item), depth, b, e (box), out_base, os and per input in<k>_base, s<k>, in<k>_red.
// `globals` (tables, helpers) go between the preamble and main(). Integer inputs are int
// buffers (i64: two ints per element, low word first).
std::string shader(int rank, const std::vector<DType>& types, const std::string& body, const std::string& globals = "") {
  const size_t inputs = types.size();
  std::string s = absl::StrCat(preamble(rank, types), globals,
                               "void main() {\n"
                               "  const int p = push.first;\n"
                               "  const uint items = uint(P[p]);\n"
                               "  const int depth = P[p + 1];\n"
                               "  const int out_base = P[p + 2];\n"
                               "  int os[8], b[8], e[8];\n"
                               "  for (int d = 0; d < 8; ++d) { os[d] = P[p + 3 + d]; b[d] = P[p + "
                               "11 + d]; e[d] = P[p + 19 + d]; }\n");
  for (size_t k = 0; k < inputs; ++k) {
    const size_t at = kGlslFixedParams + k * kGlslInputParams;
    absl::StrAppend(&s, "  const int in", k, "_base = P[p + ", at, "], in", k, "_red = P[p + ",
                    at + 9, "];\n", "  int s", k, "[8], sh", k, "[8];\n  for (int d = 0; d < 8; ++d) { s", k,
                    "[d] = P[p + ", at + 1, " + d]; sh", k, "[d] = P[p + ", at + 10, " + d]; }\n");
  }
  absl::StrAppend(&s,
                  "  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;\n"
                  "  for (uint gu = gl_GlobalInvocationID.x; gu < items; gu += step) {\n"
                  "    const int g = int(gu);\n",
                  body, "  }\n}\n");
  return s;
}

std::string shader(int rank, size_t inputs, const std::string& body) {
  return shader(rank, std::vector<DType>(inputs, DType::F32), body);
}

std::vector<DType> input_types(const Graph& graph, const Node& node) {
  std::vector<DType> types;
  for (NodeId in : node.inputs) types.push_back(graph.node(in).dtype);
  return types;
}

GeneratedKernel elementwise(const Node& node, size_t inputs, const std::string& value) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "main";
  std::string body = "    int idx[8];\n    decode(g, b, e, -1, idx);\n";
  for (size_t i = 0; i < inputs; ++i)
    absl::StrAppend(&body, "    const float a", i, " = in", i, "[at(in", i, "_base, s", i,
                    ", idx)];\n");
  absl::StrAppend(&body, value, "    o_[at(out_base, os, idx)] = v;\n");
  k.source = shader(k.rank, inputs, body);
  return k;
}

// softmax / log_softmax along `axis`: the whole row, in order.
GeneratedKernel softmax(const Node& node) {
  const SoftmaxAttrs& a = node.attrs_as<SoftmaxAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = static_cast<int>(a.axis);
  k.name = "main";
  k.source =
      shader(k.rank, 1,
             absl::StrCat("    const int A = ", k.axis, ";\n",
                          "    int idx[8];\n    decode(g, b, e, A, idx);\n"
                          "    const int ox = at(in0_base, s0, idx), sa = s0[A];\n"
                          "    precise float m = -INFINITY;\n"
                          "    for (int j = 0; j < depth; ++j) m = max(m, in0[ox + j * sa]);\n"
                          "    precise float s = 0.0f;\n"
                          "    for (int j = 0; j < depth; ++j) s = s + exp(in0[ox + j * sa] - m);\n"
                          "    for (int j = b[A]; j < b[A] + e[A]; ++j) {\n"
                          "      idx[A] = j;\n"
                          "      const float x = in0[ox + j * sa];\n",
                          a.log ? "      o_[at(out_base, os, idx)] = (x - m) - log(s);\n"
                                : "      o_[at(out_base, os, idx)] = exp(x - m) / s;\n",
                          "    }\n"));
  return k;
}

GeneratedKernel rms_norm(const Node& node) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = k.rank - 1;
  const bool weight = node.inputs.size() > 1;
  k.name = "main";
  k.source =
      shader(k.rank, node.inputs.size(),
             absl::StrCat("    const int A = R - 1;\n"
                          "    int idx[8];\n    decode(g, b, e, A, idx);\n"
                          "    const int ox = at(in0_base, s0, idx), sa = s0[A];\n"
                          "    precise float ss = 0.0f;\n"
                          "    for (int j = 0; j < depth; ++j) { const float x = in0[ox + j * sa]; "
                          "ss = ss + x * x; }\n"
                          "    precise float scale = 1.0f / sqrt(ss / float(depth) + ",
                          literal(node.attrs_as<RmsNormAttrs>().eps), ");\n",
                          "    for (int j = b[A]; j < b[A] + e[A]; ++j) {\n"
                          "      idx[A] = j;\n",
                          weight ? "      o_[at(out_base, os, idx)] = (in0[ox + j * sa] * scale) * "
                                   "in1[at(in1_base, s1, idx)];\n"
                                 : "      o_[at(out_base, os, idx)] = in0[ox + j * sa] * scale;\n",
                          "    }\n"));
  return k;
}

// rope and rope_multi (see codegen.cc).
GeneratedKernel rope(const Graph& graph, const Node& node) {
  const detail::RopeTable t = detail::rope_table(node);
  const std::vector<DType> types = input_types(graph, node);
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "main";
  // An i64 position is exact when it fits 32 bits (the usual case), else rounded via its words.
  const std::string position =
      types[1] == DType::I64
          ? "float tessera_position(int o) {\n"
            "  const int lo = in1[2 * o], hi = in1[2 * o + 1];\n"
            "  return hi == (lo >> 31) ? float(lo) : float(hi) * 4294967296.0f + float(uint(lo));\n"
            "}\n"
          : "float tessera_position(int o) { return float(in1[o]); }\n";
  const std::string pairing =
      t.half_split ? absl::StrCat("      const bool first = c < ", t.rotated / 2, ";\n      const int pair = first ? c : c - ",
                                  t.rotated / 2, ", partner = first ? c + ", t.rotated / 2, " : c - ", t.rotated / 2, ";\n")
                   : "      const bool first = c % 2 == 0;\n      const int pair = c / 2, partner = first ? c + 1 : c - 1;\n";
  const std::string globals = absl::StrCat("const float tessera_frequency[] = float[](", t.frequencies, ");\n",
                                           "const int tessera_axis[] = int[](", t.axes, ");\n", position);
  k.source = shader(k.rank, types,
                    absl::StrCat("    int idx[8];\n    decode(g, b, e, -1, idx);\n"
                                 "    const int c = idx[R - 1], ox = at(in0_base, s0, idx);\n"
                                 "    precise float v = in0[ox];\n"
                                 "    if (c < ", t.rotated, ") {\n", pairing,
                                 "      const float pos = tessera_position(at(in1_base, s1, idx) + tessera_axis[pair] * in1_red);\n"
                                 "      precise float theta = pos * tessera_frequency[pair];\n"
                                 "      const float cs = cos(theta), sn = sin(theta);\n"
                                 "      const float other = in0[ox + (partner - c) * s0[R - 1]];\n"
                                 "      v = first ? v * cs - other * sn : other * sn + v * cs;\n"
                                 "    }\n"
                                 "    o_[at(out_base, os, idx)] = v;\n"),
                    globals);
  return k;
}

GeneratedKernel layer_norm(const Node& node) {
  const LayerNormAttrs& a = node.attrs_as<LayerNormAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = k.rank - 1;
  k.name = "main";
  std::string value = "(in0[ox + j * sa] - mean) * inv_std";
  if (a.has_weight) value = absl::StrCat("(", value, ") * in1[at(in1_base, s1, idx)]");
  if (a.has_bias) {
    const int bias = a.has_weight ? 2 : 1;
    value = absl::StrCat("(", value, ") + in", bias, "[at(in", bias, "_base, s", bias, ", idx)]");
  }
  k.source = shader(k.rank, node.inputs.size(),
                    absl::StrCat("    const int A = R - 1;\n"
                                 "    int idx[8];\n    decode(g, b, e, A, idx);\n"
                                 "    const int ox = at(in0_base, s0, idx), sa = s0[A];\n"
                                 "    precise float sum = 0.0f;\n"
                                 "    for (int j = 0; j < depth; ++j) sum = sum + in0[ox + j * sa];\n"
                                 "    precise float mean = sum / float(depth);\n"
                                 "    precise float ss = 0.0f;\n"
                                 "    for (int j = 0; j < depth; ++j) { precise float x = in0[ox + j * sa] - mean; "
                                 "ss = ss + x * x; }\n"
                                 "    precise float inv_std = 1.0f / sqrt(ss / float(depth) + ",
                                 literal(a.eps), ");\n",
                                 "    for (int j = b[A]; j < b[A] + e[A]; ++j) {\n"
                                 "      idx[A] = j;\n"
                                 "      precise float y = ", value, ";\n"
                                 "      o_[at(out_base, os, idx)] = y;\n"
                                 "    }\n"));
  return k;
}

// attention (see codegen.cc).
GeneratedKernel attention(const Node& node) {
  const AttentionAttrs& a = node.attrs_as<AttentionAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "main";
  const std::string first = a.causal && a.window > 0 ? absl::StrCat("max(0, t - ", a.window - 1, ")") : "0";
  const std::string score = detail::attention_score(kGlsl, node, "int");
  k.source = shader(k.rank, 3,
                    absl::StrCat("    const int T = R - 3, H = R - 2, C = R - 1;\n"
                                 "    int idx[8], kv[8];\n    decode(g, b, e, -1, idx);\n"
                                 "    for (int d = 0; d < 8; ++d) kv[d] = idx[d];\n"
                                 "    const int t = idx[T], j = idx[C];\n"
                                 "    kv[T] = 0; kv[C] = 0; kv[H] = idx[H] / in2_red;\n"
                                 "    idx[C] = 0;\n"
                                 "    const int oq = at(in0_base, s0, idx), qd = s0[C];\n"
                                 "    const int ok = at(in1_base, s1, kv), ks = s1[T], kd = s1[C];\n"
                                 "    const int ov = at(in2_base, s2, kv) + j * s2[C], vs = s2[T];\n"
                                 "    const int first = ", first, ", last = ", a.causal ? "t + 1" : "in1_red", ";\n",
                                 "    precise float m = -INFINITY;\n"
                                 "    for (int s = first; s < last; ++s) {\n", score,
                                 "      m = max(m, x);\n"
                                 "    }\n"
                                 "    precise float den = 0.0f, acc = 0.0f;\n"
                                 "    for (int s = first; s < last; ++s) {\n", score,
                                 "      precise float w = exp(x - m);\n"
                                 "      den = den + w;\n"
                                 "      acc = acc + w * in2[ov + s * vs];\n"
                                 "    }\n"
                                 "    idx[C] = j;\n"
                                 "    precise float y = acc / den;\n"
                                 "    o_[at(out_base, os, idx)] = y;\n"));
  return k;
}

}  // namespace

std::string detail::glsl_kernel(const Graph& graph, const Node& node, const std::string& body, int rank) {
  return shader(rank, input_types(graph, node), body);
}

absl::StatusOr<GeneratedKernel> generate_glsl(const Graph& graph, const Node& node) {
  absl::StatusOr<detail::Form> form = detail::kernel_form(graph, node);
  if (!form.ok()) return form.status();
  GeneratedKernel k;
  switch (*form) {
    case detail::Form::Unary:
      k = elementwise(
          node, 1,
          absl::StrCat("    ", kGlsl.temp, " v = ",
                       detail::unary_expr(kGlsl, node.attrs_as<UnaryAttrs>().fn, "a0"), ";\n"));
      break;
    case detail::Form::Binary:
      k = elementwise(
          node, 2,
          absl::StrCat("    ", kGlsl.temp, " v = ",
                       detail::binary_expr(kGlsl, node.attrs_as<BinaryAttrs>().fn, "a0", "a1"),
                       ";\n"));
      break;
    case detail::Form::Fused: {
      absl::StatusOr<std::string> body = detail::fused_body(kGlsl, node);
      if (!body.ok()) return body.status();
      k = elementwise(node, node.inputs.size(), *body);
      break;
    }
    case detail::Form::Dot: {
      absl::StatusOr<GeneratedKernel> tiled = detail::tiled_dot_glsl(graph, node);
      if (!tiled.ok()) return tiled.status();
      k = std::move(*tiled);
      break;
    }
    case detail::Form::Softmax:
      k = softmax(node);
      break;
    case detail::Form::RmsNorm:
      k = rms_norm(node);
      break;
    case detail::Form::Copy:
      k = elementwise(node, 1, absl::StrCat("    ", kGlsl.temp, " v = a0;\n"));
      break;
    case detail::Form::Rope:
      k = rope(graph, node);
      break;
    case detail::Form::LayerNorm:
      k = layer_norm(node);
      break;
    case detail::Form::Attention:
      k = attention(node);
      break;
    default: {  // codegen_nn.cc
      absl::StatusOr<GeneratedKernel> nn = detail::nn_kernel(detail::kGlslLang, graph, node, *form);
      if (!nn.ok()) return nn.status();
      k = std::move(*nn);
      break;
    }
  }
  detail::set_depth(graph, node, k);
  return k;
}

absl::Status append_glsl_params(const InputLayout& out, const Box& box, int64_t items,
                                int64_t depth, std::span<const InputLayout> inputs,
                                std::vector<int32_t>& params) {
  const size_t first = params.size();
  bool fits = true;
  auto put = [&](int64_t v) {
    fits = fits && v >= std::numeric_limits<int32_t>::min() &&
           v <= std::numeric_limits<int32_t>::max();
    params.push_back(static_cast<int32_t>(v));
  };
  put(items);
  put(depth);
  put(out.base);
  for (int64_t s : out.strides) put(s);
  for (int d = 0; d < 8; ++d) put(d < box.rank() ? box.begin(d) : 0);
  for (int d = 0; d < 8; ++d) put(d < box.rank() ? box.extent(d) : 1);
  for (const InputLayout& in : inputs) {
    put(in.base);
    for (int64_t s : in.strides) put(s);
    put(in.red);
    for (int64_t n : in.shape) put(n);
  }
  if (fits) return absl::OkStatus();
  params.resize(first);
  return absl::OutOfRangeError(
      "[gpu] a GLSL kernel parameter (offset, stride or size) does not fit 32 bits");
}

}  // namespace tessera::gpu
