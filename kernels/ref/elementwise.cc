// Reference kernels: constants, unary, binary, where, cast.
#include <algorithm>
#include <cmath>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"
#include "kernels/quant.h"
#include "kernels/ref/elementwise_fns.h"

namespace tessera::ref {

// Inputs are written by the caller, never computed.
absl::Status input(const KernelArgs&) {
  return absl::FailedPreconditionError("inputs are written, never computed");
}

absl::Status constant(const KernelArgs& args) {
  if (args.node.constant_data == nullptr) return absl::InvalidArgumentError("constant without data");
  TensorView src = dense_view(const_cast<void*>(args.node.constant_data), args.node.dtype, Box::full(args.node.shape));
  for_each_index(args.box, [&](const int64_t* i) { store(args.out, i, load(src, i)); });
  return absl::OkStatus();
}

absl::Status unary(const KernelArgs& args) {
  const UnaryFn fn = args.node.attrs_as<UnaryAttrs>().fn;
  const TensorView& x = args.inputs[0];
  for_each_index(args.box, [&](const int64_t* i) { store(args.out, i, apply_unary(fn, load(x, i))); });
  return absl::OkStatus();
}

absl::Status binary(const KernelArgs& args) {
  const BinaryFn fn = args.node.attrs_as<BinaryAttrs>().fn;
  const Shape& sa = args.inputs[0].shape;
  const Shape& sb = args.inputs[1].shape;
  const bool integer = is_integer(args.inputs[0].dtype);
  const int rank = args.node.rank();
  int64_t ia[kMaxRank], ib[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    broadcast_index(sa, rank, i, ia);
    broadcast_index(sb, rank, i, ib);
    store(args.out, i, apply_binary(fn, load(args.inputs[0], ia), load(args.inputs[1], ib), integer));
  });
  return absl::OkStatus();
}

absl::Status where(const KernelArgs& args) {
  const int rank = args.node.rank();
  int64_t ic[kMaxRank], ia[kMaxRank], ib[kMaxRank];
  const Shape& sc = args.inputs[0].shape;
  const Shape& sa = args.inputs[1].shape;
  const Shape& sb = args.inputs[2].shape;
  for_each_index(args.box, [&](const int64_t* i) {
    broadcast_index(sc, rank, i, ic);
    broadcast_index(sa, rank, i, ia);
    broadcast_index(sb, rank, i, ib);
    double v = load(args.inputs[0], ic) != 0 ? load(args.inputs[1], ia) : load(args.inputs[2], ib);
    store(args.out, i, v);
  });
  return absl::OkStatus();
}

namespace {

// The q8_0 block starting at element `index` of a view (whole blocks along a last axis of
// stride 1).
uint8_t* q8_0_block(const TensorView& v, const int64_t* index) {
  return static_cast<uint8_t*>(v.data) + v.offset(index) / 32 * dtype_block_bytes(DType::Q8_0);
}

// A cast to q8_0, one block of the last axis at a time (the box's blocks are whole: cast's
// rules). From q8_0 the elementwise cast below reads each element exactly (load).
absl::Status cast_to_q8_0(const KernelArgs& args) {
  const TensorView& x = args.inputs[0];
  const int last = args.box.rank() - 1;
  Box rows = args.box;
  const int64_t begin = args.box.begin(last), end = args.box.end(last);
  rows[last] = Interval(begin, begin + 1);
  float values[32];
  for_each_index(rows, [&](const int64_t* row) {
    int64_t i[kMaxRank];
    std::copy(row, row + args.box.rank(), i);
    for (int64_t b0 = begin / 32 * 32; b0 < end; b0 += 32) {
      for (int64_t j = 0; j < 32; ++j) {
        i[last] = b0 + j;
        values[j] = static_cast<float>(load(x, i));
      }
      i[last] = b0;
      quant::quantize_q8_0(values, q8_0_block(args.out, i));
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status cast(const KernelArgs& args) {
  if (args.out.dtype == DType::Q8_0) return cast_to_q8_0(args);
  for_each_index(args.box, [&](const int64_t* i) { store(args.out, i, load(args.inputs[0], i)); });
  return absl::OkStatus();
}

}  // namespace tessera::ref
