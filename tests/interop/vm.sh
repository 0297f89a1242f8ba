#!/usr/bin/env bash
# vm.sh: the rxe peer of the interop suite, a qemu VM with Debian's kernel,
# rdma_rxe and rdma-core's tools, every piece from Debian's packages.
#
#   vm.sh image DIR                 build DIR/vmlinuz and DIR/rootfs.cpio.gz once
#   vm.sh boot DIR NS TAP IP IP6 MTU SCRIPT OUT
#                                   boot on TAP in netns NS with addresses IP
#                                   (/24) and IP6 (/64) and link MTU MTU, run
#                                   SCRIPT once rxe0 is up,
#                                   print the console, power off; what SCRIPT
#                                   writes to /dev/ttyS1 lands in file OUT
#                                   (a file never drops output, as a busy
#                                   console can)
#
# Facts this rests on (from the workplace's rxe-peer recipe): rdma_rxe needs
# crc32_generic, which is loaded by crypto name so module dependencies do not
# pull it in; perftest needs libibumad3; GID index 1 of rxe0 is the RoCEv2
# IPv4 GID (index 0 is the link-local default GID; the IPv6 address is added
# after rxe0, so its GID comes after the IPv4 one); qemu's TCG boots this in
# seconds without KVM.
set -euo pipefail

# rdmacm-utils brings rping, for the connection manager's cases;
# ucx-utils and libucx0 ucx_perftest (UCX's own libraries and its
# transports, dlopened from usr/lib/x86_64-linux-gnu/ucx: 2.6 MB).
pkgs=(rdma-core ibverbs-providers libibverbs1 librdmacm1 libibumad3 perftest
	ibverbs-utils rdmacm-utils libnl-3-200 libnl-route-3-200 libpci3
	ucx-utils libucx0)
# rdma_ucm (with rdma_cm, ib_cm, iw_cm) is what rping and librdmacm need.
mods=(crc32_generic virtio_pci virtio_net rdma_rxe ib_uverbs ib_umad rdma_ucm)

fail() { echo "vm.sh: $*" >&2; exit 2; }

