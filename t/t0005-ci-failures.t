#!/bin/sh
# t0005-ci-failures.t — contrib/ci/failures.sh, what CI prints after a failed test phase: it
# names the tests that failed, with what they ran and printed, and only those. A test that
# prints a "not ok" line on purpose (t0004 and t0002 check checkers whose output is TAP) and
# passes is not listed: CI once printed t0004 under "the failed tests" beside the real one.
test_description='contrib/ci/failures.sh lists the failed tests and only those'
. "$(dirname "$0")/sharness.sh"

failures="$DPTRAIN_SRC_DIR/contrib/ci/failures.sh"

# a shell test file of this suite, run in its own build directory b/
inner() {
	name=$1 && shift &&
	{
		echo "#!/bin/sh" &&
		echo "test_description=\"$name\"" &&
		echo ". \"\$DPTRAIN_SRC_DIR/t/sharness.sh\"" &&
		cat &&
		echo "test_done"
	} >"$name.t" &&
	(unset verbose; DPTRAIN_BUILD_DIR="$PWD/b" sh "$name.t" >"$name.tap" 2>&1) || :
}

test_expect_success 'a passing test that prints "not ok" lines is not a failure' '
	inner t9001-prints-tap <<-\EOF &&
	test_expect_success "a checker of TAP output" "
		printf \"not ok 1 - inner check\\n#   why\\nnot ok 2 - another\\n\" >out &&
		cat out && grep -c \"^not ok\" out
	"
	EOF
	grep "^ok 1 - a checker of TAP output" t9001-prints-tap.tap &&
	grep "^not ok 1 - inner check" b/t/test-results/t9001-prints-tap.out &&
	"$failures" "$PWD/b" >list &&
	cat list &&
	grep "^==== no shell test left a .not ok. in" list &&
	! grep t9001 list
'

test_expect_success 'a failed test is listed with its script and what it printed' '
	inner t9002-fails <<-\EOF &&
	test_expect_success "passes first" "echo not ok 7 - printed by a passing test"
	test_expect_success "fails second" "echo the cause is here; false"
	test_expect_success "passes third" "true"
	EOF
	grep "^not ok 2 - fails second" t9002-fails.tap &&
	"$failures" "$PWD/b" >list &&
	cat list &&
	grep "^==== t9002-fails.out: the failed tests" list &&
	! grep t9001 list &&
	grep "^    the cause is here" list &&
	grep "^not ok 2 - fails second" list &&
	! grep "passes third" list &&
	! grep "printed by a passing test" list &&
	test $(grep -c "^not ok" list) = 1
'

test_done
