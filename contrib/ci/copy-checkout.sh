#!/bin/bash
# copy-checkout.sh TOP DEST — copy the checkout at TOP into DEST (made if missing): the files
# git knows, as they are in the working tree, without build outputs or .git (contrib/pkg/tree.sh,
# which the package builds use too). Used by cleanroot.sh (into a clean root) and portable.sh
# (to an unusual path).
set -euo pipefail
[ $# = 2 ] || {
	echo "usage: $0 TOP DEST" >&2
	exit 2
}
mkdir -p "$2"
"$1/contrib/pkg/tree.sh" "$1" | tar -C "$2" -xf -
