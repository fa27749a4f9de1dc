#!/bin/bash
# VLESS over WebSocket, in clear and over TLS, with real v2ray 4.34 clients (issue 9):
# t-vless-clients.sh with KT_NETS=ws (its own test, so that each stays within the time limit).
KT_NAME=t-vless-ws KT_NETS=ws exec bash "$(dirname "$0")/t-vless-clients.sh"
