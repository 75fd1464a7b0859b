#!/usr/bin/env bash
# Unpacks Debian's cloud kernel (linux-image-cloud-amd64: the microvm class's guest kernel, with
# virtio modules, MICROVM.md) into a cache directory outside the repository, once per machine,
# without installing it as the host's kernel (no hooks, no initramfs, no bootloader). Prints the
# directory, which holds `vmlinuz` and `lib/modules/<version>/`. Safe to run again.
#
#   ATE_GUEST_KERNEL_CACHE  where it goes (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ate/guest-kernel)
set -euo pipefail
cache="${ATE_GUEST_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ate/guest-kernel}"
if [ -e "$cache/vmlinuz" ] && [ -d "$cache/lib/modules" ]; then
  echo "$cache"
  exit 0
fi
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9  # one unpacking at a time; the others find it done
if [ -e "$cache/vmlinuz" ] && [ -d "$cache/lib/modules" ]; then
  echo "$cache"
  exit 0
fi
package="$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)"
if [ -z "$package" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  package="$(apt-cache depends linux-image-cloud-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)"
fi
if [ -z "$package" ]; then
  echo "guest-kernel.sh: apt knows no linux-image-cloud-amd64 (is deb.debian.org bookworm in the sources?)" >&2
  exit 1
fi
work="$(mktemp -d)"
chmod 755 "$work"  # apt-get download reads the dir as its own user (it still writes as root)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq "$package" >/dev/null)
mkdir -p "$work/root"
dpkg-deb -x "$work"/*.deb "$work/root"
kernel="$(ls "$work"/root/boot/vmlinuz-* | head -1)"
staged="$(mktemp -d "$cache.XXXX")"
mkdir -p "$staged/lib"
cp "$kernel" "$staged/vmlinuz"
cp -a "$work/root/lib/modules" "$staged/lib/modules"
echo "$package" > "$staged/package"
chmod 755 "$staged"
rm -rf "$cache"
mv "$staged" "$cache"
echo "$cache"
