// Reference kernels: matmul, gather, triangle, arange, rand.
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/ops.h"
#include "kernels/quant.h"
#include "kernels/ref/access.h"
#include "xxhash.h"

namespace tessera::ref {

namespace {

// Index of a broadcast matmul operand for output index `out`: batch dims map by numpy rules,
// the two matrix dims are set by the caller.
void batch_index(const Shape& in_shape, int out_rank, const int64_t* out, int64_t* in) {
  const int in_batch = static_cast<int>(in_shape.size()) - 2, offset = out_rank - 2 - in_batch;
  for (int d = 0; d < in_batch; ++d)
    in[d] = in_shape[static_cast<size_t>(d)] == 1 ? 0 : out[d + offset];
}

// Copies one element between views without going through double, so movement-like ops are
// exact for every dtype (i64 above 2^53 included).
void copy_element(const TensorView& dst, const int64_t* dst_index, const TensorView& src,
                  const int64_t* src_index) {
  const size_t size = static_cast<size_t>(dtype_size(dst.dtype));
  std::memcpy(
      static_cast<std::byte*>(dst.data) + dst.offset(dst_index) * static_cast<int64_t>(size),
      static_cast<const std::byte*>(src.data) + src.offset(src_index) * static_cast<int64_t>(size),
      size);
}

int64_t load_id(const TensorView& ids, const int64_t* index) {
  const int64_t o = ids.offset(index);
  if (ids.dtype == DType::I32) return static_cast<const int32_t*>(ids.data)[o];
  return static_cast<const int64_t*>(ids.data)[o];
}

// Uniform in [0, 1) with 24 random bits (exactly representable in every float dtype's range).
double uniform_at(uint64_t counter, uint64_t seed) {
  const uint64_t h = XXH3_64bits_withSeed(&counter, sizeof(counter), seed);
  return static_cast<double>(h >> 40) * 0x1p-24;
}

}  // namespace

// Each output element sums a[..., m, k] * b[..., k, n] over k = 0..K-1 in increasing order in
// double, then rounds once on store.
absl::Status matmul(const KernelArgs& args) {
  const Shape& sa = args.inputs[0].shape;
  const Shape& sb = args.inputs[1].shape;
  const int rank = args.node.rank(), ra = static_cast<int>(sa.size()),
            rb = static_cast<int>(sb.size());
  const int64_t depth = sa.back();
  int64_t ia[kMaxRank], ib[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    batch_index(sa, rank, i, ia);
    batch_index(sb, rank, i, ib);
    ia[ra - 2] = i[rank - 2];
    ib[rb - 1] = i[rank - 1];
    double acc = 0;
    for (int64_t k = 0; k < depth; ++k) {
      ia[ra - 1] = k;
      ib[rb - 2] = k;
      acc += load(args.inputs[0], ia) * load(args.inputs[1], ib);
    }
    store(args.out, i, acc);
  });
  return absl::OkStatus();
}

// Rows of a quantised table [V, D]: element (id, c) is decoded from its block.
static absl::Status gather_quantized(const KernelArgs& args) {
  const KernelInput& table = args.inputs[0];
  const int idx_rank = args.inputs[1].rank();
  const int64_t rows = table.shape[0], row_bytes = dtype_bytes(table.dtype, table.shape[1]);
  const int64_t block = dtype_block_size(table.dtype), block_bytes = dtype_block_bytes(table.dtype);
  const quant::BlockDequantizer dequantize = quant::block_dequantizer(table.dtype);
  const auto* base = static_cast<const uint8_t*>(args.inputs[0].data);
  float decoded[256];
  absl::Status status = absl::OkStatus();
  for_each_index(args.box, [&](const int64_t* i) {
    if (!status.ok()) return;
    const int64_t id = load_id(args.inputs[1], i);
    if (id < 0 || id >= rows) {
      status = absl::InvalidArgumentError(absl::StrCat("id ", id, " out of range [0, ", rows, ")"));
      return;
    }
    const int64_t c = i[idx_rank];
    dequantize(base + id * row_bytes + (c / block) * block_bytes, decoded);
    store(args.out, i, decoded[c % block]);
  });
  return status;
}

