// CUDA C for the kernels of codegen.cc: the OpenCL C source with a prelude that maps its
// dialect (address-space qualifiers, long8 arguments, get_global_id, NAN/INFINITY) onto CUDA, and
// device qualifiers on its helper functions. The arguments and their meaning are unchanged.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "backends/gpu/codegen.h"

namespace tessera::gpu {

namespace {

constexpr const char* kPrelude =
    "// CUDA prelude for Tessera's OpenCL-dialect kernels.\n"
    "struct long8 { long long s0, s1, s2, s3, s4, s5, s6, s7; };\n"
    "#define __kernel extern \"C\" __global__\n"
    "#define __global\n"
    "#define __constant __constant__\n"
    "#define get_global_id(d) ((long)blockIdx.x * (long)blockDim.x + (long)threadIdx.x)\n"
    "#define INFINITY __int_as_float(0x7f800000)\n"
    "#define NAN __int_as_float(0x7fffffff)\n"
    "#define isnan(x) ((x) != (x))\n"
    "#define rint(x) rintf(x)\n"
    "// Work-groups (tiled kernels): local memory, barriers, byte buffers.\n"
    "#define __local __shared__\n"
    "#define get_local_id(d) ((long)threadIdx.x)\n"
    "#define get_group_id(d) ((long)blockIdx.x)\n"
    "#define barrier(flags) __syncthreads()\n"
    "#define as_float(x) __uint_as_float(x)\n"
    "typedef unsigned char uchar;\n"
    "typedef unsigned int uint;\n";

}  // namespace

absl::StatusOr<GeneratedKernel> generate_cuda(const Graph& graph, const Node& node) {
  absl::StatusOr<GeneratedKernel> k = generate_opencl(graph, node);
  if (!k.ok()) return k;
  // Contraction is turned off by the compile options (--fmad=false), not by a pragma.
  k->source = absl::StrCat(kPrelude, absl::StrReplaceAll(k->source, {{"#pragma OPENCL FP_CONTRACT OFF\n", ""},
                                                                      {"long at(", "__device__ long at("},
                                                                      {"void decode(", "__device__ void decode("},
                                                                      {"float tq_half(", "__device__ float tq_half("}}));
  return k;
}

}  // namespace tessera::gpu
