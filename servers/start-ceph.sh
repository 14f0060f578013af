#!/bin/bash
# Start a minimal single-host Ceph (pacific 16.2) for the test suite: one monitor, one in-memory
# OSD (memstore) and radosgw on http://127.0.0.1:7480, user AKIDTEST/SECRETTEST, region
# us-east-1, path-style addressing. About 25 s to ready (the bucket pools are made up front),
# under 200 MB at rest; the OSD grows with the data up to CEPH_MEMSTORE_BYTES (default 3 GiB) and
# keeps memory after deletes.
#
# Environment: CEPH_DIR (state, logs, pid files; default /tmp/provcat-test-ceph; wiped on start),
# CEPH_MEMSTORE_BYTES, CEPH_RGW_PORT (7480) and CEPH_MON_PORT (3300) — other ports let a second
# instance run beside a developer's. Stop with stop-ceph.sh and the same CEPH_DIR.
#
# Three settings are essential (found the hard way, see docs/drivers/s3.md):
# - auth "none" everywhere: no cephx keys to manage;
# - ms_mon_client_mode = crc for radosgw: it defaults to "secure", which needs cephx, and then
#   hangs for 300 s;
# - tcp_nodelay=1 on the beast frontend: without it every request on a reused connection stalls
#   about 40 ms (Nagle + delayed ACK).
set -euo pipefail
D=${CEPH_DIR:-/tmp/provcat-test-ceph}
PORT=${CEPH_RGW_PORT:-7480}
MON_PORT=${CEPH_MON_PORT:-3300}
FSID=6d9c1f0e-0000-4000-8000-000000000002
here="$(cd "$(dirname "$0")" && pwd)"

fail() { echo "start-ceph: $*" >&2; exit 1; }
for tool in ceph ceph-authtool monmaptool ceph-mon ceph-osd radosgw radosgw-admin; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install radosgw ceph-mon ceph-osd)"
done

# An HTTP GET / that answers 200 (no curl needed: bash's /dev/tcp).
rgw_ready() {
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null || return 1
  printf 'GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  IFS= read -r -t 2 line <&3 || { exec 3>&-; return 1; }
  exec 3>&-
  [[ "$line" == HTTP/1.?\ 200* ]]
}

"$here/stop-ceph.sh" || true
rm -rf "$D"; mkdir -p "$D"/{mon.a,osd.0,rgw,log,run}
cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon_host = v2:127.0.0.1:$MON_PORT
public_addr = 127.0.0.1
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
keyring = $D/keyring
run_dir = $D/run
admin_socket = $D/run/\$name.asok
log_file = $D/log/\$name.log
pid_file = $D/run/\$name.pid
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_max_pg_per_osd = 1000
mon_data_avail_warn = 1
auth_allow_insecure_global_id_reclaim = false
[mon]
mon_data = $D/\$name
mon_allow_pool_delete = true
[osd]
osd_data = $D/\$name
osd_objectstore = memstore
memstore_device_bytes = ${CEPH_MEMSTORE_BYTES:-3221225472}
osd_class_load_list = *
osd_class_default_list = *
[client.rgw.a]
# tcp_nodelay: without it every request on a reused connection stalls about 40 ms (Nagle)
rgw_frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
rgw_data = $D/rgw
rgw_thread_pool_size = 32
# reclaim deleted objects quickly so long test runs do not fill the in-memory store
rgw_gc_obj_min_wait = 5
rgw_gc_processor_period = 10
rgw_gc_processor_max_time = 10
# radosgw defaults to ms_mon_client_mode=secure, which needs cephx
ms_mon_client_mode = crc
auth_client_required = none
CONF
C=(-c "$D/ceph.conf")
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$D/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
monmaptool --create --fsid $FSID --addv a "[v2:127.0.0.1:$MON_PORT]" "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon "${C[@]}" -i a
timeout 60 ceph "${C[@]}" osd create >/dev/null || fail "the monitor did not answer (log: $D/log/mon.a.log)"
ceph-osd "${C[@]}" -i 0 --mkfs 2>"$D/log/osd-mkfs.err" || fail "ceph-osd --mkfs failed: $(tail -3 "$D/log/osd-mkfs.err")"
ceph-osd "${C[@]}" -i 0
up=""
for _ in $(seq 120); do
  if timeout 10 ceph "${C[@]}" osd stat 2>/dev/null | grep -q '1 up'; then up=1; break; fi
  sleep 0.5
done
[ -n "$up" ] || fail "the OSD did not come up within 60 s (log: $D/log/osd.0.log)"
# radosgw creates a bucket's pools on first use: the first bucket, the first object and the first
# multipart upload each wait about 2 s for a new pool's placement groups. Made here, that wait is
# paid once at start instead of by whichever test comes first (a 1 s stall timeout then fires).
for pool in default.rgw.buckets.index default.rgw.buckets.data default.rgw.buckets.non-ec; do
  ceph "${C[@]}" osd pool create "$pool" >/dev/null 2>&1 || fail "creating pool $pool failed"
  ceph "${C[@]}" osd pool application enable "$pool" rgw >/dev/null 2>&1 ||
    fail "tagging pool $pool for rgw failed"
done
radosgw "${C[@]}" -n client.rgw.a
ready=""
for _ in $(seq 240); do
  if rgw_ready; then ready=1; break; fi
  sleep 0.5
done
[ -n "$ready" ] || fail "radosgw did not answer on port $PORT within 120 s (log: $D/log/client.rgw.a.log)"
radosgw-admin "${C[@]}" user create --uid=test --display-name=test \
  --access-key=AKIDTEST --secret=SECRETTEST >/dev/null || fail "radosgw-admin user create failed"
echo "ceph rgw ready on http://127.0.0.1:$PORT (AKIDTEST/SECRETTEST), state in $D"
