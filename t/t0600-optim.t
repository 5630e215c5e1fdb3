#!/bin/sh
test_description='optimizer reference data: t/reference/gen_optim.py reproduces the committed files'
. "$(dirname "$0")/sharness.sh"

# The C tests (t/unit/optim*.c, t/unit/lr_schedule.c) compare against these files; if torch or
# the generator changed them, the comparison would silently test against stale numbers.
test_expect_success TORCH 'gen_optim.py writes the committed golden files byte for byte' '
	/usr/bin/python3 "$DPTRAIN_SRC_DIR/t/reference/gen_optim.py" gen &&
	ls gen >made &&
	test $(wc -l <made) -ge 20 &&
	while read f; do
		cmp "gen/$f" "$DPTRAIN_SRC_DIR/t/reference/data/$f" || return 1
	done <made &&
	(cd "$DPTRAIN_SRC_DIR/t/reference/data" && ls optim-*.json) >committed &&
	test_cmp committed made
'

test_expect_success TORCH 'gen_optim.py is deterministic: a second run writes the same files' '
	/usr/bin/python3 "$DPTRAIN_SRC_DIR/t/reference/gen_optim.py" gen2 &&
	for f in gen/*; do cmp "$f" "gen2/${f#gen/}" || return 1; done
'

test_done
