// Reference kernels of the movement ops. Every output element is a copy of one input element
// (or pad's value): the bytes are copied as they are, so every dtype stays bit-exact (i64 above
// 2^53 and NaN payloads included). Inputs are addressed by global coordinates; attribute
// encodings are documented at the definition blocks (engine/ops_movement.cc, ops_reshape.cc).
#include <cstring>

#include "engine/op_def.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

namespace {

void copy_element(const TensorView& dst, const int64_t* dst_index, const TensorView& src,
                  const int64_t* src_index) {
  const int64_t size = dtype_size(dst.dtype);
  std::memcpy(static_cast<std::byte*>(dst.data) + dst.offset(dst_index) * size,
              static_cast<const std::byte*>(src.data) + src.offset(src_index) * size,
              static_cast<size_t>(size));
}

const Shape& input_shape(const KernelArgs& args, int i) {
  return args.inputs[static_cast<size_t>(i)].shape;
}

}  // namespace

absl::Status reshape(const KernelArgs& args) {
  const Shape& in_shape = input_shape(args, 0);
  const Shape& out_shape = args.node.shape;
  const int in_rank = static_cast<int>(in_shape.size());
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    // Same row-major linear index on both sides.
    int64_t linear = 0;
    for (size_t d = 0; d < out_shape.size(); ++d) linear = linear * out_shape[d] + i[d];
    for (int d = in_rank - 1; d >= 0; --d) {
      in_index[d] = linear % in_shape[d];
      linear /= in_shape[d];
    }
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

absl::Status permute(const KernelArgs& args) {
  const Ints& perm = args.node.attrs_as<PermuteAttrs>().perm;
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (size_t d = 0; d < perm.size(); ++d) in_index[perm[d]] = i[d];
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

absl::Status slice(const KernelArgs& args) {
  const SliceAttrs& a = args.node.attrs_as<SliceAttrs>();
  const int rank = args.node.rank();
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (int d = 0; d < rank; ++d) in_index[d] = a.start[d] + i[d] * a.step[d];
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

absl::Status pad(const KernelArgs& args) {
  const Shape& in_shape = input_shape(args, 0);
  const Ints& before = args.node.attrs_as<PadAttrs>().before;
  const double value = args.node.attrs_as<PadAttrs>().value;
  const int rank = args.node.rank();
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    bool inside = true;
    for (int d = 0; d < rank; ++d) {
      in_index[d] = i[d] - before[d];
      inside = inside && in_index[d] >= 0 && in_index[d] < in_shape[d];
    }
    if (inside)
      copy_element(args.out, i, args.inputs[0], in_index);
    else
      store(args.out, i, value);
  });
  return absl::OkStatus();
}

absl::Status concat(const KernelArgs& args) {
  const int axis = static_cast<int>(args.node.attrs_as<ConcatAttrs>().axis);
  const int rank = args.node.rank();
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (int d = 0; d < rank; ++d) in_index[d] = i[d];
    // Find the input whose slab of the axis holds i[axis] (at most 64 inputs).
    int64_t offset = 0;
    for (size_t k = 0; k < args.inputs.size(); ++k) {
      const int64_t n = input_shape(args, static_cast<int>(k))[axis];
      if (i[axis] < offset + n) {
        in_index[axis] = i[axis] - offset;
        copy_element(args.out, i, args.inputs[k], in_index);
        return;
      }
      offset += n;
    }
  });
  return absl::OkStatus();
}

absl::Status repeat(const KernelArgs& args) {
  const Shape& in_shape = input_shape(args, 0);
  const int rank = args.node.rank();
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (int d = 0; d < rank; ++d) in_index[d] = i[d] % in_shape[d];
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

absl::Status flip(const KernelArgs& args) {
  const Shape& shape = args.node.shape;
  const int rank = args.node.rank();
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (int d = 0; d < rank; ++d) in_index[d] = i[d];
    for (int64_t a : args.node.attrs_as<FlipAttrs>().axes) in_index[a] = shape[a] - 1 - i[a];
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

absl::Status expand(const KernelArgs& args) {
  const Shape& in_shape = input_shape(args, 0);
  const int in_rank = static_cast<int>(in_shape.size());
  const int offset = args.node.rank() - in_rank;  // new leading dims
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (int d = 0; d < in_rank; ++d) in_index[d] = in_shape[d] == 1 ? 0 : i[d + offset];
    copy_element(args.out, i, args.inputs[0], in_index);
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
