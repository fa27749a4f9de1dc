#!/bin/bash
# `katana import` (issue 32): the configs of V2bX (config.json), XrayR (config.yml, the file,
# dns and http certificate modes) and Xboard-Node (config.yml, nodes and a machine) in
# tests/integration/import/, written from each agent's documented format, become katana
# configs that `katana check --offline` accepts, with the panels' urls, tokens, node ids and
# types, listen/send addresses, limits, Redis, DNS and certificates mapped, and one warning per
# setting katana has no equivalent for. A missing file or malformed JSON/YAML exits 1 with the
# reason; an unknown agent or a missing argument exits 2 naming what was wrong.
. "$(dirname "$0")/lib.sh"
needs_katana "katana import" || exit 77
kt_need jq

KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
FIX=$KT_DIR/import

# imp NAME AGENT FILE: import into $T/NAME.json (warnings in $T/NAME.log); sets RC.
imp() {
    RC=0
    timeout 10 "$KATANA" import --db "$T/katana.db" "$2" "$3" >"$T/$1.json" 2>"$T/$1.log" ||
        RC=$?
    echo "$1: import rc $RC"
    sed 's/^/    /' "$T/$1.log"
}

# imported NAME: the import exited 0 and `katana check --offline` accepts the output.
imported() {
    check "$1: katana import exits 0" test "$RC" = 0
    local out rc=0
    out=$(timeout 10 "$KATANA" check --offline -c "$T/$1.json" 2>&1) || rc=$?
    echo "$1: check rc $rc: $out"
    check "$1: katana check --offline accepts the output" \
        bash -c "[ $rc = 0 ] && grep -q 'Configuration OK.' <<<\"\$1\"" _ "$out"
}

# value NAME JQ EXPECTED: the output's JQ value is EXPECTED (jq -c form).
value() {
    local got
    got=$(jq -c "$2" "$T/$1.json" 2>&1 || true)
    check "$1: $2 is $3 (got $got)" test "$got" = "$3"
}

# warned NAME TEXT...: one warning line holds every TEXT (fixed strings).
warned() {
    local n=$1 lines t
    shift
    lines=$(grep '^katana import: warning: ' "$T/$n.log" || true)
    for t in "$@"; do
        lines=$(grep -F -e "$t" <<<"$lines" || true)
    done
    check "$n: a warning names $*" test -n "$lines"
}

# --- V2bX: two nodes of different types, a type katana does not serve ---
imp v2bx v2bx "$FIX/v2bx.json"
imported v2bx
value v2bx '[.nodes[].panel.type]' '["uniproxy","uniproxy"]'
value v2bx '[.nodes[].panel.url] | unique' '["https://panel.example.com"]'
value v2bx '[.nodes[].panel.token] | unique' '["v2bx-token-1"]'
value v2bx '[.nodes[].panel.node_id]' '[33,34]'
value v2bx '[.nodes[].panel.node_type]' '["shadowsocks","vless"]'
value v2bx '[.nodes[].tag]' '["hk-ss","vless-34"]'
value v2bx '.nodes[0].listen' '"127.0.0.1"'
value v2bx '.nodes[0].outbound.bind' '["127.0.0.1"]'
value v2bx '.nodes[0].speed_limit' '100'
value v2bx '.nodes[0].accept_proxy_protocol' 'true'
value v2bx '.nodes[1].accept_proxy_protocol' 'null'
value v2bx '.nodes[1].panel.timeout' '15'
value v2bx '.nodes[1].listen' 'null'
value v2bx '.nodes[1].cert' '{"mode":"file","cert_file":"/etc/V2bX/cert/34.pem","key_file":"/etc/V2bX/cert/34.key"}'
value v2bx '.nodes[1].fallback' '"127.0.0.1:8080"'
value v2bx '.dns' '{"servers":["1.1.1.1","8.8.8.8:5353"],"strategy":"ipv4_only"}'
value v2bx '.db.path' "\"$T/katana.db\""
value v2bx '.api.listen' '"127.0.0.1:9090"'
value v2bx '[.api.token | test("^[0-9a-f]{64}$")]' '[true]'
value v2bx '[keys_unsorted[] | select(. == "api" or . == "nodes")]' '["api","nodes"]'
check "v2bx: the note names the API and its token" \
    grep -q '^katana import: note: api: the REST API on 127.0.0.1:9090 with a new random token' "$T/v2bx.log"
