#!/usr/bin/env bash
# Builds the Debian package of rnicd from this checkout with dpkg-deb:
#   packaging/deb.sh [OUTDIR]      (default OUTDIR: dist)
# It prints the path of the .deb it wrote. No downloads: Go builds from the
# module cache, clib with make against rdma-core's headers (libibverbs-dev,
# librdmacm-dev).
#
# The version is internal/buildinfo's Version, the one version string in
# the code. The Go binaries are static (CGO_ENABLED=0), built with the same
# flags as CI's `CGO_ENABLED=0 go build ./...` so that they come from its
# build cache. clib's libraries go to /usr/lib/rnicd, outside the linker's
# search path: installed system-wide they would shadow rdma-core's
# libibverbs.so.1 for every program, so that is an opt-in (the ld.so
# configuration under /usr/share/rnicd, which the admin copies).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
cd "$repo"

version=$(sed -nE 's/^const Version = "([^"]+)"$/\1/p' internal/buildinfo/buildinfo.go)
[ -n "$version" ] || { echo "deb.sh: no Version in internal/buildinfo/buildinfo.go" >&2; exit 1; }
arch=$(dpkg --print-architecture)
root=$out/rnicd_${version}_$arch
rm -rf "$root"
trap 'rm -rf "$root"' EXIT

install -d "$root/DEBIAN" "$root/usr/sbin" "$root/usr/bin" "$root/usr/lib/rnicd" \
	"$root/lib/systemd/system" "$root/usr/share/man/man8" "$root/usr/share/rnicd/ld.so.conf.d" \
	"$root/usr/share/doc/rnicd" "$root/usr/share/bash-completion/completions" \
	"$root/usr/share/zsh/vendor-completions"

CGO_ENABLED=0 go build -o "$root/usr/sbin/rnicd" ./cmd/rnicd
CGO_ENABLED=0 go build -o "$root/usr/bin/rnic" ./cmd/rnic
# clib's own build directory: CI's `make -C clib` has already built it.
# The libmlx5 and libefa stand-ins too: Debian's perftest, UCX and
# libfabric link the providers, and rdma-core's need its private ABI,
# which clib's libibverbs lacks (the program stops at load).
make -s -C clib install DESTDIR="$root" PREFIX=/usr
strip --strip-unneeded "$root/usr/lib/rnicd/"*.so.1

p=packaging
install -m 0644 $p/systemd/rnicd@.service "$root/lib/systemd/system/"
for m in rnicd.8 rnic.8; do
	gzip -9n <$p/man/$m >"$root/usr/share/man/man8/$m.gz"
done
install -m 0644 $p/completion/rnicd.bash "$root/usr/share/bash-completion/completions/rnicd"
install -m 0644 $p/completion/rnic.bash "$root/usr/share/bash-completion/completions/rnic"
install -m 0644 $p/completion/_rnicd $p/completion/_rnic "$root/usr/share/zsh/vendor-completions/"
install -m 0644 $p/ld.so.conf.d/rnicd.conf "$root/usr/share/rnicd/ld.so.conf.d/"
install -m 0644 $p/rnicd.conf.example "$root/usr/share/rnicd/"
install -m 0644 $p/copyright "$root/usr/share/doc/rnicd/"

# clib needs the C library; the newest GLIBC_ symbol version it uses is
# the least libc6 it runs on (what dpkg-shlibdeps would find).
glibc=$(objdump -T "$root"/usr/lib/rnicd/*.so.1 | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: rnicd
Version: $version
Architecture: $arch
Maintainer: The rnicd authors <rnicd@users.noreply.github.com>
Installed-Size: $size
Depends: libc6 (>= $glibc)
Section: net
Priority: optional
Homepage: https://github.com/rnicd/rnicd
Description: software RoCEv2 RDMA NIC
 rnicd is a RoCEv2 RDMA NIC in pure Go: a daemon per device (rnicd, with
 the systemd unit rnicd@.service), the rnic tools (perftest, ibverbs and
 rdma tools re-made on it), and drop-in libibverbs.so.1 and librdmacm.so.1
 (with stand-ins of libmlx5.so.1 and libefa.so.1 for programs linked to
 them) under /usr/lib/rnicd, which programs load with LD_LIBRARY_PATH or,
 system-wide, with the ld.so configuration in /usr/share/rnicd.
CONTROL
# The unit is installed but neither enabled nor started: each device needs
# its own address in /etc/rnicd/DEVICE.conf first.
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
POSTINST
cat >"$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"

deb=$out/rnicd_${version}_$arch.deb
dpkg-deb --root-owner-group -Zgzip -z6 --build "$root" "$deb" >/dev/null
echo "$deb"
