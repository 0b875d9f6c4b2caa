# Sourced by the CLI checks (mimo_run_cli.sh, reliability_cli.sh) after
# `set -uo pipefail`, with BIN_DIR and EXAMPLES_DIR as $1 and $2: the
# binaries, the examples, a scratch folder removed at exit, Open MPI set up
# for root and oversubscription on the loopback, and pass/fail counting
# (the script ends with `finish`).
bin=$(cd "$1" && pwd) examples=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_vader_single_copy_mechanism=none
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
finish() {
  echo "$failures failure(s)"
  [ $failures -eq 0 ]
}
# Waits (at most 60 s) until FILE, a --metrics file, has N steps.
wait_for_steps() {
  local waited=0
  until [ "$(grep -c '"loss"' "$1" 2>/dev/null)" -ge "$2" ] || [ $waited -ge 600 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
}
