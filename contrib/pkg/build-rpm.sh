#!/bin/sh
# build-rpm.sh OUTDIR — make rpm: the RPMs of contrib/rpm/dptrain.spec from a tarball of the files
# git knows (as they are in the working tree), with rpmbuild in OUTDIR/rpmbuild; the .rpm files
# land in OUTDIR. On an RPM system the spec's BuildRequires (slurm-devel, ...) must be
# installed. On a machine whose packages rpm does not know (Debian's rpm package), the build
# runs with --nodeps against the headers the Makefile finds, and the plugin requires the Slurm
# version of those headers; RPM_FLAGS adds rpmbuild options (--with cuda).
set -eu
OUT=${1:?usage: build-rpm.sh OUTDIR}
TOP=$(cd "$(dirname "$0")/../.." && pwd -P)
command -v rpmbuild >/dev/null 2>&1 ||
	{ echo "make rpm: 'rpmbuild' is missing (Debian: apt-get install rpm; RHEL: dnf install rpm-build)" >&2; exit 1; }
VERSION=$(cat "$TOP/VERSION")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
R=$OUT/rpmbuild
rm -rf "$R" && mkdir -p "$R/SOURCES" "$R/SPECS" "$R/BUILD" "$R/RPMS" "$R/SRPMS"
rm -f "$OUT"/dptrain*.rpm
mkdir -p "$R/tree/dptrain-$VERSION"
sh "$TOP/contrib/pkg/tree.sh" "$TOP" | tar -C "$R/tree/dptrain-$VERSION" -xf -
tar -C "$R/tree" -czf "$R/SOURCES/dptrain-$VERSION.tar.gz" "dptrain-$VERSION"
rm -rf "$R/tree"
cp "$TOP/contrib/rpm/dptrain.spec" "$R/SPECS/"
set -- --define "_topdir $R" --define "version_from_tree $VERSION"
if ! rpm -q glibc >/dev/null 2>&1 && ! rpm -q slurm-devel >/dev/null 2>&1; then
	# Not an RPM system: Slurm's version from its headers (slurm/slurm_version.h).
	v=$(printf '#include <slurm/slurm_version.h>\nSLURM_VERSION_NUMBER\n' |
		${CC:-cc} -E -P -x c - ${SLURM_CFLAGS:-} 2>/dev/null | tail -n 1)
	[ -n "$v" ] || { echo "make rpm: no Slurm headers (slurm/slurm_version.h) found" >&2; exit 1; }
	sv=$(printf '%d.%02d.%d' $((v >> 16)) $((v >> 8 & 255)) $((v & 255)))
	echo "make rpm: not an RPM system: building with --nodeps against Slurm $sv's headers here"
	set -- "$@" --nodeps --define "slurm_version $sv"
fi
echo "make rpm: rpmbuild in $R (log: $OUT/rpmbuild.log)"
# shellcheck disable=SC2086
if ! env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u DPTRAIN_BUILD_DIR -u DPTRAIN_SRC_DIR -u DPTRAIN_SAN \
	rpmbuild -ba "$@" ${RPM_FLAGS:-} "$R/SPECS/dptrain.spec" >"$OUT/rpmbuild.log" 2>&1; then
	tail -n 40 "$OUT/rpmbuild.log" >&2
	echo "make rpm: rpmbuild failed (log: $OUT/rpmbuild.log)" >&2
	exit 1
fi
find "$R/RPMS" "$R/SRPMS" -name '*.rpm' -exec cp {} "$OUT/" \;
for f in "$OUT"/dptrain*.rpm; do
	echo "$(basename "$f"):"
	rpm -qp --requires "$f" 2>/dev/null | grep -E 'slurm|dptrain|libjansson|libpmix|libdnnl' | sed 's/^/    requires /'
done
