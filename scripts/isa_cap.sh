#!/usr/bin/env bash
# Runs a test binary with the CPU kernels capped at an instruction set (TESSERA_CPU_ISA): CTest's
# "isa <cap>" tests run the session-level suites again on the paths a CPU without this one's
# extensions takes (the kernel tests compare every path's kernels directly; these check whole
# sessions: incremental reads bitwise equal to fresh ones, the real models' golden outputs).
# Exits 77 (CTest: skipped, and says why) when this CPU's own path is no higher than the cap,
# which the plain run covers.
# Usage: bash scripts/isa_cap.sh CAP BINARY [ARGS...]   (CAP: avx512vnni, avx512, avx2, portable)
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
cap="$1"
shift
level() {
  case "$1" in
    portable) echo 0 ;; avx2) echo 1 ;; avx512) echo 2 ;; avx512vnni) echo 3 ;; amx) echo 4 ;;
    *) echo "isa_cap.sh: unknown cap '$1'" >&2; exit 2 ;;
  esac
}
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
native=portable
if has avx2 fma; then native=avx2; fi
if has avx512f avx512bw avx512vl avx512dq; then native=avx512; fi
if [ "$native" = avx512 ] && has avx512_vnni; then native=avx512vnni; fi
if [ "$native" = avx512vnni ] && has amx_tile amx_int8; then native=amx; fi
if [ "$(level "$cap")" -ge "$(level "$native")" ]; then
  echo "skipped: this CPU's own path ($native) is no higher than the cap $cap; the plain run covers it"
  exit 77
fi
echo "TESSERA_CPU_ISA=$cap (this CPU: $native): $*"
export TESSERA_CPU_ISA="$cap"
exec "$@"
