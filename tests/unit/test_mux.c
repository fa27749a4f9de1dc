/*
 * Unit tests: Mux.Cool codec (supervisor/proto/mux.c, PROTOCOLS.md §7). Known answers come from
 * tests/unit/vectors/mux-cool-vless.json, captured from the v2ray 4.34 client (mux enabled)
 * over VLESS; the codec gets the body after the 19-byte VLESS request header. A runtime-like
 * driver keeps the unconsumed carry, as proto.h's contract asks.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "supervisor/proto/mux.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define VLESS_HEADER 19 /* version, UUID, addons length 0, command 3 */

static json_t *g_vec;

static int setup(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/mux-cool-vless.json",
             top ? top : TOP_SRCDIR);
    json_error_t jerr;
    g_vec = json_load_file(path, 0, &jerr);
    if (g_vec == NULL)
        fprintf(stderr, "%s: %s\n", path, jerr.text);
    return g_vec != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_vec);
    return 0;
}

static size_t jhex(const char *obj, const char *key, uint8_t *out, size_t cap)
{
    const char *s = json_string_value(json_object_get(json_object_get(g_vec, obj), key));
    assert_non_null(s);
    size_t n = strlen(s) / 2;
    assert_true(n <= cap && strlen(s) % 2 == 0);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static ssize_t feed(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    memset(fx, 0xa5, sizeof *fx);
    fx->n = 0;
    ssize_t r = sv_mux_feed(m, p, n, fx);
    assert_true(fx->n < SV_EFFECTS_MAX); /* a slot stays free for the caller's error */
    return r;
}

static void assert_dest(const sv_dest *d, const char *text, enum sv_network net)
{
    char got[300];
    sv_dest_format(d, got, sizeof got);
    assert_string_equal(got, text);
    assert_int_equal(d->network, net);
}

/* ---------- transcript of a run, the same however the input is cut ---------- */

typedef struct transcript {
    char *b;
    size_t len, cap;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->b = realloc(t->b, t->cap);
        assert_non_null(t->b);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
    t->b[t->len] = '\0';
}

static void tr_printf(transcript *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tr_printf(transcript *t, const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    assert_true(k > 0 && (size_t)k < sizeof line);
    tr_put(t, line, (size_t)k);
}

/*
 * Deliver @p wire in pieces of @p piece bytes through a carry buffer and log the effects: events
 * in @p ev (TCP data merged per session run, so cuts do not show), datagrams whole.
 * @return the final result (negative error, or 0).
 */
static int drive(const uint8_t *wire, size_t n, size_t piece, transcript *ev)
{
    sv_mux *m = sv_mux_new();
    assert_non_null(m);
    uint8_t *buf = malloc(n + SV_MUX_CARRY_MAX + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    int rc = 0;
    long tcp_stream = -1;
    for (;;) {
        sv_effects fx;
        ssize_t r = feed(m, buf, have, &fx);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            char d[300];
            if (e->kind != SV_FX_TO_OUTBOUND && tcp_stream >= 0) {
                tr_put(ev, "\n", 1);
                tcp_stream = -1;
            }
            switch (e->kind) {
            case SV_FX_OPEN:
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "open %u %s net %d", e->stream, d, (int)e->dest.network);
                for (size_t g = 0; g < sizeof e->global_id; g++) /* XUDP GlobalID, if any */
                    if (e->global_id[g] != 0) {
                        tr_printf(ev, " gid ");
                        for (size_t h = 0; h < sizeof e->global_id; h++)
                            tr_printf(ev, "%02x", e->global_id[h]);
                        break;
                    }
                tr_printf(ev, "\n");
                break;
            case SV_FX_TO_OUTBOUND:
                assert_true(e->len > 0 && e->data >= buf && e->data + e->len <= buf + have);
                if (tcp_stream != (long)e->stream) {
                    if (tcp_stream >= 0)
                        tr_put(ev, "\n", 1);
                    tr_printf(ev, "tcp %u:", e->stream);
                    tcp_stream = e->stream;
                }
                tr_put(ev, e->data, e->len);
                break;
            case SV_FX_DATAGRAM:
                assert_true(e->data >= buf && e->data + e->len <= buf + have);
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "dgram %u %s len %zu:", e->stream, d, e->len);
                tr_put(ev, e->data, e->len);
                tr_put(ev, "\n", 1);
                break;
            case SV_FX_CLOSE:
                tr_printf(ev, "close %u\n", e->stream);
                break;
            case SV_FX_TO_CLIENT:
                assert_int_equal(e->len, SV_MUX_END_LEN);
                tr_printf(ev, "answer %02x%02x %02x%02x %02x %02x\n", e->data[0], e->data[1],
                          e->data[2], e->data[3], e->data[4], e->data[5]);
                break;
            default:
                fail_msg("unexpected effect %d", (int)e->kind);
            }
        }
        if (r < 0) {
            rc = (int)r;
            break;
        }
        assert_true((size_t)r <= have);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        assert_true(have <= SV_MUX_CARRY_MAX);
        if (in == n)
            break;
        size_t k = piece < n - in ? piece : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    if (tcp_stream >= 0)
        tr_put(ev, "\n", 1);
    if (rc == 0)
        tr_printf(ev, "rc 0 left %zu\n", have);
    else
        tr_printf(ev, "rc %d\n", rc);
    free(buf);
    sv_mux_free(m);
    return rc;
}

/* Drive @p wire whole and in pieces of 1, 3 and 100 bytes; the transcripts must agree. */
static int drive_all_cuts(const uint8_t *wire, size_t n, transcript *ev)
{
    static const size_t pieces[] = {1, 3, 100};
    int rc = drive(wire, n, n + 1, ev);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        transcript ev2 = {0};
        assert_int_equal(drive(wire, n, pieces[i], &ev2), rc);
        if (ev2.len != ev->len || memcmp(ev->b, ev2.b, ev->len) != 0)
            fail_msg("cut %zu differs:\n%.300s\n---\n%.300s", pieces[i], ev->b, ev2.b);
        free(ev2.b);
    }
    return rc;
}

