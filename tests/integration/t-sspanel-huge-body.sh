#!/bin/bash
# Issue 33: t-panel-huge-body.sh on SSPanel-UIM mod_mu (the emulator's sspanel mode, katana's
# sspanel panel): a users answer {"ret":1,"data":[... that never closes, then a valid list.
PANEL_TYPE=sspanel exec bash "$(dirname "$0")/t-panel-huge-body.sh"
