#!/bin/sh
# contrib/ci/failures.sh [BUILD_DIR]: for every shell test that failed in the last run, print
# what it did and printed before its "not ok" line, from BUILD_DIR/t/test-results/NAME.out
# (t/sharness.sh writes those, with each test's own result line as "#### ok N" / "#### not ok N"
# so that a "not ok" a test prints on purpose is not taken for its failure; prove shows only
# the TAP lines). At most LINES (80) lines of each failed test. Used by .ci/run and
# contrib/ci/cleanroot.sh when a test phase fails.
dir=${1:-build}/t/test-results
lines=${LINES:-80}
found=0
for f in "$dir"/*.out; do
	test -f "$f" || continue
	grep -q '^#### not ok [0-9]' "$f" || continue
	found=1
	echo "==== ${f##*/}: the failed tests, with what they printed"
	awk -v max="$lines" '
	/^#### (ok|not ok) [0-9]+ / {
		if ($2 == "not") {
			if (n > max) print "    [... " n - max " lines before]"
			for (i = (n > max ? n - max : 0); i < n; i++) print "    " buf[i]
			print substr($0, 6)
		}
		n = 0; next
	}
	{ buf[n++] = $0 }' "$f"
done
test $found = 1 || echo "==== no shell test left a 'not ok' in $dir"
