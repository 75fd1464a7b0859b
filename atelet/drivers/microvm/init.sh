#!/bin/busybox sh
# The microvm guest's init (PID 1), packed into its initramfs by atelet.drivers.microvm.initramfs
# next to a static busybox. It mounts the kernel's filesystems, loads the kernel modules listed
# in /ate/modules (in that order), runs the workload in /ate/command, says how it ended on the
# console and powers the VM off (PID 1 must never exit: the kernel would panic).
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
echo "ate-init: running the workload"
sh /ate/command
echo "ate-init: the workload exited with status $?"
poweroff -f
