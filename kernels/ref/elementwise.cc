// Reference kernels: constants, unary, binary, where, cast.
#include <cmath>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"

namespace tessera::ref {

namespace {

// Input index of an output index under numpy broadcasting.
void broadcast_index(const Shape& in_shape, int out_rank, const int64_t* out_index, int64_t* in_index) {
  const int offset = out_rank - static_cast<int>(in_shape.size());
  for (int d = 0; d < static_cast<int>(in_shape.size()); ++d)
    in_index[d] = in_shape[d] == 1 ? 0 : out_index[d + offset];
}

double apply_unary(UnaryFn fn, double x) {
  switch (fn) {
    case UnaryFn::Neg: return -x;
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Sign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : x);
    case UnaryFn::Reciprocal: return 1.0 / x;
    case UnaryFn::Relu: return x > 0 ? x : 0.0;
    case UnaryFn::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
    case UnaryFn::GeluTanh: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case UnaryFn::GeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case UnaryFn::Silu: return x / (1.0 + std::exp(-x));
    case UnaryFn::Floor: return std::floor(x);
    case UnaryFn::Ceil: return std::ceil(x);
    case UnaryFn::Round: return std::nearbyint(x);  // default rounding mode: half to even
    case UnaryFn::Erf: return std::erf(x);
    case UnaryFn::Count: break;
  }
  return x;
}

double apply_binary(BinaryFn fn, double a, double b, bool integer) {
  switch (fn) {
    case BinaryFn::Add: return a + b;
    case BinaryFn::Sub: return a - b;
    case BinaryFn::Mul: return a * b;
    case BinaryFn::Div:
      if (integer) return b == 0 ? 0.0 : std::trunc(a / b);
      return a / b;
    case BinaryFn::Pow: return std::pow(a, b);
    case BinaryFn::Minimum: return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
    case BinaryFn::Maximum: return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
    case BinaryFn::Eq: return a == b;
    case BinaryFn::Ne: return a != b;
    case BinaryFn::Lt: return a < b;
    case BinaryFn::Le: return a <= b;
    case BinaryFn::Gt: return a > b;
    case BinaryFn::Ge: return a >= b;
    case BinaryFn::Count: break;
  }
  return 0;
}

}  // namespace

// Inputs are written by the caller, never computed.
absl::Status input(const KernelArgs&) {
  return absl::FailedPreconditionError("inputs are written, never computed");
}

absl::Status constant(const KernelArgs& args) {
  const ConstantData& data = args.graph.constant_data(args.node.constant);
  TensorView src = dense_view(const_cast<void*>(data.data), args.node.dtype, Box::full(args.node.shape));
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
  const Shape& sa = args.graph.node(args.node.inputs[0]).shape;
  const Shape& sb = args.graph.node(args.node.inputs[1]).shape;
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
  const Shape& sc = args.graph.node(args.node.inputs[0]).shape;
  const Shape& sa = args.graph.node(args.node.inputs[1]).shape;
  const Shape& sb = args.graph.node(args.node.inputs[2]).shape;
  for_each_index(args.box, [&](const int64_t* i) {
    broadcast_index(sc, rank, i, ic);
    broadcast_index(sa, rank, i, ia);
    broadcast_index(sb, rank, i, ib);
    double v = load(args.inputs[0], ic) != 0 ? load(args.inputs[1], ia) : load(args.inputs[2], ib);
    store(args.out, i, v);
  });
  return absl::OkStatus();
}

absl::Status cast(const KernelArgs& args) {
  for_each_index(args.box, [&](const int64_t* i) { store(args.out, i, load(args.inputs[0], i)); });
  return absl::OkStatus();
}

}  // namespace tessera::ref