/* ---------- frames by hand ---------- */

typedef struct wire {
    uint8_t b[200000];
    size_t n;
} wire;

static void put(wire *w, const void *p, size_t n)
{
    if (n == 0)
        return;
    assert_true(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

/* A frame: session @p id, @p status, @p option, extra metadata, then @p dlen data bytes of
 * @p fill (when option has 0x01). */
static void frame(wire *w, uint16_t id, uint8_t status, uint8_t option, const void *extra,
                  size_t elen, size_t dlen, uint8_t fill)
{
    size_t ml = 4 + elen;
    uint8_t h[8] = {(uint8_t)(ml >> 8), (uint8_t)ml, (uint8_t)(id >> 8), (uint8_t)id, status,
                    option};
    put(w, h, 6);
    put(w, extra, elen);
    if (option & 1) {
        uint8_t l[2] = {(uint8_t)(dlen >> 8), (uint8_t)dlen};
        put(w, l, 2);
        for (size_t i = 0; i < dlen; i++)
            put(w, &fill, 1);
    }
}

static const uint8_t k_new_tcp[] = {0x01, 0x00, 0x50, 0x02, 0x04, 'a', '.', 't', 'e'};
static const uint8_t k_new_udp[] = {0x02, 0x14, 0xe9, 0x01, 127, 0, 0, 1};

/* ---------- known answers ---------- */

static void vectors__tcp_and_udp_sessions(void **state)
{
    (void)state;
    uint8_t p[512], want[128], out[128];
    size_t n = jhex("case", "client_to_server_hex", p, sizeof p);
    sv_mux *m = sv_mux_new();
    sv_effects fx;
    assert_int_equal(feed(m, p + VLESS_HEADER, n - VLESS_HEADER, &fx), n - VLESS_HEADER);
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[0].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[0].stream, 1);
    assert_dest(&fx.v[0].dest, "example.test:80", SV_NET_TCP);
    assert_int_equal(fx.v[1].kind, SV_FX_TO_OUTBOUND);
    assert_int_equal(fx.v[1].stream, 1);
    assert_int_equal(fx.v[1].len, 21);
    assert_memory_equal(fx.v[1].data, "GET /mux HTTP/1.1\r\n\r\n", 21);
    sv_mux_free(m);

    /* The reply the real client accepted: VLESS 00 00, Keep with data, End. */
    size_t wn = jhex("case", "server_to_client_hex", want, sizeof want);
    const char *pong = "pong for vless-mux-tcp";
    ssize_t k = sv_mux_frame_data(1, (const uint8_t *)pong, strlen(pong), out, sizeof out);
    assert_int_equal(k, 8 + strlen(pong));
    assert_memory_equal(out, want + 2, (size_t)k);
    assert_int_equal(sv_mux_frame_end(1, false, out), SV_MUX_END_LEN);
    assert_int_equal(wn, 2 + (size_t)k + SV_MUX_END_LEN);
    assert_memory_equal(out, want + 2 + k, SV_MUX_END_LEN);

    n = jhex("udp_case", "client_to_server_hex", p, sizeof p);
    m = sv_mux_new();
    assert_int_equal(feed(m, p + VLESS_HEADER, n - VLESS_HEADER, &fx), n - VLESS_HEADER);
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[0].kind, SV_FX_OPEN);
    assert_dest(&fx.v[0].dest, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[1].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[1].stream, 1);
    assert_dest(&fx.v[1].dest, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[1].len, 12);
    assert_memory_equal(fx.v[1].data, "mux udp ping", 12);
    sv_mux_free(m);
    wn = jhex("udp_case", "server_to_client_hex", want, sizeof want);
    k = sv_mux_frame_data(1, (const uint8_t *)"mux udp pong", 12, out, sizeof out);
    assert_int_equal(wn, 2 + (size_t)k);
    assert_memory_equal(out, want + 2, (size_t)k);
}

