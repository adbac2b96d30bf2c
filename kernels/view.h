// TensorView: strided access to a buffer holding a box (`extent`) of a tensor. Kernels address
// elements by global tensor coordinates; the view maps them into the buffer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/graph.h"
#include "regions/box.h"

namespace tessera {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Box extent;                          // the elements the buffer holds
  std::array<int64_t, kMaxRank> strides{};  // elements, for the extent

  int64_t offset(const int64_t* index) const {
    int64_t o = 0;
    for (int i = 0; i < extent.rank(); ++i) o += (index[i] - extent.begin(i)) * strides[i];
    return o;
  }
  template <class T>
  T* at(const int64_t* index) const {
    return static_cast<T*>(data) + offset(index);
  }
};

// A dense row-major view of `extent` over `data`.
TensorView dense_view(void* data, DType dtype, const Box& extent);

// Copy `box` (inside view.extent) between a view and dense row-major memory holding exactly
// that box, one contiguous innermost run at a time.
void copy_box_to_view(const TensorView& view, const Box& box, const void* dense);
void copy_box_from_view(const TensorView& view, const Box& box, void* dense);

// Whether a reshape's output view already holds box `box` of its output (of `out_shape`) as its
// input view holds them (of `in_shape`): the box is one run of row-major linear indices, that
// run lies densely in both views, and it starts at the same address in both. The planner places
// a reshape over its dying input's block when its box and the input's are the same run
// (planner/plan.cc); such a reshape has nothing to move. Plain dtypes only (false for a
// quantised value, whose views address blocks, not elements).
bool reshape_in_place(const TensorView& in, const Shape& in_shape, const TensorView& out, const Shape& out_shape,
                      const Box& box);

// What a kernel knows of one input: a view of (at least) the box it reads, plus the whole
// tensor's shape (broadcasting and bounds need it; the view's extent may be only a part).
// `dtype` (in the view) is the input's dtype.
struct KernelInput : TensorView {
  Shape shape;  // the full shape of the input tensor
  int rank() const { return static_cast<int>(shape.size()); }
};

// What a kernel knows of its own node: kind, dtype, full output shape, typed attributes and,
// for constants only, the constant's bytes. It refers to the node's storage (the graph must
// outlive it) but gives no way back to the graph: kernels see no other node.
struct KernelNode {
  OpKind kind = OpKind::Input;
  DType dtype = DType::F32;
  const Shape& shape;
  const OpAttrs& attrs;
  const void* constant_data = nullptr;  // OpKind::Constant: dense row-major values of `shape`
  // What the backend prepared for this node once, before any run (nullptr: nothing): the cpu
  // backend's linear with int8 activations gets its weight repacked into the kernel's panel
  // layout (kernels/cpu/linear_q8.h). A kernel computes the same bits with or without it.
  const void* prepared = nullptr;

  // From a node; `constant_data` is set by kernel_node(graph, node) only.
  KernelNode(const Node& node)  // NOLINT(google-explicit-constructor): a view of the node
      : kind(node.kind), dtype(node.dtype), shape(node.shape), attrs(node.attrs), node_(&node) {}

  // The typed attributes (the alternative of `kind`); see Node::attrs_as.
  template <class A>
  const A& attrs_as() const {
    return node_->attrs_as<A>();
  }
  int rank() const { return static_cast<int>(shape.size()); }

 private:
  const Node* node_;
};

// The kernel view of `node` of `graph`, constant bytes included (plan time, tests).
KernelNode kernel_node(const Graph& graph, const Node& node);
// One KernelInput per input of `node`: `views[i]` with the input node's full shape.
void kernel_inputs(const Graph& graph, const Node& node, std::span<const TensorView> views,
                   std::vector<KernelInput>& out);

// What a kernel gets: its node, one input per node input, the output view and the output box
// to compute (inside out.extent). Kernels never allocate on success, never throw, and compute
// each element in an order independent of `box`. Everything a kernel may read is here: no
// kernel sees the Graph (so a backend can run kernels from a prepared plan alone).
//
// `scratch`: memory the kernel may use during the call (64-byte aligned, contents undefined),
// at least kernel_scratch_bytes(graph, node, dense) bytes, where `dense` says whether every
// view is dense row-major (session buffers always are). A backend takes it from the plan's
// transient arena, one slice per worker; a kernel given too little returns an error.
struct KernelArgs {
  KernelNode node;
  std::span<const KernelInput> inputs;
  const TensorView& out;
  const Box& box;
  std::span<std::byte> scratch{};
};

