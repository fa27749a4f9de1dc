#!/bin/bash
# Shadowsocks inside WebSocket with the SIP003 v2ray-plugin and Mux.Cool (issue 9): the node's
# plugin_opts say mux=1, real ss-local + ss-v2ray-plugin clients with mux=1 and mux=8, over ws
# and ws-tls; each Mux.Cool sub-connection carries its own Shadowsocks stream and is its own flow.
# The scenarios and checks are t-ss-v2ray-plugin.sh's (see there), run with SS_PLUGIN_MUX=1.
SS_PLUGIN_MUX=1
. "$(dirname "$0")/t-ss-v2ray-plugin.sh"
