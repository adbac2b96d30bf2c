// Pass "fuse" (b): elementwise chains into fused_elementwise nodes. See planner/fuse.h.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "planner/fuse.h"

namespace tessera {

namespace {

constexpr size_t kMaxLeaves = 16;
constexpr size_t kMaxInstructions = 64;

bool fusable(const Graph& graph, const Node& node) {
  if (node.dtype != DType::F32) return false;
  if (node.kind == OpKind::Unary) {
    return graph.node(node.inputs[0]).dtype == DType::F32;
  }
  if (node.kind == OpKind::Binary) {
    const BinaryFn fn = node.attrs_as<BinaryAttrs>().fn;
    const bool arithmetic = fn == BinaryFn::Add || fn == BinaryFn::Sub || fn == BinaryFn::Mul || fn == BinaryFn::Div ||
                            fn == BinaryFn::Pow || fn == BinaryFn::Minimum || fn == BinaryFn::Maximum;
    return arithmetic && graph.node(node.inputs[0]).dtype == DType::F32 &&
           graph.node(node.inputs[1]).dtype == DType::F32;
  }
  return false;
}

}  // namespace

std::optional<Rewritten> fuse_elementwise_chains(const Graph& graph, FuseReport& report,
                                                 std::span<const uint8_t> pinned) {
  const size_t n = static_cast<size_t>(graph.size());
  // The single reader of each node (-1: none yet, -2: several or an output).
  std::vector<NodeId> reader(n, -1);
  for (NodeId id = 0; id < graph.size(); ++id)
    for (NodeId in : graph.node(id).inputs) {
      NodeId& r = reader[static_cast<size_t>(in)];
      r = (r == -1 || r == id) ? id : -2;
    }
  for (const auto& [name, id] : graph.outputs()) reader[static_cast<size_t>(id)] = -2;
  for (size_t id = 0; id < pinned.size(); ++id)
    if (pinned[id]) reader[id] = -2;
  std::vector<uint8_t> is_fusable(n, 0), absorbed(n, 0);
  for (NodeId id = 0; id < graph.size(); ++id) is_fusable[static_cast<size_t>(id)] = fusable(graph, graph.node(id));
  for (NodeId id = 0; id < graph.size(); ++id) {
    const NodeId r = reader[static_cast<size_t>(id)];
    absorbed[static_cast<size_t>(id)] = is_fusable[static_cast<size_t>(id)] && r >= 0 && is_fusable[static_cast<size_t>(r)];
  }

  // Every chain of two or more nodes has an absorbed member.
  if (std::find(absorbed.begin(), absorbed.end(), 1) == absorbed.end()) return std::nullopt;
  return rebuild(graph, [&](NodeId root, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped) -> std::optional<Tensor> {
    if (!is_fusable[static_cast<size_t>(root)] || absorbed[static_cast<size_t>(root)]) return std::nullopt;
    // The chain: the root and every node absorbed into it, in topological order.
    std::vector<NodeId> members = {root};
    for (size_t i = 0; i < members.size(); ++i)
      for (NodeId in : graph.node(members[i]).inputs)
        if (absorbed[static_cast<size_t>(in)] && std::find(members.begin(), members.end(), in) == members.end())
          members.push_back(in);
    if (members.size() < 2) return std::nullopt;
    std::sort(members.begin(), members.end());
    std::vector<NodeId> leaves;
    for (NodeId m : members)
      for (NodeId in : graph.node(m).inputs)
        if (!std::binary_search(members.begin(), members.end(), in) &&
            std::find(leaves.begin(), leaves.end(), in) == leaves.end())
          leaves.push_back(in);
    // Too wide or too long: leave it unfused rather than split it.
    if (leaves.size() > kMaxLeaves || members.size() > kMaxInstructions) return std::nullopt;
    auto operand = [&](NodeId in) -> int32_t {
      auto leaf = std::find(leaves.begin(), leaves.end(), in);
      if (leaf != leaves.end()) return static_cast<int32_t>(leaf - leaves.begin());
      return static_cast<int32_t>(leaves.size() + static_cast<size_t>(std::lower_bound(members.begin(), members.end(), in) - members.begin()));
    };
    std::vector<FusedInstr> program;
    for (NodeId m : members) {
      const Node& node = graph.node(m);
      FusedInstr instr;
      instr.kind = node.kind;
      instr.fn = node.kind == OpKind::Unary ? static_cast<int64_t>(node.attrs_as<UnaryAttrs>().fn)
                                            : static_cast<int64_t>(node.attrs_as<BinaryAttrs>().fn);
      instr.a = operand(node.inputs[0]);
      if (node.inputs.size() > 1) instr.b = operand(node.inputs[1]);
      program.push_back(instr);
    }
    std::vector<Tensor> inputs;
    for (NodeId leaf : leaves) inputs.push_back(mapped(leaf));
    Tensor fused = fused_elementwise(inputs, std::move(program));
    report.chains += 1;
    report.chain_nodes += static_cast<int64_t>(members.size());
    report.fused.push_back(absl::StrCat("chain of ", members.size(), " at %", root, " -> ", op_display_name(out.node(fused.id))));
    return fused;
  });
}

}  // namespace tessera