TOKEN1=$(jq -r .api.token "$T/v2bx.json")
imp v2bx-again v2bx "$FIX/v2bx.json"
check "v2bx: each import draws a new token" test "$(jq -r .api.token "$T/v2bx-again.json")" != "$TOKEN1"
value v2bx '.redis' '{"url":"redis://127.0.0.1:6379/1","expiry":120}'
warned v2bx 'Nodes[2].NodeType "hysteria2"' 'node 35 left out'
warned v2bx 'Nodes[0].EnableTFO'
warned v2bx 'Nodes[0].LimitConfig.IPLimit' "device_limit from the panel"
warned v2bx 'Cores[0].NTP'
warned v2bx 'Cores[0].OriginalPath'
warned v2bx 'server "https+local://dns.google/dns-query"' 'left out'
warned v2bx 'a server for some domains only (9.9.9.9)'
warned v2bx 'Nodes[1].Options.CertConfig.RejectUnknownSni: katana answers every SNI'
check "v2bx: no warning for a setting that is mapped (ApiHost, ListenIP, SpeedLimit, EnableProxyProtocol)" \
    bash -c "test -s '$T/v2bx.log' && ! grep -E 'ApiHost|ListenIP|LimitConfig.SpeedLimit|NodeID|EnableProxyProtocol' '$T/v2bx.log'"

# --- XrayR: SSpanel node, CertMode file, Redis device limit, DNS file, fallbacks ---
imp xrayr-file xrayr "$FIX/xrayr-file.yml"
imported xrayr-file
value xrayr-file '.nodes[0].panel' '{"type":"sspanel","url":"https://sspanel.example.com","token":"mu-key-123","node_id":41,"timeout":30,"pull_interval":90,"push_interval":90}'
value xrayr-file '.nodes[0].tag' '"sspanel-41"'
value xrayr-file '.nodes[0].listen' '"127.0.0.1"'
value xrayr-file '.nodes[0].outbound' 'null'
value xrayr-file '.nodes[0].speed_limit' '50'
value xrayr-file '.nodes[0].accept_proxy_protocol' 'null'
value xrayr-file '.nodes[0].cert' '{"mode":"file","cert_file":"/etc/XrayR/cert/node1.test.com.cert","key_file":"/etc/XrayR/cert/node1.test.com.key"}'
value xrayr-file '.nodes[0].fallback' '"127.0.0.1:80"'
value xrayr-file '.redis' '{"url":"redis://:pa%3Ass%20word@127.0.0.1:6379/2","timeout":5,"expiry":60}'
value xrayr-file '.dns' '{"strategy":"ipv4_only","servers":["1.1.1.1","8.8.8.8:5353"]}'
value xrayr-file '.log' 'null'
warned xrayr-file 'Log.Level warning: katana logs info'
warned xrayr-file '(top).RouteConfigPath' 'no local route file'
warned xrayr-file '(top).ConnectionConfig'
warned xrayr-file 'Nodes[0].ApiConfig.DeviceLimit'
warned xrayr-file 'Nodes[0].ApiConfig.VlessFlow'
warned xrayr-file 'FallBackConfigs[1]' 'one fallback per node'
warned xrayr-file 'hosts: katana has no static host table'
warned xrayr-file 'Nodes[0].ControllerConfig.GlobalDeviceLimitConfig: ' 'count their devices apart'
warned v2bx 'Nodes[0].LimitConfig.IpRecorderConfig: ' 'count their devices apart'

# --- XrayR: CertMode dns and http, a V2board and an unsupported panel ---
imp xrayr-acme xrayr "$FIX/xrayr-acme.yml"
imported xrayr-acme
value xrayr-acme '[.nodes[].panel.type]' '["uniproxy","uniproxy"]'
value xrayr-acme '[.nodes[].panel.node_id]' '[7,8]'
value xrayr-acme '[.nodes[].panel.node_type]' '["trojan","vmess"]'
value xrayr-acme '[.nodes[].cert.mode]' '["self","self"]'
value xrayr-acme '.log' 'null'
warned xrayr-acme 'Log.Level none: katana logs info'
warned xrayr-acme 'Nodes[0].ControllerConfig.CertConfig: certificate mode dns: katana has no ACME client (DNS provider alidns unused)' 'for node7.test.com'
warned xrayr-acme 'Nodes[1].ControllerConfig.CertConfig: certificate mode http: katana has no ACME client' 'for node8.test.com'
warned xrayr-acme 'Nodes[0].ControllerConfig.EnableREALITY'
warned xrayr-acme 'Nodes[0].ControllerConfig.UpdatePeriodic'
warned xrayr-acme 'Nodes[1].PanelType V2board'
warned xrayr-acme 'Nodes[2].PanelType "PMpanel"' 'node 9 left out'
warned xrayr-acme 'Log.Level none'
warned xrayr-acme 'Nodes[0].ControllerConfig.AutoSpeedLimitConfig: katana has no automatic speed limit'

