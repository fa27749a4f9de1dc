#!/usr/bin/env python3
"""panel_emu: a V2Board/Xboard UniProxy panel over real HTTP on loopback, for katana's tests.

Speaks /api/v1/server/UniProxy/{config,user,push,alive,alivelist,status} (PANEL.md §1) with
token/node_id/node_type query parameters, ETag = sha1 of the body (quoted), 304 when
If-None-Match contains it, and Xboard's envelopes. Pushes are applied to per-user totals and
recorded. Control endpoints (no token) under /_emu/:
  GET  /_emu/state              {"totals":{uid:[up,down]}, "pushes":[...], "hits":{endpoint:n},
                                 "hit_times":{endpoint:[t...]}, "alive":..., "status":...}
  POST /_emu/config             body: a new config object (ETag changes)
  POST /_emu/users              body: {"users":[...]}
  POST /_emu/fault              {"endpoint":"push","faults":["500","502","timeout","html200",
                                 "apply_close","slow:2",...]}: one fault per request, in order
  POST /_emu/down               {"down":true}: every UniProxy request is refused with 502
  POST /_emu/alivelist          {"<uid>":count,...}: what GET alivelist answers from now on
Faults: 500 = JSON 500 {"message":...}; 502 = HTML 502; timeout = hold the request open
(unanswered) for --hold seconds, then close; html200 = an HTML page with 200; apply_close = apply
the push, then close the connection without an answer; slow:S = answer normally after S s;
apply_hang:S (push only) = apply the push, then answer only after S s.

--mode sspanel (issue 14) speaks SSPanel-UIM mod_mu instead (PANEL.md §2): GET
/mod_mu/nodes/{id}/info and /mod_mu/users (key/muKey query, W/"..." ETags, 304, {"ret":1,...}
envelopes, 401 {"ret":0,"msg":"Invalid request."} on a bad key), POST /mod_mu/users/traffic,
/mod_mu/users/aliveip, /mod_mu/users/detectlog (recorded in the state's "detectlog" as
{"t","req","user_id","list_id"}, req = the request's number) and the legacy POST /mod_mu/nodes/{id}/info load report. The state and the
control endpoints stay in UniProxy shapes: the config and users set through /_emu/ are translated
(shadowsocks -> sort 0 with custom_config.method and offset_port_node, trojan -> sort 14, vless
-> sort 11 with enable_vless; a config's own "sspanel_custom_config" object joins custom_config,
e.g. enable_reality and reality-opts; uuid -> passwd on sort 0; speed_limit -> node_speedlimit,
device_limit -> node_iplimit), endpoint names for faults and hits are the UniProxy ones
(config, user, push, alive, status), and pushes are recorded as {uid: [up, down]}. Extra controls:
  POST /_emu/raw      {"endpoint":"config"|"user","body":<raw answer or null>, "status":200}:
                      answer that endpoint with this body from now on (null: back to translating);
                      {"endpoint":...,"huge":N}: a 200 whose JSON body is N bytes long
                      and never ends ({"ret":1,"data":[{"id":1,"uuid":"x"},... without the
                      final ]}); with "shape":"uniproxy" it starts {"users":[ instead; with
                      "valid":true it is a whole user list of N bytes in that shape (ids from
                      1000000001 up, each secret distinct, as many users as fit, at most
                      1 000 000; "secret":"passwd" names the secret passwd, as mod_mu's sort 0;
                      with an ETag of its own, and 304 when asked with it);
                      "once":true: for the next request only
  POST /_emu/detect_rules  [{"id","name","text","regex","type"}...]: GET func/detect_rules
  POST /_emu/deleted  {"ids":[uid,...]}: users deleted from the panel: gone from the users
                      answer, and a traffic entry for one is fatal after the earlier entries
                      were applied (HTTP 500, PANEL.md §2.6)

--mode xboard (issue 14) speaks Xboard API v2 (PANEL.md §1.1, PROTOCOLS-2.md §6): the UniProxy
endpoints under /api/v2/server/ (no node_type), POST handshake answering
{"websocket":{"enabled":true,"ws_url":"ws://127.0.0.1:P/ws"}}, and a real WebSocket server
(RFC 6455 on this same HTTP port, GET /ws?token=..&node_id=..) that sends auth.success, then
sync.config and sync.users (the full sync), records what the node sends (pong, report.devices)
and answers WebSocket ping frames. /_emu/raw works here too (config, user). Extra controls:
  POST /_emu/ws_send  {"event":..,"data":..}: sent to every open channel (timestamp added)
  POST /_emu/ws_raw   {"text":S} or {"size":N}: S, or a JSON text of N bytes, as one text frame
  POST /_emu/ws_kill  {"partial":{event}}: the first half of that event's frame, then the
                      socket is shut; {}: shut at once
  POST /_emu/ws       {"enabled":bool[,"refuse":bool]}: what handshake offers from now on;
                      refuse true: GET /ws is answered 503 (no upgrade) until refuse is false
  GET /_emu/state adds "ws": {"connects":n, "open":n, "received":[messages]}
The node's metrics (PROTOCOLS-2.md §6.5, PANEL.md §1.1): each `node.status` the node sends is
also kept in the state's "node_status" as {"t","via":"ws","node_id","data"} (node_id: data's in
machine mode, else the channel's), and POST report (Xboard's combined report: every key
optional, answered {"data":true}) is recorded in the state's "reports" as {"t","node_id","body"}
(recorded only: its traffic is not billed), its "metrics" also going to "node_status" with
"via":"report". GET /_emu/node_status[?via=ws|report] answers that list alone (panel.sh's
panel_node_status).
Machine mode (PANEL.md §1.1): POST /_emu/machine {"machine_id":M,"token":MT,"base_config":{..},
"nodes":{"<id>":{"type":T,"config":{..},"users":{"users":[..]}}}} sets the machine (replacing
the last one; null: none). Then POST machine/nodes ({"machine_id","token"} in the JSON body)
lists the nodes, POST machine/status is recorded in the state's "machine_status", and a REST
request with machine_id (query) is authenticated with the machine token (401 unknown machine,
403 wrong token) and answered for its node_id from that node's config and users (400 "Server
does not exist" for a node the machine does not have). Pushes are also added to the state's
"node_totals" {node_id: {uid: [up, down]}} and recorded with their "node_id". Faults, hits and
/_emu/raw take "machine/nodes" as an endpoint name; /_emu/down refuses the machine endpoints too.
The machine's channel (PROTOCOLS-2.md §6.2-6.4): handshake takes {"machine_id","token"}; GET
/ws?token=MT&machine_id=M sends auth.success {"machine_id","node_ids"}, then per node a
sync.config and a sync.users carrying data.node_id; /_emu/ws_send, ws_raw and ws_kill reach it
like a node's channel (the test puts node_id in data). A POST /_emu/machine that changes the
node set (ids or types) sends sync.nodes {"nodes":[{id,type,name}]} on every machine channel
(as Xboard's notifyMachineNodesChanged), unless the body says "notify": false.

usage: panel_emu.py --port P --token T --config FILE --users FILE [--ready-file F] [--hold S]
                    [--mode uniproxy|sspanel|xboard]
"""