static void frame__blocks_bounds_and_end(void **state)
{
    (void)state;
    static uint8_t in[70000], out[70100];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)i;
    assert_int_equal(sv_mux_frame_max(0), 8);
    assert_int_equal(sv_mux_frame_max(65535), 65535 + 8);
    assert_int_equal(sv_mux_frame_max(65536), 65536 + 16);
    assert_int_equal(sv_mux_frame_data(7, in, 65536, out, 65536 + 15), -EMSGSIZE);
    assert_int_equal(sv_mux_frame_data(7, in, 65536, out, sizeof out), 65536 + 16);
    static const uint8_t h1[] = {0, 4, 0, 7, 2, 1, 0xff, 0xff};
    static const uint8_t h2[] = {0, 4, 0, 7, 2, 1, 0, 1};
    assert_memory_equal(out, h1, 8);
    assert_memory_equal(out + 8, in, 65535);
    assert_memory_equal(out + 8 + 65535, h2, 8);
    assert_int_equal(out[8 + 65535 + 8], in[65535]);
    uint8_t end[SV_MUX_END_LEN];
    static const uint8_t e1[] = {0, 4, 0x12, 0x34, 3, 2};
    sv_mux_frame_end(0x1234, true, end);
    assert_memory_equal(end, e1, sizeof e1);
}

/* ---------- whole vs piecewise, every frame kind ---------- */

