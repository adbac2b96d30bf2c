// Reference kernel of linear: out[..., n] = sum_k x[..., k] * w[n, k], accumulated in double in
// increasing k, with quantised weight rows dequantised block by block.
#include <cstring>

#include "kernels/quant.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

absl::Status linear(const KernelArgs& args) {
  const KernelInput& w = args.inputs[1];
  const int64_t K = w.shape[1];
  const int last = args.node.rank() - 1;
  const TensorView& x = args.inputs[0];
  const int64_t block = dtype_block_size(w.dtype), block_bytes = dtype_block_bytes(w.dtype);
  const quant::BlockDequantizer dequantize = quant::block_dequantizer(w.dtype);
  const auto* w_bytes = static_cast<const uint8_t*>(args.inputs[1].data);
  const int64_t row_bytes = dtype_bytes(w.dtype, K);
  // Weights are constants: the view covers the whole [N, K] matrix from row 0.
  const int64_t row_origin = args.inputs[1].extent.begin(0);
  float decoded[256];
  int64_t xi[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    const int64_t n = i[last];
    for (int d = 0; d < last; ++d) xi[d] = i[d];
    const uint8_t* row = w_bytes + (n - row_origin) * row_bytes;
    double acc = 0;
    for (int64_t k0 = 0; k0 < K; k0 += block) {
      dequantize(row + (k0 / block) * block_bytes, decoded);
      for (int64_t j = 0; j < block; ++j) {
        xi[last] = k0 + j;
        acc += load(x, xi) * static_cast<double>(decoded[j]);
      }
    }
    store(args.out, i, acc);
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
