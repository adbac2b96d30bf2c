#include "backends/gpu/codegen_shared.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "backends/gpu/codegen_linear.h"
#include "engine/op_def.h"

namespace tessera::gpu::detail {

const Dialect kOpenCl = {"fabs", "fmin", "fmax", "rint", "erf", "pow", "const float"};
const Dialect kGlsl = {"abs", "min", "max", "roundEven", "tessera_erf", "tessera_pow", "precise float"};

absl::Status unsupported(const Node& node, std::string_view why) {
  return absl::UnimplementedError(absl::StrCat("[", op_display_name(node), "] no GPU kernel: ", std::string(why)));
}

std::string literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<float>(v));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // "1f" is no float literal
  return s + "f";
}

std::string unary_expr(const Dialect& d, UnaryFn fn, const std::string& x) {
  switch (fn) {
    case UnaryFn::Neg: return absl::StrCat("(-", x, ")");
    case UnaryFn::Exp: return absl::StrCat("exp(", x, ")");
    case UnaryFn::Log: return absl::StrCat("log(", x, ")");
    case UnaryFn::Sqrt: return absl::StrCat("sqrt(", x, ")");
    case UnaryFn::Rsqrt: return absl::StrCat("(1.0f / sqrt(", x, "))");
    case UnaryFn::Abs: return absl::StrCat(d.fabs, "(", x, ")");
    case UnaryFn::Sign: return absl::StrCat("(", x, " > 0.0f ? 1.0f : (", x, " < 0.0f ? -1.0f : ", x, "))");
    case UnaryFn::Reciprocal: return absl::StrCat("(1.0f / ", x, ")");
    case UnaryFn::Relu: return absl::StrCat("(", x, " > 0.0f ? ", x, " : 0.0f)");
    case UnaryFn::Sigmoid: return absl::StrCat("(1.0f / (1.0f + exp(-", x, ")))");
    case UnaryFn::Tanh: return absl::StrCat("tanh(", x, ")");
    case UnaryFn::Sin: return absl::StrCat("sin(", x, ")");
    case UnaryFn::Cos: return absl::StrCat("cos(", x, ")");
    case UnaryFn::GeluTanh:
      return absl::StrCat("(0.5f * ", x, " * (1.0f + tanh(", literal(std::sqrt(2.0 / M_PI)), " * (", x, " + 0.044715f * ", x,
                          " * ", x, " * ", x, "))))");
    case UnaryFn::GeluErf:
      return absl::StrCat("(0.5f * ", x, " * (1.0f + ", d.erf, "(", x, " * ", literal(1.0 / std::sqrt(2.0)), ")))");
    case UnaryFn::Erf: return absl::StrCat(d.erf, "(", x, ")");
    case UnaryFn::Silu: return absl::StrCat("(", x, " / (1.0f + exp(-", x, ")))");
    case UnaryFn::Floor: return absl::StrCat("floor(", x, ")");
    case UnaryFn::Ceil: return absl::StrCat("ceil(", x, ")");
    case UnaryFn::Round: return absl::StrCat(d.rint, "(", x, ")");
    case UnaryFn::Count: break;
  }
  return "";
}

std::string binary_expr(const Dialect& d, BinaryFn fn, const std::string& a, const std::string& b) {
  switch (fn) {
    case BinaryFn::Add: return absl::StrCat("(", a, " + ", b, ")");
    case BinaryFn::Sub: return absl::StrCat("(", a, " - ", b, ")");
    case BinaryFn::Mul: return absl::StrCat("(", a, " * ", b, ")");
    case BinaryFn::Div: return absl::StrCat("(", a, " / ", b, ")");
    case BinaryFn::Pow: return absl::StrCat(d.pow, "(", a, ", ", b, ")");
    case BinaryFn::Minimum:
      return absl::StrCat("((isnan(", a, ") || isnan(", b, ")) ? NAN : ", d.fmin, "(", a, ", ", b, "))");
    case BinaryFn::Maximum:
      return absl::StrCat("((isnan(", a, ") || isnan(", b, ")) ? NAN : ", d.fmax, "(", a, ", ", b, "))");
    default: return "";
  }
}

absl::StatusOr<std::string> fused_body(const Dialect& d, const Node& node) {
  const auto& program = node.attrs_as<FusedElementwiseAttrs>().program;
  const size_t n = node.inputs.size();
  auto value = [&](int32_t i) { return i < static_cast<int32_t>(n) ? absl::StrCat("a", i) : absl::StrCat("t", i - n); };
  std::string body;
  for (size_t i = 0; i < program.size(); ++i) {
    const FusedInstr& instr = program[i];
    const std::string expr = instr.kind == OpKind::Unary
                                 ? unary_expr(d, static_cast<UnaryFn>(instr.fn), value(instr.a))
                                 : binary_expr(d, static_cast<BinaryFn>(instr.fn), value(instr.a), value(instr.b));
    if (expr.empty()) return unsupported(node, "instruction without a GPU form");
    absl::StrAppend(&body, "  ", d.temp, " t", i, " = ", expr, ";\n");
  }
  absl::StrAppend(&body, "  ", d.temp, " v = t", program.size() - 1, ";\n");
  return body;
}