absl::Status gather(const KernelArgs& args) {
  const KernelInput& table = args.inputs[0];
  if (is_quantized(table.dtype)) return gather_quantized(args);
  const int idx_rank = args.inputs[1].rank();
  const int rest_rank = table.rank() - 1;
  const int64_t rows = table.shape[0];
  int64_t it[kMaxRank];
  absl::Status status = absl::OkStatus();
  for_each_index(args.box, [&](const int64_t* i) {
    if (!status.ok()) return;
    const int64_t id = load_id(args.inputs[1], i);
    if (id < 0 || id >= rows) {
      status = absl::InvalidArgumentError(absl::StrCat("id ", id, " out of range [0, ", rows, ")"));
      return;
    }
    it[0] = id;
    for (int d = 0; d < rest_rank; ++d) it[d + 1] = i[idx_rank + d];
    copy_element(args.out, i, args.inputs[0], it);
  });
  return status;
}

absl::Status triangle(const KernelArgs& args) {
  const bool upper = args.node.attrs_as<TriangleAttrs>().upper;
  const int64_t k = args.node.attrs_as<TriangleAttrs>().k;
  const int rank = args.node.rank();
  const size_t size = static_cast<size_t>(dtype_size(args.out.dtype));
  for_each_index(args.box, [&](const int64_t* i) {
    const int64_t diagonal = i[rank - 1] - i[rank - 2];
    if (upper ? diagonal >= k : diagonal <= k) {
      copy_element(args.out, i, args.inputs[0], i);
    } else {
      // All-zero bytes are zero in every dtype (floats, halves, integers, bool).
      std::memset(
          static_cast<std::byte*>(args.out.data) + args.out.offset(i) * static_cast<int64_t>(size),
          0, size);
    }
  });
  return absl::OkStatus();
}

absl::Status arange(const KernelArgs& args) {
  const ArangeAttrs& a = args.node.attrs_as<ArangeAttrs>();
  const double start = a.start, step = a.step;
  for_each_index(args.box, [&](const int64_t* i) {
    store(args.out, i, start + static_cast<double>(i[0]) * step);
  });
  return absl::OkStatus();
}

// Element i (row-major over the full shape) hashes the 8 bytes of i with the seed. Normal values
// use Box-Muller on the independent counters 2i and 2i+1; 1 - u lies in (0, 1], so log is finite.
absl::Status rand(const KernelArgs& args) {
  const RandDist dist = args.node.attrs_as<RandAttrs>().dist;
  const uint64_t seed = args.node.attrs_as<RandAttrs>().seed;
  const Shape& shape = args.node.shape;
  const int rank = args.node.rank();
  for_each_index(args.box, [&](const int64_t* i) {
    uint64_t flat = 0;
    for (int d = 0; d < rank; ++d)
      flat =
          flat * static_cast<uint64_t>(shape[static_cast<size_t>(d)]) + static_cast<uint64_t>(i[d]);
    double value;
    if (dist == RandDist::Uniform) {
      value = uniform_at(flat, seed);
    } else {
      const double u1 = 1.0 - uniform_at(2 * flat, seed), u2 = uniform_at(2 * flat + 1, seed);
      value = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }
    // f16/bf16 round a value just below 1 up to 1.0; clamp to the largest value below 1 so
    // uniform stays inside [0, 1) in every float dtype (f32 holds 24 bits exactly).
    if (dist == RandDist::Uniform && round_to(args.out.dtype, value) >= 1.0)
      value = args.out.dtype == DType::F16 ? 1.0 - 0x1p-11 : 1.0 - 0x1p-8;
    store(args.out, i, value);
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