static void cuts__sessions_in_one_stream(void **state)
{
    (void)state;
    static wire w;
    w.n = 0;
    frame(&w, 1, SV_MUX_NEW, 1, k_new_tcp, sizeof k_new_tcp, 5, 'a');  /* New TCP with data */
    frame(&w, 2, SV_MUX_NEW, 1, k_new_udp, sizeof k_new_udp, 3, 'u');  /* New UDP with data */
    frame(&w, 1, SV_MUX_KEEP, 1, NULL, 0, 65535, 'b');                 /* the largest block */
    frame(&w, 2, SV_MUX_KEEP, 1, NULL, 0, 0, 0);                       /* an empty datagram */
    frame(&w, 2, SV_MUX_KEEP, 1, NULL, 0, SV_MUX_UDP_PAYLOAD_MAX + 1, 'x'); /* dropped */
    frame(&w, 2, SV_MUX_KEEP, 1, NULL, 0, SV_MUX_UDP_PAYLOAD_MAX, 'v');     /* the largest */
    frame(&w, 9, SV_MUX_KEEP, 1, NULL, 0, 4, 'z');                     /* unknown: End back */
    frame(&w, 0, SV_MUX_KEEPALIVE, 1, NULL, 0, 6, 'k');                /* dropped */
    frame(&w, 1, SV_MUX_KEEP, 1, NULL, 0, 0, 0);                       /* nothing */
    frame(&w, 1, SV_MUX_KEEP, 0, NULL, 0, 0, 0);                       /* nothing */
    frame(&w, 1, SV_MUX_END, 1, NULL, 0, 2, 'e');                      /* close, data dropped */
    frame(&w, 1, SV_MUX_KEEP, 1, NULL, 0, 1, 'c');                     /* closed: End back */
    frame(&w, 1, SV_MUX_NEW, 0, k_new_tcp, sizeof k_new_tcp, 0, 0);    /* the id again */
    frame(&w, 3, SV_MUX_END, 2, NULL, 0, 0, 0);                        /* unknown End: nothing */
    uint8_t part[] = {0, 4, 0, 1, 2, 1, 0, 9, 'p', 'q'};               /* 2 of 9 data bytes */
    put(&w, part, sizeof part);

    transcript ev = {0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), 0);
    static char want[200000];
    char bs[65536], vs[SV_MUX_UDP_PAYLOAD_MAX + 1];
    memset(bs, 'b', 65535);
    bs[65535] = '\0';
    memset(vs, 'v', SV_MUX_UDP_PAYLOAD_MAX);
    vs[SV_MUX_UDP_PAYLOAD_MAX] = '\0';
    int k = snprintf(want, sizeof want,
                     "open 1 a.te:80 net 1\ntcp 1:aaaaa\n"
                     "open 2 127.0.0.1:5353 net 2\ndgram 2 127.0.0.1:5353 len 3:uuu\n"
                     "tcp 1:%s\n"
                     "dgram 2 127.0.0.1:5353 len 0:\n"
                     "dgram 2 127.0.0.1:5353 len %d:%s\n"
                     "answer 0004 0009 03 00\n"
                     "close 1\n"
                     "answer 0004 0001 03 00\n"
                     "open 1 a.te:80 net 1\n"
                     "tcp 1:pq\n"
                     "rc 0 left 0\n",
                     bs, SV_MUX_UDP_PAYLOAD_MAX, vs);
    assert_true(k > 0 && (size_t)k < sizeof want);
    assert_string_equal(ev.b, want);
    free(ev.b);
}

/*
 * XUDP as Xray's client sends it (PROTOCOLS-2.md §5.1, §5.2): session 0, a New UDP frame with the
 * destination, the 8-byte GlobalID and the first datagram, then Keep frames with network 2 and
 * each datagram's own destination (sing-box's New has no GlobalID). Every datagram goes where
 * its frame says, whole and however the input is cut; a Keep frame without an address goes to
 * the session's destination; a bad address in a Keep frame ends the connection.
 */