absl::StatusOr<Form> kernel_form(const Graph& graph, const Node& node) {
  if (node.dtype != DType::F32) return unsupported(node, absl::StrCat(dtype_name(node.dtype), " output"));
  const bool positions = node.kind == OpKind::Rope || node.kind == OpKind::RopeMulti || node.kind == OpKind::Gather;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const DType t = graph.node(node.inputs[k]).dtype;
    if (t == DType::F32 || (positions && k == 1 && (t == DType::I32 || t == DType::I64))) continue;
    if (node.kind == OpKind::Linear && k == 1 && has_block_decoder(t)) continue;  // decoded in the kernel
    return unsupported(node, absl::StrCat(dtype_name(t), " input"));
  }
  if (node.rank() < 1 || node.rank() > 8) return unsupported(node, "rank 0 output");
  switch (node.kind) {
    case OpKind::Unary:
      if (unary_expr(kOpenCl, node.attrs_as<UnaryAttrs>().fn, "x").empty()) break;
      return Form::Unary;
    case OpKind::Binary:
      if (binary_expr(kOpenCl, node.attrs_as<BinaryAttrs>().fn, "a", "b").empty()) break;
      return Form::Binary;
    case OpKind::FusedElementwise:
      return Form::Fused;
    case OpKind::Matmul:
      if (graph.node(node.inputs[0]).rank() < 2 || graph.node(node.inputs[1]).rank() < 2) break;
      return Form::Dot;
    case OpKind::Linear:
      return Form::Dot;
    case OpKind::Softmax:
      return Form::Softmax;
    case OpKind::RmsNorm:
      return Form::RmsNorm;
    case OpKind::Rope:
    case OpKind::RopeMulti:
      return Form::Rope;
    case OpKind::LayerNorm:
      return Form::LayerNorm;
    case OpKind::Attention:
      return Form::Attention;
    case OpKind::Slice:
    case OpKind::Permute:
    case OpKind::Expand:
      return Form::Copy;
    case OpKind::Conv2d: return Form::Conv2d;
    case OpKind::Pool2d: return Form::Pool2d;
    case OpKind::Upsample: return Form::Upsample;
    case OpKind::Concat: return Form::Concat;
    case OpKind::GroupNorm: return Form::GroupNorm;
    case OpKind::Reduce: return Form::Reduce;
    case OpKind::Gather: return Form::Gather;
    case OpKind::Reshape: return Form::Reshape;
    default:
      break;
  }
  return unsupported(node, "op not covered");
}

RopeTable rope_table(const Node& node) {
  RopeTable t;
  auto add = [&](double frequency, int64_t axis) {
    absl::StrAppend(&t.frequencies, t.frequencies.empty() ? "" : ", ", literal(frequency));
    absl::StrAppend(&t.axes, t.axes.empty() ? "" : ", ", axis);
  };
  if (node.kind == OpKind::Rope) {
    const RopeAttrs& a = node.attrs_as<RopeAttrs>();
    t.rotated = a.n_rot;
    t.half_split = a.mode == RopeMode::HalfSplit;
    for (int64_t i = 0; i < a.n_rot / 2; ++i)
      add(a.freq_scale * std::pow(a.base, -2.0 * static_cast<double>(i) / static_cast<double>(a.n_rot)), 0);
    return t;
  }
  const RopeMultiAttrs& a = node.attrs_as<RopeMultiAttrs>();
  for (size_t axis = 0; axis < a.axes_dims.size(); ++axis) {
    const int64_t dims = a.axes_dims[axis];
    for (int64_t i = 0; i < dims / 2; ++i)
      add(std::pow(a.base, -2.0 * static_cast<double>(i) / static_cast<double>(dims)), static_cast<int64_t>(axis));
    t.rotated += dims;
  }
  return t;
}

std::string attention_score(const Dialect& d, const Node& node, const std::string& index) {
  const AttentionAttrs& a = node.attrs_as<AttentionAttrs>();
  std::string s = absl::StrCat("      ", d.temp == std::string("const float") ? "float" : "precise float", " dot = 0.0f;\n",
                               "      for (", index, " i = 0; i < depth; ++i) dot = dot + in0[oq + i * qd] * in1[ok + s * ks + i * kd];\n",
                               "      ", d.temp, " scaled = ", literal(a.scale), " * dot;\n");
  if (a.softcap > 0)
    absl::StrAppend(&s, "      ", d.temp, " x = ", literal(a.softcap), " * tanh(scaled / ", literal(a.softcap), ");\n");
  else
    absl::StrAppend(&s, "      ", d.temp, " x = scaled;\n");
  return s;
}

void set_depth(const Graph& graph, const Node& node, GeneratedKernel& kernel) {
  const Shape& x = graph.node(node.inputs[0]).shape;
  if (node.kind == OpKind::Matmul || node.kind == OpKind::Linear || node.kind == OpKind::RmsNorm ||
      node.kind == OpKind::LayerNorm || node.kind == OpKind::Attention)
    kernel.depth = x.back();
  if (node.kind == OpKind::Softmax) kernel.depth = x[static_cast<size_t>(kernel.axis)];
}

}  // namespace tessera::gpu::detail
