#!/bin/bash
# t-vless-clients.sh with the Xray-core client for every user (issue 10; peer built by tests/setup-deps.sh).
KT_CLIENT=xray exec bash "$(dirname "$0")/t-vless-clients.sh" "$@"
