#include "kernels/ref/ref_kernels.h"

namespace tessera::ref {

absl::Status copy_constant(const KernelArgs&);
absl::Status unary(const KernelArgs&);
absl::Status binary(const KernelArgs&);
absl::Status where(const KernelArgs&);
absl::Status cast(const KernelArgs&);
absl::Status reduce(const KernelArgs&);
absl::Status cumsum(const KernelArgs&);
absl::Status matmul(const KernelArgs&);
absl::Status linear(const KernelArgs&);
absl::Status reshape(const KernelArgs&);
absl::Status permute(const KernelArgs&);
absl::Status slice(const KernelArgs&);
absl::Status pad(const KernelArgs&);
absl::Status concat(const KernelArgs&);
absl::Status repeat(const KernelArgs&);
absl::Status flip(const KernelArgs&);
absl::Status expand(const KernelArgs&);
absl::Status gather(const KernelArgs&);
absl::Status triangle(const KernelArgs&);
absl::Status arange(const KernelArgs&);
absl::Status rand(const KernelArgs&);
absl::Status softmax(const KernelArgs&);
absl::Status rms_norm(const KernelArgs&);
absl::Status layer_norm(const KernelArgs&);
absl::Status group_norm(const KernelArgs&);
absl::Status rope(const KernelArgs&);
absl::Status conv2d(const KernelArgs&);
absl::Status pool2d(const KernelArgs&);
absl::Status upsample(const KernelArgs&);
absl::Status attention(const KernelArgs&);

KernelFn reference_kernel(OpKind kind) {
  switch (kind) {
    case OpKind::Input: return nullptr;  // inputs are written, never computed
    case OpKind::Constant: return copy_constant;
    case OpKind::Unary: return unary;
    case OpKind::Binary: return binary;
    case OpKind::Where: return where;
    case OpKind::Cast: return cast;
    case OpKind::Reduce: return reduce;
    case OpKind::Cumsum: return cumsum;
    case OpKind::Matmul: return matmul;
    case OpKind::Linear: return linear;
    case OpKind::Reshape: return reshape;
    case OpKind::Permute: return permute;
    case OpKind::Slice: return slice;
    case OpKind::Pad: return pad;
    case OpKind::Concat: return concat;
    case OpKind::Repeat: return repeat;
    case OpKind::Flip: return flip;
    case OpKind::Expand: return expand;
    case OpKind::Gather: return gather;
    case OpKind::Triangle: return triangle;
    case OpKind::Arange: return arange;
    case OpKind::Rand: return rand;
    case OpKind::Softmax: return softmax;
    case OpKind::RmsNorm: return rms_norm;
    case OpKind::LayerNorm: return layer_norm;
    case OpKind::GroupNorm: return group_norm;
    case OpKind::Rope: return rope;
    case OpKind::Conv2d: return conv2d;
    case OpKind::Pool2d: return pool2d;
    case OpKind::Upsample: return upsample;
    case OpKind::Attention: return attention;
    case OpKind::Count: break;
  }
  return nullptr;
}

}  // namespace tessera::ref
