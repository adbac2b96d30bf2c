#include "backends/gpu/codegen.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera::gpu {

namespace {

absl::Status unsupported(const Node& node, std::string_view why) {
  return absl::UnimplementedError(absl::StrCat("[", op_display_name(node), "] no GPU kernel: ", std::string(why)));
}

// A float literal that reads back as exactly `v`.
std::string literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9gf", static_cast<float>(v));
  return buf;
}

// OpenCL C of a unary function of `x` (float), or "" when there is none.
std::string unary_expr(UnaryFn fn, const std::string& x) {
  switch (fn) {
    case UnaryFn::Neg: return absl::StrCat("(-", x, ")");
    case UnaryFn::Exp: return absl::StrCat("exp(", x, ")");
    case UnaryFn::Log: return absl::StrCat("log(", x, ")");
    case UnaryFn::Sqrt: return absl::StrCat("sqrt(", x, ")");
    case UnaryFn::Rsqrt: return absl::StrCat("(1.0f / sqrt(", x, "))");
    case UnaryFn::Abs: return absl::StrCat("fabs(", x, ")");
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
    case UnaryFn::GeluErf: return absl::StrCat("(0.5f * ", x, " * (1.0f + erf(", x, " * ", literal(1.0 / std::sqrt(2.0)), ")))");
    case UnaryFn::Erf: return absl::StrCat("erf(", x, ")");
    case UnaryFn::Silu: return absl::StrCat("(", x, " / (1.0f + exp(-", x, ")))");
    case UnaryFn::Floor: return absl::StrCat("floor(", x, ")");
    case UnaryFn::Ceil: return absl::StrCat("ceil(", x, ")");
    case UnaryFn::Round: return absl::StrCat("rint(", x, ")");
    case UnaryFn::Count: break;
  }
  return "";
}

// OpenCL C of an arithmetic binary function (float result), or "" (comparisons give bool).
std::string binary_expr(BinaryFn fn, const std::string& a, const std::string& b) {
  switch (fn) {
    case BinaryFn::Add: return absl::StrCat("(", a, " + ", b, ")");
    case BinaryFn::Sub: return absl::StrCat("(", a, " - ", b, ")");
    case BinaryFn::Mul: return absl::StrCat("(", a, " * ", b, ")");
    case BinaryFn::Div: return absl::StrCat("(", a, " / ", b, ")");
    case BinaryFn::Pow: return absl::StrCat("pow(", a, ", ", b, ")");
    case BinaryFn::Minimum: return absl::StrCat("((isnan(", a, ") || isnan(", b, ")) ? NAN : fmin(", a, ", ", b, "))");
    case BinaryFn::Maximum: return absl::StrCat("((isnan(", a, ") || isnan(", b, ")) ? NAN : fmax(", a, ", ", b, "))");
    default: return "";
  }
}

// Shared helpers: vector arguments to arrays, index decoding and addressing.
std::string preamble(int rank) {
  return absl::StrCat(
      "#pragma OPENCL FP_CONTRACT OFF\n"
      "#define R ",
      rank,
      "\n"
      "#define ARR(v) {v.s0, v.s1, v.s2, v.s3, v.s4, v.s5, v.s6, v.s7}\n"
      "long at(long base, const long* st, const long* idx) {\n"
      "  long o = base;\n"
      "  for (int d = 0; d < R; ++d) o += idx[d] * st[d];\n"
      "  return o;\n"
      "}\n"
      "// Element g of the box (row-major), skipping axis `skip` (-1: none), which is set to 0.\n"
      "void decode(long g, const long* b, const long* e, int skip, long* idx) {\n"
      "  for (int d = R - 1; d >= 0; --d) {\n"
      "    if (d == skip) { idx[d] = 0; continue; }\n"
      "    idx[d] = b[d] + g % e[d];\n"
      "    g /= e[d];\n"
      "  }\n"
      "}\n");
}

std::string signature(const std::string& name, size_t inputs) {
  std::string s = absl::StrCat("__kernel void ", name,
                               "(__global float* out, long out_base, long8 out_st, long8 begin, long8 ext, long items, "
                               "long depth");
  for (size_t k = 0; k < inputs; ++k)
    absl::StrAppend(&s, ", __global const float* in", k, ", long in", k, "_base, long8 in", k, "_st, long in", k, "_red");
  absl::StrAppend(&s, ") {\n  const long g = get_global_id(0);\n  if (g >= items) return;\n",
                  "  const long b[8] = ARR(begin), e[8] = ARR(ext), os[8] = ARR(out_st);\n");
  for (size_t k = 0; k < inputs; ++k) absl::StrAppend(&s, "  const long s", k, "[8] = ARR(in", k, "_st);\n");
  absl::StrAppend(&s, "  (void)depth;\n");
  return s;
}

