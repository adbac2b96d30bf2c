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

KernelNode kernel_node(const Graph& graph, const Node& node) {
  KernelNode result(node);
  if (node.kind == OpKind::Constant && node.constant >= 0)
    result.constant_data = graph.constant_data(node.constant).data;
  return result;
}

void kernel_inputs(const Graph& graph, const Node& node, std::span<const TensorView> views,
                   std::vector<KernelInput>& out) {
  out.clear();
  for (size_t i = 0; i < node.inputs.size() && i < views.size(); ++i) {
    KernelInput input;
    static_cast<TensorView&>(input) = views[i];
    input.shape = graph.node(node.inputs[i]).shape;
    out.push_back(std::move(input));
  }
}

}  // namespace tessera
