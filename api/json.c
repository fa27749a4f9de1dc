/*
 * JSON bodies of the API (api/api.h): flows, sessions, stats snapshots, nodes. Byte counts are
 * JSON integers (jansson's json_int_t is 64-bit; counts above INT64_MAX are clamped), times are
 * RFC 3339 UTC strings.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
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

/* ------------------------------------------------------------------------------------------ */
/* Direct writer for flows and sessions                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Room for @p n more bytes; on failure the writer is spent (oom, every later write a no-op). */
static bool jw_room(api_jw *w, size_t n)
{
    if (w->oom)
        return false;
    if (w->cap - w->len >= n)
        return true;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap - w->len < n) {
        if (cap > SIZE_MAX / 2)
            goto fail;
        cap *= 2;
    }
    char *p = realloc(w->buf, cap);
    if (p == NULL)
        goto fail;
    w->buf = p;
    w->cap = cap;
    return true;
fail:
    w->oom = true;
    return false;
}

void api_jw_raw(api_jw *w, const char *text, size_t n)
{
    if (jw_room(w, n)) {
        memcpy(w->buf + w->len, text, n);
        w->len += n;
    }
}

static void jw_lit(api_jw *w, const char *text)
{
    api_jw_raw(w, text, strlen(text));
}

/* Length of the well-formed UTF-8 sequence at @p p (RFC 3629 §4), 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* bounds of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

/* A JSON string (RFC 8259 §7): '"' and '\\' and control characters escaped, well-formed UTF-8
 * copied, any other byte written as U+FFFD (what a client sent need not be UTF-8). */
static void jw_str(api_jw *w, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t n = strlen(text), run = 0;
    api_jw_raw(w, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++, run++;
            continue;
        }
        api_jw_raw(w, (const char *)p + i - run, run);
        run = 0;
        size_t seq = c >= 0x80 ? utf8_seq(p + i, n - i) : 0;
        if (seq > 0) {
            api_jw_raw(w, (const char *)p + i, seq);
            i += seq;
            continue;
        }
        char esc[8];
        if (c == '"' || c == '\\')
            esc[0] = '\\', esc[1] = (char)c, esc[2] = '\0';
        else if (c == '\n')
            memcpy(esc, "\\n", 3);
        else if (c == '\r')
            memcpy(esc, "\\r", 3);
        else if (c == '\t')
            memcpy(esc, "\\t", 3);
        else if (c < 0x20)
            snprintf(esc, sizeof esc, "\\u%04X", c);
        else
            memcpy(esc, "\\uFFFD", 7);
        jw_lit(w, esc);
        i++;
    }
    api_jw_raw(w, (const char *)p + n - run, run);
    api_jw_raw(w, "\"", 1);
}

/* A byte count as a JSON integer, clamped at INT64_MAX like the jansson builders. */
static void jw_u64(api_jw *w, uint64_t v)
{
    char num[24];
    size_t at = sizeof num;
    if (v > (uint64_t)INT64_MAX)
        v = (uint64_t)INT64_MAX;
    do
        num[--at] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    api_jw_raw(w, num + at, sizeof num - at);
}

static void jw_time(api_jw *w, uint64_t ms)
{
    char buf[40];
    if (ms == 0) {
        jw_lit(w, "null");
        return;
    }
    api_time_rfc3339(ms, buf, sizeof buf);
    jw_str(w, buf);
}

/* jw_key_*: a member, its separator and key given as one literal (",\"up\":") */
static void jw_key_str(api_jw *w, const char *key, const char *text)
{
    jw_lit(w, key);
    jw_str(w, text);
}

static void jw_key_u64(api_jw *w, const char *key, uint64_t v)
{
    jw_lit(w, key);
    jw_u64(w, v);
}

/* the members a flow and a session end with: start, up, down and the closing brace */
static void jw_tail(api_jw *w, uint64_t started_ms, uint64_t up, uint64_t down)
{
    jw_lit(w, ",\"start\":");
    jw_time(w, started_ms);
    jw_key_u64(w, ",\"up\":", up);
    jw_key_u64(w, ",\"down\":", down);
    jw_lit(w, "}");
}

