#include "kernels/view.h"

namespace tessera {

TensorView dense_view(void* data, DType dtype, const Box& extent) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.extent = extent;
  int64_t s = 1;
  for (int i = extent.rank() - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= extent.extent(i);
  }
  return v;
}

}  // namespace tessera
