// Elementwise ops: unary, binary (broadcasting), where, cast.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, absl::StrCat("shapes ", shape_string(a), " and ", shape_string(b), " do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Box broadcast_needed(const Shape& input, const Shape& output, const Box& out_box) {
  const int offset = static_cast<int>(output.size() - input.size());
  Box b = Box::of_rank(static_cast<int>(input.size()));
  for (int d = 0; d < b.rank(); ++d) {
    if (out_box.empty()) return b;  // empty stays empty
    b[d] = (input[d] == 1 && output[d + offset] != 1) ? Interval(0, 1) : out_box[d + offset];
  }
  return b;
}

Box broadcast_forward(const Shape& input, const Shape& output, const Box& dirty) {
  const int offset = static_cast<int>(output.size() - input.size());
  Box b = Box::full(output);
  for (int d = 0; d < static_cast<int>(input.size()); ++d)
    if (!(input[d] == 1 && output[d + offset] != 1)) b[d + offset] = dirty[d];
  return b;
}

void identity_forward(const Graph&, const Node&, int, const Box& dirty, Region& out) { out.add(dirty); }

Box whole_blocks(const Box& box, DType dtype, int64_t last_dim) {
  const int64_t block = dtype_block_size(dtype);
  if (block == 1 || box.rank() == 0 || box.empty()) return box;
  Box b = box;
  const int last = box.rank() - 1;
  b[last] = Interval(box.begin(last) / block * block, std::min(last_dim, (box.end(last) + block - 1) / block * block));
  return b;
}

void identity_needed(const Graph&, const Node&, const Box& out, std::span<Box> inputs) {
  for (Box& b : inputs) b = out;
}

static void broadcast_forward_rule(const Graph& g, const Node& node, int i, const Box& dirty, Region& out) {
  out.add(broadcast_forward(input_node(g, node, i).shape, node.shape, dirty));
}

static void broadcast_needed_rule(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = broadcast_needed(input_node(g, node, static_cast<int>(i)).shape, node.shape, out);
}

// ---- unary: UnaryAttrs {fn} ---------------------------------------------------------------
std::string_view fn_name(UnaryFn fn) {
  static constexpr std::string_view kNames[] = {
      "neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign", "reciprocal", "relu", "sigmoid",
      "tanh", "sin", "cos", "gelu_tanh", "gelu_erf", "silu", "floor", "ceil", "round", "erf"};
  const auto i = static_cast<size_t>(fn);
  return i < std::size(kNames) ? kNames[i] : "?";
}
std::string UnaryAttrs::to_string() const { return "unary." + std::string(fn_name(fn)); }

static bool unary_accepts_integers(UnaryFn fn) {
  return fn == UnaryFn::Neg || fn == UnaryFn::Abs || fn == UnaryFn::Sign || fn == UnaryFn::Relu;
}

// Decompositions of the composite functions, with the reference kernel's constants: sigmoid
// 1 / (1 + exp(-x)); silu x * sigmoid(x); gelu_tanh (as HF's NewGELU)
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))); gelu_erf
// 0.5 * x * (1 + erf(x / sqrt(2))). The other functions are primitive (Tensor{}).
static Tensor unary_decompose(std::span<const Tensor> inputs, const Node& node) {
  const Tensor x = inputs[0];
  auto c = [&](double value) { return x.graph->scalar(static_cast<float>(value), node.dtype); };
  switch (node.attrs_as<UnaryAttrs>().fn) {
    case UnaryFn::Sigmoid:
      return c(1.0) / (c(1.0) + exp(neg(x)));
    case UnaryFn::Silu:
      return x * sigmoid(x);
    case UnaryFn::GeluTanh:
      return c(0.5) * x *
             (c(1.0) + tanh(c(std::sqrt(2.0 / M_PI)) * (x + c(0.044715) * pow(x, c(3.0)))));
    case UnaryFn::GeluErf:
      return c(0.5) * x * (c(1.0) + erf(x / c(std::sqrt(2.0))));
    default:
      return Tensor{};
  }
}

const OpDef kUnaryDef{
    .name = "unary",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const UnaryFn fn = node.attrs_as<UnaryAttrs>().fn;
          if (fn < UnaryFn::Neg || fn >= UnaryFn::Count) fail("unary", "unknown function");
          const Node& x = input_node(g, node, 0);
          if (x.dtype == DType::Bool || (is_integer(x.dtype) && !unary_accepts_integers(fn)))
            fail(op_display_name(node), absl::StrCat("does not accept ", dtype_name(x.dtype)));
          node.shape = x.shape;
          node.dtype = x.dtype;
        },
    .forward = identity_forward,
    .needed = identity_needed,
    .decompose = unary_decompose,
};

