// PLACEHOLDER: to be replaced by the real definitions.
#include "engine/op_def.h"

namespace tessera {

const OpDef kReshapeDef{.name = "reshape", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("reshape", "not implemented"); }};
const OpDef kPermuteDef{.name = "permute", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("permute", "not implemented"); }};
const OpDef kSliceDef{.name = "slice", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("slice", "not implemented"); }};
const OpDef kPadDef{.name = "pad", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("pad", "not implemented"); }};
const OpDef kConcatDef{.name = "concat", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("concat", "not implemented"); }};
const OpDef kRepeatDef{.name = "repeat", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("repeat", "not implemented"); }};
const OpDef kFlipDef{.name = "flip", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("flip", "not implemented"); }};
const OpDef kExpandDef{.name = "expand", .min_inputs = 0, .max_inputs = 8, .infer = [](const Graph&, Node&) { fail("expand", "not implemented"); }};

}  // namespace tessera