void api_jw_flow(api_jw *w, const sv_flow_info *f)
{
    jw_key_u64(w, "{\"id\":", f->id);
    jw_key_u64(w, ",\"session\":", f->session);
    /* katana lowers each node to one inbound tagged with the node's tag (agent/lower.h) */
    jw_key_str(w, ",\"node\":", f->inbound);
    jw_key_str(w, ",\"inbound\":", f->inbound);
    jw_lit(w, ",\"user\":");
    if (f->has_user) {
        jw_key_u64(w, "{\"uid\":", f->user);
        jw_key_str(w, ",\"label\":", f->user_label);
        jw_lit(w, "}");
    } else {
        jw_lit(w, "null");
    }
    jw_key_str(w, ",\"source\":", f->source);
    jw_key_str(w, ",\"destination\":", f->destination);
    if (f->sniffed[0])
        jw_key_str(w, ",\"sniffed_host\":", f->sniffed);
    else
        jw_lit(w, ",\"sniffed_host\":null");
    jw_lit(w, f->network == SV_NET_UDP ? ",\"network\":\"udp\"" : ",\"network\":\"tcp\"");
    jw_key_str(w, ",\"outbound\":", f->outbound);
    if (f->rule < 0)
        jw_lit(w, ",\"rule\":null");
    else
        jw_key_u64(w, ",\"rule\":", (uint64_t)f->rule);
    jw_key_u64(w, ",\"epoch\":", f->epoch);
    jw_lit(w, f->killed ? ",\"killed\":true" : ",\"killed\":false");
    jw_tail(w, f->started_ms, f->up, f->down);
}

void api_jw_session(api_jw *w, const sv_session_info *s)
{
    jw_key_u64(w, "{\"id\":", s->id);
    jw_key_str(w, ",\"node\":", s->inbound);
    jw_key_str(w, ",\"inbound\":", s->inbound);
    jw_key_str(w, ",\"source\":", s->source);
    if (s->has_user)
        jw_key_u64(w, ",\"user\":", s->user);
    else
        jw_lit(w, ",\"user\":null");
    jw_lit(w, s->udp ? ",\"network\":\"udp\"" : ",\"network\":\"tcp\"");
    jw_tail(w, s->started_ms, s->up, s->down);
}

char *api_jw_take(api_jw *w, size_t *len)
{
    char *out = NULL;
    *len = 0;
    if (jw_room(w, 1)) {
        w->buf[w->len] = '\0';
        out = w->buf;
        *len = w->len;
    } else {
        free(w->buf);
    }
    memset(w, 0, sizeof *w);
    return out;
}

static json_t *tag_stats(const sv_tag_stats *t, const char *key)
{
    json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:o}", "up", u64(t->up), "down", u64(t->down),
                          "up_rate", u64(t->up_rate), "down_rate", u64(t->down_rate),
                          "flows", u64(t->flows));
    if (o != NULL && key != NULL) {
        uint64_t id;
        bool user = strcmp(key, "user") == 0;
        json_t *v = user && api_parse_u64(t->tag, &id) == 0 ? u64(id) : json_string(t->tag);
        if (json_object_set_new(o, key, v) != 0 ||
            (user && json_object_set_new(o, "label", json_string(t->label)) != 0)) {
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
    return json_pack("{s:s, s:{s:s, s:s}, s:o, s:o, s:b, s:o, s:o, s:o, s:o, s:o,"
                     " s:{s:o, s:o, s:o, s:o}, s:o}",
                     "tag", n->tag, "panel", "type", n->panel_type, "url", n->panel_url,
                     "last_pull", result(n->last_pull_ms, n->last_pull_status, n->last_pull_error),
                     "last_push", result(n->last_push_ms, n->last_push_status, n->last_push_error),
                     "applied", n->applied, "applied_at", api_json_time(n->applied_ms),
                     "epoch", u64(n->epoch), "users", u64(n->users),
                     "sessions", u64(sessions < 0 ? 0 : (uint64_t)sessions),
                     "flows", u64(flows < 0 ? 0 : (uint64_t)flows),
                     "outbox", "pending_bytes", u64(n->outbox_pending_bytes),
                     "oldest", api_json_time(n->outbox_oldest_ms),
                     "dropped_users", u64(n->usage_dropped_users),
                     "dropped_bytes", u64(n->usage_dropped_bytes),
                     "certificate", n->cert_not_after == 0 ? json_null()
                         : json_pack("{s:o}", "not_after",
                                     api_json_time((uint64_t)n->cert_not_after * 1000)));
}