# --- Xboard-Node: instances, several nodes of one panel, a machine, inherited cert ---
imp xboard-node xboard-node "$FIX/xboard-node.yml"
imported xboard-node
value xboard-node '[.nodes[].panel.type] | unique' '["xboard"]'
value xboard-node '[.nodes[].panel.node_id]' '[11,13,null]'
value xboard-node '[.nodes[].panel.node_type]' '["vless","trojan",null]'
value xboard-node '[.nodes[].panel.token]' '["xboard-server-token","xboard-server-token","machine-token-2"]'
value xboard-node '.nodes[2].panel' '{"type":"xboard","url":"https://xboard.example.com","token":"machine-token-2","machine_id":2}'
value xboard-node '.nodes[0].cert' '{"mode":"self"}'
value xboard-node '.nodes[1].cert.mode' '"file"'
value xboard-node '.log.level' '"debug"'
warned xboard-node 'instances[0].nodes[1].node_type "hysteria"' 'node 12 left out'
warned xboard-node 'instances[0].nodes[0].cert: certificate mode http' 'for node.example.com'
warned xboard-node 'kernel.custom_route'
warned xboard-node 'instances[0].node.push_interval'
warned xboard-node 'instances[1].health_port'

# --- errors ---
# err NAME WANT-RC PATTERN ARGS...: katana import ARGS exits WANT-RC, stderr matching PATTERN,
# nothing on stdout.
err() {
    local n=$1 want=$2 pat=$3 rc=0
    shift 3
    timeout 10 "$KATANA" import "$@" >"$T/$n.out" 2>"$T/$n.log" || rc=$?
    echo "$n: rc $rc: $(head -c 300 "$T/$n.log")"
    check "$n: exits $want" test "$rc" = "$want"
    check "$n: stderr says $pat" grep -q -E -e "$pat" "$T/$n.log"
    check "$n: nothing on stdout" test ! -s "$T/$n.out"
}
err missing 1 "katana import: .*/no-such\.yml: No such file or directory" xrayr "$T/no-such.yml"
err bad-yaml 1 "katana import: YAML line 6 column [0-9]+: " xrayr "$FIX/malformed.yml"
err bad-json 1 "katana import: JSON line 1 column [0-9]+: " v2bx "$FIX/malformed.json"
err yaml-as-json 1 "katana import: JSON line" v2bx "$FIX/xrayr-file.yml"
err directory 1 "not a regular file" xrayr "$FIX"
err unknown-agent 2 'unknown agent "xrayx": expected v2bx, xrayr or xboard-node' xrayx "$FIX/xrayr-file.yml"
err no-file 2 "expected an agent name and a FILE" xrayr
err no-args 2 "expected an agent name and a FILE"
err extra 2 "too many arguments" xrayr "$FIX/xrayr-file.yml" more
err bad-option 2 "unknown option" --dbx x xrayr "$FIX/xrayr-file.yml"
err db-no-path 2 "--db needs a path" --db
printf 'Nodes:\n  - PanelType: SSpanel\n    ApiConfig: {ApiHost: "https://x", ApiKey: k}\n' \
    >"$T/no-id.yml"
err no-node-id 1 "Nodes\[0\]\.ApiConfig: ApiHost, ApiKey and a positive NodeID are required" \
    xrayr "$T/no-id.yml"
printf 'Nodes:\n  - PanelType: PMpanel\n    ApiConfig: {ApiHost: "https://x", ApiKey: k, NodeID: 3}\n' \
    >"$T/none-served.yml"
err none-served 1 "no node katana can serve" xrayr "$T/none-served.yml"
printf 'Nodes:\n  - PanelType: SSpanel\n    ApiConfig: {ApiHost: "ftp://x", ApiKey: k, NodeID: 3, NodeType: Trojan}\n' \
    >"$T/bad-url.yml"
err bad-url 1 "the source holds a value katana refuses: nodes\[0\]\.panel\.url: must start with http" \
    xrayr "$T/bad-url.yml"
rc=0
out=$("$KATANA" import --help 2>&1) || rc=$?
check "import --help: exits 0 and names the agents" \
    bash -c "[ $rc = 0 ] && grep -q 'v2bx|xrayr|xboard-node FILE' <<<\"\$1\"" _ "$out"

kt_finish