Tensor unary(UnaryFn fn, Tensor x) {
  Graph& g = builder_graph("unary", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, UnaryAttrs{fn});
}
Tensor neg(Tensor x) { return unary(UnaryFn::Neg, x); }
Tensor exp(Tensor x) { return unary(UnaryFn::Exp, x); }
Tensor log(Tensor x) { return unary(UnaryFn::Log, x); }
Tensor sqrt(Tensor x) { return unary(UnaryFn::Sqrt, x); }
Tensor rsqrt(Tensor x) { return unary(UnaryFn::Rsqrt, x); }
Tensor abs(Tensor x) { return unary(UnaryFn::Abs, x); }
Tensor sign(Tensor x) { return unary(UnaryFn::Sign, x); }
Tensor reciprocal(Tensor x) { return unary(UnaryFn::Reciprocal, x); }
Tensor relu(Tensor x) { return unary(UnaryFn::Relu, x); }
Tensor sigmoid(Tensor x) { return unary(UnaryFn::Sigmoid, x); }
Tensor tanh(Tensor x) { return unary(UnaryFn::Tanh, x); }
Tensor sin(Tensor x) { return unary(UnaryFn::Sin, x); }
Tensor cos(Tensor x) { return unary(UnaryFn::Cos, x); }
Tensor gelu(Tensor x, bool tanh_approximation) {
  return unary(tanh_approximation ? UnaryFn::GeluTanh : UnaryFn::GeluErf, x);
}
Tensor silu(Tensor x) { return unary(UnaryFn::Silu, x); }
Tensor floor(Tensor x) { return unary(UnaryFn::Floor, x); }
Tensor ceil(Tensor x) { return unary(UnaryFn::Ceil, x); }
Tensor round(Tensor x) { return unary(UnaryFn::Round, x); }
Tensor erf(Tensor x) { return unary(UnaryFn::Erf, x); }

