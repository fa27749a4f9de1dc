#!/bin/bash
# Issue 14: t-panel-kill-after-apply.sh replayed on SSPanel-UIM mod_mu (the emulator's sspanel mode, katana's
# sspanel panel): the same faults, the same exact totals.
PANEL_TYPE=sspanel exec bash "$(dirname "$0")/t-panel-kill-after-apply.sh"
