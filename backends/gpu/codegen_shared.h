// What the OpenCL C and GLSL generators share: the expression tables of unary and binary
// functions, the fused-elementwise program, and which kernel form (and depth) an op gets. The
// dialects differ only in the names of a few functions and in how temporaries are declared.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "backends/gpu/codegen.h"
#include "engine/graph.h"
#include "engine/ops.h"

namespace tessera::gpu::detail {

// Function names and declarations of one kernel language.
struct Dialect {
  const char* fabs;
  const char* fmin;
  const char* fmax;
  const char* rint;  // round half to even
  const char* erf;
  const char* pow;
  const char* temp;  // declares a float temporary that the compiler may not contract
};
extern const Dialect kOpenCl;
extern const Dialect kGlsl;  // erf and pow are helpers in every GLSL preamble

absl::Status unsupported(const Node& node, std::string_view why);
// A float literal ("...f", valid in both languages) that reads back as exactly `v`.
std::string literal(double v);
// A unary function of `x` (float), or "" when there is none.
std::string unary_expr(const Dialect& d, UnaryFn fn, const std::string& x);
// An arithmetic binary function (float result), or "" (comparisons give bool).
std::string binary_expr(const Dialect& d, BinaryFn fn, const std::string& a, const std::string& b);
// Statements computing the fused program of `node` from values a0..a<n-1> into `v`.
absl::StatusOr<std::string> fused_body(const Dialect& d, const Node& node);

// The kernel an op gets (after the checks every GPU kernel shares: f32 out, rank 1..8, f32
// inputs except the integer positions of rope and rope_multi and the ids of gather).
// Copy: slice, permute and expand, an identity kernel whose input addressing does the move.
// Conv2d .. Gather: the kernels of codegen_nn.cc.
enum class Form : uint8_t {
  Unary, Binary, Fused, Dot, Softmax, RmsNorm, Copy, Rope, LayerNorm, Attention,
  Conv2d, Pool2d, Upsample, Concat, GroupNorm, Reduce, Gather, Reshape,
};
absl::StatusOr<Form> kernel_form(const Graph& graph, const Node& node);
// Rope and rope_multi: the rotated columns and, per pair of columns (2i, 2i + 1 interleaved;
// i, i + rotated / 2 half-split), its frequency (theta = position * frequency) and position
// column (the axis of rope_multi; 0 for rope). Attributes only, so sources stay size-free.
struct RopeTable {
  int64_t rotated = 0;
  bool half_split = false;
  std::string frequencies;  // comma-separated float literals
  std::string axes;         // comma-separated int literals
};
RopeTable rope_table(const Node& node);
// Attention: statements of the body of a loop over keys `s` that leave the score of key s in
// `x`: the dot product of q (in0 at oq, D stride qd) and k (in1 at ok + s * ks, D stride kd) in
// order over d < depth, scaled, softcapped. `index` is the integer type ("long" or "int").
std::string attention_score(const Dialect& d, const Node& node, const std::string& index);
// A kernel language as codegen_nn.cc writes its bodies: the index type, a float accumulator's
// declaration, the output array, a cast to float, and whether it is GLSL (i64 inputs are then
// int pairs, low word first).
struct Lang {
  const char* index;  // "long" / "int"
  const char* acc;    // "float" / "precise float"
  const char* out;    // "out" / "o_"
  const char* to_float;  // "(float)" / "float"
  bool glsl;
  const Dialect* dialect;
};
extern const Lang kOpenClLang;
extern const Lang kGlslLang;
// The whole kernel around `body` (statements for work item g, see codegen.h; no `return`: GLSL
// bodies run inside a loop over items), with the node's inputs as arguments.
std::string opencl_kernel(const Graph& graph, const Node& node, const std::string& name, const std::string& body, int rank);
std::string glsl_kernel(const Graph& graph, const Node& node, const std::string& body, int rank);
// The kernel of a codegen_nn.cc form in `lang`.
absl::StatusOr<GeneratedKernel> nn_kernel(const Lang& lang, const Graph& graph, const Node& node, Form form);
// Input addressing of the codegen_nn.cc ops whose inputs do not follow the output axis by axis
// (codegen.h); false for other ops and inputs, `l` then untouched.
bool nn_input_strides(const Node& node, int input, const KernelInput& view, int out_rank, InputLayout& l);
// Fills depth (K of dot products, the row length of Rows kernels) from the input shapes.
void set_depth(const Graph& graph, const Node& node, GeneratedKernel& kernel);

}  // namespace tessera::gpu::detail
