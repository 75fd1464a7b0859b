#!/usr/bin/env bash
# Builds the counter example into a local OCI image layout at examples/counter/oci (tag latest),
# without a registry: a static Go binary (CGO_ENABLED=0) packed with umoci, and a static busybox
# (Debian's busybox-static) as /bin/sh, cat, ls... so that `ate exec` has tools to debug with.
# Idempotent: skips when the image already holds a binary built from the current sources.
# Callable from any cwd. Needs: go, umoci, sha256sum.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

out="$here/oci"
build="$here/build"
mkdir -p "$build"
export GOCACHE="${GOCACHE:-$build/gocache}"
export GOFLAGS="${GOFLAGS:--trimpath}"

# Fingerprint of everything the image is made of.
busybox="$(command -v busybox)"
src_sum="$(cat ./*.go go.mod build.sh "$busybox" | sha256sum | cut -d' ' -f1)"
if [ -f "$out/index.json" ] && [ "$(cat "$build/stamp" 2>/dev/null)" = "$src_sum" ]; then
  echo "counter: image up to date at $out (latest)"
  exit 0
fi

CGO_ENABLED=0 go build -ldflags='-s -w' -o "$build/counter" .

rootfs="$build/rootfs"
rm -rf "$rootfs" && mkdir -p "$rootfs/data" "$rootfs/tmp" "$rootfs/etc"
cp "$build/counter" "$rootfs/counter"
chmod 0755 "$rootfs/counter"
mkdir -p "$rootfs/bin"
cp "$busybox" "$rootfs/bin/busybox"
for tool in sh cat ls ps echo sleep env id head tail wc true false kill; do ln -s busybox "$rootfs/bin/$tool"; done
chmod 1777 "$rootfs/tmp"
: > "$rootfs/etc/resolv.conf"
printf 'root:x:0:0:root:/:/counter\n' > "$rootfs/etc/passwd"

staging="$build/oci.staging"
rm -rf "$staging"
umoci init --layout "$staging"
umoci new --image "$staging:latest"
umoci insert --image "$staging:latest" "$rootfs" /
umoci config --image "$staging:latest" \
  --config.entrypoint /counter \
  --config.env PORT=8080 --config.env DATA_DIR=/data --config.env PATH=/bin \
  --config.exposedports 8080/tcp \
  --config.workingdir /
umoci gc --layout "$staging"

rm -rf "$out.old"
if [ -e "$out" ]; then mv "$out" "$out.old"; fi
mv "$staging" "$out"
rm -rf "$out.old"
echo "$src_sum" > "$build/stamp"
echo "counter: built image $out (latest)"
