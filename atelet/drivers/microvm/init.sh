#!/.ate/busybox sh
# The microvm guest's init (PID 1), packed into its initramfs by atelet.drivers.microvm.initramfs
# next to a static busybox (in /.ate, out of the actor's root filesystem's way). It mounts the
# kernel's filesystems, loads the kernel modules listed in /.ate/modules.list (in that order),
# gives eth0 the worker's address when the kernel command line has one, runs the workload in
# /.ate/command, says how it ended on the console and powers the VM off (PID 1 must never
# exit: the kernel would panic).
/.ate/busybox mkdir -p /proc /sys /dev /tmp /.ate/bin
/.ate/busybox --install -s /.ate/bin
export PATH=/.ate/bin
# A step that fails ends the VM (the node sees it exit, with this line in the actor's log)
# rather than letting the workload run without its network or durable dir.
fail() { echo "ate-init: $*; stopping the VM"; sync; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
if [ -f /.ate/modules.list ]; then
  while read -r module; do
    [ -z "$module" ] || insmod "$module" || fail "kernel module $module did not load"
  done < /.ate/modules.list
fi
# The worker's address (atelet.drivers.microvm.network): ate.ip=<ip>/<len> ate.gw=<ip>.
for word in $(cat /proc/cmdline); do
  case "$word" in
    ate.ip=*) address="${word#ate.ip=}" ;;
    ate.gw=*) gateway="${word#ate.gw=}" ;;
    ate.mount=*) mounts="$mounts ${word#ate.mount=}" ;;
    ate.hostname=*) hostname "${word#ate.hostname=}" ;;
  esac
done
# The durable dirs (atelet.drivers.microvm.disk): ate.mount=<disk>:<path>, e.g. vda:/data,
# mounted sync: every write is on the disk image when it returns, so the node can read the dir
# back after the VM is stopped at any moment.
for pair in $mounts; do
  mkdir -p "${pair#*:}"
  mount -t ext4 -o sync "/dev/${pair%%:*}" "${pair#*:}" || fail "durable dir /dev/${pair%%:*} did not mount on ${pair#*:}"
  echo "ate-init: /dev/${pair%%:*} on ${pair#*:}"
done
ip link set lo up
if [ -n "$address" ]; then
  ip addr add "$address" dev eth0 && ip link set eth0 up || fail "eth0 did not take $address"
  [ -z "$gateway" ] || ip route add default via "$gateway" || fail "no default route via $gateway"
  echo "ate-init: eth0 $address via $gateway"
fi
# The channel from the node (atelet.drivers.microvm.qemu): one request line, one answer line.
#   addr <ip>/<len> <gw>   gives eth0 a new address (a VM restored on another worker): "ok"
#   exec <id> <base64 sh>  starts the script in a session of its own, its output to files: "started"
#   status <id> <bytes>    "running", or "done <status> <base64 stdout> <base64 stderr>" (each its
#                          first <bytes> bytes, "-" when empty), and the exec is forgotten
#   kill <id>              kills the exec's session and forgets it: "ok"
#   clock <epoch seconds>  sets the guest's wall clock (a VM restored or thawed comes back with the
#                          time it was saved or stopped at): "ok"
if [ -n "$address" ]; then
  tries=0  # the port appears once its module probed the device
  while [ ! -e /sys/class/virtio-ports ] && [ "$tries" -lt 50 ]; do sleep 0.1; tries=$((tries + 1)); done
fi
for port in /sys/class/virtio-ports/*; do
  if [ "$(cat "$port/name" 2>/dev/null)" = ate.agent ]; then
    agent="/dev/${port##*/}"
    echo "ate-init: channel ate.agent on $agent"
    (
      exec 3<>"$agent"
      while true; do
        # a read while no host end is connected returns at once with nothing: wait and read again
        read -r verb value via <&3 || { sleep 0.2; continue; }
        run="/tmp/ate-exec/$value"
        case "$verb/$value" in
          exec/|status/|kill/|exec/*[!a-z0-9]*|status/*[!a-z0-9]*|kill/*[!a-z0-9]*) echo "failed: bad exec id" >&3; continue ;;
        esac
        if [ "$verb" = exec ]; then
          mkdir -p "$run" && echo "$via" | base64 -d > "$run/cmd" || { echo "failed: exec $value" >&3; continue; }
          setsid sh -c 'sh "$1/cmd" </dev/null >"$1/out" 2>"$1/err"; echo $? >"$1/status.new"; mv "$1/status.new" "$1/status"' sh "$run" &
          echo $! > "$run/pid"
          echo started >&3
        elif [ "$verb" = status ]; then
          if [ -f "$run/status" ]; then
            out=$(head -c "$via" "$run/out" | base64 -w 0); err=$(head -c "$via" "$run/err" | base64 -w 0)
            echo "done $(cat "$run/status") ${out:--} ${err:--}" >&3
            rm -rf "$run"
          elif [ -d "$run" ]; then echo running >&3; else echo "failed: no exec $value" >&3; fi
        elif [ "$verb" = kill ]; then
          [ -f "$run/pid" ] && kill -KILL -"$(cat "$run/pid")" 2>/dev/null
          rm -rf "$run"
          echo ok >&3
        elif [ "$verb" = clock ]; then
          case "$value" in
            ''|*[!0-9]*) echo "failed: not seconds since the epoch: $value" >&3 ;;
            *) if date -s "@$value" >/dev/null 2>&1; then echo ok >&3; else echo "failed: date -s @$value" >&3; fi ;;
          esac
        elif [ "$verb" = addr ] && ip addr flush dev eth0 && ip addr add "$value" dev eth0 \
            && ip route replace default via "$via"; then
          echo "ate-init: eth0 now $value via $via"
          echo ok >&3
        else
          echo "failed: $verb $value $via" >&3
        fi
      done
    ) &
  fi
done
echo "ate-init: running the workload"
sh /.ate/command
echo "ate-init: the workload exited with status $?"
sync
poweroff -f
