/*
 * Server-Sent Events streams (issue 4): GET /v1/connections/events (opened / closed / lagged
 * from the supervisor's event ring) and GET /v1/traffic (one `traffic` event per sampler tick).
 *
 * libmicrohttpd runs one thread per connection, so a stream's reader callback may wait (in
 * 50 ms steps) without touching any other request or the data plane. A slow client is never
 * waited for by anyone else: while its socket is full the callback is not called, its ring
 * cursor falls behind and it gets `lagged` {"missed": n} instead of the lost events (ticks
 * likewise). Streams end within one step once the server stops.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"

#define STEP_MS 50
#define KEEPALIVE_MS 10000

enum stream_kind { STREAM_EVENTS = 1, STREAM_TRAFFIC };

typedef struct sse_stream {
    api_server *srv;
    enum stream_kind kind;
    uint64_t cursor;    /* events: seq of the last event read */
    uint64_t last_tick; /* traffic: last tick sent */
    char *buf;          /* pending bytes of the current event */
    size_t len, off;
    bool started;
} sse_stream;

static void nap(void)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = STEP_MS * 1000000L};
    nanosleep(&ts, NULL);
}

/* Queue "event: NAME\ndata: JSON\n\n" (consumes v). @return 0 or -1. */
static int queue_event(sse_stream *st, const char *name, json_t *v)
{
    char *data = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (data == NULL)
        return -1;
    size_t need = strlen(name) + strlen(data) + 32;
    free(st->buf);
    st->buf = malloc(need);
    if (st->buf == NULL) {
        free(data);
        return -1;
    }
    st->len = (size_t)snprintf(st->buf, need, "event: %s\ndata: %s\n\n", name, data);
    st->off = 0;
    free(data);
    return 0;
}

static int queue_text(sse_stream *st, const char *text)
{
    free(st->buf);
    st->buf = strdup(text);
    st->len = st->buf != NULL ? strlen(text) : 0;
    st->off = 0;
    return st->buf != NULL ? 0 : -1;
}

/* Next event of the ring into the buffer. @return 1 queued, 0 nothing new, -1 error. */
static int next_flow_event(sse_stream *st)
{
    sv_event ev;
    if (sv_events_next(st->srv->sv, &st->cursor, &ev) != 1)
        return 0;
    if (ev.kind == SV_EVENT_LAGGED)
        return queue_event(st, "lagged", json_pack("{s:I}", "missed", (json_int_t)ev.missed))
               == 0 ? 1 : -1;
    const char *name = ev.kind == SV_EVENT_OPENED ? "opened" : "closed";
    return queue_event(st, name, api_json_flow(&ev.flow)) == 0 ? 1 : -1;
}

/* The latest tick when it is newer than the last one sent (lagged first if ticks were lost). */
static int next_tick(sse_stream *st)
{
    sv_stats stats;
    if (sv_stats_get(st->srv->sv, &stats) != 0)
        return -1;
    int rc = 0;
    if (stats.tick > st->last_tick) {
        if (st->last_tick + 1 < stats.tick && st->buf == NULL) {
            /* the client was too slow for these ticks: say so, send this tick next call */
            rc = queue_event(st, "lagged", json_pack("{s:I}", "missed",
                             (json_int_t)(stats.tick - st->last_tick - 1))) == 0 ? 1 : -1;
            st->last_tick = stats.tick - 1;
        } else {
            rc = queue_event(st, "traffic", api_json_stats(&stats)) == 0 ? 1 : -1;
            st->last_tick = stats.tick;
        }
    }
    sv_stats_free(&stats);
    return rc;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    sse_stream *st = cls;
    unsigned waited = 0;
    for (;;) {
        if (st->off < st->len) {
            size_t n = st->len - st->off < max ? st->len - st->off : max;
            memcpy(out, st->buf + st->off, n);
            st->off += n;
            if (st->off == st->len) {
                free(st->buf);
                st->buf = NULL;
                st->len = st->off = 0;
            }
            return (ssize_t)n;
        }
        if (atomic_load(&st->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        int got;
        if (!st->started) {
            st->started = true; /* a first comment, so the client sees the stream is open */
            got = queue_text(st, ": katana stream\n\n") == 0 ? 1 : -1;
        } else {
            got = st->kind == STREAM_EVENTS ? next_flow_event(st) : next_tick(st);
        }
        if (got < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (got > 0)
            continue;
        if (waited >= KEEPALIVE_MS) {
            if (queue_text(st, ": keepalive\n\n") != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        nap();
        waited += STEP_MS;
    }
}

static void sse_free(void *cls)
{
    sse_stream *st = cls;
    atomic_fetch_sub(&st->srv->streams, 1);
    free(st->buf);
    free(st);
}

static struct MHD_Response *sse_new(api_server *s, enum stream_kind kind)
{
    if (atomic_fetch_add(&s->streams, 1) >= API_SSE_STREAMS_MAX) {
        atomic_fetch_sub(&s->streams, 1);
        return NULL;
    }
    sse_stream *st = calloc(1, sizeof *st);
    if (st == NULL) {
        atomic_fetch_sub(&s->streams, 1);
        return NULL;
    }
    st->srv = s;
    st->kind = kind;
    if (kind == STREAM_EVENTS) {
        st->cursor = sv_events_head(s->sv); /* from now on, none missed */
    } else {
        sv_stats now;
        if (sv_stats_get(s->sv, &now) == 0) {
            st->last_tick = now.tick;
            sv_stats_free(&now);
        }
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read,
                                                               st, sse_free);
    if (r == NULL) {
        sse_free(st);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return r;
}

struct MHD_Response *api_sse_events(api_server *s)
{
    return sse_new(s, STREAM_EVENTS);
}

struct MHD_Response *api_sse_traffic(api_server *s)
{
    return sse_new(s, STREAM_TRAFFIC);
}
