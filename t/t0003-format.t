#!/bin/sh
# t0003-format.t — the C and CUDA sources are formatted as .clang-format says (make format;
# contrib/ci/check-format), with the clang-format version the tree is formatted with; then a
# small tree with one badly formatted file, to see the check fail and name it.
test_description='formatting: this tree is clang-format clean, a badly formatted file is named'
. "$(dirname "$0")/sharness.sh"

check="$DPTRAIN_SRC_DIR/contrib/ci/check-format"
why=$(sh "$check" --why-skip "$DPTRAIN_SRC_DIR")
if test -n "$why"; then
	skip_all=$why
	test_done
fi

test_expect_success 'every source file is formatted as .clang-format says' '
	sh "$check" "$DPTRAIN_SRC_DIR" >out 2>&1 || { grep -A3 "^not ok" out; return 1; }
	test $(grep -c "^ok" out) -ge 100
'

test_expect_success 'a badly formatted file fails the check, by name' '
	mkdir -p bad/trainer/nn &&
	cp "$DPTRAIN_SRC_DIR/.clang-format" bad/ &&
	cp "$DPTRAIN_SRC_DIR/trainer/nn/nn_io.c" bad/trainer/nn/ &&
	printf "int  f( void ){return 0;}\n" >bad/trainer/nn/bad.c &&
	printf "int g(void)\n{\n\tint x;\n\treturn sizeof x;\n}\n" >bad/trainer/nn/loose.c &&
	test_expect_code 1 sh "$check" "$PWD/bad" >out 2>&1 &&
	cat out &&
	grep "^not ok 1 - trainer/nn/bad.c is not formatted as .clang-format says (make format)" out &&
	grep "^ok 2 - trainer/nn/loose.c" out &&
	grep "^ok 3 - trainer/nn/nn_io.c" out &&
	grep "^not ok 4 - sizeof is written sizeof(x), not sizeof x" out &&
	grep "trainer/nn/loose.c:4:" out
'

test_done
