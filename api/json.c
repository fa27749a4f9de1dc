/*
 * JSON bodies of the API (api/api.h): flows, sessions, stats snapshots, nodes. Byte counts are
 * JSON integers (jansson's json_int_t is 64-bit; counts above INT64_MAX are clamped), times are
 * RFC 3339 UTC strings.
 */
#include <config.h>

#include <string.h>

#include "api/api_internal.h"

static json_t *u64(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

json_t *api_json_time(uint64_t ms)
{
    char buf[40];
    if (ms == 0)
        return json_null();
    api_time_rfc3339(ms, buf, sizeof buf);
    return json_string(buf);
}

json_t *api_json_flow(const sv_flow_info *f)
{
    json_t *user = json_null();
    if (f->has_user)
        user = json_pack("{s:o, s:s}", "uid", u64(f->user), "label", f->user_label);
    /* katana lowers each node to one inbound tagged with the node's tag (agent/lower.h) */
    return json_pack("{s:o, s:o, s:s, s:s, s:o, s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:o, s:o, "
                     "s:o}",
                     "id", u64(f->id), "session", u64(f->session), "node", f->inbound,
                     "inbound", f->inbound, "user", user, "source", f->source,
                     "destination", f->destination, "sniffed_host",
                     f->sniffed[0] ? json_string(f->sniffed) : json_null(),
                     "network", f->network == SV_NET_UDP ? "udp" : "tcp",
                     "outbound", f->outbound,
                     "rule", f->rule < 0 ? json_null() : json_integer(f->rule),
                     "epoch", u64(f->epoch), "start", api_json_time(f->started_ms),
                     "up", u64(f->up), "down", u64(f->down));
}

json_t *api_json_session(const sv_session_info *s)
{
    return json_pack("{s:o, s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:o}",
                     "id", u64(s->id), "node", s->inbound, "inbound", s->inbound,
                     "source", s->source, "user", s->has_user ? u64(s->user) : json_null(),
                     "network", s->udp ? "udp" : "tcp", "start", api_json_time(s->started_ms),
                     "up", u64(s->up), "down", u64(s->down));
}

static json_t *tag_stats(const sv_tag_stats *t, const char *key)
{
    json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:o}", "up", u64(t->up), "down", u64(t->down),
                          "up_rate", u64(t->up_rate), "down_rate", u64(t->down_rate),
                          "flows", u64(t->flows));
    if (o != NULL && key != NULL) {
        uint64_t id;
        json_t *v = strcmp(key, "user") == 0 && api_parse_u64(t->tag, &id) == 0
                        ? u64(id) : json_string(t->tag);
        if (json_object_set_new(o, key, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *tag_list(const sv_tag_stats *v, size_t n, const char *key)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, tag_stats(&v[i], key)) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

json_t *api_json_stats(const sv_stats *st)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "tick", u64(st->tick),
                     "interval_ms", u64(st->interval_ns / 1000000u),
                     "total", tag_stats(&st->total, NULL),
                     "inbounds", tag_list(st->inbounds, st->n_inbounds, "tag"),
                     "outbounds", tag_list(st->outbounds, st->n_outbounds, "tag"),
                     "users", tag_list(st->users, st->n_users, "user"));
}

static json_t *result(uint64_t ms, int status, const char *error)
{
    if (ms == 0)
        return json_null();
    return json_pack("{s:o, s:b, s:o}", "time", api_json_time(ms), "ok", status == 0,
                     "error", status == 0 ? json_null() : json_string(error));
}

json_t *api_json_node(const api_node_status *n, long sessions, long flows)
{
    return json_pack("{s:s, s:{s:s, s:s}, s:o, s:o, s:b, s:o, s:o, s:o, s:o, s:o, s:{s:o, s:o}}",
                     "tag", n->tag, "panel", "type", n->panel_type, "url", n->panel_url,
                     "last_pull", result(n->last_pull_ms, n->last_pull_status, n->last_pull_error),
                     "last_push", result(n->last_push_ms, n->last_push_status, n->last_push_error),
                     "applied", n->applied, "applied_at", api_json_time(n->applied_ms),
                     "epoch", u64(n->epoch), "users", u64(n->users),
                     "sessions", u64(sessions < 0 ? 0 : (uint64_t)sessions),
                     "flows", u64(flows < 0 ? 0 : (uint64_t)flows),
                     "outbox", "pending_bytes", u64(n->outbox_pending_bytes),
                     "oldest", api_json_time(n->outbox_oldest_ms));
}
