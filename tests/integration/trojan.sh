# shellcheck shell=bash
# trojan.sh: helpers for tests/integration/t-trojan-*.sh (sourced after lib.sh, bash).
#
# Issue 8: Trojan over TLS with fallback. The server under test (KT_SERVER):
#   katana  (default) katana itself, for the same config as below (cert + fallback per node);
#   trojan  trojan-gfw's server (`trojan -c server.json`): every user's password, the node's
#           certificate, remote_addr/remote_port = the node's fallback;
#   v2ray   v2ray's trojan-tls inbound with `fallbacks` = the node's fallback.
# Without a fallback katana answers a plain HTTP/1.1 404 and closes; the reference servers
# cannot, so the harness gives them a 404 server (katest.py httpd --status 404) as fallback.
# A "self" certificate is served by the reference servers as a harness-made self-signed one.

TJ_SNI=node.test

# tj_need_server: skip the test when the reference server of this mode is not installed.
tj_need_server() {
    case $KT_SERVER in
        katana) ;;
        trojan) kt_need trojan ;;
        v2ray) kt_need v2ray ;;
        *) skip_all "KT_SERVER=$KT_SERVER does not serve Trojan (katana, trojan or v2ray)" ;;
    esac
}

# tj_certs DIR NAME: a test CA (DIR/ca.crt, ca.key; made once per DIR) and a server certificate
# DIR/NAME.crt + DIR/NAME.key (P-256) for node.test with SANs DNS:node.test, DNS:localhost,
# IP:127.0.0.1, IP:::1, signed by that CA. Sets TJ_CA, TJ_CERT, TJ_KEY.
tj_certs() {
    local dir=$1 name=$2
    mkdir -p "$dir"
    if [ ! -e "$dir/ca.crt" ]; then
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$dir/ca.key" -out "$dir/ca.crt" -days 30 -subj "/CN=katana test CA" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    fi
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$TJ_SNI" 2>/dev/null
    printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n' \
        "$TJ_SNI" >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/$name.crt" -days 30 -extfile "$dir/$name.ext" 2>/dev/null
    TJ_CA=$dir/ca.crt TJ_CERT=$dir/$name.crt TJ_KEY=$dir/$name.key
}

# tj_fp_file CERT: the SHA-256 fingerprint of a PEM certificate file.
tj_fp_file() { openssl x509 -noout -fingerprint -sha256 -in "$1" | sed 's/.*=//'; }

# tj_fp_served PORT: the SHA-256 fingerprint of the certificate served on 127.0.0.1:PORT
# (SNI node.test); empty when no handshake completes within 10 s.
tj_fp_served() {
    timeout 10 openssl s_client -connect "127.0.0.1:$1" -servername "$TJ_SNI" </dev/null \
        2>/dev/null | openssl x509 -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//'
}

# tj_httpd NAME BODY [STATUS]: a fixed-answer HTTP server on a free port; sets HTTPD_PORT.
tj_httpd() {
    kt_ports 1; HTTPD_PORT=${PORTS[0]}
    kt_bg "$1" "${KT_PY[@]}" httpd --port "$HTTPD_PORT" --body "$2" --status "${3:-200}" \
        --ready-file "$T/$1.ready"
    kt_wait_file "$T/$1.ready" 10 || { fail "http server $1 did not start"; exit 1; }
}

# tj_json_str TEXT: TEXT as a JSON string literal.
tj_json_str() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