static void xudp__per_datagram_destinations(void **state)
{
    (void)state;
    static wire w;
    w.n = 0;
    static const uint8_t new_gid[] = {0x02, 0x14, 0xe9, 0x01, 127, 0, 0, 1,
                                      0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77};
    static const uint8_t keep_v4[] = {0x02, 0x00, 0x35, 0x01, 127, 0, 0, 2};
    static const uint8_t keep_name[] = {0x02, 0x01, 0xbb, 0x02, 0x06, 'q', '.', 't', 'e',
                                        's', 't'};
    static const uint8_t keep_v6[] = {0x02, 0x1f, 0x90, 0x03, 0, 0, 0, 0, 0, 0, 0,
                                      0, 0, 0, 0, 0, 0, 0, 0, 1};
    frame(&w, 0, SV_MUX_NEW, 1, new_gid, sizeof new_gid, 3, 'a');
    frame(&w, 0, SV_MUX_KEEP, 1, keep_v4, sizeof keep_v4, 2, 'b');
    frame(&w, 0, SV_MUX_KEEP, 1, keep_name, sizeof keep_name, 1, 'c');
    frame(&w, 0, SV_MUX_KEEP, 1, keep_v6, sizeof keep_v6, 4, 'd');
    frame(&w, 0, SV_MUX_KEEP, 1, NULL, 0, 1, 'e');          /* no address: the session's */
    frame(&w, 7, SV_MUX_NEW, 1, k_new_udp, sizeof k_new_udp, 1, 'f'); /* sing-box: no id */
    frame(&w, 7, SV_MUX_KEEP, 1, keep_v4, sizeof keep_v4, 1, 'g');
    frame(&w, 0, SV_MUX_END, 0, NULL, 0, 0, 0);
    transcript ev = {0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), 0);
    assert_string_equal(ev.b, "open 0 127.0.0.1:5353 net 2 gid 5a11223344556677\n"
                              "dgram 0 127.0.0.1:5353 len 3:aaa\n"
                              "dgram 0 127.0.0.2:53 len 2:bb\n"
                              "dgram 0 q.test:443 len 1:c\n"
                              "dgram 0 [::1]:8080 len 4:dddd\n"
                              "dgram 0 127.0.0.1:5353 len 1:e\n"
                              "open 7 127.0.0.1:5353 net 2\ndgram 7 127.0.0.1:5353 len 1:f\n"
                              "dgram 7 127.0.0.2:53 len 1:g\n"
                              "close 0\nrc 0 left 0\n");
    free(ev.b);

    /* a Keep frame with network 2 and a bad address type closes the connection */
    w.n = 0;
    static const uint8_t keep_bad[] = {0x02, 0x00, 0x35, 0x09, 1, 2, 3, 4};
    frame(&w, 0, SV_MUX_NEW, 1, new_gid, sizeof new_gid, 1, 'a');
    frame(&w, 0, SV_MUX_KEEP, 1, keep_bad, sizeof keep_bad, 1, 'b');
    ev = (transcript){0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), -EPROTO);
    free(ev.b);

    /* issue 10: the GlobalID is read only from a New UDP frame with data (§5.1): not from one
     * without the data bit, nor from a TCP New; fewer than 8 trailing bytes are no GlobalID */
    w.n = 0;
    static const uint8_t new_tcp_gid[] = {0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1,
                                          1, 2, 3, 4, 5, 6, 7, 8};
    static const uint8_t new_short[] = {0x02, 0x14, 0xe9, 0x01, 127, 0, 0, 1, 9, 9, 9};
    frame(&w, 1, SV_MUX_NEW, 0, new_gid, sizeof new_gid, 0, 0);
    frame(&w, 2, SV_MUX_NEW, 1, new_tcp_gid, sizeof new_tcp_gid, 1, 't');
    frame(&w, 3, SV_MUX_NEW, 1, new_short, sizeof new_short, 1, 's');
    ev = (transcript){0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), 0);
    assert_string_equal(ev.b, "open 1 127.0.0.1:5353 net 2\n"
                              "open 2 127.0.0.1:80 net 1\ntcp 2:t\n"
                              "open 3 127.0.0.1:5353 net 2\ndgram 3 127.0.0.1:5353 len 1:s\n"
                              "rc 0 left 0\n");
    free(ev.b);
}

/* Replies of a UDP session carry their source (§5.3 item 6): known answers for IPv4, IPv6 and
 * a name, as Xray's and sing-box's readers parse them. */
