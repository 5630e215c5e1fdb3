#!/bin/sh
# tree.sh TOP — a tar stream of the source tree at TOP for a package build: the files git knows,
# as they are in the working tree, in a git checkout; elsewhere (a copy, as in the clean roots
# of contrib/ci/) every file but the build outputs.
set -eu
cd "${1:?usage: tree.sh TOP}"
if git rev-parse --git-dir >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf -
else
	tar --exclude=./.git --exclude=./build --exclude=./build-san --exclude=./build-fuzz \
		--exclude='./t/trash directory.*' --exclude=./t/test-results -cf - .
fi
