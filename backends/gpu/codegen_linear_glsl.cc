// The tiled matmul / linear kernel as a GLSL 450 compute shader: the body of codegen_linear.cc
// over GLSL dialect macros. Quantised weights are a uint buffer read as bytes (little-endian
// words); float temporaries are `precise`, so nothing is contracted into an FMA. Work-groups loop
// over the launch's groups (items / kTileLocalSize), so any number of dispatched groups covers it.
#include "absl/strings/str_cat.h"
#include "backends/gpu/codegen_linear.h"

namespace tessera::gpu::detail {

namespace {

static_assert(kTileLocalSize == kGlslLocalSize, "the Vulkan host dispatches kGlslLocalSize work items per group");

std::string glsl_prologue(int rank, DType weight) {
  return absl::StrCat(
      "#version 450\n"
      "layout(local_size_x = ", kTileLocalSize, ") in;\n",
      "layout(push_constant) uniform Push { int first; } push;\n"
      "layout(std430, set = 0, binding = 0) readonly buffer Params { int P[]; };\n"
      "layout(std430, set = 0, binding = 1) buffer Out { float o_[]; };\n"
      "layout(std430, set = 0, binding = 2) readonly buffer In0 { float in0[]; };\n"
      "layout(std430, set = 0, binding = 3) readonly buffer In1 { ", is_quantized(weight) ? "uint" : "float", " in1[]; };\n",
      "#define R ", rank, "\n#define ROWS_MIN ", kTileMinRows, "\n",
      "#define IDX int\n"
      "#define PF precise float\n"
      "#define TOF(x) float(x)\n"
      "#define TOI(x) int(x)\n"
      "#define AS_FLOAT(x) uintBitsToFloat(x)\n"
      "#define TQ_B(o) bitfieldExtract(in1[(o) >> 2], ((o) & 3) * 8, 8)\n"
      "#define TQ_I8(o) bitfieldExtract(int(in1[(o) >> 2]), ((o) & 3) * 8, 8)\n"
      "#define X(o) in0[o]\n"
      "#define Y(o) in1[o]\n"
      "#define STORE(o, v) o_[o] = (v)\n"
      "#define BARRIER() memoryBarrierShared(); barrier()\n"
      "shared float As[1056];\n"
      "shared float Bs[1056];\n",
      kBlockMacros, kHalfFunction,
      "int at(int base, int st[8], int idx[8]) {\n"
      "  int o = base;\n"
      "  for (int d = 0; d < R; ++d) o += idx[d] * st[d];\n"
      "  return o;\n"
      "}\n"
      "void decode(int g, int b[8], int e[8], inout int idx[8]) {\n"
      "  for (int d = R - 1; d >= 0; --d) {\n"
      "    idx[d] = b[d] + g % e[d];\n"
      "    g /= e[d];\n"
      "  }\n"
      "}\n");
}

// Parameters as codegen_glsl.cc lays them out (append_glsl_params), then the group loop.
std::string glsl_main(const std::string& body) {
  std::string s =
      "void main() {\n"
      "  const int p = push.first;\n"
      "  const int items = P[p];\n"
      "  const int depth = P[p + 1];\n"
      "  const int out_base = P[p + 2];\n"
      "  int os[8], b[8], e[8], s0[8], s1[8];\n"
      "  for (int d = 0; d < 8; ++d) { os[d] = P[p + 3 + d]; b[d] = P[p + 11 + d]; e[d] = P[p + 19 + d]; }\n";
  for (int k = 0; k < 2; ++k) {
    const int at = kGlslFixedParams + k * kGlslInputParams;
    absl::StrAppend(&s, "  const int in", k, "_base = P[p + ", at, "], in", k, "_red = P[p + ", at + 9, "];\n",
                    "  for (int d = 0; d < 8; ++d) s", k, "[d] = P[p + ", at + 1, " + d];\n");
  }
  absl::StrAppend(&s,
                  "  const int lid = int(gl_LocalInvocationID.x);\n"
                  "  const int groups = items / ", kTileLocalSize, ";\n",
                  "  for (int grp = int(gl_WorkGroupID.x); grp < groups; grp += int(gl_NumWorkGroups.x)) {\n", body,
                  "  }\n}\n");
  return s;
}

}  // namespace

absl::StatusOr<GeneratedKernel> tiled_dot_glsl(const Graph& graph, const Node& node) {
  const DType weight = graph.node(node.inputs[1]).dtype;
  return tiled_kernel(node, "main", absl::StrCat(glsl_prologue(node.rank(), weight), glsl_main(tiled_body(weight))));
}

}  // namespace tessera::gpu::detail
