#include "backends/gpu/codegen.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/gpu/codegen_linear.h"
#include "backends/gpu/codegen_shared.h"
#include "engine/ops.h"

namespace tessera::gpu {

namespace {

using detail::kOpenCl;
using detail::literal;
using detail::unsupported;

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

// The element type of each input in the kernel's arguments.
std::vector<std::string> input_types(const Graph& graph, const Node& node) {
  std::vector<std::string> types;
  for (NodeId in : node.inputs) {
    const DType t = graph.node(in).dtype;
    types.push_back(t == DType::I32 ? "int" : t == DType::I64 ? "long" : "float");
  }
  return types;
}

std::string signature(const std::string& name, const std::vector<std::string>& types) {
  const size_t inputs = types.size();
  std::string s = absl::StrCat("__kernel void ", name,
                               "(__global float* out, long out_base, long8 out_st, long8 begin, long8 ext, long items, "
                               "long depth");
  for (size_t k = 0; k < inputs; ++k)
    absl::StrAppend(&s, ", __global const ", types[k], "* in", k, ", long in", k, "_base, long8 in", k, "_st, long in", k, "_red",
                    ", long8 in", k, "_shape");
  absl::StrAppend(&s, ") {\n  const long g = get_global_id(0);\n  if (g >= items) return;\n",
                  "  const long b[8] = ARR(begin), e[8] = ARR(ext), os[8] = ARR(out_st);\n");
  for (size_t k = 0; k < inputs; ++k)
    absl::StrAppend(&s, "  const long s", k, "[8] = ARR(in", k, "_st), sh", k, "[8] = ARR(in", k, "_shape);\n");
  absl::StrAppend(&s, "  (void)depth;\n");
  return s;
}

std::string signature(const std::string& name, size_t inputs) {
  return signature(name, std::vector<std::string>(inputs, "float"));
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
  absl::StatusOr<std::string> body = detail::fused_body(kOpenCl, node);
  if (!body.ok()) return body.status();
  return elementwise(node, node.inputs.size(), *body);
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

// rope and rope_multi: one work item per element; a rotated column reads its pair partner and
// its row's position (rope_multi: the position of the column's axis, at in1_red apart).
GeneratedKernel rope(const Graph& graph, const Node& node) {
  const detail::RopeTable t = detail::rope_table(node);
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "tessera_rope";
  const std::string pairing =
      t.half_split ? absl::StrCat("    const int first = c < ", t.rotated / 2, ";\n    const long pair = first ? c : c - ",
                                  t.rotated / 2, ", partner = first ? c + ", t.rotated / 2, " : c - ", t.rotated / 2, ";\n")
                   : "    const int first = c % 2 == 0;\n    const long pair = c / 2, partner = first ? c + 1 : c - 1;\n";
  k.source = absl::StrCat(
      preamble(k.rank), "__constant float tessera_frequency[] = {", t.frequencies, "};\n",
      "__constant int tessera_axis[] = {", t.axes, "};\n", signature(k.name, input_types(graph, node)),
      "  long idx[8];\n  decode(g, b, e, -1, idx);\n"
      "  const long c = idx[R - 1], ox = at(in0_base, s0, idx);\n"
      "  float v = in0[ox];\n"
      "  if (c < ", t.rotated, ") {\n", pairing,
      "    const float pos = (float)in1[at(in1_base, s1, idx) + tessera_axis[pair] * in1_red];\n"
      "    const float theta = pos * tessera_frequency[pair];\n"
      "    const float cs = cos(theta), sn = sin(theta);\n"
      "    const float other = in0[ox + (partner - c) * s0[R - 1]];\n"
      "    v = first ? v * cs - other * sn : other * sn + v * cs;\n"
      "  }\n"
      "  out[at(out_base, os, idx)] = v;\n}\n");
  return k;
}

// layer_norm: mean, then the mean of centred squares, over the whole row in order.
GeneratedKernel layer_norm(const Node& node) {
  const LayerNormAttrs& a = node.attrs_as<LayerNormAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.shape = KernelShape::Rows;
  k.axis = k.rank - 1;
  k.name = "tessera_layer_norm";
  std::string value = "(in0[ox + j * sa] - mean) * inv_std";
  if (a.has_weight) value = absl::StrCat("(", value, ") * in1[at(in1_base, s1, idx)]");
  if (a.has_bias) {
    const int bias = a.has_weight ? 2 : 1;
    value = absl::StrCat("(", value, ") + in", bias, "[at(in", bias, "_base, s", bias, ", idx)]");
  }
  k.source = absl::StrCat(preamble(k.rank), signature(k.name, node.inputs.size()), "  const int A = R - 1;\n",
                          "  long idx[8];\n  decode(g, b, e, A, idx);\n"
                          "  const long ox = at(in0_base, s0, idx), sa = s0[A];\n"
                          "  float sum = 0.0f;\n"
                          "  for (long j = 0; j < depth; ++j) sum = sum + in0[ox + j * sa];\n"
                          "  const float mean = sum / (float)depth;\n"
                          "  float ss = 0.0f;\n"
                          "  for (long j = 0; j < depth; ++j) { const float x = in0[ox + j * sa] - mean; ss = ss + x * x; }\n"
                          "  const float inv_std = 1.0f / sqrt(ss / (float)depth + ",
                          literal(a.eps), ");\n",
                          "  for (long j = b[A]; j < b[A] + e[A]; ++j) {\n"
                          "    idx[A] = j;\n"
                          "    out[at(out_base, os, idx)] = ", value, ";\n",
                          "  }\n}\n");
  return k;
}

// attention: one work item per output element (leading, t, head, column): the maximum score
// over the visible keys, then the softmax weights and the weighted column of v, keys in order,
// scores recomputed in each pass (no scratch on devices). Layout: see input_layout.
GeneratedKernel attention(const Node& node) {
  const AttentionAttrs& a = node.attrs_as<AttentionAttrs>();
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = "tessera_attention";
  const std::string first = a.causal && a.window > 0 ? absl::StrCat("(t > ", a.window - 1, " ? t - ", a.window - 1, " : 0)") : "0";
  const std::string score = detail::attention_score(kOpenCl, node, "long");
  k.source = absl::StrCat(
      preamble(k.rank), signature(k.name, 3),
      "  const int T = R - 3, H = R - 2, C = R - 1;\n"
      "  long idx[8], kv[8];\n  decode(g, b, e, -1, idx);\n"
      "  for (int d = 0; d < 8; ++d) kv[d] = idx[d];\n"
      "  const long t = idx[T], j = idx[C];\n"
      "  kv[T] = 0, kv[C] = 0, kv[H] = idx[H] / in2_red;\n"
      "  idx[C] = 0;\n"
      "  const long oq = at(in0_base, s0, idx), qd = s0[C];\n"
      "  const long ok = at(in1_base, s1, kv), ks = s1[T], kd = s1[C];\n"
      "  const long ov = at(in2_base, s2, kv) + j * s2[C], vs = s2[T];\n"
      "  const long first = ", first, ", last = ", a.causal ? "t + 1" : "in1_red", ";\n",
      "  float m = -INFINITY;\n"
      "  for (long s = first; s < last; ++s) {\n", score,
      "    m = fmax(m, x);\n"
      "  }\n"
      "  float den = 0.0f, acc = 0.0f;\n"
      "  for (long s = first; s < last; ++s) {\n", score,
      "    const float w = exp(x - m);\n"
      "    den = den + w;\n"
      "    acc = acc + w * in2[ov + s * vs];\n"
      "  }\n"
      "  idx[C] = j;\n"
      "  out[at(out_base, os, idx)] = acc / den;\n}\n");
  return k;
}

}  // namespace

std::string detail::opencl_kernel(const Graph& graph, const Node& node, const std::string& name, const std::string& body,
                                  int rank) {
  return absl::StrCat(preamble(rank), signature(name, input_types(graph, node)), body, "}\n");
}

absl::StatusOr<GeneratedKernel> generate_opencl(const Graph& graph, const Node& node) {
  absl::StatusOr<detail::Form> form = detail::kernel_form(graph, node);
  if (!form.ok()) return form.status();
  absl::StatusOr<GeneratedKernel> k;
  switch (*form) {
    case detail::Form::Unary:
      k = elementwise(node, 1, absl::StrCat("  const float v = ", detail::unary_expr(kOpenCl, node.attrs_as<UnaryAttrs>().fn, "a0"), ";\n"));
      break;
    case detail::Form::Binary:
      k = elementwise(node, 2,
                      absl::StrCat("  const float v = ", detail::binary_expr(kOpenCl, node.attrs_as<BinaryAttrs>().fn, "a0", "a1"), ";\n"));
      break;
    case detail::Form::Fused: k = fused(node); break;
    case detail::Form::Dot: k = detail::tiled_dot_opencl(graph, node); break;
    case detail::Form::Softmax: k = softmax(node); break;
    case detail::Form::RmsNorm: k = rms_norm(node); break;
    case detail::Form::Copy: k = elementwise(node, 1, "  const float v = a0;\n"); break;
    case detail::Form::Rope: k = rope(graph, node); break;
    case detail::Form::LayerNorm: k = layer_norm(node); break;
    case detail::Form::Attention: k = attention(node); break;
    default: k = detail::nn_kernel(detail::kOpenClLang, graph, node, *form); break;  // codegen_nn.cc
  }
  if (k.ok()) detail::set_depth(graph, node, *k);
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
  for (int d = 0; d < 8; ++d) l.shape[static_cast<size_t>(d)] = d < r ? view.shape[static_cast<size_t>(d)] : 1;
  if (detail::nn_input_strides(node, input, view, out_rank, l)) return l;  // codegen_nn.cc
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
    } else if (is_quantized(view.dtype)) {  // byte-addressed whole rows (element_offset is in bytes)
      const int64_t row_bytes = dtype_bytes(view.dtype, view.shape[1]);
      l.base = element_offset - view.extent.begin(0) * row_bytes;
      l.strides[static_cast<size_t>(out_rank - 1)] = row_bytes;
      l.red = 1;
    } else {
      l.strides[static_cast<size_t>(out_rank - 1)] = stride(0);
      l.red = stride(1);
    }
  } else if ((node.kind == OpKind::Rope || node.kind == OpKind::RopeMulti) && input == 1) {
    // positions [T] or [T, A]: the row axis T is output axis rank - 3; the axis column is `red`.
    l.strides[static_cast<size_t>(out_rank - 3)] = stride(0);
    if (r == 2) l.red = stride(1);
  } else if (node.kind == OpKind::Attention) {
    // q [..., T, Hq, D], k [..., S, Hkv, D], v [..., S, Hkv, Dv]: each input's own strides axis
    // by axis (the kernel walks keys on the row axis and divides the head index by the group);
    // k's red is the number of keys S, v's the group Hq / Hkv.
    for (int d = 0; d < r; ++d) l.strides[static_cast<size_t>(d)] = stride(d);
    if (input == 1) l.red = view.shape[static_cast<size_t>(r - 3)];
    if (input == 2) l.red = node.shape[static_cast<size_t>(r - 2)] / std::max<int64_t>(1, view.shape[static_cast<size_t>(r - 2)]);
  } else if (node.kind == OpKind::Slice) {
    // Output index i reads input index start + i * step on every axis.
    const SliceAttrs& a = node.attrs_as<SliceAttrs>();
    for (int d = 0; d < r; ++d) {
      l.strides[static_cast<size_t>(d)] = stride(d) * a.step[static_cast<size_t>(d)];
      l.base += a.start[static_cast<size_t>(d)] * stride(d);
    }
  } else if (node.kind == OpKind::Permute) {
    // Output axis d is input axis perm[d].
    const Ints& perm = node.attrs_as<PermuteAttrs>().perm;
    for (int d = 0; d < out_rank; ++d) l.strides[static_cast<size_t>(d)] = stride(static_cast<int>(perm[static_cast<size_t>(d)]));
  } else {
    broadcast();  // elementwise inputs, expand
  }
  return l;
}

int64_t address_unit(DType dtype) { return is_quantized(dtype) ? 1 : dtype_size(dtype); }

int64_t work_items(const GeneratedKernel& kernel, const Box& box) {
  if (box.empty()) return 0;
  if (kernel.shape == KernelShape::Elements) return box.volume();
  if (kernel.shape == KernelShape::Groups)
    return box.extent(0) * ((box.end(1) - 1) / kernel.depth - box.begin(1) / kernel.depth + 1);
  if (kernel.shape == KernelShape::Blocks)
    return box.volume() / box.extent(kernel.axis) * ((box.extent(kernel.axis) + kernel.depth - 1) / kernel.depth);
  if (kernel.shape == KernelShape::Tiles) {  // as the kernel decides (codegen_linear.cc)
    const int r = box.rank();
    const int64_t m = r >= 2 ? box.extent(r - 2) : 1, n = box.extent(r - 1), lead = box.volume() / (m * n);
    const int64_t groups = m < kTileMinRows ? (box.volume() + kTileLocalSize - 1) / kTileLocalSize
                                            : lead * ((m + 31) / 32) * ((n + 31) / 32);
    return groups * kTileLocalSize;
  }
  return box.volume() / box.extent(kernel.axis);
}

}  // namespace tessera::gpu
