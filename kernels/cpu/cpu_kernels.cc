#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/conv2d_internal.h"

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

// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), the tile state enabled by the OS
// (XCR0 bits 17 and 18), and this process's permission to use the tile data (asked once).
bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
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
    case Isa::Amx:
#if defined(__x86_64__)
      return isa_supported(Isa::Avx512Vnni) && amx_usable();
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
    const bool vnni_cap = cap != nullptr && std::strcmp(cap, "avx512vnni") == 0;
    if (!avx2_cap && !avx512_cap && !vnni_cap && isa_supported(Isa::Amx)) return Isa::Amx;
    if (!avx2_cap && !avx512_cap && isa_supported(Isa::Avx512Vnni)) return Isa::Avx512Vnni;
    if (!avx2_cap && isa_supported(Isa::Avx512)) return Isa::Avx512;
    return isa_supported(Isa::Avx2) ? Isa::Avx2 : Isa::Portable;
  }();
  return isa;
}

namespace {

// The CPU's family when it is AMD's, else 0.
unsigned amd_family() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return 0;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0 || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
  // Family: the base family (bits 8-11), plus the extended family (bits 20-27) when it is 0Fh.
  unsigned family = (eax >> 8) & 0x0F;
  if (family == 0x0F) family += (eax >> 20) & 0xFF;
  return family;
#else
  return 0;
#endif
}

int64_t detected_stream_prefetch() {
  if (const char* bytes = std::getenv("TESSERA_STREAM_PREFETCH"); bytes != nullptr)
    return std::max<int64_t>(0, std::strtoll(bytes, nullptr, 10));
  return amd_family() == 0x1A ? 6 << 10 : 0;
}

int64_t detected_wide_vectors() {
  const char* env = std::getenv("TESSERA_WIDE_VECTORS");  // "0" or "1"; anything else: the CPU's
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)) return env[0] - '0';
  return amd_family() != 0x19 ? 1 : 0;
}

// A choice made once per process: `choice` holds -1 until detect() (or a setter) decides it.
// A setter's value wins over a detection racing it.
int64_t decided(std::atomic<int64_t>& choice, int64_t (*detect)()) {
  int64_t value = choice.load(std::memory_order_relaxed);
  if (value < 0) {
    const int64_t detected = detect();
    value = -1;
    if (choice.compare_exchange_strong(value, detected, std::memory_order_relaxed)) value = detected;
  }
  return value;
}

std::atomic<int64_t> stream_prefetch{-1};  // -1: not decided yet
std::atomic<int64_t> wide_choice{-1};

}  // namespace

int64_t stream_prefetch_distance() { return decided(stream_prefetch, detected_stream_prefetch); }

void set_stream_prefetch_distance(int64_t bytes) { stream_prefetch.store(std::max<int64_t>(0, bytes), std::memory_order_relaxed); }

bool wide_vectors() { return decided(wide_choice, detected_wide_vectors) != 0; }

void set_wide_vectors(bool value) { wide_choice.store(value ? 1 : 0, std::memory_order_relaxed); }

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
    case Isa::Amx:
      return "amx";
  }
  return "?";
}

LinearPath linear_path() {
  const char* mode = std::getenv("TESSERA_LINEAR");
  if (mode != nullptr && std::strcmp(mode, "int8") == 0) return LinearPath::Int8;
  if (mode != nullptr && std::strcmp(mode, "f32") == 0) return LinearPath::F32;
  return LinearPath::Int24;
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

std::shared_ptr<const void> prepare_node_data(const Graph& graph, const Node& node, KernelFn kernel) {
  switch (node.kind) {
    case OpKind::Linear:
      return linear_prepare_data(graph, node, kernel);
    case OpKind::Conv2d:
      return conv2d_prepare(graph, node, kernel);
    default:
      return nullptr;
  }
}

int64_t prepared_bytes(const Graph& graph, const Node& node, KernelFn kernel) {
  switch (node.kind) {
    case OpKind::Linear:
      return linear_prepared_bytes(graph, node, kernel);
    case OpKind::Conv2d:
      return conv2d_prepared_bytes(graph, node, kernel);
    default:
      return 0;
  }
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
