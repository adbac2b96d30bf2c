// Optimised pool2d (f32) and nearest upsample (any dtype of 1, 2, 4 or 8 bytes per element);
// semantics at their definition blocks in engine/ops_nn.cc.
//
// Exactness (DESIGN.md section 1): upsample copies elements, so any box gives the same bits.
// pool2d reduces each window in the fixed order (kh, kw), skipping the padding: max keeps the
// first NaN it meets (NaN propagates, as in the reference), avg sums in float from 0 and divides
// by kernel * kernel (count_include_pad). Both depend on the output element only.
#include <cstring>
#include <limits>

#include "engine/ops.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tessera::cpu {

namespace {

// ---- pool2d ---------------------------------------------------------------------------------

// One window's max or sum over rows [h0, h1) x columns [w0, w1) of x (clipped to the input).
template <PoolKind kKind>
float pool_window(const float* x, int64_t row_step, int64_t col_step, int64_t rows, int64_t cols) {
  float result = kKind == PoolKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * row_step;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = row[c * col_step];
      if constexpr (kKind == PoolKind::Max) {
        if (result == result && !(v <= result)) result = v;  // v > result, or v NaN
      } else {
        result += v;
      }
    }
  }
  return result;
}

template <PoolKind kKind>
absl::Status pool2d_f32(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const Pool2dAttrs& a = args.node.attrs_as<Pool2dAttrs>();
  const int64_t kernel = a.kernel, stride = a.stride, pad = a.padding;
  const TensorView& x = args.inputs[0];
  const Shape& xs = args.inputs[0].shape;
  const float divisor = static_cast<float>(kernel * kernel);
  const int64_t row_step = x.strides[2], col_step = x.strides[3], out_step = args.out.strides[3];
  const BoxRows rows(box);
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    const int64_t ih0 = index[2] * stride - pad;
    const int64_t h0 = std::max<int64_t>(ih0, 0), h1 = std::min<int64_t>(ih0 + kernel, xs[2]);
    float* out = args.out.at<float>(index);
    for (int64_t ow = box.begin(3); ow < box.end(3); ++ow) {
      const int64_t iw0 = ow * stride - pad;
      const int64_t w0 = std::max<int64_t>(iw0, 0), w1 = std::min<int64_t>(iw0 + kernel, xs[3]);
      const int64_t at[4] = {index[0], index[1], h0, w0};
      const float v =
          pool_window<kKind>(x.at<const float>(at), row_step, col_step, h1 - h0, w1 - w0);
      out[(ow - box.begin(3)) * out_step] = kKind == PoolKind::Max ? v : v / divisor;
    }
  }
  return absl::OkStatus();
}

// ---- upsample -------------------------------------------------------------------------------

// Output rows along the last axis; a row whose source row is the previous row's is a copy of it
// when both are contiguous.
template <class T>
absl::Status upsample_typed(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const int rank = box.rank(), last = rank - 1;
  const int64_t scale = args.node.attrs_as<UpsampleAttrs>().scale;
  const TensorView& x = args.inputs[0];
  const int64_t in_step = x.strides[static_cast<size_t>(last)],
                out_step = args.out.strides[static_cast<size_t>(last)];
  const int64_t j0 = box.begin(last), columns = box.extent(last);
  const BoxRows rows(box);
  int64_t index[kMaxRank], src[kMaxRank];
  const T* previous_src = nullptr;
  const T* previous_out = nullptr;
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    for (int d = 0; d < rank; ++d) src[d] = index[d];
    src[last - 1] /= scale;
    src[last] = j0 / scale;
    const T* in = x.at<const T>(src);  // element (j0 / scale)
    T* out = args.out.at<T>(index);
    if (in == previous_src && out_step == 1) {
      std::memcpy(out, previous_out, sizeof(T) * static_cast<size_t>(columns));
    } else if (scale == 2 && out_step == 1 && in_step == 1) {
      // Each source element twice (a loop the compiler vectorises); an odd first column is the
      // second copy of in[0].
      int64_t i = 0;
      const T* from = in;
      if (j0 % 2 == 1) {
        out[0] = *from++;
        i = 1;
      }
      for (; i + 1 < columns; i += 2, ++from) {
        out[i] = *from;
        out[i + 1] = *from;
      }
      if (i < columns) out[i] = *from;
    } else {
      // Column j0 + i reads source column (j0 + i) / scale, i.e. in[((j0 + i) / scale - j0 /
      // scale)].
      for (int64_t i = 0; i < columns; ++i)
        out[i * out_step] = in[((j0 + i) / scale - j0 / scale) * in_step];
    }
    previous_src = in;
    previous_out = out;
  }
  return absl::OkStatus();
}

}  // namespace

KernelFn pool2d_kernel(const Graph& graph, const Node& node, Isa) {
  if (node.dtype != DType::F32 || graph.node(node.inputs[0]).dtype != DType::F32) return nullptr;
  return node.attrs_as<Pool2dAttrs>().kind == PoolKind::Max ? pool2d_f32<PoolKind::Max>
                                                            : pool2d_f32<PoolKind::Avg>;
}

KernelFn upsample_kernel(const Graph&, const Node& node, Isa) {
  if (is_quantized(node.dtype)) return nullptr;
  switch (dtype_size(node.dtype)) {
    case 1:
      return upsample_typed<uint8_t>;
    case 2:
      return upsample_typed<uint16_t>;
    case 4:
      return upsample_typed<uint32_t>;
    case 8:
      return upsample_typed<uint64_t>;
    default:
      return nullptr;
  }
}

}  // namespace tessera::cpu
