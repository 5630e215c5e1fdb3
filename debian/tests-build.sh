#!/bin/sh
# What the package build checks of its own build (no root, no Slurm needed): the plugin exports
# only what Slurm's loader and SPANK look up (a library loaded beside it cannot clash), and the
# unit tests of the wire-up records between plugin and launcher (their protocol version).
set -eu
O=${1:-build}
if [ -e "$O/lib/dptrain.so" ]; then
	syms=$(nm -D --defined-only "$O/lib/dptrain.so" | awk '{ print $3 }')
	bad=$(printf '%s\n' "$syms" | grep -v -E '^(slurm_spank_|spank_|plugin_)' || true)
	[ -z "$bad" ] || { echo "dptrain.so exports more than SPANK's symbols: $bad" >&2; exit 1; }
	printf '%s\n' "$syms" | grep -qx slurm_spank_init || { echo "dptrain.so lacks slurm_spank_init" >&2; exit 1; }
	echo "dptrain.so exports: $(printf '%s ' $syms)"
fi
for t in wire config; do
	"$O/t/$t.t"
done
