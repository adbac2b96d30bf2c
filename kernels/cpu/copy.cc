// Optimised copies: reshape (any plain dtype) and gather (plain tables, and block-quantised
// tables when the node's dtype is f32). Values are copied bit-exactly, in row runs with memcpy
// where both sides are contiguous; a quantised table row is dequantised with the scalar block
// dequantisers of kernels/quant (the same values as the reference), so every path gives the
// same bits for an element whatever box computes it.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/box_rows.h"
#include "kernels/cpu/copy_runs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant.h"

namespace tessera::cpu {

namespace {

// Output rows map to consecutive row-major linear indices of the input; each row is copied in
// runs that stay within one input row.
absl::Status reshape_copy(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const Shape& in_shape = args.inputs[0].shape;
  const Shape& out_shape = args.node.shape;
  const int in_rank = static_cast<int>(in_shape.size()), out_rank = args.node.rank();
  const int64_t size = dtype_size(args.out.dtype);
  const TensorView& in = args.inputs[0];
  if (out_rank == 0 || in_rank == 0) {
    int64_t zero[kMaxRank] = {};
    // The one element; the same address when the planner placed the reshape over its input.
    std::memmove(element(args.out, zero, size), element(in, zero, size), static_cast<size_t>(size));
    return absl::OkStatus();
  }
  if (reshape_in_place(in, args.inputs[0].shape, args.out, out_shape, box)) return absl::OkStatus();
  const int64_t in_row = in_shape.back();
  const int64_t in_step = in.strides[in_rank - 1], out_step = args.out.strides[out_rank - 1];
  const BoxRows rows(box);
  const int64_t width = box.extent(out_rank - 1);
  int64_t out_index[kMaxRank], in_index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, out_index);
    int64_t linear = 0;
    for (int d = 0; d < out_rank; ++d)
      linear = linear * out_shape[static_cast<size_t>(d)] + out_index[d];
    std::byte* dst = element(args.out, out_index, size);
    for (int64_t done = 0; done < width;) {
      int64_t rest = linear + done;
      for (int d = in_rank - 1; d >= 0; --d) {
        in_index[d] = rest % in_shape[static_cast<size_t>(d)];
        rest /= in_shape[static_cast<size_t>(d)];
      }
      const int64_t run = std::min(width - done, in_row - in_index[in_rank - 1]);
      copy_run(dst + done * out_step * size, out_step, element(in, in_index, size), in_step, run,
               size);
      done += run;
    }
  }
  return absl::OkStatus();
}

int64_t load_id(const TensorView& ids, const int64_t* index) {
  const int64_t o = ids.offset(index);
  if (ids.dtype == DType::I32) return static_cast<const int32_t*>(ids.data)[o];
  return static_cast<const int64_t*>(ids.data)[o];
}

absl::Status id_error(int64_t id, int64_t rows) {
  return absl::InvalidArgumentError(absl::StrCat("id ", id, " out of range [0, ", rows, ")"));
}

// Table [V, ...rest] (rank >= 2) of a plain dtype: output rows are table rows' box columns.
absl::Status gather_rows(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const KernelInput& table = args.inputs[0];
  const int idx_rank = args.inputs[1].rank();
  const int rank = args.node.rank(), last = rank - 1;
  const int64_t size = dtype_size(args.out.dtype), width = box.extent(last);
  const TensorView& values = args.inputs[0];
  const BoxRows rows(box);
  int64_t index[kMaxRank], table_index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    const int64_t id = load_id(args.inputs[1], index);
    if (id < 0 || id >= table.shape[0]) return id_error(id, table.shape[0]);
    table_index[0] = id;
    for (int d = idx_rank; d < rank; ++d) table_index[d - idx_rank + 1] = index[d];
    copy_run(element(args.out, index, size), args.out.strides[last],
             element(values, table_index, size), values.strides[table.rank() - 1], width, size);
  }
  return absl::OkStatus();
}

// Table [V, D] of a block-quantised dtype, f32 output: the blocks holding the box's columns
// are dequantised (whole blocks, as the reference dequantisers do) and the columns copied.
absl::Status gather_quantized(const KernelArgs& args) {
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const KernelInput& table = args.inputs[0];
  const int last = args.node.rank() - 1;
  const int64_t dim = table.shape[1], block = dtype_block_size(table.dtype);
  const int64_t block_bytes = dtype_block_bytes(table.dtype),
                row_bytes = dtype_bytes(table.dtype, dim);
  const quant::BlockDequantizer dequantize = quant::block_dequantizer(table.dtype);
  const auto* data = static_cast<const uint8_t*>(args.inputs[0].data);
  const int64_t row_origin = args.inputs[0].extent.begin(0);
  const int64_t j0 = box.begin(last), j1 = box.end(last), out_step = args.out.strides[last];
  const BoxRows rows(box);
  float decoded[256];
  int64_t index[kMaxRank];
  for (int64_t r = 0; r < rows.count(); ++r) {
    rows.index(r, index);
    const int64_t id = load_id(args.inputs[1], index);
    if (id < 0 || id >= table.shape[0]) return id_error(id, table.shape[0]);
    const uint8_t* row = data + (id - row_origin) * row_bytes;
    float* out = args.out.at<float>(index);
    for (int64_t b = j0 / block; b * block < j1; ++b) {
      dequantize(row + b * block_bytes, decoded);
      const int64_t from = std::max(j0, b * block), to = std::min(j1, (b + 1) * block);
      for (int64_t j = from; j < to; ++j) out[(j - j0) * out_step] = decoded[j - b * block];
    }
  }
  return absl::OkStatus();
}

}  // namespace

KernelFn reshape_kernel(const Graph&, const Node& node, Isa) {
  return is_quantized(node.dtype) ? nullptr : reshape_copy;
}

KernelFn gather_kernel(const Graph& graph, const Node& node, Isa) {
  const Node& table = graph.node(node.inputs[0]);
  if (table.rank() < 2) return nullptr;
  if (is_quantized(table.dtype))
    return node.dtype == DType::F32 && table.rank() == 2 &&
                   table.shape[1] % dtype_block_size(table.dtype) == 0
               ? gather_quantized
               : nullptr;
  return node.dtype == table.dtype ? gather_rows : nullptr;
}

}  // namespace tessera::cpu