absl::StatusOr<GeneratedKernel> elementwise(const Node& node, size_t inputs, const std::string& body) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "tessera_elementwise";
  k.source = absl::StrCat(preamble(k.rank), signature(k.name, inputs), "  long idx[8];\n  decode(g, b, e, -1, idx);\n");
  for (size_t i = 0; i < inputs; ++i)
    absl::StrAppend(&k.source, "  const float a", i, " = in", i, "[at(in", i, "_base, s", i, ", idx)];\n");
  absl::StrAppend(&k.source, body, "  out[at(out_base, os, idx)] = v;\n}\n");
  return k;
}

absl::StatusOr<GeneratedKernel> fused(const Node& node) {
  const auto& program = node.attrs_as<FusedElementwiseAttrs>().program;
  const size_t n = node.inputs.size();
  auto value = [&](int32_t i) { return i < static_cast<int32_t>(n) ? absl::StrCat("a", i) : absl::StrCat("t", i - n); };
  std::string body;
  for (size_t i = 0; i < program.size(); ++i) {
    const FusedInstr& instr = program[i];
    const std::string expr = instr.kind == OpKind::Unary
                                 ? unary_expr(static_cast<UnaryFn>(instr.fn), value(instr.a))
                                 : binary_expr(static_cast<BinaryFn>(instr.fn), value(instr.a), value(instr.b));
    if (expr.empty()) return unsupported(node, "instruction without a GPU form");
    absl::StrAppend(&body, "  const float t", i, " = ", expr, ";\n");
  }
  absl::StrAppend(&body, "  const float v = t", program.size() - 1, ";\n");
  return elementwise(node, n, body);
}

// matmul and linear: one work item per output element, k in increasing order.
absl::StatusOr<GeneratedKernel> dot(const Node& node) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "tessera_dot";
  k.source = absl::StrCat(preamble(k.rank), signature(k.name, 2),
                          "  long idx[8];\n  decode(g, b, e, -1, idx);\n"
                          "  const long oa = at(in0_base, s0, idx), ob = at(in1_base, s1, idx);\n"
                          "  float acc = 0.0f;\n"
                          "  for (long k = 0; k < depth; ++k) acc = acc + in0[oa + k * in0_red] * in1[ob + k * in1_red];\n"
                          "  out[at(out_base, os, idx)] = acc;\n}\n");
  return k;
}

// softmax / log_softmax along `axis`: the whole row, in order.
absl::StatusOr<GeneratedKernel> softmax(const Node& node) {
  const SoftmaxAttrs& a = node.attrs_as<SoftmaxAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = static_cast<int>(a.axis);
  k.name = "tessera_softmax";
  k.source = absl::StrCat(preamble(k.rank), signature(k.name, 1), "  const int A = ", k.axis, ";\n",
                          "  long idx[8];\n  decode(g, b, e, A, idx);\n"
                          "  const long ox = at(in0_base, s0, idx), sa = s0[A];\n"
                          "  float m = -INFINITY;\n"
                          "  for (long j = 0; j < depth; ++j) m = fmax(m, in0[ox + j * sa]);\n"
                          "  float s = 0.0f;\n"
                          "  for (long j = 0; j < depth; ++j) s = s + exp(in0[ox + j * sa] - m);\n"
                          "  for (long j = b[A]; j < b[A] + e[A]; ++j) {\n"
                          "    idx[A] = j;\n"
                          "    const float x = in0[ox + j * sa];\n",
                          a.log ? "    out[at(out_base, os, idx)] = (x - m) - log(s);\n"
                                : "    out[at(out_base, os, idx)] = exp(x - m) / s;\n",
                          "  }\n}\n");
  return k;
}

absl::StatusOr<GeneratedKernel> rms_norm(const Node& node) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = k.rank - 1;
  const bool weight = node.inputs.size() > 1;
  k.name = "tessera_rms_norm";
  k.source = absl::StrCat(preamble(k.rank), signature(k.name, node.inputs.size()), "  const int A = R - 1;\n",
                          "  long idx[8];\n  decode(g, b, e, A, idx);\n"
                          "  const long ox = at(in0_base, s0, idx), sa = s0[A];\n"
                          "  float ss = 0.0f;\n"
                          "  for (long j = 0; j < depth; ++j) { const float x = in0[ox + j * sa]; ss = ss + x * x; }\n"
                          "  const float scale = 1.0f / sqrt(ss / (float)depth + ",
                          literal(node.attrs_as<RmsNormAttrs>().eps), ");\n",
                          "  for (long j = b[A]; j < b[A] + e[A]; ++j) {\n"
                          "    idx[A] = j;\n",
                          weight ? "    out[at(out_base, os, idx)] = (in0[ox + j * sa] * scale) * in1[at(in1_base, s1, idx)];\n"
                                 : "    out[at(out_base, os, idx)] = in0[ox + j * sa] * scale;\n",
                          "  }\n}\n");
  return k;
}

}  // namespace