import argparse
import base64
import hashlib
import json
import os
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

API = "/api/v1/server/UniProxy/"
API2 = "/api/v2/server/"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WS = {"conns": [], "connects": 0, "received": [], "enabled": True, "refuse": False}
LOCK = threading.Lock()
STATE = {"config": {}, "users": {"users": []}, "totals": {}, "pushes": [], "hits": {},
         "hit_times": {}, "faults": {}, "down": False, "alive": [], "status": [],
         "alivelist": {}, "raw": {}, "deleted": [], "detect_rules": [], "detectlog": [],
         "machine": None, "machine_status": [], "node_totals": {}, "reports": [],
         "node_status": []}
ARGS = None


def body_etag(obj):
    text = json.dumps(obj, separators=(",", ":")).encode()
    etag = '"%s"' % hashlib.sha1(text).hexdigest()
    return text, ("W/" + etag) if ARGS.mode == "sspanel" else etag


SORTS = {"shadowsocks": 0, "vmess": 11, "vless": 11, "trojan": 14}


def ss_info(cfg):
    """A UniProxy config object as mod_mu's node info (PANEL.md §2.5)."""
    proto = cfg.get("protocol", "shadowsocks")
    sort = SORTS.get(proto, 2)
    cc = {"offset_port_node": str(cfg.get("server_port", 0)),
          "offset_port_user": str(cfg.get("server_port", 0))}
    if cfg.get("cipher"):
        cc["method"] = cfg["cipher"]
        if cfg["cipher"].startswith("2022-"):
            sort = 1
            cc["server_key"] = cfg.get("server_key") or ""
    if proto == "vless":
        cc["enable_vless"] = "1"
    if proto == "trojan" and cfg.get("server_name"):
        cc["host"] = cfg["server_name"]
    if cfg.get("network") not in (None, "", "tcp"):
        cc["network"] = cfg["network"]
    cc.update(cfg.get("sspanel_custom_config") or {})  # the test's own keys (reality-opts ...)
    return {"ret": 1, "data": {"node_speedlimit": 0, "sort": sort, "server": "127.0.0.1",
                               "custom_config": cc, "type": "SSPanel-UIM",
                               "version": "2025.1.0"}}


