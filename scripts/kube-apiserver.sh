#!/usr/bin/env bash
# Builds a real kube-apiserver and kube-controller-manager (Kubernetes v1.20.2) from Debian
# bookworm's `kubernetes` source package, once per machine, into a cache directory outside the
# repository (KUBERNETES.md explains why: no binary is packaged anywhere these machines reach),
# and installs etcd from Debian. Prints the directory holding the binaries. Safe to run again:
# it does nothing when they are there. Needs root for apt (etcd-server and the build tools).
#
#   ATE_KUBE_CACHE  where the binaries go (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ate/kubernetes-v1.20.2)
set -euo pipefail
version=v1.20.2
cache="${ATE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ate/kubernetes-$version}"
bin="$cache/bin"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && command -v etcd >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
need=()
for pkg in etcd-server etcd-client golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "kube-apiserver.sh: root is needed to install: ${need[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ]; then
  echo "$bin"
  exit 0
fi
work="$cache/build"
rm -rf "$work"
mkdir -p "$work/apt/lists/partial" "$work/apt/sources" "$work/src" "$bin"
# The source package through an apt state of its own, so the machine's apt set-up is untouched.
cat > "$work/apt/sources/debian-src.list" <<'SRC'
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
SRC
apt_own=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/apt/sources" -o Dir::State::Lists="$work/apt/lists")
apt-get "${apt_own[@]}" update -qq
(cd "$work/src" && apt-get "${apt_own[@]}" source --download-only -qq kubernetes >/dev/null)
dsc=$(ls "$work"/src/kubernetes_*.dsc | head -n 1)
(cd "$work/src" && dpkg-source --no-check -x "$dsc" tree >/dev/null)
tree="$work/src/tree"
# The vendored reflect2 1.0.1 crashes under Go >= 1.18 as soon as a custom resource is created
# ("fatal error: fault"): use Debian's newer copies of it and of json-iterator.
for module in github.com/modern-go/reflect2 github.com/json-iterator/go; do
  rm -rf "$tree/vendor/$module"
  cp -r "/usr/share/gocode/src/$module" "$tree/vendor/$module"
done
(cd "$tree" && CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor KUBE_GIT_VERSION=$version \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$work/make.log" 2>&1) || {
  echo "kube-apiserver.sh: the build failed; the last lines of $work/make.log:" >&2
  tail -n 30 "$work/make.log" >&2
  exit 1
}
cp "$tree/_output/bin/kube-apiserver" "$tree/_output/bin/kube-controller-manager" "$bin/"
rm -rf "$work"  # ~2.2 GB of build tree
echo "$bin"