// ---- binary: BinaryAttrs {fn} -------------------------------------------------------------
std::string_view fn_name(BinaryFn fn) {
  static constexpr std::string_view kNames[] = {"add", "sub", "mul", "div", "pow", "minimum", "maximum",
                                                "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  const auto i = static_cast<size_t>(fn);
  return i < std::size(kNames) ? kNames[i] : "?";
}
std::string BinaryAttrs::to_string() const { return "binary." + std::string(fn_name(fn)); }

static bool is_comparison(BinaryFn fn) { return fn >= BinaryFn::Eq; }

const OpDef kBinaryDef{
    .name = "binary",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer =
        [](const Graph& g, Node& node) {
          const BinaryFn fn = node.attrs_as<BinaryAttrs>().fn;
          if (fn < BinaryFn::Add || fn >= BinaryFn::Count) fail("binary", "unknown function");
          const Node& a = input_node(g, node, 0);
          const Node& b = input_node(g, node, 1);
          std::string name = op_display_name(node);
          if (a.dtype != b.dtype)
            fail(name, absl::StrCat("dtype mismatch: ", dtype_name(a.dtype), " vs ", dtype_name(b.dtype)));
          if (a.dtype == DType::Bool && !(fn == BinaryFn::Eq || fn == BinaryFn::Ne ||
                                          fn == BinaryFn::Minimum || fn == BinaryFn::Maximum))
            fail(name, "does not accept bool");
          node.shape = broadcast_shapes(name, a.shape, b.shape);
          node.dtype = is_comparison(fn) ? DType::Bool : a.dtype;
        },
    .forward = broadcast_forward_rule,
    .needed = broadcast_needed_rule,
};

Tensor binary(BinaryFn fn, Tensor a, Tensor b) {
  Graph& g = builder_graph("binary", {{"a", a}, {"b", b}});
  Tensor in[] = {a, b};
  return g.add_node(in, BinaryAttrs{fn});
}
Tensor add(Tensor a, Tensor b) { return binary(BinaryFn::Add, a, b); }
Tensor sub(Tensor a, Tensor b) { return binary(BinaryFn::Sub, a, b); }
Tensor mul(Tensor a, Tensor b) { return binary(BinaryFn::Mul, a, b); }
Tensor div(Tensor a, Tensor b) { return binary(BinaryFn::Div, a, b); }
Tensor pow(Tensor a, Tensor b) { return binary(BinaryFn::Pow, a, b); }
Tensor minimum(Tensor a, Tensor b) { return binary(BinaryFn::Minimum, a, b); }
Tensor maximum(Tensor a, Tensor b) { return binary(BinaryFn::Maximum, a, b); }
Tensor eq(Tensor a, Tensor b) { return binary(BinaryFn::Eq, a, b); }
Tensor ne(Tensor a, Tensor b) { return binary(BinaryFn::Ne, a, b); }
Tensor lt(Tensor a, Tensor b) { return binary(BinaryFn::Lt, a, b); }
Tensor le(Tensor a, Tensor b) { return binary(BinaryFn::Le, a, b); }
Tensor gt(Tensor a, Tensor b) { return binary(BinaryFn::Gt, a, b); }
Tensor ge(Tensor a, Tensor b) { return binary(BinaryFn::Ge, a, b); }
Tensor operator+(Tensor a, Tensor b) { return add(a, b); }
Tensor operator-(Tensor a, Tensor b) { return sub(a, b); }
Tensor operator*(Tensor a, Tensor b) { return mul(a, b); }
Tensor operator/(Tensor a, Tensor b) { return div(a, b); }

// ---- where(cond, a, b): no attributes -----------------------------------------------------
std::string WhereAttrs::to_string() const { return "where"; }

const OpDef kWhereDef{
    .name = "where",
    .min_inputs = 3,
    .max_inputs = 3,
    .infer =
        [](const Graph& g, Node& node) {
          const Node& c = input_node(g, node, 0);
          const Node& a = input_node(g, node, 1);
          const Node& b = input_node(g, node, 2);
          if (c.dtype != DType::Bool) fail("where", "condition must be bool");
          if (a.dtype != b.dtype)
            fail("where", absl::StrCat("dtype mismatch: ", dtype_name(a.dtype), " vs ", dtype_name(b.dtype)));
          node.shape = broadcast_shapes("where", broadcast_shapes("where", c.shape, a.shape), b.shape);
          node.dtype = a.dtype;
        },
    .forward = broadcast_forward_rule,
    .needed = broadcast_needed_rule,
};

Tensor where(Tensor cond, Tensor a, Tensor b) {
  Graph& g = builder_graph("where", {{"cond", cond}, {"a", a}, {"b", b}});
  Tensor in[] = {cond, a, b};
  return g.add_node(in, WhereAttrs{});
}

// ---- cast: CastAttrs {dtype} (the target) --------------------------------------------------
// Between plain dtypes elementwise. To q8_0 from a float dtype (quantise: each block of 32 along
// the last axis as quant::quantize_q8_0, ggml's quantize_row_q8_0) and from q8_0 to a float
// dtype (d * q, exact in f32): the last axis is whole blocks, and boxes grow to whole blocks on
// it (a block's scale depends on all of its 32 elements).
std::string CastAttrs::to_string() const { return absl::StrCat("cast.", dtype_name(dtype)); }

namespace {

// The quantised side of a cast (its output or input), or F32 when it has none.
DType quantised_side(const Graph& g, const Node& node) {
  if (is_quantized(node.dtype)) return node.dtype;
  const DType in = input_node(g, node, 0).dtype;
  return is_quantized(in) ? in : DType::F32;
}

void cast_forward(const Graph& g, const Node& node, int, const Box& dirty, Region& out) {
  out.add(whole_blocks(dirty, quantised_side(g, node), node.shape.empty() ? 0 : node.shape.back()));
}

void cast_needed(const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
  inputs[0] = whole_blocks(out, quantised_side(g, node), node.shape.empty() ? 0 : node.shape.back());
}

}  // namespace

const OpDef kCastDef{
    .name = "cast",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer =
        [](const Graph& g, Node& node) {
          const DType dtype = node.attrs_as<CastAttrs>().dtype;
          const Node& x = input_node(g, node, 0);
          if (dtype > DType::Bool && dtype != DType::Q8_0)
            fail("cast", absl::StrCat("cannot cast to ", dtype_name(dtype), " (quantised targets: q8_0)"));
          if (is_quantized(x.dtype) && x.dtype != DType::Q8_0)
            fail("cast", absl::StrCat("cannot cast from ", dtype_name(x.dtype), " (quantised sources: q8_0)"));
          if (dtype == DType::Q8_0 || x.dtype == DType::Q8_0) {
            const DType other = dtype == DType::Q8_0 ? x.dtype : dtype;
            if (!is_float(other))
              fail("cast", absl::StrCat("q8_0 casts to and from f32, f16 or bf16 only, not ", dtype_name(other)));
            if (x.shape.empty() || x.shape.back() % dtype_block_size(DType::Q8_0) != 0)
              fail("cast", absl::StrCat("q8_0 needs a last axis of whole blocks of 32, got shape ", shape_string(x.shape)));
          }
          node.shape = x.shape;
          node.dtype = dtype;
        },
    .forward = cast_forward,
    .needed = cast_needed,
};

Tensor cast(Tensor x, DType dtype) {
  Graph& g = builder_graph("cast", {{"x", x}});
  Tensor in[] = {x};
  return g.add_node(in, CastAttrs{dtype});
}

}  // namespace tessera