namespace {

absl::StatusOr<GeneratedKernel> generate_kernel(const Graph& graph, const Node& node) {
  if (node.dtype != DType::F32) return unsupported(node, absl::StrCat(dtype_name(node.dtype), " output"));
  for (NodeId in : node.inputs)
    if (graph.node(in).dtype != DType::F32) return unsupported(node, "non-f32 input");
  if (node.rank() < 1 || node.rank() > 8) return unsupported(node, "rank 0 output");
  switch (node.kind) {
    case OpKind::Unary: {
      const std::string expr = unary_expr(node.attrs_as<UnaryAttrs>().fn, "a0");
      if (expr.empty()) break;
      return elementwise(node, 1, absl::StrCat("  const float v = ", expr, ";\n"));
    }
    case OpKind::Binary: {
      const std::string expr = binary_expr(node.attrs_as<BinaryAttrs>().fn, "a0", "a1");
      if (expr.empty()) break;
      return elementwise(node, 2, absl::StrCat("  const float v = ", expr, ";\n"));
    }
    case OpKind::FusedElementwise:
      return fused(node);
    case OpKind::Matmul:
      if (graph.node(node.inputs[0]).rank() < 2 || graph.node(node.inputs[1]).rank() < 2) break;
      return dot(node);
    case OpKind::Linear:
      return dot(node);
    case OpKind::Softmax:
      return softmax(node);
    case OpKind::RmsNorm:
      return rms_norm(node);
    default:
      break;
  }
  return unsupported(node, "op not covered");
}

}  // namespace

absl::StatusOr<GeneratedKernel> generate_opencl(const Graph& graph, const Node& node) {
  absl::StatusOr<GeneratedKernel> k = generate_kernel(graph, node);
  if (!k.ok()) return k;
  const Shape& x = graph.node(node.inputs[0]).shape;
  if (node.kind == OpKind::Matmul || node.kind == OpKind::Linear || node.kind == OpKind::RmsNorm) k->depth = x.back();
  if (node.kind == OpKind::Softmax) k->depth = x[static_cast<size_t>(k->axis)];
  return k;
}

namespace {

// base: the element offset of index 0 on every axis (may be negative before the terms add).
int64_t origin(const TensorView& view, int64_t element_offset) {
  int64_t base = element_offset;
  for (int d = 0; d < view.extent.rank(); ++d) base -= view.extent.begin(d) * view.strides[static_cast<size_t>(d)];
  return base;
}

}  // namespace

InputLayout output_layout(const TensorView& view, int64_t element_offset) {
  InputLayout l;
  l.base = origin(view, element_offset);
  for (int d = 0; d < view.extent.rank(); ++d) l.strides[static_cast<size_t>(d)] = view.strides[static_cast<size_t>(d)];
  return l;
}

InputLayout input_layout(const Node& node, int input, const KernelInput& view, int64_t element_offset, int out_rank) {
  InputLayout l;
  l.base = origin(view, element_offset);
  const int r = view.rank();
  auto stride = [&](int d) { return view.strides[static_cast<size_t>(d)]; };
  auto broadcast = [&]() {  // numpy broadcasting: input axis d is output axis out_rank - r + d
    for (int d = 0; d < r; ++d)
      if (view.shape[static_cast<size_t>(d)] != 1) l.strides[static_cast<size_t>(out_rank - r + d)] = stride(d);
  };
  if (node.kind == OpKind::Matmul) {
    // [..batch, M, K] x [..batch, K, N]: batch axes broadcast, then i (a) or j (b); K reduced.
    for (int d = 0; d + 2 < r; ++d)
      if (view.shape[static_cast<size_t>(d)] != 1) l.strides[static_cast<size_t>(out_rank - r + d)] = stride(d);
    if (input == 0) l.strides[static_cast<size_t>(out_rank - 2)] = stride(r - 2), l.red = stride(r - 1);
    else l.strides[static_cast<size_t>(out_rank - 1)] = stride(r - 1), l.red = stride(r - 2);
  } else if (node.kind == OpKind::Linear) {
    // x [..., K] . w[N, K]: x follows the output but its last axis is K; w row n = output column.
    if (input == 0) {
      for (int d = 0; d + 1 < r; ++d) l.strides[static_cast<size_t>(d)] = stride(d);
      l.red = stride(r - 1);
    } else {
      l.strides[static_cast<size_t>(out_rank - 1)] = stride(0);
      l.red = stride(1);
    }
  } else {
    broadcast();
  }
  return l;
}

int64_t work_items(const GeneratedKernel& kernel, const Box& box) {
  if (box.empty()) return 0;
  if (kernel.shape == KernelShape::Elements) return box.volume();
  return box.volume() / box.extent(kernel.axis);
}

}  // namespace tessera::gpu
