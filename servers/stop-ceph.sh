#!/bin/bash
# Stop the daemons start-ceph.sh started in CEPH_DIR (by their pid files) and wait until they
# have exited (SIGKILL after 20 s). Leaves the state directory for post-mortem reading.
D=${CEPH_DIR:-/tmp/provcat-test-ceph}
pids=""
for n in client.rgw.a osd.0 mon.a; do
  f="$D/run/$n.pid"
  if [ -f "$f" ]; then
    p=$(cat "$f")
    if kill "$p" 2>/dev/null; then pids="$pids $p"; fi
  fi
done
alive=""
for _ in $(seq 100); do
  alive=""
  for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && exit 0
  sleep 0.2
done
for p in $alive; do kill -9 "$p" 2>/dev/null; done
exit 0
