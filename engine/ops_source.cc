// Source nodes: inputs (written by the caller) and constants (data owned by the graph).
// Neither has inputs, so their forward and needed rules are never called.
#include "engine/op_def.h"

namespace tessera {

static void no_forward(const Graph&, const Node&, int, const Box&, Region&) {}
static void no_needed(const Graph&, const Node&, const Box&, std::span<Box>) {}

std::string InputAttrs::to_string() const { return "input." + name; }
std::string ConstantAttrs::to_string() const { return "constant"; }

const OpDef kInputDef{
    .name = "input",
    .min_inputs = 0,
    .max_inputs = 0,
    .infer = [](const Graph&, Node&) { fail("input", "inputs are declared with Graph::input"); },
    .forward = no_forward,
    .needed = no_needed,
};

const OpDef kConstantDef{
    .name = "constant",
    .min_inputs = 0,
    .max_inputs = 0,
    .infer = [](const Graph&, Node&) { fail("constant", "constants are declared with Graph::constant"); },
    .forward = no_forward,
    .needed = no_needed,
};

}  // namespace tessera
