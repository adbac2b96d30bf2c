// Force-included into every file of the fuzz build (scripts/fuzz.sh), which is compiled with
// -march=native for the machine that runs it: the runtime ISA probe then answers "supported"
// (clang 14 does not know every feature name the probe asks GCC about, such as "f16c").
#pragma once
#define __builtin_cpu_supports(feature) 1