def ss_users(cfg, users):
    """A UniProxy user list as mod_mu's users answer (PANEL.md §2.4)."""
    sort = ss_info(cfg)["data"]["sort"]
    out = []
    for u in users.get("users", []):
        if u["id"] in STATE["deleted"]:  # a deleted user is in no list
            continue
        e = {"id": u["id"], "node_speedlimit": u.get("speed_limit") or 0}
        if sort <= 1:
            e.update({"passwd": u["uuid"], "method": cfg.get("cipher"),
                      "port": cfg.get("server_port", 0)})
        else:
            e["uuid"] = u["uuid"]
        if u.get("device_limit"):
            e["node_iplimit"] = u["device_limit"]
        out.append(e)
    return {"ret": 1, "data": out}


def ss_endpoint(method, path):
    """The UniProxy name of a mod_mu route, or None."""
    parts = path.strip("/").split("/")
    if len(parts) == 4 and parts[:2] == ["mod_mu", "nodes"] and parts[3] == "info":
        return "config" if method == "GET" else "status"
    return {"/mod_mu/users": "user", "/mod_mu/users/traffic": "push",
            "/mod_mu/func/detect_rules": "detect_rules",
            "/mod_mu/users/aliveip": "alive",
            "/mod_mu/users/detectlog": "detectlog"}.get(path)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send(self, status, body, ctype="application/json", etag=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def route(self, method):
        url = urlparse(self.path)
        raw = self.read_body()
        if url.path.startswith("/_emu/"):
            return self.control(method, url.path[6:], raw)
        if ARGS.mode == "sspanel":
            return self.sspanel(method, url, raw)
        api = API2 if ARGS.mode == "xboard" else API
        q = parse_qs(url.query)
        if ARGS.mode == "xboard" and url.path == "/ws":
            return self.websocket(q)
        if not url.path.startswith(api):
            return self.send(404, {"message": "not found"})
        ep = url.path[len(api):]
        if ARGS.mode == "xboard" and ep == "handshake":
            return self.handshake(q, raw)
        if ARGS.mode == "xboard" and ep.startswith("machine/"):
            return self.machine_endpoint(ep, raw)
        node = None
        if ARGS.mode == "xboard" and q.get("machine_id"):
            node = self.machine_node(q)
            if not isinstance(node, dict):
                return None
        with LOCK:
            STATE["hits"][ep] = STATE["hits"].get(ep, 0) + 1
            STATE["hit_times"].setdefault(ep, []).append(time.time())
            queue = STATE["faults"].get(ep) or []
            fault = queue.pop(0) if queue else None
            down = STATE["down"]
        if down:
            return self.send(502, b"<html>502 Bad Gateway</html>", "text/html")
        if node is None and q.get("token", [""])[0] != ARGS.token:
            return self.send(500, {"message": "token is error"})
        if not q.get("node_id", [""])[0]:
            return self.send(400, {"status": "fail", "message": "Server does not exist",
                                   "data": None, "error": None})
        if fault and self.pre_fault(fault):
            return None
        with LOCK:
            raw_answer = take_raw(ep)
        if raw_answer is not None and raw_answer.get("huge"):
            return self.send_huge(int(raw_answer["huge"]), raw_answer)
        if raw_answer is not None:
            body = raw_answer["body"]
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            return self.send(raw_answer.get("status", 200), data)
        if node is not None and ep in ("config", "user"):
            with LOCK:
                obj = dict(node["config"], base_config=STATE["machine"].get(
                    "base_config", {"push_interval": 60, "pull_interval": 60})) \
                    if ep == "config" else node["users"]
            return self.fetch(obj)
        handler = {"config": self.ep_config, "user": self.ep_user, "push": self.ep_push,
                   "alive": self.ep_alive, "alivelist": self.ep_alivelist,
                   "status": self.ep_status}.get(ep)
        if ARGS.mode == "xboard" and ep == "report":
            return self.ep_report(raw, int(q["node_id"][0]))
        if handler is None:
            return self.send(404, {"message": "not found"})
        if ep == "push":
            return self.ep_push(raw, fault, int(q["node_id"][0]) if q.get("node_id") else 0)
        return handler(raw, fault)

    # --- Xboard machine mode (PANEL.md §1.1) --------------------------------------------------

    def machine_auth(self, machine_id, token):
        """The machine, or None when the answer (401/403) was sent."""
        with LOCK:
            m = STATE["machine"]
        if m is None or str(m["machine_id"]) != str(machine_id):
            self.send(401, {"message": "Machine not found"})
            return None
        if token != m["token"]:
            self.send(403, {"message": "Machine token invalid"})
            return None
        return m

    def machine_node(self, q):
        m = self.machine_auth(q["machine_id"][0], q.get("token", [""])[0])
        if m is None:
            return False
        node = m["nodes"].get(q.get("node_id", [""])[0])
        if node is None:
            self.send(400, {"status": "fail", "message": "Server does not exist", "data": None,
                            "error": None})
            return False
        return node

    def machine_endpoint(self, ep, raw):
        with LOCK:
            STATE["hits"][ep] = STATE["hits"].get(ep, 0) + 1
            queue = STATE["faults"].get(ep) or []
            fault = queue.pop(0) if queue else None
            raw_answer = take_raw(ep)
            down = STATE["down"]
        if down:
            return self.send(502, b"<html>502 Bad Gateway</html>", "text/html")
        try:
            body = json.loads(raw or b"{}")
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return self.send(422, {"message": "Invalid data format"})
        if fault and self.pre_fault(fault):
            return None
        m = self.machine_auth(body.get("machine_id"), body.get("token"))
        if m is None:
            return None
        if ep == "machine/status":
            with LOCK:
                STATE["machine_status"].append(body)
            return self.send(200, {"data": True})
        if ep != "machine/nodes":
            return self.send(404, {"message": "not found"})
        if raw_answer is not None and raw_answer.get("huge"):
            return self.send_huge(int(raw_answer["huge"]), raw_answer)
        if raw_answer is not None:
            data = raw_answer["body"]
            data = data.encode() if isinstance(data, str) else json.dumps(data).encode()
            return self.send(raw_answer.get("status", 200), data)
        with LOCK:
            nodes = [{"id": int(k), "type": v["type"], "name": "node %s" % k}
                     for k, v in sorted(m["nodes"].items(), key=lambda kv: int(kv[0]))]
            bc = m.get("base_config", {"push_interval": 60, "pull_interval": 60})
        return self.send(200, {"nodes": nodes, "base_config": bc})

    # --- Xboard API v2 (--mode xboard) ------------------------------------------------------

    def handshake(self, q, raw):
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        token = body.get("token") or q.get("token", [""])[0]
        machine_id = body.get("machine_id") or q.get("machine_id", [""])[0]
        with LOCK:
            STATE["hits"]["handshake"] = STATE["hits"].get("handshake", 0) + 1
            enabled = WS["enabled"]
        if machine_id:
            if self.machine_auth(machine_id, token) is None:
                return None
        elif token != ARGS.token:
            return self.send(422, {"message": "Invalid token", "errors": {"token": ["Invalid token"]}})
        ws = {"enabled": True, "ws_url": "ws://127.0.0.1:%d/ws" % ARGS.port} if enabled else \
            {"enabled": False}
        return self.send(200, {"websocket": ws})

    def websocket(self, q):
        key = self.headers.get("Sec-WebSocket-Key")
        if (self.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            return self.send(400, {"message": "not a websocket request"})
        with LOCK:
            refuse = WS["refuse"]
        if refuse:
            return self.send(503, {"message": "websocket refused (/_emu/ws)"})
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        conn = WsConn(self)
        if q.get("machine_id"):
            return self.machine_websocket(q, conn)
        if q.get("token", [""])[0] != ARGS.token or not q.get("node_id", [""])[0]:
            conn.send_event({"event": "error", "data": {"message": "invalid token"}})
            conn.kill()
            return None
        with LOCK:
            WS["conns"].append(conn)
            WS["connects"] += 1
            cfg = {k: v for k, v in STATE["config"].items() if k != "base_config"}
            users = STATE["users"]
        node_id = int(q["node_id"][0])
        conn.node_id = node_id
        conn.send_event({"event": "auth.success", "data": {"node_id": node_id}})
        conn.send_event({"event": "sync.config", "data": {"config": cfg}})
        conn.send_event({"event": "sync.users", "data": users})
        try:
            conn.serve()
        finally:
            with LOCK:
                if conn in WS["conns"]:
                    WS["conns"].remove(conn)
        return None

    def machine_websocket(self, q, conn):
        """The machine's one channel (PROTOCOLS-2.md §6.2): auth.success with node_ids, then
        each node's full sync, node-scoped events carrying data.node_id."""
        with LOCK:
            m = STATE["machine"]
        if m is None or str(m["machine_id"]) != q["machine_id"][0] or \
                q.get("token", [""])[0] != m["token"]:
            conn.send_event({"event": "error", "data": {"message": "invalid machine credentials"}})
            conn.kill()
            return None
        conn.machine = True
        with LOCK:
            WS["conns"].append(conn)
            WS["connects"] += 1
            nodes = sorted(m["nodes"].items(), key=lambda kv: int(kv[0]))
        conn.send_event({"event": "auth.success",
                         "data": {"machine_id": int(m["machine_id"]),
                                  "node_ids": [int(k) for k, _ in nodes]}})
        for k, v in nodes:
            cfg = {a: b for a, b in v["config"].items() if a != "base_config"}
            conn.send_event({"event": "sync.config", "data": {"config": cfg, "node_id": int(k)}})
            conn.send_event({"event": "sync.users", "data": dict(v["users"], node_id=int(k))})
        try:
            conn.serve()
        finally:
            with LOCK:
                if conn in WS["conns"]:
                    WS["conns"].remove(conn)
        return None

    def sspanel(self, method, url, raw):
        ep = ss_endpoint(method, url.path)
        q = parse_qs(url.query)
        if ep is None:
            return self.send(404, {"ret": 0, "msg": "Not found."})
        with LOCK:
            STATE["hits"][ep] = STATE["hits"].get(ep, 0) + 1
            STATE["hit_times"].setdefault(ep, []).append(time.time())
            queue = STATE["faults"].get(ep) or []
            fault = queue.pop(0) if queue else None
            down = STATE["down"]
            raw_answer = take_raw(ep)
        if down:
            return self.send(502, b"<html>502 Bad Gateway</html>", "text/html")
        if q.get("key", [""])[0] != ARGS.token:
            return self.send(401, {"ret": 0, "msg": "Invalid request."})
        if ep in ("user", "push", "alive", "detectlog") and not q.get("node_id", [""])[0]:
            return self.send(200, {"ret": 0, "msg": "Node not found."})
        if fault and self.pre_fault(fault):
            return None
        if raw_answer is not None and raw_answer.get("huge"):
            return self.send_huge(int(raw_answer["huge"]), raw_answer)
        if raw_answer is not None:
            body = raw_answer["body"]
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            return self.send(raw_answer.get("status", 200), data)
        if ep == "detect_rules":
            with LOCK:
                rules = STATE["detect_rules"]
            return self.fetch({"ret": 1, "data": rules})
        if ep in ("config", "user"):
            with LOCK:
                cfg, users = STATE["config"], STATE["users"]
            return self.fetch(ss_info(cfg) if ep == "config" else ss_users(cfg, users))
        try:
            items = json.loads(raw or b"{}")["data"]
            assert isinstance(items, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            return self.send(200, {"ret": 0, "msg": "Invalid data."})
        if ep == "push":
            return self.ss_traffic(items, fault)
        with LOCK:
            if ep == "alive":
                alive = {}
                for e in items:
                    alive.setdefault(str(e["user_id"]), []).append(e["ip"])
                STATE["alive"].append(alive)
            elif ep == "detectlog":  # inserts (user_id, list_id, node_id, datetime), §2.6
                req = STATE["hits"]["detectlog"]  # which request it came in
                for e in items:
                    STATE["detectlog"].append({"t": time.time(), "req": req,
                                               "user_id": int(e["user_id"]),
                                               "list_id": int(e["list_id"])})
            else:
                STATE["status"].append(json.loads(raw))
        return self.send(200, {"ret": 1, "msg": "ok"})

    def send_huge(self, n, spec=None):
        """A 200 of n bytes: a JSON user list that never ends, or with spec["valid"] a whole
        one (see /_emu/raw); the client may hang up early."""
        spec = spec or {}
        head = b'{"users":[' if spec.get("shape") == "uniproxy" else b'{"ret":1,"data":['
        etag = '"huge-%d-%s-%s"' % (n, spec.get("shape", "sspanel"), spec.get("secret", "uuid"))
        if spec.get("valid") and etag in (self.headers.get("If-None-Match") or ""):
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        if spec.get("valid"):
            self.send_header("ETag", etag)
        self.end_headers()
        try:
            if spec.get("valid"):
                self.send_user_list(n, head, spec.get("secret", "uuid"))
            else:
                self.send_open_list(n, head)
        except OSError:
            pass
        self.close_connection = True

    def send_open_list(self, n, head):
        chunk = b'{"id":1,"uuid":"x"},' * 3276
        self.wfile.write(head[:n])
        sent = min(len(head), n)
        while sent < n:
            part = chunk[:n - sent]
            self.wfile.write(part)
            sent += len(part)

    def send_user_list(self, n, head, secret):
        """Users {"id":I,"<secret>":"s<I>..."} of one width, then blanks up to n bytes."""
        tail = b"]}"
        fixed = len('{"id":1000000001,"%s":""},' % secret)
        width = max(36, -(-(n - len(head) - len(tail)) // 1000000) - fixed)
        each = fixed + width
        count = min(1000000, max(0, (n - len(head) - len(tail) + 1) // each))
        self.wfile.write(head)
        sent = len(head)
        fmt = '{"id":%%d,"%s":"s%%0%dd"}' % (secret, width - 1)
        for start in range(0, count, 10000):
            ids = range(1000000001 + start, 1000000001 + min(count, start + 10000))
            part = ",".join(fmt % (i, i) for i in ids)
            part = ("," + part if start > 0 else part).encode()
            self.wfile.write(part)
            sent += len(part)
        self.wfile.write(b" " * (n - sent - len(tail)) + tail)

    def ss_traffic(self, items, fault):
        """Applied entry by entry without a transaction (PANEL.md §2.6)."""
        body = {}
        with LOCK:
            for e in items:
                if e["user_id"] in STATE["deleted"]:
                    STATE["pushes"].append({"t": time.time(), "body": body, "fault": "deleted"})
                    return self.send(500, b"<html>Whoops, looks like something went wrong.</html>",
                                     "text/html")
                uid = str(e["user_id"])
                t = STATE["totals"].setdefault(uid, [0, 0])
                t[0] += int(e["u"])
                t[1] += int(e["d"])
                body[uid] = [int(e["u"]), int(e["d"])]
            STATE["pushes"].append({"t": time.time(), "body": body, "fault": fault})
        if fault == "apply_close":
            self.close_connection = True
            return None
        if fault and fault.startswith("apply_hang:"):
            time.sleep(float(fault[len("apply_hang:"):]))
        return self.send(200, {"ret": 1, "msg": "ok"})

    def pre_fault(self, fault):
        """Faults that replace the answer; True when the request was answered here."""
        if fault == "500":
            self.send(500, {"message": "Uh-oh, we've had some problems, we're working on it."})
        elif fault == "502":
            self.send(502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        elif fault == "html200":
            self.send(200, b"<html><body>Checking your browser</body></html>", "text/html")
        elif fault == "timeout":
            time.sleep(ARGS.hold)
            self.close_connection = True
        elif fault.startswith("slow:"):
            time.sleep(float(fault[5:]))
            return False
        else:
            return False
        return True

    def fetch(self, obj):
        data, etag = body_etag(obj)
        if ARGS.no_etag:  # a panel that answers every pull in full
            self.send(200, data)
            return
        inm = self.headers.get("If-None-Match") or ""
        if etag.strip('"') in inm:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send(200, data, etag=etag)

    def ep_config(self, raw, fault):
        with LOCK:
            obj = STATE["config"]
        self.fetch(obj)

    def ep_user(self, raw, fault):
        with LOCK:
            obj = STATE["users"]
        self.fetch(obj)

    def ep_push(self, raw, fault, node_id=0):
        try:
            data = json.loads(raw or b"{}")
            assert isinstance(data, dict)
        except (ValueError, AssertionError):
            return self.send(422, {"status": "fail", "message": "Invalid data format",
                                   "data": None, "error": None})
        with LOCK:
            per_node = STATE["node_totals"].setdefault(str(node_id), {})
            for uid, pair in data.items():
                for t in (STATE["totals"].setdefault(uid, [0, 0]),
                          per_node.setdefault(uid, [0, 0])):
                    t[0] += int(pair[0])
                    t[1] += int(pair[1])
            STATE["pushes"].append({"t": time.time(), "body": data, "fault": fault,
                                    "node_id": node_id})
        if fault == "apply_close":
            self.close_connection = True
            return None
        if fault and fault.startswith("apply_hang:"):  # applied, the answer comes only after S seconds
            time.sleep(float(fault[len("apply_hang:"):]))
        return self.send(200, {"status": "success", "message": "操作成功", "data": True,
                               "error": None})

    def ep_report(self, raw, node_id):
        """Xboard's POST report (PANEL.md §1.1): recorded; its metrics are a node status."""
        try:
            body = json.loads(raw or b"{}")
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return self.send(422, {"message": "Invalid data format"})
        now = time.time()
        with LOCK:
            STATE["reports"].append({"t": now, "node_id": node_id, "body": body})
            if isinstance(body.get("metrics"), dict) and body["metrics"]:
                STATE["node_status"].append({"t": now, "via": "report", "node_id": node_id,
                                             "data": body["metrics"]})
        return self.send(200, {"data": True})

    def ep_alive(self, raw, fault):
        with LOCK:
            STATE["alive"].append(json.loads(raw or b"{}"))
        self.send(200, {"data": True})

    def ep_alivelist(self, raw, fault):
        with LOCK:
            counts = dict(STATE["alivelist"])
        self.send(200, {"alive": counts})

    def ep_status(self, raw, fault):
        with LOCK:
            STATE["status"].append(json.loads(raw or b"{}"))
        self.send(200, {"data": True, "code": 0, "message": "success"})

    def control(self, method, what, raw):
        with LOCK:
            if method == "GET" and what == "state":
                out = {k: STATE[k] for k in ("totals", "pushes", "hits", "hit_times", "alive",
                                             "status", "detectlog", "machine_status",
                                             "node_totals", "reports", "node_status")}
                out["ws"] = {"connects": WS["connects"], "open": len(WS["conns"]),
                             "received": WS["received"]}
                return self.send(200, out)
            if method == "GET" and what == "node_status":
                via = parse_qs(urlparse(self.path).query).get("via", [None])[0]
                return self.send(200, [r for r in STATE["node_status"]
                                       if via is None or r["via"] == via])
            body = json.loads(raw or b"{}")
            conns = list(WS["conns"])
            if what == "ws_send":
                body["timestamp"] = int(time.time())
                n = sum(1 for c in conns if c.send_event(body))
                return self.send(200, {"sent": n})
            if what == "ws_raw":
                text = body["text"].encode() if "text" in body else \
                    (b'{"event":"sync.users","data":{"users":[' + b" " * int(body["size"]) +
                     b"]}}")
                n = sum(1 for c in conns if c.send_frame(0x1, text))
                return self.send(200, {"sent": n})
            if what == "ws_kill":
                for c in conns:
                    if body.get("partial"):
                        frame = ws_frame(0x1, json.dumps(body["partial"]).encode())
                        c.send_raw(frame[:len(frame) // 2])
                    c.kill()
                return self.send(200, {"killed": len(conns)})
            if what == "ws":
                WS["enabled"] = bool(body.get("enabled"))
                WS["refuse"] = bool(body.get("refuse"))
                return self.send(200, {"ok": True})
            if what == "config":
                STATE["config"] = body
            elif what == "users":
                STATE["users"] = body
            elif what == "fault":
                STATE["faults"][body["endpoint"]] = list(body["faults"])
            elif what == "down":
                STATE["down"] = bool(body.get("down"))
            elif what == "alivelist":  # {"<uid>": count}: the alivelist answer from now on
                STATE["alivelist"] = body
            elif what == "raw":  # a raw answer for config/user (null: back to the state)
                keep = body.get("body") is not None or body.get("huge")
                STATE["raw"][body["endpoint"]] = body if keep else None
            elif what == "detect_rules":  # sspanel: [{"id","name","text","regex","type"}]
                STATE["detect_rules"] = body
            elif what == "machine":
                old = machine_node_set(STATE["machine"])
                STATE["machine"] = body if body else None
                now = machine_node_set(STATE["machine"])
                if now != old and (body or {}).get("notify", True):  # notifyMachineNodesChanged
                    ev = {"event": "sync.nodes", "timestamp": int(time.time()),
                          "data": {"nodes": [{"id": i, "type": t, "name": "node %d" % i}
                                             for i, t in now]}}
                    for c in conns:
                        if c.machine:
                            c.send_event(ev)
            elif what == "deleted":
                STATE["deleted"] = list(body["ids"])
            else:
                return self.send(404, {"message": "unknown control"})
        return self.send(200, {"ok": True})


def take_raw(ep):
    """The raw answer set for endpoint ep (under LOCK); a "once" answer is dropped as taken."""
    raw = STATE["raw"].get(ep)
    if raw is not None and raw.get("once"):
        STATE["raw"][ep] = None
    return raw


def machine_node_set(m):
    """[(id, type)] of a machine's nodes, sorted by id."""
    return sorted((int(k), v["type"]) for k, v in (m or {}).get("nodes", {}).items())


def ws_frame(opcode, payload):
    """One unmasked, final server frame (RFC 6455 §5.2)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class WsConn:
    """The server end of one node channel, on the handler's socket."""

    def __init__(self, handler):
        self.h = handler
        self.sock = handler.connection
        self.wlock = threading.Lock()
        self.machine = False
        self.node_id = None

    def send_raw(self, data):
        try:
            with self.wlock:
                self.h.wfile.write(data)
                self.h.wfile.flush()
            return True
        except OSError:
            return False

    def send_frame(self, opcode, payload):
        return self.send_raw(ws_frame(opcode, payload))

    def send_event(self, obj):
        return self.send_frame(0x1, json.dumps(obj).encode())

    def kill(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def read_exact(self, n):
        data = self.h.rfile.read(n)
        if len(data) != n:
            raise EOFError
        return data

    def serve(self):
        """Read the node's frames until it closes: text is recorded, ping answered."""
        msg = b""
        try:
            while True:
                b0, b1 = self.read_exact(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self.read_exact(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self.read_exact(8))[0]
                mask = self.read_exact(4) if b1 & 0x80 else b"\0\0\0\0"
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(self.read_exact(n)))
                op = b0 & 0x0F
                if op == 0x8:
                    self.send_frame(0x8, data[:2])
                    return
                if op == 0x9:
                    self.send_frame(0xA, data)
                    continue
                if op in (0x0, 0x1, 0x2):
                    msg += data
                    if b0 & 0x80:
                        try:
                            obj = json.loads(msg)
                        except ValueError:
                            obj = {"unparsed": msg.decode(errors="replace")}
                        with LOCK:
                            WS["received"].append(obj)
                            if isinstance(obj, dict) and obj.get("event") == "node.status":
                                data = obj.get("data") or {}
                                STATE["node_status"].append({
                                    "t": time.time(), "via": "ws", "data": data,
                                    "node_id": data.get("node_id") if self.machine
                                    else self.node_id})
                        msg = b""
        except (EOFError, OSError, ValueError):
            return


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--users", required=True)
    p.add_argument("--ready-file")
    p.add_argument("--hold", type=float, default=5.0)
    p.add_argument("--no-etag", action="store_true",
                   help="no ETag and never 304: every pull gets the full body")
    p.add_argument("--mode", choices=("uniproxy", "sspanel", "xboard"), default="uniproxy")
    ARGS = p.parse_args()
    with open(ARGS.config) as f:
        STATE["config"] = json.load(f)
    with open(ARGS.users) as f:
        STATE["users"] = json.load(f)
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    if ARGS.ready_file:
        tmp = ARGS.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("ready\n")
        os.rename(tmp, ARGS.ready_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
