// Tiled matmul / linear kernels: the dialect-neutral body and block decoders, and the OpenCL C
// kernel around them (see codegen_linear.h for the work division and why it is box-independent).
#include "backends/gpu/codegen_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::gpu::detail {

namespace {

// How one GGUF block type is decoded, 32 elements (a "chunk") at a time: `setup` declares what
// chunk c of the block at byte offset bo needs, `element` is the value of element l of the chunk
// (element 32 c + l of the block). The same float operations in the same order as the reference
// dequantisers (kernels/quant.cc), so decoded weights are bitwise the CPU's.
struct BlockDecoder {
  DType dtype;
  int chunks;  // 32-element chunks per block
  const char* setup;
  const char* element;
};

constexpr BlockDecoder kDecoders[] = {
    {DType::Q8_0, 1, "PF d0 = TQ_H(bo);", "TOF(TQ_I8(bo + 2 + l)) * d0"},
    {DType::Q4_0, 1, "PF d0 = TQ_H(bo);", "TOF(TQ_NIB(bo + 2, l) - 8) * d0"},
    {DType::Q4_1, 1, "PF d0 = TQ_H(bo); PF m0 = TQ_H(bo + 2);", "TOF(TQ_NIB(bo + 4, l)) * d0 + m0"},
    {DType::Q5_0, 1, "PF d0 = TQ_H(bo); const uint qh = TQ_U32(bo + 2);", "TOF(TQ_FIVE(bo + 6, qh, l) - 16) * d0"},
    {DType::Q5_1, 1, "PF d0 = TQ_H(bo); PF m0 = TQ_H(bo + 2); const uint qh = TQ_U32(bo + 4);",
     "TOF(TQ_FIVE(bo + 8, qh, l)) * d0 + m0"},
    {DType::Q4_K, 8, "PF d1 = TQ_H(bo) * TOF(TQ_KSC(bo + 4, c)); PF m1 = TQ_H(bo + 2) * TOF(TQ_KMN(bo + 4, c));",
     "d1 * TOF(TOI((TQ_B(bo + 16 + 32 * (c >> 1) + l) >> (4 * (c & 1))) & 15u)) - m1"},
    {DType::Q5_K, 8, "PF d1 = TQ_H(bo) * TOF(TQ_KSC(bo + 4, c)); PF m1 = TQ_H(bo + 2) * TOF(TQ_KMN(bo + 4, c));",
     "d1 * TOF(TOI(((TQ_B(bo + 48 + 32 * (c >> 1) + l) >> (4 * (c & 1))) & 15u) | (((TQ_B(bo + 16 + l) >> c) & 1u) << 4))) - m1"},
    {DType::Q6_K, 8, "PF d0 = TQ_H(bo + 208);",
     "(d0 * TOF(TQ_I8(bo + 192 + 2 * c + (l >> 4)))) * "
     "TOF(TOI(((TQ_B(bo + 64 * (c >> 2) + 32 * (c & 1) + l) >> (4 * ((c >> 1) & 1))) & 15u) | "
     "(((TQ_B(bo + 128 + 32 * (c >> 2) + l) >> (2 * (c & 3))) & 3u) << 4)) - 32)"},
};

const BlockDecoder* decoder(DType dtype) {
  for (const BlockDecoder& d : kDecoders)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

// The K loop of the row path (one output element per work item): oa / ob are the element
// offsets of the row of A and the column of B (for quantised weights: the byte offset of the
// weight row).
std::string row_loop(DType weight) {
  const BlockDecoder* q = decoder(weight);
  if (q == nullptr)
    return "          for (IDX k = 0; k < depth; ++k) acc = acc + X(oa + k * in0_red) * Y(ob + k * in1_red);\n";
  return absl::StrCat("          IDX k = 0;\n"
                      "          for (IDX bo = ob; bo < ob + (depth >> 5) / ", q->chunks, " * ",
                      dtype_block_bytes(weight), "; bo += ", dtype_block_bytes(weight), ") {\n",
                      "            for (int c = 0; c < ", q->chunks, "; ++c) {\n",
                      "              ", q->setup, "\n",
                      "              for (int l = 0; l < 32; ++l) {\n"
                      "                PF w = ", q->element, ";\n",
                      "                acc = acc + X(oa + k * in0_red) * w;\n"
                      "                k += 1;\n"
                      "              }\n"
                      "            }\n"
                      "          }\n");
}

// Stages chunk [k0, k0 + 32) of the tile's 32 columns of B into Bs[kk * 33 + col].
std::string stage_b(DType weight) {
  const BlockDecoder* q = decoder(weight);
  if (q == nullptr)
    return "          for (int i = TOI(lid); i < 1024; i += 64) {\n"
           "            const int col = i >> 5, kk = i & 31;\n"
           "            float v = 0.0f;\n"
           "            if (n0 + col < en && kk < kn) v = Y(bbase + (nb0 + n0 + col) * sn + (k0 + kk) * in1_red);\n"
           "            Bs[kk * 33 + col] = v;\n"
           "          }\n";
  // Work item lid decodes elements [16 (lid / 32), +16) of the chunk for column lid % 32.
  const int64_t block = dtype_block_size(weight);
  return absl::StrCat("          {\n"
                      "            const int col = TOI(lid & 31), l0 = TOI(lid >> 5) * 16;\n"
                      "            const int c = TOI((k0 % ", block, ") >> 5);\n"
                      "            if (n0 + col < en) {\n"
                      "              const IDX bo = bbase + (nb0 + n0 + col) * sn + (k0 / ", block, ") * ",
                      dtype_block_bytes(weight), ";\n",
                      "              ", q->setup, "\n",
                      "              for (int l = l0; l < l0 + 16; ++l) {\n"
                      "                PF w = ", q->element, ";\n",
                      "                Bs[l * 33 + col] = w;\n"
                      "              }\n"
                      "            } else {\n"
                      "              for (int l = l0; l < l0 + 16; ++l) Bs[l * 33 + col] = 0.0f;\n"
                      "            }\n"
                      "          }\n");
}

}  // namespace

bool has_block_decoder(DType dtype) { return decoder(dtype) != nullptr; }

const char* const kBlockMacros =
    "#define TQ_U16(o) (TQ_B(o) | (TQ_B((o) + 1) << 8))\n"
    "#define TQ_U32(o) (TQ_U16(o) | (TQ_U16((o) + 2) << 16))\n"
    "#define TQ_H(o) tq_half(TQ_U16(o))\n"
    "#ifndef TQ_I8\n"
    "#define TQ_I8(o) (TOI(TQ_B(o)) - ((TOI(TQ_B(o)) & 128) << 1))\n"
    "#endif\n"
    "// Element l of 32 nibbles: byte l % 16, low nibble for l < 16, else high.\n"
    "#define TQ_NIB(o, l) TOI((TQ_B((o) + ((l) & 15)) >> (4 * ((l) >> 4))) & 15u)\n"
    "#define TQ_FIVE(o, qh, l) (TQ_NIB(o, l) | (TOI(((qh) >> (l)) & 1u) << 4))\n"
    "// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (12 bytes at s).\n"
    "#define TQ_KSC(s, j) ((j) < 4 ? TOI(TQ_B((s) + (j)) & 63u) : "
    "TOI((TQ_B((s) + (j) + 4) & 15u) | ((TQ_B((s) + (j) - 4) >> 6) << 4)))\n"
    "#define TQ_KMN(s, j) ((j) < 4 ? TOI(TQ_B((s) + (j) + 4) & 63u) : "
    "TOI((TQ_B((s) + (j) + 4) >> 4) | ((TQ_B((s) + (j)) >> 6) << 4)))\n";

const char* const kHalfFunction =
    "float tq_half(uint h) {\n"
    "  const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;\n"
    "  if (e == 0u) {\n"
    "    const float v = TOF(m) * 5.9604644775390625e-8f;\n"
    "    return s != 0u ? -v : v;\n"
    "  }\n"
    "  return AS_FLOAT(s | (e == 31u ? 0x7f800000u : (e + 112u) << 23) | (m << 13));\n"
    "}\n";

// Variables the dialect's prologue provides: b, e, os, s0, s1 (IDX[8]); out_base, in0_base,
// in1_base, in0_red, in1_red, depth, lid, grp (IDX); local arrays As, Bs (1056 floats each);
// functions at(base, strides, idx) and decode(g, b, e, idx).
std::string tiled_body(DType weight) {
  return absl::StrCat(
      "      IDX em = 1;\n"
      "#if R >= 2\n"
      "      em = e[R - 2];\n"
      "#endif\n"
      "      const IDX en = e[R - 1];\n"
      "      IDX idx[8];\n"
      "      for (int d = 0; d < 8; ++d) idx[d] = 0;\n"
      "      if (em < ROWS_MIN) {\n"
      "        IDX volume = 1;\n"
      "        for (int d = 0; d < R; ++d) volume *= e[d];\n"
      "        const IDX g = grp * 64 + lid;\n"
      "        if (g < volume) {\n"
      "          decode(g, b, e, idx);\n"
      "          const IDX oa = at(in0_base, s0, idx), ob = at(in1_base, s1, idx);\n"
      "          PF acc = 0.0f;\n",
      row_loop(weight),
      "          STORE(at(out_base, os, idx), acc);\n"
      "        }\n"
      "      } else {\n"
      "        const IDX tiles_m = (em + 31) / 32, tiles_n = (en + 31) / 32;\n"
      "        IDX rest = grp;\n"
      "        const IDX n0 = (rest % tiles_n) * 32;\n"
      "        rest /= tiles_n;\n"
      "        const IDX m0 = (rest % tiles_m) * 32;\n"
      "        rest /= tiles_m;\n"
      "        for (int d = R - 3; d >= 0; --d) {\n"
      "          idx[d] = b[d] + rest % e[d];\n"
      "          rest /= e[d];\n"
      "        }\n"
      "        const IDX abase = at(in0_base, s0, idx), bbase = at(in1_base, s1, idx);\n"
      "#if R >= 2\n"
      "        const IDX sm = s0[R - 2], mb0 = b[R - 2];\n"
      "#else\n"
      "        const IDX sm = 0, mb0 = 0;\n"
      "#endif\n"
      "        const IDX sn = s1[R - 1], nb0 = b[R - 1];\n"
      "        const int tx = TOI(lid & 7), ty = TOI(lid >> 3);\n"
      "        PF acc[16];\n"
      "        for (int i = 0; i < 16; ++i) acc[i] = 0.0f;\n"
      "        for (IDX k0 = 0; k0 < depth; k0 += 32) {\n"
      "          const int kn = depth - k0 < 32 ? TOI(depth - k0) : 32;\n"
      "          for (int i = TOI(lid); i < 1024; i += 64) {\n"
      "            const int r = i >> 5, kk = i & 31;\n"
      "            float v = 0.0f;\n"
      "            if (m0 + r < em && kk < kn) v = X(abase + (mb0 + m0 + r) * sm + (k0 + kk) * in0_red);\n"
      "            As[kk * 33 + r] = v;\n"
      "          }\n",
      stage_b(weight),
      "          BARRIER();\n"
      "          for (int kk = 0; kk < kn; ++kk)\n"
      "            for (int i = 0; i < 4; ++i) {\n"
      "              const float a = As[kk * 33 + ty + 8 * i];\n"
      "              for (int j = 0; j < 4; ++j) acc[4 * i + j] = acc[4 * i + j] + a * Bs[kk * 33 + tx + 8 * j];\n"
      "            }\n"
      "          BARRIER();\n"
      "        }\n"
      "        for (int i = 0; i < 4; ++i)\n"
      "          for (int j = 0; j < 4; ++j) {\n"
      "            const IDX m = m0 + ty + 8 * i, n = n0 + tx + 8 * j;\n"
      "            if (m >= em || n >= en) continue;\n"
      "#if R >= 2\n"
      "            idx[R - 2] = mb0 + m;\n"
      "#endif\n"
      "            idx[R - 1] = nb0 + n;\n"
      "            STORE(at(out_base, os, idx), acc[4 * i + j]);\n"
      "          }\n"
      "      }\n");
}

namespace {

std::string opencl_prologue(int rank, DType weight) {
  const bool bytes = is_quantized(weight);
  return absl::StrCat(
      "#pragma OPENCL FP_CONTRACT OFF\n"
      "#define R ", rank, "\n#define ROWS_MIN ", kTileMinRows, "\n",
      "#define IDX long\n"
      "#define PF float\n"
      "#define TOF(x) ((float)(x))\n"
      "#define TOI(x) ((int)(x))\n"
      "#define AS_FLOAT(x) as_float(x)\n"
      "#define TQ_B(o) ((uint)in1[o])\n"
      "#define X(o) in0[o]\n"
      "#define Y(o) in1[o]\n"
      "#define STORE(o, v) out[o] = (v)\n"
      "#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)\n"
      "#define ARR(v) {v.s0, v.s1, v.s2, v.s3, v.s4, v.s5, v.s6, v.s7}\n",
      kBlockMacros, kHalfFunction,
      "long at(long base, const long* st, const long* idx) {\n"
      "  long o = base;\n"
      "  for (int d = 0; d < R; ++d) o += idx[d] * st[d];\n"
      "  return o;\n"
      "}\n"
      "void decode(long g, const long* b, const long* e, long* idx) {\n"
      "  for (int d = R - 1; d >= 0; --d) {\n"
      "    idx[d] = b[d] + g % e[d];\n"
      "    g /= e[d];\n"
      "  }\n"
      "}\n"
      "__kernel void tessera_dot(__global float* out, long out_base, long8 out_st, long8 begin, long8 ext, long items,"
      " long depth, __global const float* in0, long in0_base, long8 in0_st, long in0_red, long8 in0_shape,"
      " __global const ",
      bytes ? "uchar" : "float",
      "* in1, long in1_base, long8 in1_st, long in1_red, long8 in1_shape) {\n"
      "  __local float As[1056], Bs[1056];\n"
      "  const long b[8] = ARR(begin), e[8] = ARR(ext), os[8] = ARR(out_st), s0[8] = ARR(in0_st), s1[8] = ARR(in1_st);\n"
      "  const long lid = get_local_id(0), grp = get_group_id(0);\n"
      "  (void)items; (void)in0_shape; (void)in1_shape;\n"
      "  {\n");
}

}  // namespace

absl::StatusOr<GeneratedKernel> tiled_dot_opencl(const Graph& graph, const Node& node) {
  const DType weight = graph.node(node.inputs[1]).dtype;
  return tiled_kernel(node, "tessera_dot",
                      absl::StrCat(opencl_prologue(node.rank(), weight), tiled_body(weight), "  }\n}\n"));
}

GeneratedKernel tiled_kernel(const Node& node, std::string name, std::string source) {
  GeneratedKernel k;
  k.rank = node.rank();
  k.name = std::move(name);
  k.shape = KernelShape::Tiles;
  k.local_size = kTileLocalSize;
  k.source = std::move(source);
  return k;
}

}  // namespace tessera::gpu::detail
