// Optimised matmul: C[..., m, n] = sum_k A[..., m, k] * B[..., k, n], accumulated in float, for
// f32, f16 and bf16 (all three tensors of one dtype). Half operands are widened to float exactly
// (a chunk of B's row at a time) and each output is rounded once to the half type at the end.
//
// Exactness (DESIGN.md section 1): every output element is computed by the same sequence of
// operations whatever box is requested: acc = 0, then acc += a[m][k] * b[k][n] for k = 0..K-1
// in increasing order, one float rounding per step. Boxes and tiles only choose which elements
// are computed together (rows are blocked by 4 and columns by a fixed chunk for cache reuse);
// K is never split, so tile boundaries cannot change a reduction order. Vector lanes and the
// scalar column tail perform the same IEEE operations (same multiply, same add), so where an
// element falls in a chunk does not matter either.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/access.h"
#include "kernels/ref/ref_kernels.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kRows = 4;      // rows of C sharing each loaded row chunk of B
constexpr int64_t kChunk = 1024;  // columns per accumulator row: 4 x 4 KiB stays in L1
constexpr int64_t kLanes = 8;     // fixed-width inner blocks, vectorised by GCC at -O2 (SLP)

// acc[r][j] += a[r] * b[j * b_step] for r < rows, j < cols. The fixed-size inner blocks let GCC
// vectorise without runtime alias or trip-count checks; the tail repeats the same operation.
void axpy_rows(float (*acc)[kChunk], const float* a, int64_t rows, const float* b, int64_t b_step,
               int64_t cols) {
  const int64_t full = cols - cols % kLanes;
  if (b_step == 1 && rows == kRows) {
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    for (int64_t j0 = 0; j0 < full; j0 += kLanes)
      for (int64_t j = j0; j < j0 + kLanes; ++j) {
        const float bj = b[j];
        acc[0][j] += a0 * bj;
        acc[1][j] += a1 * bj;
        acc[2][j] += a2 * bj;
        acc[3][j] += a3 * bj;
      }
    for (int64_t j = full; j < cols; ++j)
      for (int64_t r = 0; r < kRows; ++r) acc[r][j] += a[r] * b[j];
    return;
  }
  if (b_step == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const float ar = a[r];
      float* row = acc[r];
      for (int64_t j0 = 0; j0 < full; j0 += kLanes)
        for (int64_t j = j0; j < j0 + kLanes; ++j) row[j] += ar * b[j];
      for (int64_t j = full; j < cols; ++j) row[j] += ar * b[j];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) acc[r][j] += a[r] * b[j * b_step];
}

// Where a matmul operand's matrix starts for an output batch index (numpy broadcasting), as the
// address of that element (of the view's dtype).
const std::byte* matrix_origin(const TensorView& view, const Shape& shape, int out_rank,
                               const int64_t* out_index, int64_t row, int64_t col) {
  int64_t index[kMaxRank];
  const int rank = static_cast<int>(shape.size()), offset = out_rank - rank;
  for (int d = 0; d < rank - 2; ++d)
    index[d] = shape[static_cast<size_t>(d)] == 1 ? 0 : out_index[d + offset];
  index[rank - 2] = row;
  index[rank - 1] = col;
  return element_address(view, index);
}

}  // namespace

absl::Status matmul_float(const KernelArgs& args) {
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& out = args.out;
  const DType dtype = out.dtype;
  if (a.dtype != dtype || b.dtype != dtype || (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16))
    return ref::reference_kernel(OpKind::Matmul)(args);
  const bool f32 = dtype == DType::F32;
  const Box& box = args.box;
  if (box.empty()) return absl::OkStatus();
  const Shape& sa = args.inputs[0].shape;
  const Shape& sb = args.inputs[1].shape;
  const int rank = args.node.rank(), ra = static_cast<int>(sa.size()),
            rb = static_cast<int>(sb.size());
  const int64_t depth = sa.back();
  const int64_t a_row_step = a.strides[ra - 2], a_k_step = a.strides[ra - 1];
  const int64_t b_k_step = b.strides[rb - 2], b_col_step = b.strides[rb - 1];
  const int64_t out_row_step = out.strides[rank - 2], out_col_step = out.strides[rank - 1];
  const int64_t m_begin = box.begin(rank - 2), m_end = box.end(rank - 2);
  const int64_t n_begin = box.begin(rank - 1), n_end = box.end(rank - 1);

  alignas(64) float acc[kRows][kChunk];
  alignas(64) float b_row[kChunk];  // a half B row chunk, widened
  float a_col[kRows];
  Box batch = Box::of_rank(rank - 2);
  for (int d = 0; d < rank - 2; ++d) batch[d] = box[d];
  int64_t index[kMaxRank];
  ref::for_each_index(batch, [&](const int64_t* batch_index) {
    std::copy(batch_index, batch_index + rank - 2, index);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kRows) {
      const int64_t rows = std::min(kRows, m_end - m0);
      const std::byte* a_rows = matrix_origin(a, sa, rank, index, m0, 0);
      for (int64_t n0 = n_begin; n0 < n_end; n0 += kChunk) {
        const int64_t cols = std::min(kChunk, n_end - n0);
        const std::byte* b_cols = matrix_origin(b, sb, rank, index, 0, n0);
        for (int64_t r = 0; r < rows; ++r) std::fill_n(acc[r], cols, 0.0f);
        for (int64_t k = 0; k < depth; ++k) {
          for (int64_t r = 0; r < rows; ++r) a_col[r] = float_at(dtype, a_rows, r * a_row_step + k * a_k_step);
          if (f32) {
            axpy_rows(acc, a_col, rows, reinterpret_cast<const float*>(b_cols) + k * b_k_step, b_col_step, cols);
          } else {
            for (int64_t j = 0; j < cols; ++j) b_row[j] = float_at(dtype, b_cols, k * b_k_step + j * b_col_step);
            axpy_rows(acc, a_col, rows, b_row, 1, cols);
          }
        }
        index[rank - 2] = m0;
        index[rank - 1] = n0;
        void* c = static_cast<std::byte*>(out.data) + out.offset(index) * dtype_size(dtype);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) store_float(dtype, c, r * out_row_step + j * out_col_step, acc[r][j]);
      }
    }
  });
  return absl::OkStatus();
}

// Matmul inputs share the output dtype (engine/ops_index.cc). The
// kernel is plain C++ (the same code for every instruction set).
KernelFn matmul_kernel(const Graph&, const Node& node, Isa) {
  return node.dtype == DType::F32 || node.dtype == DType::F16 || node.dtype == DType::BF16 ? matmul_float : nullptr;
}

}  // namespace tessera::cpu
