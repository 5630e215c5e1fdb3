#!/bin/bash
# copy-checkout.sh TOP DEST — copy the checkout at TOP into DEST (made if missing): the files
# git knows (tracked, and untracked ones it does not ignore), as they are in the working tree,
# without its build outputs or .git. Used by cleanroot.sh (into a clean root) and portable.sh
# (to an unusual path).
set -euo pipefail
[ $# = 2 ] || {
	echo "usage: $0 TOP DEST" >&2
	exit 2
}
mkdir -p "$2"
(cd "$1" && git ls-files -z --cached --others --exclude-standard) |
	while IFS= read -r -d '' f; do
		if [ -e "$1/$f" ] || [ -L "$1/$f" ]; then printf '%s\0' "$f"; fi
	done |
	tar -C "$1" --null -T - -cf - | tar -C "$2" -xf -