image() {
	local out=$1
	# The image is rebuilt when what goes into it changes: the stamp is
	# this script's own image recipe.
	local stamp
	stamp=$(sed -n '/^pkgs=/,/^boot()/p' "$0" | sha256sum | cut -c1-16)
	[[ -s $out/vmlinuz && -s $out/rootfs.cpio.gz && $(cat "$out/stamp" 2>/dev/null) == "$stamp" ]] && return 0
	mkdir -p "$out"
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	local kernel
	kernel=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9].*\)/\1/p' | head -1)
	[[ -n $kernel ]] || fail "no Debian kernel package (apt-get update?)"
	mkdir -p "$tmp/debs" "$tmp/kernel" "$tmp/pkgs" "$tmp/root"
	(cd "$tmp/debs" && apt-get download -qq "$kernel" "${pkgs[@]}") >/dev/null 2>&1 || fail "apt-get download"
	local deb
	for deb in "$tmp"/debs/*.deb; do
		if [[ $deb == *linux-image-* ]]; then dpkg -x "$deb" "$tmp/kernel"; else dpkg -x "$deb" "$tmp/pkgs"; fi
	done
	local kver
	kver=$(ls "$tmp/kernel/lib/modules")
	depmod -b "$tmp/kernel" "$kver"

	local root=$tmp/root
	mkdir -p "$root"/{bin,proc,sys,dev,tmp,etc,lib64,lib/x86_64-linux-gnu,lib/modules/$kver}
	cp -a "$tmp/pkgs/usr" "$root/"
	cp -a "$tmp/pkgs/etc/libibverbs.d" "$root/etc/"
	cp "$(command -v busybox)" "$root/bin/busybox"
	cp "$(command -v rdma)" "$root/bin/rdma"
	# The tools' shared libraries come from this host, also Debian 12;
	# UCX's transports are modules it loads, whose libraries ldd of the
	# tools does not see (libnuma, libstdc++ for ucx_perftest).
	local bin lib
	for bin in "$tmp"/pkgs/usr/bin/* "$tmp"/pkgs/usr/lib/x86_64-linux-gnu/ucx/*.so.0 "$(command -v rdma)"; do
		LD_LIBRARY_PATH=$tmp/pkgs/usr/lib/x86_64-linux-gnu ldd "$bin" 2>/dev/null || true
	done | awk '$3 ~ /^\// {print $3}' | grep -v "^$tmp" | sort -u >"$tmp/libs"
	while read -r lib; do cp -L "$lib" "$root/lib/x86_64-linux-gnu/"; done <"$tmp/libs"
	cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$root/lib/x86_64-linux-gnu/"
	cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
	local m
	for m in "${mods[@]}"; do
		modprobe -d "$tmp/kernel" -S "$kver" --show-depends "$m"
	done | awk '{print $2}' | sort -u | while read -r m; do
		local rel=${m#"$tmp/kernel/lib/modules/$kver/"}
		mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
		cp "$m" "$root/lib/modules/$kver/$rel"
	done
	cp "$tmp/kernel/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/"
	depmod -b "$root" "$kver"
	cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
for m in ${mods[*]}; do modprobe \$m; done
for a in \$(cat /proc/cmdline); do case \$a in peer_ip=*) ip=\${a#peer_ip=};; peer_ip6=*) ip6=\${a#peer_ip6=};; peer_mtu=*) mtu=\${a#peer_mtu=};; esac; done
ip link set lo up
# No duplicate address detection: a tentative address is no source, and
# the link has no one else.
echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad
ip link set eth0 mtu \$mtu up
ip addr add \$ip/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
ip -6 addr add \$ip6/64 dev eth0
# rxe0's GID table once the IPv6 GID is in (the core adds it from a work
# queue), for the host to check: "=== gid INDEX GID" on the second port.
g=/sys/class/infiniband/rxe0/ports/1/gids
i=0; while [ \$i -lt 50 ] && ! grep -q '^2001:' \$g/* 2>/dev/null; do sleep 0.1; i=\$((i+1)); done
for n in 0 1 2 3; do echo "=== gid \$n \$(cat \$g/\$n 2>/dev/null)"; done > /dev/ttyS1
echo "=== peer up \$ip \$ip6 active_mtu \$(ibv_devinfo -d rxe0 | awk '/active_mtu/{print \$2}')"
sh /case.sh
echo "=== peer done"
poweroff -f
EOF
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$out/rootfs.cpio.gz.new"
	cp "$tmp"/kernel/boot/vmlinuz-* "$out/vmlinuz"
	mv "$out/rootfs.cpio.gz.new" "$out/rootfs.cpio.gz"
	echo "$stamp" >"$out/stamp"
}

boot() {
	local dir=$1 ns=$2 tap=$3 ip=$4 ip6=$5 mtu=$6 script=$7 out=$8
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	mkdir "$tmp/x"
	cp "$script" "$tmp/x/case.sh"
	(cd "$tmp/x" && echo case.sh | cpio -o -H newc 2>/dev/null | gzip -1) >"$tmp/x.cpio.gz"
	cat "$dir/rootfs.cpio.gz" "$tmp/x.cpio.gz" >"$tmp/initrd"
	local mac
	mac=$(printf '52:54:00:12:34:%02x' "${ip##*.}")
	ip netns exec "$ns" qemu-system-x86_64 -accel tcg -m 512 -smp 1 -nographic -no-reboot \
		-kernel "$dir/vmlinuz" -initrd "$tmp/initrd" \
		-append "console=ttyS0 quiet panic=-1 peer_ip=$ip peer_ip6=$ip6 peer_mtu=$mtu" \
		-serial mon:stdio -serial "file:$out" \
		-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=$mac" </dev/null | tr -d '\r'
}

case ${1:-} in
image) [[ $# -eq 2 ]] || fail "usage: vm.sh image DIR"; image "$2" ;;
boot) [[ $# -eq 9 ]] || fail "usage: vm.sh boot DIR NS TAP IP IP6 MTU SCRIPT OUT"; shift; boot "$@" ;;
*) fail "usage: vm.sh image DIR | boot DIR NS TAP IP IP6 MTU SCRIPT OUT" ;;
esac
