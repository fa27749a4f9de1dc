#!/bin/bash
# Issue 14: t-panel-check.sh against SSPanel-UIM mod_mu (the emulator's sspanel mode).
PANEL_TYPE=sspanel exec bash "$(dirname "$0")/t-panel-check.sh"
