// Fused elementwise: a chain of f32 unary / binary (broadcasting) ops as one node, built by the
// planner's fusion pass. Its rules are those of one broadcasting elementwise op: a composition
// of elementwise broadcast ops maps output element i to input element broadcast(i) and to no
// other, so broadcast_forward / broadcast_needed per input are exact.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

namespace {

constexpr int kMaxFusedInputs = 16;
constexpr size_t kMaxFusedInstrs = 64;

std::string instr_string(const FusedInstr& instr) {
  if (instr.kind == OpKind::Unary)
    return absl::StrCat(std::string(fn_name(static_cast<UnaryFn>(instr.fn))), "(", instr.a, ")");
  if (instr.kind == OpKind::Binary)
    return absl::StrCat(std::string(fn_name(static_cast<BinaryFn>(instr.fn))), "(", instr.a, ",",
                        instr.b, ")");
  return "?";
}

[[noreturn]] void fail_instr(size_t j, const std::string& message) {
  fail("fused_elementwise", absl::StrCat("instruction ", j, ": ", message));
}

// Checks instruction j (kind, function, operands) against n_inputs values before it.
void check_instr(const FusedInstr& instr, size_t j, int64_t n_inputs) {
  const int64_t available = n_inputs + static_cast<int64_t>(j);
  auto check_operand = [&](int32_t operand, const char* which) {
    if (operand < 0 || operand >= available)
      fail_instr(j,
                 absl::StrCat("operand ", which, " = ", operand, " is not an input or an earlier ",
                              "instruction (0..", available - 1, ")"));
  };
  if (instr.kind == OpKind::Unary) {
    if (instr.fn < 0 || instr.fn >= static_cast<int64_t>(UnaryFn::Count))
      fail_instr(j, absl::StrCat("unknown unary function ", instr.fn));
    check_operand(instr.a, "a");
    if (instr.b != -1) fail_instr(j, "a unary instruction has no operand b (must be -1)");
  } else if (instr.kind == OpKind::Binary) {
    if (instr.fn < 0 || instr.fn >= static_cast<int64_t>(BinaryFn::Count))
      fail_instr(j, absl::StrCat("unknown binary function ", instr.fn));
    if (instr.fn >= static_cast<int64_t>(BinaryFn::Eq))
      fail_instr(j,
                 absl::StrCat("comparison ", std::string(fn_name(static_cast<BinaryFn>(instr.fn))),
                              " gives bool; only arithmetic functions fuse"));
    check_operand(instr.a, "a");
    check_operand(instr.b, "b");
  } else {
    const bool known = instr.kind < OpKind::Count;
    fail_instr(j, absl::StrCat("kind must be unary or binary, not ",
                               known ? op_def(instr.kind).name : "an unknown kind"));
  }
}

void infer_fused(const Graph& g, Node& node) {
  const std::vector<FusedInstr>& program = node.attrs_as<FusedElementwiseAttrs>().program;
  const int64_t n_inputs = static_cast<int64_t>(node.inputs.size());
  if (program.empty() || program.size() > kMaxFusedInstrs)
    fail("fused_elementwise",
         absl::StrCat("expects 1..", kMaxFusedInstrs, " instructions, got ", program.size()));
  std::vector<Shape> shapes;  // per value: inputs, then instruction results
  for (int64_t k = 0; k < n_inputs; ++k) {
    const Node& x = input_node(g, node, static_cast<int>(k));
    if (x.dtype != DType::F32)
      fail("fused_elementwise",
           absl::StrCat("input ", k, " is ", dtype_name(x.dtype), ", not f32"));
    shapes.push_back(x.shape);
  }
  std::vector<bool> used(static_cast<size_t>(n_inputs) + program.size(), false);
  for (size_t j = 0; j < program.size(); ++j) {
    const FusedInstr& instr = program[j];
    check_instr(instr, j, n_inputs);
    const auto a = static_cast<size_t>(instr.a);
    used[a] = true;
    if (instr.kind == OpKind::Unary) {
      shapes.push_back(shapes[a]);
    } else {
      const auto b = static_cast<size_t>(instr.b);
      used[b] = true;
      Shape joint;
      try {
        joint = broadcast_shapes("fused_elementwise", shapes[a], shapes[b]);
      } catch (const Error&) {
        fail_instr(j, absl::StrCat("shapes ", shape_string(shapes[a]), " and ",
                                   shape_string(shapes[b]), " do not broadcast"));
      }
      shapes.push_back(joint);
    }
  }
  for (size_t v = 0; v + 1 < used.size(); ++v)
    if (!used[v]) {
      if (static_cast<int64_t>(v) < n_inputs)
        fail("fused_elementwise", absl::StrCat("input ", v, " is unused"));
      fail_instr(v - static_cast<size_t>(n_inputs), "its result is unused");
    }
  node.shape = shapes.back();
  node.dtype = DType::F32;
  // Every value used by the last instruction broadcasts to its shape (checked above, step by
  // step); the inputs, in particular, broadcast to the output, as the rules assume.
  for (size_t v = 0; v < shapes.size(); ++v)
    if (broadcast_shapes("fused_elementwise", shapes[v], node.shape) != node.shape)
      fail("fused_elementwise",
           absl::StrCat("value ", v, " of shape ", shape_string(shapes[v]),
                        " does not broadcast to the output ", shape_string(node.shape)));
}

}  // namespace

std::string FusedElementwiseAttrs::to_string() const {
  return absl::StrCat("fused_elementwise{",
                      absl::StrJoin(program, ",",
                                    [](std::string* out, const FusedInstr& instr) {
                                      out->append(instr_string(instr));
                                    }),
                      "}");
}

const OpDef kFusedElementwiseDef{
    .name = "fused_elementwise",
    .min_inputs = 1,
    .max_inputs = kMaxFusedInputs,
    .infer = infer_fused,
    .forward =
        [](const Graph& g, const Node& node, int input, const Box& dirty, Region& out) {
          out.add(broadcast_forward(input_node(g, node, input).shape, node.shape, dirty));
        },
    .needed =
        [](const Graph& g, const Node& node, const Box& out, std::span<Box> inputs) {
          for (size_t k = 0; k < inputs.size(); ++k)
            inputs[k] =
                broadcast_needed(input_node(g, node, static_cast<int>(k)).shape, node.shape, out);
        },
};

Tensor fused_elementwise(std::span<const Tensor> inputs, std::vector<FusedInstr> program) {
  Graph& g = builder_graph("fused_elementwise", "inputs", inputs);
  return g.add_node(inputs, FusedElementwiseAttrs{std::move(program)});
}

}  // namespace tessera
