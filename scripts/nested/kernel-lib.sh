# Shell helpers shared by the L1 image builder: which Debian kernel to use, fetching and
# unpacking it without installing it, and the module dependency closure.
#
# A .ko's dependencies live in its .modinfo section as a NUL-separated "depends=a,b" string;
# `dpkg-deb -x` leaves no modules.dep behind (depmod only runs on install), so the closure is
# computed here from the modules themselves, dependencies first, never from a fixed list.
# Sourced, not executed; every function is prefixed kernel_lib_.

kernel_lib_log() {
	echo "nested: $*" >&2
}

kernel_lib_die() {
	echo "nested: error: $*" >&2
	exit 1
}

# The generic kernel package linux-image-amd64 depends on, e.g. linux-image-6.1.0-56-amd64.
kernel_lib_package_name() {
	if [[ -n "${VOIDBOX_NESTED_KERNEL_PKG:-}" ]]; then
		echo "$VOIDBOX_NESTED_KERNEL_PKG"
		return
	fi
	local pkg
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	[[ -n "$pkg" ]] || kernel_lib_die "apt-cache does not know linux-image-amd64: run apt-get update"
	echo "$pkg"
}

# Downloads a package into the shared .deb cache (once) and prints the .deb's path.
kernel_lib_download() {
	local pkg=$1 debs="${VOIDBOX_HOME:-$HOME/.void-box}/cache/debs" deb sandbox=()
	# apt drops to the _apt user, which cannot write into a private cache; root needs no drop.
	[[ $EUID -eq 0 ]] && sandbox=(-o APT::Sandbox::User=root)
	mkdir -p "$debs"
	deb=$(ls "$debs/${pkg}_"*.deb 2>/dev/null | head -n1 || true)
	if [[ -z "$deb" ]]; then
		kernel_lib_log "apt-get download $pkg"
		# apt's own progress lines would land in the caller's stderr: keep them for failures
		if ! (cd "$debs" && apt-get download -q "${sandbox[@]}" "$pkg") >"$debs/.apt.log" 2>&1; then
			cat "$debs/.apt.log" >&2
			kernel_lib_die "apt-get download $pkg failed: check the apt sources (apt-get update)"
		fi
		deb=$(ls "$debs/${pkg}_"*.deb | head -n1)
	fi
	echo "$deb"
}

kernel_lib_extract_package() {
	local pkg=$1 dest=$2 deb
	deb=$(kernel_lib_download "$pkg")
	mkdir -p "$dest"
	kernel_lib_log "extracting $(basename "$deb")"
	dpkg-deb -x "$deb" "$dest"
}

# busybox-static's binary: the installed one when the package is installed, else downloaded.
kernel_lib_copy_busybox() {
	local dest=$1 status tmp
	status=$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null || true)
	if [[ "$status" == "install ok installed" && -x /bin/busybox ]]; then
		cp /bin/busybox "$dest"
		return
	fi
	tmp=$(mktemp -d)
	kernel_lib_extract_package busybox-static "$tmp"
	cp "$tmp/bin/busybox" "$dest"
	rm -rf "$tmp"
}

# Module name as the kernel spells it (depends= and /sys/module use '_', files may use '-').
kernel_lib_module_name() {
	local base=${1##*/}
	base=${base%%.ko*}
	echo "${base//-/_}"
}

kernel_lib_module_depends() {
	local path=$1
	case "$path" in
	*.ko.xz) xz -dc "$path" ;;
	*.ko.zst) zstd -dc "$path" ;;
	*) cat "$path" ;;
	esac | tr '\0' '\n' | grep -a -m1 '^depends=' | cut -d= -f2- | tr ',' ' '
}

# Prints "name path" lines for the given modules and all they depend on, dependencies first.
kernel_lib_module_order() {
	local kern=$1
	shift
	local -A path_of=() state=() builtin=()
	local f
	while IFS= read -r f; do
		path_of[$(kernel_lib_module_name "$f")]=$f
	done < <(find "$kern/lib/modules" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
	# modules.builtin names what this kernel has built in (kernel/drivers/virtio/virtio_pci.ko
	# in 6.12): nothing to load for those, whatever the older kernels shipped as modules
	while IFS= read -r f; do
		f=${f##*/}
		f=${f%.ko}
		builtin[${f//-/_}]=1
	done < <(cat "$kern"/lib/modules/*/modules.builtin 2>/dev/null || true)

	kernel_lib_visit() {
		local name=$1 dep
		case "${state[$name]:-}" in
		done) return ;;
		active) kernel_lib_die "module dependency cycle through $name" ;;
		esac
		if [[ -z "${path_of[$name]:-}" ]]; then
			[[ -z "${builtin[$name]:-}" ]] || return 0
			kernel_lib_die "module $name is not in the kernel package (built in? wrong flavour?)"
		fi
		state[$name]=active
		for dep in $(kernel_lib_module_depends "${path_of[$name]}"); do
			kernel_lib_visit "$dep"
		done
		state[$name]=done
		echo "$name ${path_of[$name]}"
	}
	local m
	for m in "$@"; do
		kernel_lib_visit "$m"
	done
}

# Unpacks the ELF vmlinux from a bzImage: TCG spends seconds in the bzImage's own decompressor,
# while QEMU boots the ELF directly through its PVH entry note. Prints nothing when no known
# payload decompresses to an ELF, so the caller keeps the bzImage.
kernel_lib_extract_vmlinux() {
	local bzimage=$1 dest=$2 magic tool offset
	for magic in 'xz:\xfd\x37\x7a\x58\x5a\x00' 'gzip:\x1f\x8b\x08' 'zstd:\x28\xb5\x2f\xfd'; do
		tool=${magic%%:*}
		command -v "$tool" >/dev/null || continue
		for offset in $(LC_ALL=C grep -obUaP "${magic#*:}" "$bzimage" | cut -d: -f1); do
			tail -c "+$((offset + 1))" "$bzimage" | "$tool" -dc >"$dest" 2>/dev/null || true
			if [[ "$(head -c 4 "$dest" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
				echo "$dest"
				return
			fi
		done
	done
	rm -f "$dest"
}

# Copies a module uncompressed: busybox insmod loads plain ELF only.
kernel_lib_copy_module() {
	local src=$1 dest=$2
	case "$src" in
	*.ko.xz) xz -dc "$src" >"$dest" ;;
	*.ko.zst) zstd -dc "$src" >"$dest" ;;
	*) cp "$src" "$dest" ;;
	esac
}