static void xudp__reply_frames_carry_the_source(void **state)
{
    (void)state;
    uint8_t out[SV_MUX_DGRAM_HEAD_MAX];
    sv_dest d = {.atyp = SV_ATYP_IPV4, .ip = {127, 0, 0, 1}, .port = 5353};
    static const uint8_t v4[] = {0x00, 0x0c, 0x00, 0x00, 0x02, 0x01, 0x02, 0x14, 0xe9,
                                 0x01, 127, 0, 0, 1, 0x04, 0xb0};
    assert_int_equal(sv_mux_frame_datagram_head(0, &d, 1200, out), sizeof v4);
    assert_memory_equal(out, v4, sizeof v4);
    d = (sv_dest){.atyp = SV_ATYP_IPV6, .ip = {[15] = 1}, .port = 443};
    static const uint8_t v6[] = {0x00, 0x18, 0x01, 0x02, 0x02, 0x01, 0x02, 0x01, 0xbb, 0x03,
                                 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x00, 0x08};
    assert_int_equal(sv_mux_frame_datagram_head(0x0102, &d, 8, out), sizeof v6);
    assert_memory_equal(out, v6, sizeof v6);
    d = (sv_dest){.atyp = SV_ATYP_DOMAIN, .host = "q.test", .port = 53};
    static const uint8_t name[] = {0x00, 0x0f, 0x00, 0x07, 0x02, 0x01, 0x02, 0x00, 0x35,
                                   0x02, 0x06, 'q', '.', 't', 'e', 's', 't', 0x00, 0x00};
    assert_int_equal(sv_mux_frame_datagram_head(7, &d, 0, out), sizeof name);
    assert_memory_equal(out, name, sizeof name);
    /* our own decoder takes a reply frame as a datagram to that address (the client's view) */
    static wire w;
    w.n = 0;
    frame(&w, 0, SV_MUX_NEW, 1, k_new_udp, sizeof k_new_udp, 1, 'a');
    d = (sv_dest){.atyp = SV_ATYP_IPV4, .ip = {10, 0, 0, 9}, .port = 9};
    put(&w, out, sv_mux_frame_datagram_head(0, &d, 2, out));
    put(&w, "zz", 2);
    transcript ev = {0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), 0);
    assert_string_equal(ev.b, "open 0 127.0.0.1:5353 net 2\ndgram 0 127.0.0.1:5353 len 1:a\n"
                              "dgram 0 10.0.0.9:9 len 2:zz\nrc 0 left 0\n");
    free(ev.b);
}

static void errors__close_the_connection(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint8_t b[40];
        size_t n;
    } bad[] = {
        {"meta_len 3", {0, 3, 0, 1, 2}, 5},
        {"meta_len 513", {0x02, 0x01}, 2},
        {"status 5", {0, 4, 0, 1, 5, 0}, 6},
        {"status 0", {0, 4, 0, 1, 0, 0}, 6},
        {"New without a network", {0, 4, 0, 1, 1, 0}, 6},
        {"New network 3", {0, 9, 0, 1, 1, 0, 3, 0, 80, 1, 1}, 11},
        {"New address type 4", {0, 9, 0, 1, 1, 0, 1, 0, 80, 4, 1}, 11},
        {"New address cut by meta_len", {0, 9, 0, 1, 1, 0, 1, 0, 80, 1, 127}, 11},
        {"New empty domain", {0, 9, 0, 1, 1, 0, 1, 0, 80, 2, 0}, 11},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        transcript ev = {0};
        int rc = drive_all_cuts(bad[i].b, bad[i].n, &ev);
        if (rc != -EPROTO)
            fail_msg("%s: %d", bad[i].what, rc);
        free(ev.b);
    }

    /* A New for an open session; effects before the error stand. */
    static wire w;
    w.n = 0;
    frame(&w, 5, SV_MUX_NEW, 1, k_new_tcp, sizeof k_new_tcp, 2, 'a');
    frame(&w, 5, SV_MUX_NEW, 0, k_new_udp, sizeof k_new_udp, 0, 0);
    transcript ev = {0};
    assert_int_equal(drive_all_cuts(w.b, w.n, &ev), -EPROTO);
    assert_string_equal(ev.b, "open 5 a.te:80 net 1\ntcp 5:aa\nrc -71\n");
    free(ev.b);
}