// The scratch bytes one call of any kernel of `node` (reference or optimised, any instruction
// set, any box) may need; `dense_views`: the input and output views are dense row-major.
// Depends only on the node and its inputs' shapes (kernels/cpu/cpu_kernels.cc).
int64_t kernel_scratch_bytes(const Graph& graph, const Node& node, bool dense_views);

// Carves typed arrays out of a kernel's scratch span, 64-byte aligned; nullptr when it is
// exhausted (the kernel then returns an error).
class ScratchCarver {
 public:
  explicit ScratchCarver(std::span<std::byte> scratch) : scratch_(scratch) {}
  template <class T>
  T* take(int64_t count) {
    const size_t bytes = (static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T) + 63) / 64 * 64;
    if (bytes > scratch_.size() - used_) return nullptr;
    T* p = reinterpret_cast<T*>(scratch_.data() + used_);
    used_ += bytes;
    return p;
  }

 private:
  std::span<std::byte> scratch_;
  size_t used_ = 0;
};

using KernelFn = absl::Status (*)(const KernelArgs& args);
// A group launch: consecutive launches of one kernel that read the same input 0 over the same
// box on every axis but the last (the q, k and v projections of a decode step), run as one call
// that computes each member's output exactly as its own launch would (a group twin of a
// KernelFn: cpu::group_kernel).
using GroupKernelFn = absl::Status (*)(std::span<const KernelArgs> members);
// Whether two boxes are equal on every axis but the last: group members' boxes must be.
inline bool same_rows(const Box& a, const Box& b) {
  if (a.rank() != b.rank()) return false;
  for (int d = 0; d + 1 < a.rank(); ++d)
    if (!(a[d] == b[d])) return false;
  return true;
}

// An attention kernel's two phases, for a team sharing one query position's work (a decode
// step) where the fused kernel would give each member whole heads: `scores` computes the raw
// scores of tile `tile` of `tiles` (a cut of every row's visible keys) for every row of the
// box into `shared`; once every tile's scores are there, `values` computes any part of the box
// (some heads, some columns) from them. Each output element gets the fused kernel's bits (a
// score is a dot product of its own; the softmax and the column sums run over the keys in
// order as the fused kernel's do). `shared` holds shared_bytes (64-byte aligned), one slot per
// query head; the box must be one position (extent 1 on every axis before the heads).
struct AttentionPhases {
  absl::Status (*scores)(const KernelArgs& args, int tile, int tiles, float* shared) = nullptr;
  absl::Status (*values)(const KernelArgs& args, const float* shared) = nullptr;
  int64_t shared_bytes = 0;
  explicit operator bool() const { return scores != nullptr; }
};

// KernelArgs built from a graph, for calling a kernel directly (tests, benchmarks):
// `kernel(KernelCall{graph, node, views, out, box})`. Owns the inputs; not copyable.
class KernelCall {
 public:
  KernelCall(const Graph& graph, const Node& node, std::span<const TensorView> views, const TensorView& out,
             const Box& box)
      : inputs_(make_inputs(graph, node, views)),
        scratch_(static_cast<size_t>(kernel_scratch_bytes(graph, node, /*dense_views=*/false) + 64)),
        args_{kernel_node(graph, node), inputs_, out, box, aligned(scratch_)} {}
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;
  operator const KernelArgs&() const { return args_; }  // NOLINT(google-explicit-constructor)
  // Hands the kernel data a backend would have prepared for the node (KernelNode::prepared).
  KernelCall& with_prepared(const void* prepared) {
    args_.node.prepared = prepared;
    return *this;
  }

 private:
  static std::vector<KernelInput> make_inputs(const Graph& graph, const Node& node, std::span<const TensorView> views) {
    std::vector<KernelInput> inputs;
    kernel_inputs(graph, node, views, inputs);
    return inputs;
  }
  static std::span<std::byte> aligned(std::vector<std::byte>& v) {
    const size_t skip = (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64;
    return std::span<std::byte>(v.data() + skip, v.size() - skip);
  }
  std::vector<KernelInput> inputs_;
  std::vector<std::byte> scratch_;  // worst case (strided views), 64-byte aligned in aligned()
  KernelArgs args_;
};

}  // namespace tessera
