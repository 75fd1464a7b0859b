#!/bin/busybox sh
# The microvm guest's init (PID 1), packed into its initramfs by atelet.drivers.microvm.initramfs
# next to a static busybox. It mounts the kernel's filesystems, loads the kernel modules listed
# in /ate/modules (in that order), gives eth0 the worker's address when the kernel command line
# has one, runs the workload in /ate/command, says how it ended on the console and powers the
# VM off (PID 1 must never exit: the kernel would panic).
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s
if [ -f /ate/modules ]; then
  while read -r module; do
    [ -n "$module" ] && insmod "$module"
  done < /ate/modules
fi
# The worker's address (atelet.drivers.microvm.network): ate.ip=<ip>/<len> ate.gw=<ip>.
for word in $(cat /proc/cmdline); do
  case "$word" in
    ate.ip=*) address="${word#ate.ip=}" ;;
    ate.gw=*) gateway="${word#ate.gw=}" ;;
  esac
done
ip link set lo up
if [ -n "$address" ]; then
  ip addr add "$address" dev eth0
  ip link set eth0 up
  [ -n "$gateway" ] && ip route add default via "$gateway"
  echo "ate-init: eth0 $address via $gateway"
fi
echo "ate-init: running the workload"
sh /ate/command
echo "ate-init: the workload exited with status $?"
poweroff -f
