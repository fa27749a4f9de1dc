/*
 * Node metrics in Xboard's shapes (panel/xboard.h): the `metrics` object that Xboard's
 * ServerService::updateMetrics reads, and the `node.status` channel message carrying it
 * (PROTOCOLS-2.md §6.5). Pure: no I/O.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "panel/xboard.h"

/* A count as a JSON integer (jansson's are signed 64-bit). */
static json_t *count(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* Set @p key of @p o to @p v (taken); false when either is missing. */
static bool put(json_t *o, const char *key, json_t *v)
{
    return o != NULL && v != NULL && json_object_set_new(o, key, v) == 0;
}

/* The nested objects: load, speed_limiter, api, ws, limits; cpu_per_core when known. */
static bool put_nested(json_t *o, const pn_metrics *m)
{
    bool ok = put(o, "load", json_pack("{s:f, s:f, s:f}", "load1", m->load[0], "load5",
                                       m->load[1], "load15", m->load[2])) &&
              put(o, "speed_limiter", json_pack("{s:b, s:o}", "has_limits", m->has_limits,
                                                "limited_users", count(m->limited_users))) &&
              put(o, "api", json_pack("{s:o, s:o}", "success", count(m->api_success),
                                      "failure", count(m->api_failure))) &&
              put(o, "ws", json_pack("{s:b, s:b}", "enabled", m->ws_enabled, "connected",
                                     m->ws_connected)) &&
              put(o, "limits", json_pack("{s:o, s:o}", "device_limit_events",
                                         count(m->device_limit_events), "speed_limited_users",
                                         count(m->speed_limited_users)));
    if (!ok || m->n_cores == 0)
        return ok;
    json_t *cores = json_array();
    size_t n = m->n_cores < PN_METRICS_CORES_MAX ? m->n_cores : PN_METRICS_CORES_MAX;
    for (size_t i = 0; cores != NULL && i < n; i++)
        if (json_array_append_new(cores, json_real(m->cpu_per_core[i])) != 0) {
            json_decref(cores);
            cores = NULL;
        }
    return put(o, "cpu_per_core", cores);
}

json_t *pn_xb_metrics_json(const pn_metrics *m)
{
    json_t *o = json_object();
    bool ok = put(o, "uptime", count(m->uptime_s)) &&
              put(o, "active_connections", count(m->active_connections)) &&
              put(o, "total_connections", count(m->total_connections)) &&
              put(o, "active_users", count(m->active_users)) &&
              put(o, "total_users", count(m->total_users)) &&
              put(o, "inbound_speed", count(m->inbound_speed)) &&
              put(o, "outbound_speed", count(m->outbound_speed)) && put_nested(o, m) &&
              put(o, "kernel_status", json_boolean(m->kernel_status));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *pn_xb_status_message(const pn_metrics *m, bool machine, uint64_t node_id)
{
    json_t *data = pn_xb_metrics_json(m);
    if (machine && data != NULL && !put(data, "node_id", count(node_id))) {
        json_decref(data);
        data = NULL;
    }
    json_t *msg = data != NULL ? json_pack("{s:s, s:o, s:I}", "event", "node.status", "data",
                                           data, "timestamp", (json_int_t)time(NULL))
                               : NULL;
    char *text = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    return text;
}
