#!/bin/sh
# t0007-perf-compare.t — contrib/bench/perf-compare.py, which compares two runs of a benchmark
# by their JSON lines: every line recorded under doc/perf/ can be compared (a date, a commit,
# a main measurement); a malformed line is named by file and line; configurations are matched
# by their fields, rounds taken by their median, a change judged by the measurement's
# direction, and a regression beyond the threshold is an exit status of 1.
test_description='perf-compare.py: doc/perf/ is comparable, regressions are found'
. "$(dirname "$0")/sharness.sh"

cmp="$DPTRAIN_SRC_DIR/contrib/bench/perf-compare.py"
if ! test -x /usr/bin/python3; then
	skip_all='needs /usr/bin/python3'
	test_done
fi

test_expect_success 'every JSON line under doc/perf/ can be compared' '
	set -- "$DPTRAIN_SRC_DIR"/doc/perf/*.jsonl &&
	test -f "$1" &&
	"$cmp" --check "$@" >out &&
	cat out &&
	test $(grep -c " lines, [0-9]* configurations$" out) = $#
'

test_expect_success 'a line that is not JSON, or has no measurement, is named' '
	printf "{\"date\": \"d\", \"commit\": \"c\", \"img_s\": 1}\n{\"date\": \"d\", \"commit\"\n" >bad.jsonl &&
	test_expect_code 2 "$cmp" --check bad.jsonl 2>err &&
	grep "bad.jsonl:2: not JSON" err &&
	printf "{\"date\": \"d\", \"commit\": \"c\", \"tool\": \"x\"}\n" >nometric.jsonl &&
	test_expect_code 2 "$cmp" --check nometric.jsonl 2>err &&
	grep "nometric.jsonl:1: no measurement" err &&
	printf "[1, 2]\n" >list.jsonl &&
	test_expect_code 2 "$cmp" list.jsonl list.jsonl 2>err &&
	grep "list.jsonl:1: not a JSON object" err
'

# Three rounds of one configuration (median 100 img/s), a time (10 ms), a configuration of the
# old run only; the new run: img/s 5% lower, the time 20% longer, a new configuration.
test_expect_success 'setup: two runs' '
	for v in 90 100 130; do
		printf "{\"date\": \"1\", \"commit\": \"a\", \"tool\": \"t\", \"model\": \"m\", \"round\": 1, \"img_s\": %s}\n" $v
	done >old.jsonl &&
	printf "{\"date\": \"1\", \"commit\": \"a\", \"tool\": \"t\", \"size_mb\": 8, \"ms\": 10, \"busbw_gbs\": 4}\n" >>old.jsonl &&
	printf "{\"date\": \"1\", \"commit\": \"a\", \"tool\": \"gone\", \"img_s\": 5}\n" >>old.jsonl &&
	printf "{\"date\": \"2\", \"commit\": \"b\", \"tool\": \"t\", \"model\": \"m\", \"round\": 2, \"img_s\": 95}\n" >new.jsonl &&
	printf "{\"date\": \"2\", \"commit\": \"b\", \"tool\": \"t\", \"size_mb\": 8, \"ms\": 12, \"busbw_gbs\": 3}\n" >>new.jsonl &&
	printf "{\"date\": \"2\", \"commit\": \"b\", \"tool\": \"new\", \"img_s\": 7}\n" >>new.jsonl
'

test_expect_success 'a time 20% longer is a regression: exit 1, named' '
	test_expect_code 1 "$cmp" old.jsonl new.jsonl >out &&
	cat out &&
	grep "^all: tool=t$" out &&
	grep "^| model=m | img_s | 100 | 95 | 0.950 | worse |$" out &&
	grep "^| size_mb=8 | ms | 10 | 12 | 1.200 | \*\*worse by 20%\*\* |$" out &&
	grep "^only in old: 1 configuration (-v lists them)$" out &&
	grep "^only in new: 1 configuration" out
'

test_expect_success 'within the threshold, or better, is exit 0' '
	"$cmp" --threshold 0.25 old.jsonl new.jsonl >out &&
	grep "| ms | 10 | 12 | 1.200 | worse |" out &&
	"$cmp" new.jsonl old.jsonl >out &&
	grep "^| model=m | img_s | 95 | 100 | 1.053 | better |$" out &&
	grep "^| size_mb=8 | ms | 12 | 10 | 0.833 | better |$" out &&
	test_expect_code 1 "$cmp" -v old.jsonl new.jsonl >out &&
	grep "^  tool=gone$" out
'

test_expect_success 'another machine matches only with --ignore' '
	sed "s/\"tool\"/\"cpu\": \"X\", \"tool\"/" old.jsonl >x.jsonl &&
	sed "s/\"tool\"/\"cpu\": \"Y\", \"tool\"/" new.jsonl >y.jsonl &&
	"$cmp" x.jsonl y.jsonl >out 2>err &&
	grep "no configuration in both files" err &&
	test_expect_code 1 "$cmp" --ignore cpu x.jsonl y.jsonl >out &&
	grep "worse by 20%" out
'

test_done