# tj_srv_start CONFIG: start the server under test for a katest.py `mkconfig --protocol trojan`
# CONFIG and wait for its port; sets SRV_PID (and SRV_CONFIG). In the reference modes the
# pid goes to $T/ss/1.pid so that lib.sh's srv_alive / srv_stop / srv_pids work unchanged.
tj_srv_start() {
    SRV_CONFIG=$1
    if [ "$KT_SERVER" = katana ]; then srv_start "$1"; return; fi
    local plan port sni cert key fallback fhost fport pws=() uid uuid
    plan=$("${KT_PY[@]}" ssplan --config "$1")
    read -r _ port _ <<<"$(grep '^node ' <<<"$plan")"
    read -r _ sni <<<"$(grep '^sni ' <<<"$plan")"
    read -r _ cert key <<<"$(grep '^cert ' <<<"$plan")"
    fallback=$(awk '$1 == "fallback" { print $2 }' <<<"$plan")
    if [ "$cert" = self ]; then
        mkdir -p "$T/self"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$T/self/key.pem" -out "$T/self/cert.pem" -days 30 -subj "/CN=$sni" \
            -addext "subjectAltName=DNS:$sni" 2>/dev/null
        cert=$T/self/cert.pem key=$T/self/key.pem
    fi
    if [ -z "$fallback" ]; then
        tj_httpd fallback404 "404 page not found" 404   # what katana answers without one
        fallback=127.0.0.1:$HTTPD_PORT
    fi
    fhost=${fallback%:*} fport=${fallback##*:}
    rm -rf "$T/ss"; mkdir -p "$T/ss"
    while read -r _ uid uuid; do
        pws+=("$(tj_json_str "$uuid")")
        echo "$port" >"$T/ss/$uid.port"
    done < <(grep '^user ' <<<"$plan")
    local pwlist; pwlist=$(IFS=,; echo "${pws[*]}")
    if [ "$KT_SERVER" = trojan ]; then
        cat >"$T/trojan-server.json" <<EOF
{"run_type": "server", "local_addr": "127.0.0.1", "local_port": $port,
 "remote_addr": "$fhost", "remote_port": $fport, "password": [$pwlist], "log_level": 1,
 "ssl": {"cert": "$cert", "key": "$key", "key_password": "", "alpn": ["http/1.1"],
         "reuse_session": true, "session_ticket": false, "session_timeout": 600},
 "tcp": {"no_delay": true, "keep_alive": true, "fast_open": false}}
EOF
        kt_bg server trojan -c "$T/trojan-server.json"
    else
        local clients; clients=$(for p in "${pws[@]}"; do printf '{"password": %s},' "$p"; done)
        cat >"$T/v2ray-server.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $port, "protocol": "trojan",
   "settings": {"clients": [${clients%,}], "fallbacks": [{"dest": "$fhost:$fport"}]},
   "streamSettings": {"network": "tcp", "security": "tls",
     "tlsSettings": {"alpn": ["http/1.1"],
       "certificates": [{"certificateFile": "$cert", "keyFile": "$key"}]}}}],
 "outbounds": [{"protocol": "freedom", "settings": {}}]}
EOF
        kt_bg server v2ray -config "$T/v2ray-server.json"
    fi
    SRV_PID=$BG_PID
    echo "$SRV_PID" >"$T/ss/1.pid"
    kt_wait_port "$port" 10 || { fail "$KT_SERVER server did not listen on $port"; exit 1; }
}

# tj_port: the node's port (every user dials the same one).
tj_port() { awk '$1 == "node" { print $2 }' <<<"$("${KT_PY[@]}" ssplan --config "$SRV_CONFIG")"; }

# tj_trojan_client NAME PASSWORD SERVER_PORT [CA_FILE]: trojan-gfw's client (SOCKS5 + UDP
# ASSOCIATE) verifying the server against CA_FILE (default $TJ_CA) for node.test; sets
# CL_PORT, CL_PID.
tj_trojan_client() {
    local ca=${4:-$TJ_CA}
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"run_type": "client", "local_addr": "127.0.0.1", "local_port": $CL_PORT,
 "remote_addr": "127.0.0.1", "remote_port": $3, "password": [$(tj_json_str "$2")],
 "log_level": 1,
 "ssl": {"verify": true, "verify_hostname": true, "cert": "$ca", "sni": "$TJ_SNI",
         "alpn": ["h2", "http/1.1"], "reuse_session": true, "session_ticket": false},
 "tcp": {"no_delay": true, "keep_alive": true, "fast_open": false}}
EOF
    kt_bg "client-$1" trojan -c "$T/client-$1.json"
    CL_PID=$BG_PID
    kt_wait_port "$CL_PORT" 10 || { fail "trojan client $1 did not listen on $CL_PORT"; exit 1; }
}

# tj_v2ray_client NAME PASSWORD SERVER_PORT [CA_FILE]: v2ray with a SOCKS5 inbound (UDP on)
# and a trojan outbound over TLS (serverName node.test, verified against CA_FILE); sets
# CL_PORT, CL_PID.
tj_v2ray_client() {
    local ca=${4:-$TJ_CA}
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "trojan",
   "settings": {"servers": [{"address": "127.0.0.1", "port": $3,
                             "password": $(tj_json_str "$2")}]},
   "streamSettings": {"network": "tcp", "security": "tls",
     "tlsSettings": {"serverName": "$TJ_SNI", "allowInsecure": false,
       "certificates": [{"usage": "verify", "certificateFile": "$ca"}]}}}]}
