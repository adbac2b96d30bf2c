#include "kernels/cpu/cpu_kernels.h"

#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) && defined(__clang__)
#include <cpuid.h>
#endif

namespace tessera::cpu {
namespace {

#if defined(__x86_64__)
// F16C: GCC's __builtin_cpu_supports knows the name, clang 14's does not (CPUID leaf 1, ECX).
bool f16c_supported() {
#if defined(__clang__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return __builtin_cpu_supports("f16c");
#endif
}
#endif

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Portable:
      return true;
    case Isa::Avx2:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c_supported();
#else
      return false;
#endif
    case Isa::Avx512:
#if defined(__x86_64__)
      return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
    case Isa::Avx512Vnni:
#if defined(__x86_64__)
      return isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512vnni");
#else
      return false;
#endif
  }
  return false;
}

Isa detected_isa() {
  static const Isa isa = [] {
    const char* cap = std::getenv("TESSERA_CPU_ISA");
    if (cap != nullptr && std::strcmp(cap, "portable") == 0) return Isa::Portable;
    const bool avx2_cap = cap != nullptr && std::strcmp(cap, "avx2") == 0;
    const bool avx512_cap = cap != nullptr && std::strcmp(cap, "avx512") == 0;
    if (!avx2_cap && !avx512_cap && isa_supported(Isa::Avx512Vnni)) return Isa::Avx512Vnni;
    if (!avx2_cap && isa_supported(Isa::Avx512)) return Isa::Avx512;
    return isa_supported(Isa::Avx2) ? Isa::Avx2 : Isa::Portable;
  }();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Portable:
      return "portable";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool linear_int8_activations() {
  const char* mode = std::getenv("TESSERA_LINEAR");
  return mode != nullptr && std::strcmp(mode, "int8") == 0;
}

KernelFn optimised_kernel_for(const Graph& graph, const Node& node, Isa isa) {
  switch (node.kind) {
    case OpKind::Matmul:
      return matmul_kernel(graph, node, isa);
    case OpKind::Linear:
      return linear_kernel(graph, node, isa);
    case OpKind::Attention:
      return attention_kernel(graph, node, isa);
    case OpKind::Unary:
      return unary_kernel(graph, node, isa);
    case OpKind::Binary:
      return binary_kernel(graph, node, isa);
    case OpKind::Cast:
      return cast_kernel(graph, node, isa);
    case OpKind::FusedElementwise:
      return fused_elementwise_kernel(graph, node, isa);
    case OpKind::RmsNorm:
      return rms_norm_kernel(graph, node, isa);
    case OpKind::Rope:
      return rope_kernel(graph, node, isa);
    case OpKind::Reshape:
      return reshape_kernel(graph, node, isa);
    case OpKind::Gather:
      return gather_kernel(graph, node, isa);
    case OpKind::Slice:
      return slice_kernel(graph, node, isa);
    case OpKind::Concat:
      return concat_kernel(graph, node, isa);
    case OpKind::RopeMulti:
      return rope_multi_kernel(graph, node, isa);
    case OpKind::Conv2d:
      return conv2d_kernel(graph, node, isa);
    case OpKind::Pool2d:
      return pool2d_kernel(graph, node, isa);
    case OpKind::Upsample:
      return upsample_kernel(graph, node, isa);
    case OpKind::LayerNorm:
      return layer_norm_kernel(graph, node, isa);
    case OpKind::GroupNorm:
      return group_norm_kernel(graph, node, isa);
    default:
      return nullptr;
  }
}

KernelFn optimised_kernel(const Graph& graph, const Node& node) {
  return optimised_kernel_for(graph, node, detected_isa());
}

}  // namespace tessera::cpu

namespace tessera {

// Reference kernels use none; the optimised kernels' bounds hold for every instruction set.
int64_t kernel_scratch_bytes(const Graph& graph, const Node& node, bool dense_views) {
  switch (node.kind) {
    case OpKind::Linear:
      return cpu::linear_scratch_bytes(graph, node, dense_views);
    case OpKind::Attention:
      return cpu::attention_scratch_bytes(graph, node, dense_views);
    case OpKind::RmsNorm:
      return cpu::rms_norm_scratch_bytes(graph, node, dense_views);
    case OpKind::RopeMulti:
      return cpu::rope_multi_scratch_bytes(graph, node, dense_views);
    case OpKind::Rope:
      return cpu::rope_scratch_bytes(graph, node, dense_views);
    case OpKind::Conv2d:
      return cpu::conv2d_scratch_bytes(graph, node, dense_views);
    default:
      return 0;
  }
}

}  // namespace tessera
