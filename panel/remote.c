/*
 * The one constructor of remote panel clients (panel/panel.h pn_remote_new).
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "panel/panel.h"
#include "panel/sspanel.h"
#include "panel/uniproxy.h"
#include "panel/xboard.h"

int pn_remote_new(const pn_remote_options *o, pn_client **out, sv_error *err)
{
    *out = NULL;
    const char *type = o->type != NULL ? o->type : "";
    if (strcmp(type, "uniproxy") == 0) {
        pn_uniproxy_options u = {.loop = o->loop, .url = o->url, .token = o->token,
                                 .node_id = o->node_id, .node_type = o->node_type,
                                 .timeout_ms = o->timeout_ms};
        return pn_uniproxy_new(&u, out, err);
    }
    if (strcmp(type, "xboard") == 0) {
        pn_xboard_options x = {.loop = o->loop, .url = o->url, .token = o->token,
                               .node_id = o->node_id, .node_type = o->node_type,
                               .timeout_ms = o->timeout_ms, .machine_id = o->machine_id};
        return pn_xboard_new(&x, out, err);
    }
    if (strcmp(type, "sspanel") == 0) {
        pn_sspanel_options s = {.loop = o->loop, .url = o->url, .key = o->token,
                                .node_id = o->node_id, .timeout_ms = o->timeout_ms,
                                .pull_interval = o->pull_interval,
                                .push_interval = o->push_interval};
        return pn_sspanel_new(&s, out, err);
    }
    return sv_error_set(err, -EINVAL, "panel type \"%.32s\" is not a remote panel", type);
}
