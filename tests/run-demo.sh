#!/bin/bash
# tests/run-demo.sh [CONFIG]: set up (deps, build in build/) and run the demo node
# packaging/examples/local-shadowsocks.json (or CONFIG, e.g. packaging/examples/local-trojan.json)
# in the foreground, after printing a client command for each of its users. Ctrl-C (SIGINT)
# stops it; it logs the usage per user.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
CONFIG=${1:-$TOP/packaging/examples/local-shadowsocks.json}

"$TOP/tests/setup-deps.sh"
if [ ! -x build/katana ]; then
    [ -x configure ] || autoreconf -fi
    mkdir -p build
    [ -f build/Makefile ] || (cd build && "$TOP/configure")
fi
make -C build -j"${JOBS:-2}" katana

build/katana check -c "$CONFIG"
python3 - "$CONFIG" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))

def allows(n):
    """What node n lets its users reach (the private-destination rule, docs/network.md)."""
    if n.get("allow_private"):
        return ("  allow_private is on: users may reach loopback, private and this host's"
                " addresses too.\n")
    return ("  Private and loopback destinations (127.0.0.1, localhost, 10/8, 192.168/16, this"
            " host's own addresses) are\n  refused by default: a local web server answers"
            " \"Empty reply from server\". Set \"allow_private\": true on the\n  node to allow"
            " them; see docs/network.md#users-cannot-reach-the-node-itself and"
            " docs/troubleshooting.md.\n")
for n in cfg["nodes"]:
    p = n["panel"]
    node, users = p.get("node"), p.get("users")
    if node is None or users is None:
        print("node %s: node/users come from files or a panel; see its config" % n["tag"])
        continue
    host = n.get("listen") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if p.get("node_type") == "trojan":
        print("\nNode %s: Trojan over TLS on %s:%d (SNI %s). Clients, one per user (trojan-gfw's"
              " client.json: run_type client, remote_addr %s, remote_port %d, local_port 1080,"
              " ssl.sni %s, ssl.verify false for a self-signed cert), password:" %
              (n["tag"], host, node["server_port"], node["server_name"], host,
               node["server_port"], node["server_name"]))
        for u in users["users"]:
            print("  user %d:  %s" % (u["id"], u["uuid"]))
        print("  a browser or a wrong password: curl -k https://%s:%d/  (404, or the fallback)" %
              (host, node["server_port"]))
        print(allows(n))
        continue
    if p.get("node_type") == "vless":
        tls = node.get("tls") == 1
        print("\nNode %s: VLESS %s on %s:%d. Clients, one per user (v2ray: a vless outbound to"
              " %s:%d, encryption none%s), id:" %
              (n["tag"], "over TLS" if tls else "in clear", host, node["server_port"], host,
               node["server_port"], ", security tls, allowInsecure for a self-signed cert"
               if tls else ""))
        for u in users["users"]:
            print("  user %d:  %s" % (u["id"], u["uuid"]))
        print(allows(n))
        continue
    print("\nNode %s: Shadowsocks %s on %s:%d (TCP+UDP). Clients, one per user:" %
          (n["tag"], node["cipher"], host, node["server_port"]))
    for i, u in enumerate(users["users"]):
        print("  user %d:  ss-local -s %s -p %d -m %s -k %s -b 127.0.0.1 -l %d -u" %
              (u["id"], host, node["server_port"], node["cipher"], u["uuid"], 1080 + i))
    print("  then:    curl --socks5-hostname 127.0.0.1:1080 https://example.com/  (a public site)")
    print(allows(n))
api = cfg.get("api", {})
listen = api.get("listen", "127.0.0.1:9090")
auth = " -H 'Authorization: Bearer %s'" % api["token"] if api.get("token") else ""
print("Ready once every node applied:  curl http://%s/readyz" % listen)
print("Refused flows by reason:        curl -s%s http://%s/metrics | grep katana_flows_refused_total\n"
      % (auth, listen))
PY
echo "Starting katana (Ctrl-C to stop; SIGHUP reloads, SIGUSR1 logs usage)..."
exec build/katana run -c "$CONFIG"
