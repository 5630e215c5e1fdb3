# shellcheck shell=bash
# chroot-lib.sh — sourced by the benchmarks that run a peer under another root (Debian 13's
# PyTorch 2.6, say): CHROOT, the root, and CHROOT_TOP, an empty directory in it where this tree
# is bound. in_chroot runs a command there as root, with /proc, /dev, /sys and the tree bound in
# a mount namespace of its own, so nothing stays mounted after it.
#   chroot_check NAME     exits 1 with a message naming NAME where CHROOT_TOP is not usable
#   in_chroot CMD ARGS... (top: this tree's root, set by the caller)
chroot_dir=${CHROOT:-} chroot_top=${CHROOT_TOP:-}
chroot_check() {
	if [ -n "$chroot_dir" ] && { [ -z "$chroot_top" ] || [ ! -d "$chroot_dir$chroot_top" ]; }; then
		echo "$1: CHROOT_TOP='$chroot_top': an empty directory in $chroot_dir is needed to bind this tree at" >&2
		exit 1
	fi
}
# shellcheck disable=SC2016,SC2154 # the inner shell expands them; the caller sets top
in_chroot() {
	unshare -m --propagation private sh -c 'r=$1 t=$2 top=$3; shift 3
		mount --rbind /proc "$r/proc" && mount --rbind /dev "$r/dev" &&
		mount --rbind /sys "$r/sys" && mount --bind "$top" "$r$t" && exec chroot "$r" "$@"' \
		sh "$chroot_dir" "$chroot_top" "$top" "$@"
}