EOF
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    CL_PID=$BG_PID
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen on $CL_PORT"; exit 1; }
}

# tj_log_lines: the number of lines the server has logged so far.
tj_log_lines() { wc -l <"$SRV_LOG"; }

# tj_rss_kib PID: resident memory of a process, KiB.
tj_rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# tj_reload: SIGHUP to the server under test (katana: lib.sh srv_reload, which sets
# SRV_RELOAD_LOG; trojan-gfw restarts its service on SIGHUP). Not for KT_SERVER=v2ray.
tj_reload() {
    if [ "$KT_SERVER" = katana ]; then srv_reload; return; fi
    local mark; mark=$(stat -c %s "$SRV_LOG")
    kill -HUP "$SRV_PID"
    sleep "${KT_RELOAD_WAIT:-1}"
    SRV_RELOAD_LOG=$(tail -c +"$((mark + 1))" "$SRV_LOG")
}

# --- WebSocket scenarios (issue 9): usage checked against what a relay counted ----------------

# tj_counting_relay NAME TO_PORT: a relay on a free port to 127.0.0.1:TO_PORT that keeps the
# bytes it moved each way (all connections) in $T/NAME.count as "UP DOWN"; sets RELAY_PORT.
tj_counting_relay() {
    kt_ports 1; RELAY_PORT=${PORTS[0]}
    kt_bg "relay-$1" "${KT_PY[@]}" relay --port "$RELAY_PORT" --to "$2" --source 127.0.0.1 \
        --count-file "$T/$1.count" --ready-file "$T/relay-$1.ready"
    kt_wait_file "$T/relay-$1.ready" 10 || { fail "relay $1 did not start"; exit 1; }
}

# tj_relays_settle NAME...: wait (at most 20 s) until the named relays' counts stay put for a
# second: the clients end their connections (WebSocket Close, TLS close_notify) after the echo.
# Read every 0.2 s: it returns a second after the last change.
tj_relays_settle() {
    local before now r
    local end=$((${EPOCHREALTIME/./} + 20000000)) since=${EPOCHREALTIME/./}
    before=$(for r in "$@"; do cat "$T/$r.count" 2>/dev/null; done)
    while ((${EPOCHREALTIME/./} < end)); do
        sleep 0.2
        now=$(for r in "$@"; do cat "$T/$r.count" 2>/dev/null; done)
        if [ "$now" != "$before" ]; then
            before=$now since=${EPOCHREALTIME/./}
        elif ((${EPOCHREALTIME/./} - since >= 1000000)); then
            return 0
        fi
    done
    return 1
}

# tj_wire_is USAGE_LINES UID RELAY [SLACK]: the user's usage line is the wire bytes relay RELAY
# counted (what katana bills: protocol, WebSocket and TLS bytes): down exactly, up exactly or
# up - SLACK (a client's last record, such as its 24-byte TLS close_notify, may arrive after
# katana closed the connection and is then not billed).
tj_wire_is() {
    local l up down; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    read -r up down <"$T/$3.count"
    echo "user $2: '${l:-no line}', relay $3 counted up $up down $down"
    [ "$l" = "$2 $up $down" ] || [ "$l" = "$2 $((up - ${4:-0})) $down" ]
}

# tj_http_status PORT PATH TLS [curl options]: the HTTP status of a request on PATH to the node
# (https for node.test when TLS is 1, verified against $TJ_CA); 000 on failure.
tj_http_status() {
    local port=$1 path=$2 scheme=http; shift 2
    [ "$1" = 1 ] && scheme=https
    shift
    timeout 15 curl -s -o /dev/null -w '%{http_code}' --max-time 10 --http1.1 \
        --cacert "$TJ_CA" --resolve "$TJ_SNI:$port:127.0.0.1" "$@" "$scheme://$TJ_SNI:$port$path" ||
        true
}

# tj_ws_status PORT PATH TLS [curl options]: the same for a WebSocket upgrade request.
tj_ws_status() {
    local port=$1 path=$2 tls=$3; shift 3
    tj_http_status "$port" "$path" "$tls" -H "Connection: Upgrade" -H "Upgrade: websocket" \
        -H "Sec-WebSocket-Version: 13" -H "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" "$@"
}
