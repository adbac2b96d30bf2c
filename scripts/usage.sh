# Sourced first by the project's shell scripts: with --help or -h, prints the calling script's
# header comment (its usage) and exits 0.
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
  exit 0
fi