static void sessions__bounded_and_forgotten(void **state)
{
    (void)state;
    static wire w;
    w.n = 0;
    for (unsigned id = 1; id <= SV_MUX_SESSIONS_MAX + 1; id++)
        frame(&w, (uint16_t)id, SV_MUX_NEW, 1, k_new_udp, sizeof k_new_udp, 1, 'n');
    sv_mux *m = sv_mux_new();
    size_t at = 0, opened = 0, datagrams = 0, answers = 0;
    while (at < w.n) {
        sv_effects fx;
        ssize_t r = feed(m, w.b + at, w.n - at, &fx);
        assert_true(r > 0);
        for (unsigned i = 0; i < fx.n; i++) {
            opened += fx.v[i].kind == SV_FX_OPEN;
            datagrams += fx.v[i].kind == SV_FX_DATAGRAM;
            if (fx.v[i].kind == SV_FX_TO_CLIENT) {
                answers++;
                static const uint8_t end129[] = {0, 4, 0, SV_MUX_SESSIONS_MAX + 1, 3, 0};
                assert_memory_equal(fx.v[i].data, end129, sizeof end129);
            }
        }
        at += (size_t)r;
    }
    assert_int_equal(opened, SV_MUX_SESSIONS_MAX);
    assert_int_equal(datagrams, SV_MUX_SESSIONS_MAX); /* the refused one's is dropped */
    assert_int_equal(answers, 1);

    /* The runtime ends session 7: a Keep for it is answered with End; its id is free again. */
    sv_mux_session_gone(m, 7);
    sv_mux_session_gone(m, 999); /* unknown: ignored */
    w.n = 0;
    frame(&w, 7, SV_MUX_KEEP, 1, NULL, 0, 1, 'k');
    frame(&w, 7, SV_MUX_NEW, 0, k_new_tcp, sizeof k_new_tcp, 0, 0);
    sv_effects fx;
    assert_int_equal(feed(m, w.b, w.n, &fx), w.n);
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_CLIENT);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[1].stream, 7);

    /* Gone in the middle of its datagram: the rest is dropped, nothing is delivered. */
    w.n = 0;
    frame(&w, 8, SV_MUX_KEEP, 1, NULL, 0, 10, 'd');
    assert_int_equal(feed(m, w.b, 8 + 4, &fx), 8); /* the header; the datagram is not whole */
    assert_int_equal(fx.n, 0);
    sv_mux_session_gone(m, 8);
    assert_int_equal(feed(m, w.b + 8, 10, &fx), 10);
    assert_int_equal(fx.n, 0);
    sv_mux_free(m);
    sv_mux_free(NULL);
}

static void effects__many_small_frames_stop_with_a_free_slot(void **state)
{
    (void)state;
    static wire w;
    w.n = 0;
    frame(&w, 1, SV_MUX_NEW, 0, k_new_udp, sizeof k_new_udp, 0, 0);
    for (int i = 0; i < 40; i++)
        frame(&w, 1, SV_MUX_KEEP, 1, NULL, 0, 1, (uint8_t)('A' + i));
    sv_mux *m = sv_mux_new();
    size_t at = 0;
    int next = 0, calls = 0;
    while (at < w.n) {
        sv_effects fx;
        ssize_t r = feed(m, w.b + at, w.n - at, &fx);
        assert_true(r > 0);
        assert_true(fx.n <= SV_EFFECTS_MAX - 1);
        for (unsigned i = 0; i < fx.n; i++)
            if (fx.v[i].kind == SV_FX_DATAGRAM)
                assert_int_equal(fx.v[i].data[0], 'A' + next++);
        at += (size_t)r;
        calls++;
    }
    assert_int_equal(next, 40);
    assert_true(calls >= 3);
    sv_mux_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vectors__tcp_and_udp_sessions),
        cmocka_unit_test(frame__blocks_bounds_and_end),
        cmocka_unit_test(cuts__sessions_in_one_stream),
        cmocka_unit_test(xudp__per_datagram_destinations),
        cmocka_unit_test(xudp__reply_frames_carry_the_source),
        cmocka_unit_test(errors__close_the_connection),
        cmocka_unit_test(sessions__bounded_and_forgotten),
        cmocka_unit_test(effects__many_small_frames_stop_with_a_free_slot),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
