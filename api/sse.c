/*
 * Server-Sent Events streams: GET /v1/connections/events (opened / closed / lagged
 * from the supervisor's event ring) and GET /v1/traffic (one `traffic` event per sampler tick).
 *
 * No stream holds a thread. libmicrohttpd's single epoll thread calls the reader
 * whenever the socket can take more; a reader with nothing to send suspends its connection
 * (MHD_suspend_connection) and returns 0 at once. The accept thread calls api_sse_pump() every
 * STEP_MS while streams live and resumes those that have something new: an event past their
 * cursor, a tick past their last one, or a keepalive comment due. A slow client is never waited
 * for by anyone else: while its socket is full its reader is not called, its ring cursor falls
 * behind and it gets `lagged` {"missed": n} instead of the lost events (ticks likewise).
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

#define KEEPALIVE_MS ((uint64_t)API_SSE_KEEPALIVE_S * 1000u)

enum stream_kind { STREAM_EVENTS = 1, STREAM_TRAFFIC };

typedef struct sse_stream {
    sv_list link;       /* in srv->stream_list */
    api_server *srv;
    struct MHD_Connection *conn;
    enum stream_kind kind;
    bool suspended;     /* under srv->stream_lock */
    uint64_t cursor;    /* events: seq of the last event read */
    uint64_t last_tick; /* traffic: last tick sent */
    uint64_t last_write_ms; /* when bytes were last handed to libmicrohttpd */
    char *buf;          /* pending bytes of the current event */
    size_t len, off;
    bool started;
} sse_stream;

/* Queue "event: NAME\ndata: DATA\n\n" (consumes @p data, which may be NULL: -1). */
static int queue_data(sse_stream *st, const char *name, char *data)
{
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

/* Queue "event: NAME\ndata: JSON\n\n" (consumes v). @return 0 or -1. */
static int queue_event(sse_stream *st, const char *name, json_t *v)
{
    char *data = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return queue_data(st, name, data);
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
    api_jw w = {0};
    size_t len;
    api_jw_flow(&w, &ev.flow);
    return queue_data(st, name, api_jw_take(&w, &len)) == 0 ? 1 : -1;
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

/* The stream's next bytes into its buffer. @return 1 queued, 0 nothing to send, -1 error. */
static int produce(sse_stream *st, uint64_t now_ms)
{
    if (!st->started) {
        st->started = true; /* a first comment, so the client sees the stream is open */
        return queue_text(st, ": katana stream\n\n") == 0 ? 1 : -1;
    }
    int got = st->kind == STREAM_EVENTS ? next_flow_event(st) : next_tick(st);
    if (got == 0 && now_ms - st->last_write_ms >= KEEPALIVE_MS)
        got = queue_text(st, ": keepalive\n\n") == 0 ? 1 : -1;
    return got;
}

/*
 * libmicrohttpd's reader, on its own thread: hand over pending bytes, or produce the next ones,
 * or suspend the connection until api_sse_pump() resumes it. Never waits.
 */
static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    sse_stream *st = cls;
    api_server *s = st->srv;
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
            st->last_write_ms = s->now_ms();
            return (ssize_t)n;
        }
        if (atomic_load(&s->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        int got = produce(st, s->now_ms());
        if (got < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (got > 0)
            continue;
        /* Nothing to send. Suspend under the lock that api_sse_stop() takes to set stopping,
         * so that no stream is left suspended once the server stops. */
        pthread_mutex_lock(&s->stream_lock);
        bool stopping = atomic_load(&s->stopping);
        if (!stopping) {
            st->suspended = true;
            MHD_suspend_connection(st->conn);
        }
        pthread_mutex_unlock(&s->stream_lock);
        return stopping ? MHD_CONTENT_READER_END_OF_STREAM : 0;
    }
}

/* Whether a suspended stream has something to send at @p now_ms (under stream_lock). */
static bool has_news(const sse_stream *st, uint64_t head, uint64_t tick, uint64_t now_ms)
{
    if (now_ms - st->last_write_ms >= KEEPALIVE_MS)
        return true;
    return st->kind == STREAM_EVENTS ? st->cursor != head : tick > st->last_tick;
}

void api_sse_pump(api_server *s, uint64_t now_ms)
{
    struct MHD_Connection *wake[API_SSE_STREAMS_MAX];
    size_t n = 0;
    uint64_t head = sv_events_head(s->sv), tick = 0;
    sv_stats stats;
    if (atomic_load(&s->traffic_streams) > 0 && sv_stats_get(s->sv, &stats) == 0) {
        tick = stats.tick;
        sv_stats_free(&stats);
    }
    pthread_mutex_lock(&s->stream_lock);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &s->stream_list) {
        sse_stream *st = sv_container_of(pos, sse_stream, link);
        if (st->suspended && n < API_SSE_STREAMS_MAX && has_news(st, head, tick, now_ms)) {
            st->suspended = false;
            wake[n++] = st->conn;
        }
    }
    pthread_mutex_unlock(&s->stream_lock);
    /* Outside the lock: a suspended connection is not freed until it is resumed. */
    for (size_t i = 0; i < n; i++)
        MHD_resume_connection(wake[i]);
}

void api_sse_stop(api_server *s)
{
    struct MHD_Connection *wake[API_SSE_STREAMS_MAX];
    size_t n = 0;
    pthread_mutex_lock(&s->stream_lock);
    atomic_store(&s->stopping, true);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &s->stream_list) {
        sse_stream *st = sv_container_of(pos, sse_stream, link);
        if (st->suspended && n < API_SSE_STREAMS_MAX) {
            st->suspended = false;
            wake[n++] = st->conn;
        }
    }
    pthread_mutex_unlock(&s->stream_lock);
    for (size_t i = 0; i < n; i++)
        MHD_resume_connection(wake[i]);
}

static void sse_free(void *cls)
{
    sse_stream *st = cls;
    api_server *s = st->srv;
    pthread_mutex_lock(&s->stream_lock);
    sv_list_unlink(&st->link);
    pthread_mutex_unlock(&s->stream_lock);
    atomic_fetch_sub(&s->streams, 1);
    if (st->kind == STREAM_TRAFFIC)
        atomic_fetch_sub(&s->traffic_streams, 1);
    free(st->buf);
    free(st);
}

static struct MHD_Response *sse_new(api_server *s, struct MHD_Connection *c,
                                    enum stream_kind kind)
{
    if (c == NULL)
        return NULL;
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
    st->conn = c;
    st->kind = kind;
    st->last_write_ms = s->now_ms();
    if (kind == STREAM_EVENTS) {
        st->cursor = sv_events_head(s->sv); /* from now on, none missed */
    } else {
        sv_stats now;
        if (sv_stats_get(s->sv, &now) == 0) {
            st->last_tick = now.tick;
            sv_stats_free(&now);
        }
    }
    if (kind == STREAM_TRAFFIC)
        atomic_fetch_add(&s->traffic_streams, 1);
    pthread_mutex_lock(&s->stream_lock);
    sv_list_insert_tail(&s->stream_list, &st->link);
    pthread_mutex_unlock(&s->stream_lock);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read,
                                                               st, sse_free);
    if (r == NULL) {
        sse_free(st);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    s->wake(s);
    return r;
}

struct MHD_Response *api_sse_events(api_server *s, struct MHD_Connection *c)
{
    return sse_new(s, c, STREAM_EVENTS);
}

struct MHD_Response *api_sse_traffic(api_server *s, struct MHD_Connection *c)
{
    return sse_new(s, c, STREAM_TRAFFIC);
}
