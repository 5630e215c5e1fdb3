#!/bin/sh
# t0004-env.t — the environment contract (common/env.def, contrib/ci/check-env): every
# variable that passes between the user, Slurm, the plugin, the launcher and the trainer is
# declared once, documented in the man pages it names, and spelled nowhere else in the
# product; then a small tree that breaks each rule once, to see every check fail and name it.
test_description='the environment contract: declared once, documented, used through common/env.h'
. "$(dirname "$0")/sharness.sh"

py=/usr/bin/python3
test -x "$py" || py=python3
check="$DPTRAIN_SRC_DIR/contrib/ci/check-env"

test_expect_success 'this tree keeps the contract' '
	"$py" "$check" >out 2>&1 || { cat out; return 1; }
	cat out &&
	test $(grep -c "^ok" out) = 6 && ! grep "^not ok" out
'

test_expect_success 'common/env.h gives every declared variable as ENV_NAME' '
	sed -n "s/^DP_ENV(\([A-Za-z_0-9]*\),.*/\1/p" "$DPTRAIN_SRC_DIR/common/env.def" >names &&
	test $(wc -l <names) -ge 60 &&
	{
		echo "#include <stdio.h>" &&
		echo "#include \"common/env.h\"" &&
		echo "int main(void) {" &&
		sed "s/.*/puts(ENV_&);/" names &&
		echo "return !dp_env_is(\"RANK=3\", ENV_RANK) || dp_env_is(\"RANK_ID=3\", ENV_RANK); }"
	} >names.c &&
	${CC:-cc} -I"$DPTRAIN_SRC_DIR" -Wall -Werror -o names.bin names.c &&
	./names.bin >printed &&
	test_cmp names printed
'

put() { mkdir -p "$(dirname "bad/$1")" && printf '%s\n' "$2" >"bad/$1"; }
test_expect_success 'a tree that breaks each rule once: every check fails, naming it' '
	put common/env.def "DP_ENV(DPTRAIN_A, \"user\", \"trainer\", \"dptrain.1\")
DP_ENV(DPTRAIN_A, \"user\", \"trainer\", \"dptrain.1\")
DP_ENV(DPTRAIN_B, \"user\", \"trainer\", \"dptrain.1 nothere.1\")
DP_ENV(DPTRAIN_C, \"\", \"trainer\", \"dptrain.1\")
DP_ENV(DPTRAIN_UNUSED, \"user\", \"trainer\", \"dptrain.1\")" &&
	put doc/dptrain.1 ".B DPTRAIN_A
.B DPTRAIN_C
.B DPTRAIN_UNUSED
.B DPTRAIN_SECRET_FEATURE" &&
	put trainer/a.c "const char *a(void) { return getenv(\"DPTRAIN_A\"); }
/* \"DPTRAIN_B\" in a comment is prose */
const char *b(void) { return getenv(ENV_DPTRAIN_B); }
const char *c(void) { return getenv(ENV_DPTRAIN_C); }
const char *d(void) { return getenv(\"DPTRAIN_NEW\"); }
const char *e(void) { return getenv(\"SLURM_UNHEARD_OF\"); }
const char *m = \"set MASTER_ADDR and \" \"DPTRAIN_A\" \" first\";" &&
	test_expect_code 1 "$py" "$check" --root "$PWD/bad" >out 2>&1 &&
	cat out &&
	grep "^not ok 1 - common/env.def declares each variable once" out &&
	grep "DPTRAIN_A is declared twice" out &&
	grep "DPTRAIN_C: who sets it, who reads it and its pages must all be given" out &&
	grep "^not ok 2 - every variable is documented in the pages it names" out &&
	grep "DPTRAIN_B is not in doc/dptrain.1" out &&
	grep "DPTRAIN_B: its page doc/nothere.1 does not exist" out &&
	grep "^not ok 3 - product sources name variables through common/env.h only" out &&
	grep "trainer/a.c spells \"DPTRAIN_A\": use ENV_DPTRAIN_A" out &&
	test $(grep -c "spells \"DPTRAIN_A\"" out) = 1 &&
	! grep "spells \"DPTRAIN_B\"" out &&
	grep "trainer/a.c uses DPTRAIN_NEW, which common/env.def does not declare" out &&
	grep "trainer/a.c uses SLURM_UNHEARD_OF, which common/env.def does not declare" out &&
	grep "^not ok 4 - every DPTRAIN_ variable the man pages name is declared" out &&
	grep "doc/dptrain.1 documents DPTRAIN_SECRET_FEATURE" out &&
	grep "^not ok 5 - every DPTRAIN_ variable declared is used by the product" out &&
	grep "DPTRAIN_UNUSED is declared but no product source uses ENV_DPTRAIN_UNUSED" out
'

test_done
