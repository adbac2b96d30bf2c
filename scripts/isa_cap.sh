#!/usr/bin/env bash
# Runs a test binary with the CPU kernels capped at an instruction set (TESSERA_CPU_ISA): CTest's
# "isa <cap>" tests run the session-level suites again on the paths a CPU without this one's
# extensions takes (the kernel tests compare every path's kernels directly; these check whole
# sessions: incremental reads bitwise equal to fresh ones, the real models' golden outputs).
# Exits 77 (CTest: skipped, and says why) when the cap leaves the engine on this CPU's own path
# (as `LIST_BACKENDS cpu` reports it with and without the cap), which the plain run covers.
# Usage: bash scripts/isa_cap.sh CAP LIST_BACKENDS BINARY [ARGS...]
#        (CAP: avx512vnni, avx512, avx2, portable; LIST_BACKENDS: the build's list_backends)
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
cap="$1"
list_backends="$2"
shift 2
case "$cap" in
  avx512vnni | avx512 | avx2 | portable) ;;
  *) echo "isa_cap.sh: unknown cap '$cap'" >&2; exit 2 ;;
esac
own="$(env -u TESSERA_CPU_ISA "$list_backends" cpu)"
capped="$(TESSERA_CPU_ISA="$cap" "$list_backends" cpu)"
if [ "$own" = "$capped" ]; then
  echo "skipped: the cap $cap leaves this CPU on its own path (${own#*available: }); the plain run covers it"
  exit 77
fi
echo "TESSERA_CPU_ISA=$cap (${capped#*available: }; this CPU: ${own#*available: }): $*"
export TESSERA_CPU_ISA="$cap"
exec "$@"
