/*
 * Unit tests: Trojan core (supervisor/proto/trojan.c) through its ops table (proto.h), and the
 * seam helper sv_effects_push (supervisor/proto/proto.c).
 * Known answers come from tests/unit/vectors/trojan.json, captured from the trojan 1.16 client
 * (PROTOCOLS.md §4, §11). A runtime-like driver below keeps the unconsumed carry and feeds it
 * again with more bytes appended, as the contract of proto.h asks.
 */
#include "config.h"

#include <arpa/inet.h>
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

#include "supervisor/proto/trojan.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static const sv_proto_ops *const ops = &sv_trojan_ops;

static json_t *g_vec;
static void *g_creds;   /* users 0 "user-a", 1 "katana-trojan-pass" (the vectors'), 2 "user-c" */

/* ---------- fixtures ---------- */

static char *g_secrets[] = {"user-a", "katana-trojan-pass", "user-c"};

static void *creds_of(char **secrets, const uint64_t *ids, size_t n, int *rc, sv_error *err)
{
    sv_user *u = calloc(n ? n : 1, sizeof *u);
    assert_non_null(u);
    for (size_t i = 0; i < n; i++) {
        u[i].id = ids != NULL ? ids[i] : i + 1;
        u[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "users", .users = u, .n_users = n};
    void *creds = NULL;
    *rc = ops->creds_new(NULL, &set, &creds, err);
    free(u);
    return creds;
}

static int setup(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/trojan.json", top ? top : TOP_SRCDIR);
    json_error_t jerr;
    g_vec = json_load_file(path, 0, &jerr);
    if (g_vec == NULL) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return -1;
    }
    int rc;
    sv_error err = {0};
    g_creds = creds_of(g_secrets, NULL, 3, &rc, &err);
    return rc == 0 && g_creds != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_vec);
    ops->creds_free(g_creds);
    return 0;
}

/* Follow a dotted path ("cases.udp_associate.decoded.packets.0.length") through objects and
 * arrays. */
static const json_t *jget(const char *path)
{
    const json_t *o = g_vec;
    char key[64];
    while (o != NULL && *path != '\0') {
        size_t k = strcspn(path, ".");
        assert_true(k < sizeof key);
        memcpy(key, path, k);
        key[k] = '\0';
        o = json_is_array(o) ? json_array_get(o, strtoul(key, NULL, 10)) : json_object_get(o, key);
        path += k + (path[k] == '.');
    }
    assert_non_null(o);
    return o;
}

static const char *jstr(const char *path)
{
    const char *s = json_string_value(jget(path));
    assert_non_null(s);
    return s;
}

static size_t jhex(const char *path, uint8_t *out, size_t cap)
{
    const char *s = jstr(path);
    size_t n = strlen(s) / 2;
    assert_true(n <= cap && strlen(s) % 2 == 0);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void *conn_new(void)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    return st;
}

static void conn_free(void *st)
{
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

/* Feed once with a dirty effects list (feed empties it). */
static ssize_t feed(void *st, uint8_t *p, size_t n, sv_effects *fx)
{
    memset(fx, 0xa5, sizeof *fx);
    fx->n = 3;
    ssize_t r = ops->feed(st, g_creds, p, n, fx);
    assert_true(fx->n <= SV_EFFECTS_MAX);
    return r;
}

static void assert_dest(const sv_dest *d, uint8_t atyp, const char *text, enum sv_network net)
{
    char got[300];
    assert_int_equal(d->atyp, atyp);
    sv_dest_format(d, got, sizeof got);
    assert_string_equal(got, text);
    assert_int_equal(d->network, net);
}

/* A request for the vectors' user: hash CRLF cmd address CRLF. @return its length. */
static size_t request(uint8_t *out, const char *password, uint8_t cmd, const uint8_t *addr,
                      size_t alen)
{
    char hex[SV_TROJAN_HASH_HEX + 1];
    assert_int_equal(sv_trojan_password_hex(password, strlen(password), hex), 0);
    size_t n = 0;
    memcpy(out, hex, SV_TROJAN_HASH_HEX);
    n += SV_TROJAN_HASH_HEX;
    out[n++] = '\r';
    out[n++] = '\n';
    out[n++] = cmd;
    memcpy(out + n, addr, alen);
    n += alen;
    out[n++] = '\r';
    out[n++] = '\n';
    return n;
}

static const uint8_t k_addr_v4[] = {0x01, 127, 0, 0, 1, 0x14, 0xe9};  /* 127.0.0.1:5353 */

/* One UDP packet to 127.0.0.1:5353 with @p len bytes of @p fill. @return its length. */
static size_t packet(uint8_t *out, size_t len, uint8_t fill)
{
    memcpy(out, k_addr_v4, sizeof k_addr_v4);
    size_t n = sizeof k_addr_v4;
    out[n++] = (uint8_t)(len >> 8);
    out[n++] = (uint8_t)len;
    out[n++] = '\r';
    out[n++] = '\n';
    memset(out + n, fill, len);
    return n + len;
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
 * Deliver @p wire in pieces of @p piece bytes through a carry buffer, the way the runtime will,
 * and log the effects: events in @p ev (datagrams with their bytes), the outbound byte stream in
 * @p out (chunking differs with the cut, the bytes do not). Checks every data pointer, and that
 * a fallback error covers exactly the bytes received so far.
 * @return the final feed result (negative error, or 0).
 */
static int drive(const uint8_t *wire, size_t n, size_t piece, transcript *ev, transcript *out)
{
    void *st = conn_new();
    uint8_t *buf = malloc(n + SV_TROJAN_CARRY_MAX + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    int rc = 0;
    for (;;) {
        sv_effects fx;
        ssize_t r = feed(st, buf, have, &fx);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            char d[300];
            switch (e->kind) {
            case SV_FX_AUTHENTICATED:
                tr_printf(ev, "auth %d\n", e->principal);
                break;
            case SV_FX_OPEN:
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "open %u %s net %d\n", e->stream, d, (int)e->dest.network);
                break;
            case SV_FX_TO_OUTBOUND:
                assert_int_equal(e->stream, 0);
                assert_true(e->len > 0 && e->data >= buf && e->data + e->len <= buf + have);
                tr_put(out, e->data, e->len);
                break;
            case SV_FX_DATAGRAM:
                assert_true(e->data >= buf && e->data + e->len <= buf + have);
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "dgram %u %s net %d len %zu:", e->stream, d, (int)e->dest.network,
                          e->len);
                tr_put(ev, e->data, e->len);
                tr_put(ev, "\n", 1);
                break;
            case SV_FX_ERROR:
                assert_true(i == fx.n - 1 && r == e->error);
                if (e->policy == SV_PROBE_FALLBACK) {
                    assert_ptr_equal(e->data, buf);
                    assert_int_equal(e->len, have);
                    assert_int_equal(in, have); /* nothing was consumed before */
                } else {
                    assert_null(e->data);
                }
                tr_printf(ev, "error %d policy %d\n", e->error, (int)e->policy);
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
        assert_int_equal(fx.n, 0);
        assert_true(have <= ops->carry_max);
        if (in == n)
            break;
        size_t k = piece < n - in ? piece : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    tr_printf(ev, "rc %d\n", rc);
    free(buf);
    conn_free(st);
    return rc;
}

/* Drive @p wire whole and in pieces of 1, 2, 7 and 61 bytes; all transcripts must agree. */
static int drive_all_cuts(const uint8_t *wire, size_t n, transcript *ev, transcript *out)
{
    static const size_t pieces[] = {1, 2, 7, 61};
    int rc = drive(wire, n, n + 1, ev, out);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        transcript ev2 = {0}, out2 = {0};
        assert_int_equal(drive(wire, n, pieces[i], &ev2, &out2), rc);
        assert_int_equal(ev2.len, ev->len);
        assert_true(ev->len == 0 || memcmp(ev->b, ev2.b, ev->len) == 0);
        assert_int_equal(out2.len, out->len);
        assert_true(out->len == 0 || memcmp(out->b, out2.b, out->len) == 0);
        free(ev2.b);
        free(out2.b);
    }
    return rc;
}

/* ---------- known answers ---------- */

static void password__hex_vector(void **state)
{
    (void)state;
    char hex[SV_TROJAN_HASH_HEX + 1];
    const char *pw = jstr("password");
    assert_int_equal(sv_trojan_password_hex(pw, strlen(pw), hex), 0);
    assert_string_equal(hex, jstr("hex_sha224_password"));
    assert_int_equal(sv_trojan_creds_lookup(g_creds, (const uint8_t *)hex), 1);
}

static void connect__vector_first_record(void **state)
{
    (void)state;
    uint8_t p[512];
    size_t n = jhex("cases.tcp_connect.first_record_plaintext_hex", p, sizeof p);
    size_t hl = (size_t)json_integer_value(jget("cases.tcp_connect.header_length"));
    const char *payload = jstr("cases.tcp_connect.decoded.payload_text");
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[0].principal, 1);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[1].stream, 0);
    assert_dest(&fx.v[1].dest, SV_ATYP_DOMAIN, "example.test:443", SV_NET_TCP);
    assert_string_equal(fx.v[1].dest.host,
                        jstr("cases.tcp_connect.decoded.address.host"));
    assert_int_equal(fx.v[2].kind, SV_FX_TO_OUTBOUND);
    assert_int_equal(fx.v[2].stream, 0);
    assert_ptr_equal(fx.v[2].data, p + hl); /* into the caller's buffer, no copy */
    assert_int_equal(fx.v[2].len, strlen(payload));
    assert_memory_equal(fx.v[2].data, payload, strlen(payload));

    /* Later bytes are relayed as they are, in place. */
    uint8_t more[] = "more bytes";
    assert_int_equal(feed(st, more, 10, &fx), 10);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_OUTBOUND);
    assert_ptr_equal(fx.v[0].data, more);
    assert_int_equal(fx.v[0].len, 10);
    assert_int_equal(feed(st, more, 0, &fx), 0);
    assert_int_equal(fx.n, 0);
    conn_free(st);
}

static void connect__header_only_and_ipv6(void **state)
{
    (void)state;
    uint8_t addr[19] = {0x04};
    addr[16] = 1; /* ::1 */
    addr[17] = 0x01;
    addr[18] = 0xbb;
    uint8_t p[128];
    size_t n = request(p, "user-c", SV_TROJAN_CONNECT, addr, sizeof addr);
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 2); /* no payload: no TO_OUTBOUND */
    assert_int_equal(fx.v[0].principal, 2);
    assert_dest(&fx.v[1].dest, SV_ATYP_IPV6, "[::1]:443", SV_NET_TCP);
    conn_free(st);
}

static void udp__vector_first_record(void **state)
{
    (void)state;
    uint8_t p[512];
    size_t n = jhex("cases.udp_associate.first_record_plaintext_hex", p, sizeof p);
    const char *payload = jstr("cases.udp_associate.decoded.packets.0.payload_text");
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[0].principal, 1);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_dest(&fx.v[1].dest, SV_ATYP_IPV4, "0.0.0.0:0", SV_NET_UDP);
    assert_int_equal(fx.v[2].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[2].stream, 0);
    assert_dest(&fx.v[2].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[2].len, strlen(payload));
    assert_ptr_equal(fx.v[2].data, p + n - strlen(payload));
    assert_memory_equal(fx.v[2].data, payload, strlen(payload));
    conn_free(st);
}

static void udp__server_reply_vector(void **state)
{
    (void)state;
    uint8_t want[128], out[128];
    size_t wn = jhex("cases.udp_associate.server_reply_packet_hex", want, sizeof want);
    sv_dest from = {.atyp = SV_ATYP_IPV4, .ip = {127, 0, 0, 1}, .port = 5353};
    const char *pong = "udp pong via trojan";
    size_t len = strlen(pong);
    assert_non_null(sv_proto_datagram(ops));
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         NULL, g_creds, 0, &from, (const uint8_t *)pong, len, out, sizeof out),
                     wn);
    assert_memory_equal(out, want, wn);
    /* Exactly enough room works; one byte less does not. */
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(NULL, g_creds, 0, &from,
                                                            (const uint8_t *)pong, len, out, wn),
                     wn);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         NULL, g_creds, 0, &from, (const uint8_t *)pong, len, out, wn - 1),
                     -EMSGSIZE);
}

static void frame__copy_and_datagram_refusals(void **state)
{
    (void)state;
    uint8_t in[100], out[100];
    memset(in, 0x42, sizeof in);
    assert_int_equal(ops->frame_max(100), 100);
    assert_int_equal(ops->frame(NULL, g_creds, 0, in, 100, out, 100), 100);
    assert_memory_equal(in, out, 100);
    assert_int_equal(ops->frame(NULL, g_creds, 0, in, 100, out, 99), -EMSGSIZE);

    static uint8_t big[SV_TROJAN_UDP_PACKET_MAX + 16];
    static uint8_t payload[SV_TROJAN_UDP_PAYLOAD_MAX + 1];
    sv_dest from = {.atyp = SV_ATYP_DOMAIN, .host = "dns.test", .port = 53};
    ssize_t r = sv_proto_datagram(ops)->frame_datagram(NULL, g_creds, 0, &from, payload,
                                                       SV_TROJAN_UDP_PAYLOAD_MAX, big, sizeof big);
    assert_int_equal(r, 1 + 1 + 8 + 2 + 2 + 2 + SV_TROJAN_UDP_PAYLOAD_MAX);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(NULL, g_creds, 0, &from, payload,
                                                            SV_TROJAN_UDP_PAYLOAD_MAX + 1, big,
                                                            sizeof big),
                     -EINVAL);
    sv_dest bad = {.atyp = 2, .port = 53};
    assert_int_equal(
        sv_proto_datagram(ops)->frame_datagram(NULL, g_creds, 0, &bad, payload, 1, big, sizeof big),
        -EINVAL);
    sv_dest empty = {.atyp = SV_ATYP_DOMAIN, .port = 53};
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(NULL, g_creds, 0, &empty, payload, 1,
                                                            big, sizeof big),
                     -EINVAL);
}

/* ---------- whole input vs piecewise ---------- */

static void cuts__vectors_and_streams_agree(void **state)
{
    (void)state;
    uint8_t p[512];
    transcript ev = {0}, out = {0};

    size_t n = jhex("cases.tcp_connect.first_record_plaintext_hex", p, sizeof p);
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 1\nopen 0 example.test:443 net 1\nrc 0\n");
    const char *payload = jstr("cases.tcp_connect.decoded.payload_text");
    assert_int_equal(out.len, strlen(payload));
    assert_memory_equal(out.b, payload, out.len);
    free(ev.b);
    free(out.b);

    ev = (transcript){0};
    out = (transcript){0};
    n = jhex("cases.udp_associate.first_record_plaintext_hex", p, sizeof p);
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 1\nopen 0 0.0.0.0:0 net 2\n"
                              "dgram 0 127.0.0.1:5353 net 2 len 19:udp ping via trojan\nrc 0\n");
    assert_int_equal(out.len, 0);
    free(ev.b);
    free(out.b);

    /* A refused request: the same error whatever the cut, the fallback gets every byte. */
    ev = (transcript){0};
    out = (transcript){0};
    const char *get = "GET / HTTP/1.1\r\nHost: node.test\r\n\r\n";
    assert_int_equal(drive_all_cuts((const uint8_t *)get, strlen(get), &ev, &out), -EPROTO);
    assert_string_equal(ev.b, "error -71 policy 3\nrc -71\n");
    free(ev.b);
    free(out.b);
}

static void udp__packet_split_across_many_feeds(void **state)
{
    (void)state;
    static uint8_t p[4096];
    size_t n = request(p, "katana-trojan-pass", SV_TROJAN_UDP_ASSOCIATE, k_addr_v4,
                       sizeof k_addr_v4);
    size_t hl = n;
    n += packet(p + n, 1000, 'x');
    n += packet(p + n, 0, 0); /* an empty datagram is a datagram */
    n += packet(p + n, 3, 'y');

    /* By hand: 13-byte feeds, each returning 0 until the packet is whole. */
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, hl, &fx), hl);
    assert_int_equal(fx.n, 2);
    size_t have = 0, feeds = 0;
    for (;;) {
        have += 13;
        feeds++;
        ssize_t r = feed(st, p + hl, have, &fx);
        if (r > 0) {
            assert_int_equal(r, 11 + 1000);
            break;
        }
        assert_int_equal(r, 0);
        assert_int_equal(fx.n, 0);
    }
    assert_true(feeds > 70);
    assert_int_equal(fx.v[0].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[0].len, 1000);
    assert_ptr_equal(fx.v[0].data, p + hl + 11);
    conn_free(st);

    transcript ev = {0}, out = {0};
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    char want[2000];
    int k = snprintf(want, sizeof want,
                     "auth 1\nopen 0 127.0.0.1:5353 net 2\ndgram 0 127.0.0.1:5353 net 2 len "
                     "1000:%.*s\ndgram 0 127.0.0.1:5353 net 2 len 0:\n"
                     "dgram 0 127.0.0.1:5353 net 2 len 3:yyy\nrc 0\n",
                     1000, (const char *)p + hl + 11);
    assert_true(k > 0 && (size_t)k < sizeof want);
    assert_string_equal(ev.b, want);
    free(ev.b);
    free(out.b);
}

static void udp__many_packets_fill_the_effects(void **state)
{
    (void)state;
    static uint8_t p[4096];
    size_t n = request(p, "katana-trojan-pass", SV_TROJAN_UDP_ASSOCIATE, k_addr_v4,
                       sizeof k_addr_v4);
    size_t hl = n, plen = 11 + 5;
    for (int i = 0; i < 40; i++)
        n += packet(p + n, 5, (uint8_t)('A' + i));
    n += 4; /* a partial 41st packet */
    memcpy(p + n - 4, k_addr_v4, 4);

    void *st = conn_new();
    sv_effects fx;
    /* Call 1: authenticated, open, then as many datagrams as fit. */
    ssize_t r = feed(st, p, n, &fx);
    assert_int_equal(fx.n, SV_EFFECTS_MAX);
    assert_int_equal(r, hl + (SV_EFFECTS_MAX - 2) * plen);
    int next = 0;
    for (unsigned i = 2; i < fx.n; i++, next++) {
        assert_int_equal(fx.v[i].kind, SV_FX_DATAGRAM);
        assert_int_equal(fx.v[i].data[0], 'A' + next);
    }
    /* The remaining bytes are fed again. */
    size_t off = (size_t)r;
    while (next < 40) {
        r = feed(st, p + off, n - off, &fx);
        assert_true(r > 0);
        assert_int_equal((size_t)r, fx.n * plen);
        for (unsigned i = 0; i < fx.n; i++, next++) {
            assert_int_equal(fx.v[i].kind, SV_FX_DATAGRAM);
            assert_ptr_equal(fx.v[i].data, p + off + i * plen + 11);
            assert_int_equal(fx.v[i].data[0], 'A' + next);
        }
        off += (size_t)r;
    }
    assert_int_equal(next, 40);
    assert_int_equal(n - off, 4);
    assert_int_equal(feed(st, p + off, n - off, &fx), 0); /* the partial packet stays */
    assert_int_equal(fx.n, 0);
    conn_free(st);
}

/* ---------- refusals before authentication: fallback with every byte ---------- */

typedef struct bad_request {
    const char *what;
    uint8_t wire[400];
    size_t len;    /* bytes of wire */
    size_t decide; /* the prefix length at which the core refuses */
    int error;
} bad_request;

/*
 * Feed every prefix of @p b: shorter than b->decide → 0, no effect; from b->decide on → the
 * error with SV_PROBE_FALLBACK and data/len = the whole prefix.
 */
static void assert_refused_at(const bad_request *b)
{
    for (size_t k = 0; k <= b->len; k++) {
        void *st = conn_new();
        uint8_t buf[400];
        memcpy(buf, b->wire, k);
        sv_effects fx;
        ssize_t r = feed(st, buf, k, &fx);
        if (k < b->decide) {
            if (r != 0 || fx.n != 0)
                fail_msg("%s: prefix %zu: %zd, %u effects", b->what, k, r, fx.n);
        } else {
            if (r != b->error || fx.n != 1)
                fail_msg("%s: prefix %zu: %zd (want %d), %u effects", b->what, k, r, b->error,
                         fx.n);
            assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
            assert_int_equal(fx.v[0].error, b->error);
            assert_int_equal(fx.v[0].policy, SV_PROBE_FALLBACK);
            assert_ptr_equal(fx.v[0].data, buf);
            assert_int_equal(fx.v[0].len, k);
            /* Failed for good: no more input is taken. */
            assert_true(feed(st, buf, k, &fx) < 0);
            assert_int_equal(fx.v[fx.n - 1].kind, SV_FX_ERROR);
            assert_int_equal(fx.v[fx.n - 1].policy, SV_PROBE_CLOSE);
        }
        conn_free(st);
    }
}

static void bad_add(bad_request *b, const void *p, size_t n)
{
    assert_true(b->len + n <= sizeof b->wire);
    memcpy(b->wire + b->len, p, n);
    b->len += n;
}

/* A valid request start for @p password up to and including the first CRLF. */
static void bad_start(bad_request *b, const char *what, const char *password)
{
    memset(b, 0, sizeof *b);
    b->what = what;
    char hex[SV_TROJAN_HASH_HEX + 1];
    assert_int_equal(sv_trojan_password_hex(password, strlen(password), hex), 0);
    bad_add(b, hex, SV_TROJAN_HASH_HEX);
    bad_add(b, "\r\n", 2);
}

static void refuse__every_request_error(void **state)
{
    (void)state;
    bad_request b;

    bad_start(&b, "browser", "x");
    b.len = 0;
    bad_add(&b, "GET / HTTP/1.1\r\n\r\n", 18);
    b.decide = 1, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "uppercase hex", "katana-trojan-pass");
    for (size_t i = 0; i < SV_TROJAN_HASH_HEX; i++)
        if (b.wire[i] >= 'a' && b.wire[i] <= 'f')
            b.wire[i] = (uint8_t)(b.wire[i] - 'a' + 'A');
    bad_add(&b, "\x01\x01\x7f\x00\x00\x01\x00\x50\r\n", 10);
    b.decide = 2, b.error = -EPROTO; /* "2E2C...": the 'E' at index 1 */
    assert_refused_at(&b);

    bad_start(&b, "unknown password", "not-a-user");
    bad_add(&b, "\x01\x01\x7f\x00\x00\x01\x00\x50\r\n", 10);
    b.decide = SV_TROJAN_HASH_HEX, b.error = -EACCES;
    assert_refused_at(&b);

    bad_start(&b, "no CR", "katana-trojan-pass");
    b.wire[56] = '\n';
    b.decide = 57, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "no LF", "katana-trojan-pass");
    b.wire[57] = '\r';
    b.decide = 58, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "mux command", "katana-trojan-pass");
    bad_add(&b, "\x7f\x01\x7f\x00\x00\x01\x00\x50\r\n", 10);
    b.decide = 59, b.error = -EPROTONOSUPPORT;
    assert_refused_at(&b);

    bad_start(&b, "BIND command", "katana-trojan-pass");
    bad_add(&b, "\x02", 1);
    b.decide = 59, b.error = -EPROTONOSUPPORT;
    assert_refused_at(&b);

    bad_start(&b, "bad ATYP", "katana-trojan-pass");
    bad_add(&b, "\x01\x02\x7f\x00\x00\x01\x00\x50\r\n", 10);
    b.decide = 60, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "zero-length domain", "katana-trojan-pass");
    bad_add(&b, "\x01\x03\x00\x00\x50\r\n", 7);
    b.decide = 61, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "NUL in domain", "katana-trojan-pass");
    bad_add(&b, "\x01\x03\x03" "a\0b" "\x00\x50\r\n", 10);
    b.decide = 59 + 1 + 1 + 3 + 2, b.error = -EPROTO; /* known once the address is whole */
    assert_refused_at(&b);

    bad_start(&b, "no final CR", "katana-trojan-pass");
    bad_add(&b, "\x01\x01\x7f\x00\x00\x01\x00\x50\n\r", 10);
    b.decide = 59 + 7 + 1, b.error = -EPROTO;
    assert_refused_at(&b);

    bad_start(&b, "no final LF", "katana-trojan-pass");
    bad_add(&b, "\x03\x01\x7f\x00\x00\x01\x00\x50\rX", 10);
    b.decide = 59 + 7 + 2, b.error = -EPROTO;
    assert_refused_at(&b);
}

static void refuse__empty_user_set(void **state)
{
    (void)state;
    int rc;
    sv_error err = {0};
    void *creds = creds_of(NULL, NULL, 0, &rc, &err);
    assert_int_equal(rc, 0);
    uint8_t p[512];
    size_t n = jhex("cases.tcp_connect.first_record_plaintext_hex", p, sizeof p);
    assert_int_equal(sv_trojan_creds_lookup(creds, p), -1);
    void *st = conn_new();
    sv_effects fx = {0};
    assert_int_equal(ops->feed(st, creds, p, n, &fx), -EACCES);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].policy, SV_PROBE_FALLBACK);
    assert_ptr_equal(fx.v[0].data, p);
    assert_int_equal(fx.v[0].len, n);
    conn_free(st);
    ops->creds_free(creds);
}

/* ---------- refusals after authentication: close ---------- */

static void assert_udp_closes(const char *what, const uint8_t *pkt, size_t plen, int error)
{
    uint8_t p[600];
    size_t n = request(p, "katana-trojan-pass", SV_TROJAN_UDP_ASSOCIATE, k_addr_v4,
                       sizeof k_addr_v4);
    n += packet(p + n, 2, 'g'); /* one good packet first */
    assert_true(n + plen <= sizeof p);
    memcpy(p + n, pkt, plen);
    n += plen;
    void *st = conn_new();
    sv_effects fx;
    ssize_t r = feed(st, p, n, &fx);
    if (r != error)
        fail_msg("%s: %zd, want %d", what, r, error);
    assert_int_equal(fx.n, 4); /* auth, open, the good datagram, the error */
    assert_int_equal(fx.v[2].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[3].kind, SV_FX_ERROR);
    assert_int_equal(fx.v[3].error, error);
    assert_int_equal(fx.v[3].policy, SV_PROBE_CLOSE);
    assert_null(fx.v[3].data);
    assert_int_equal(fx.v[3].len, 0);
    /* No success after an error. */
    r = feed(st, p, n, &fx);
    assert_true(r < 0);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
    conn_free(st);

    transcript ev = {0}, out = {0};
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), error);
    free(ev.b);
    free(out.b);
}

static void udp__errors_close(void **state)
{
    (void)state;
    uint8_t pkt[32];
    size_t n = packet(pkt, 3, 'z');

    memcpy(pkt, "\x05", 1);
    assert_udp_closes("bad ATYP", pkt, n, -EPROTO);

    memcpy(pkt, "\x03\x00", 2);
    assert_udp_closes("zero-length domain", pkt, n, -EPROTO);

    n = packet(pkt, 3, 'z');
    pkt[9] = 'x';
    assert_udp_closes("no CR", pkt, n, -EPROTO);

    n = packet(pkt, 3, 'z');
    pkt[10] = 'x';
    assert_udp_closes("no LF", pkt, n, -EPROTO);

    /* A length above the bound is refused as soon as the length is there. */
    memcpy(pkt, k_addr_v4, sizeof k_addr_v4);
    pkt[7] = (SV_TROJAN_UDP_PAYLOAD_MAX + 1) >> 8;
    pkt[8] = (SV_TROJAN_UDP_PAYLOAD_MAX + 1) & 0xff;
    assert_udp_closes("oversized length", pkt, 9, -EMSGSIZE);
    pkt[7] = 0xff;
    pkt[8] = 0xff;
    assert_udp_closes("length 65535", pkt, 9, -EMSGSIZE);
}

static void udp__largest_packet_accepted(void **state)
{
    (void)state;
    static uint8_t p[SV_TROJAN_HEADER_MAX + SV_TROJAN_UDP_PACKET_MAX];
    size_t n = request(p, "user-a", SV_TROJAN_UDP_ASSOCIATE, k_addr_v4, sizeof k_addr_v4);
    n += packet(p + n, SV_TROJAN_UDP_PAYLOAD_MAX, 'm');
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].principal, 0);
    assert_int_equal(fx.v[2].len, SV_TROJAN_UDP_PAYLOAD_MAX);
    conn_free(st);
    assert_true(ops->carry_max >= SV_TROJAN_UDP_PACKET_MAX);
    assert_true(ops->carry_max >= SV_TROJAN_HEADER_MAX);
    assert_int_equal(SV_TROJAN_HEADER_MAX, 56 + 2 + 1 + 259 + 2);
}

/* ---------- credentials ---------- */

static void creds__duplicates_and_bad_secrets_refused(void **state)
{
    (void)state;
    char *secrets[] = {"alpha", "beta", "gamma", "beta"};
    uint64_t ids[] = {7, 12, 30, 41};
    int rc;
    sv_error err = {0};
    void *creds = creds_of(secrets, ids, 4, &rc, &err);
    assert_null(creds);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, "user set users: users 12 and 41 have the same password");

    char *empty[] = {"alpha", ""};
    err = (sv_error){0};
    creds = creds_of(empty, ids, 2, &rc, &err);
    assert_null(creds);
    assert_int_equal(rc, -EINVAL);
    assert_string_equal(err.msg, "user set users: user 12 has an empty secret");

    sv_user_set huge = {.tag = "big", .n_users = (size_t)SV_USERS_MAX + 1};
    assert_int_equal(ops->creds_new(NULL, &huge, &creds, &err), -EINVAL);
    assert_null(creds);

    ops->creds_free(NULL);
}

static void creds__users_max_build_and_look_up(void **state)
{
    (void)state;
    size_t n = SV_USERS_MAX;
    char **secrets = calloc(n, sizeof *secrets);
    assert_non_null(secrets);
    for (size_t i = 0; i < n; i++) {
        secrets[i] = malloc(40);
        assert_non_null(secrets[i]);
        snprintf(secrets[i], 40, "%08zx-1b2c-4d3e-8f40-%012zx", (i * 7919) & 0xffffffffu, i);
    }
    int rc;
    sv_error err = {0};
    void *creds = creds_of(secrets, NULL, n, &rc, &err);
    assert_int_equal(rc, 0);
    assert_non_null(creds);
    char hex[SV_TROJAN_HASH_HEX + 1];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sv_trojan_password_hex(secrets[i], strlen(secrets[i]), hex), 0);
        if (sv_trojan_creds_lookup(creds, (const uint8_t *)hex) != (int)i)
            fail_msg("user %zu not found", i);
    }
    for (size_t i = 0; i < 1000; i++) {
        char pw[32];
        snprintf(pw, sizeof pw, "nobody-%zu", i);
        assert_int_equal(sv_trojan_password_hex(pw, strlen(pw), hex), 0);
        assert_int_equal(sv_trojan_creds_lookup(creds, (const uint8_t *)hex), -1);
    }

    /* A request of the last user through feed. */
    uint8_t p[256];
    size_t len = 0;
    assert_int_equal(sv_trojan_password_hex(secrets[n - 1], strlen(secrets[n - 1]), hex), 0);
    memcpy(p, hex, SV_TROJAN_HASH_HEX);
    len = SV_TROJAN_HASH_HEX;
    memcpy(p + len, "\r\n\x01\x01\x7f\x00\x00\x01\x00\x50\r\n", 12);
    len += 12;
    void *st = conn_new();
    sv_effects fx = {0};
    assert_int_equal(ops->feed(st, creds, p, len, &fx), len);
    assert_int_equal(fx.v[0].principal, (int)(n - 1));
    conn_free(st);

    ops->creds_free(creds);
    for (size_t i = 0; i < n; i++)
        free(secrets[i]);
    free(secrets);
}

static void effects__push_bounded_and_zeroed(void **state)
{
    (void)state;
    sv_effects fx;
    memset(&fx, 0xff, sizeof fx);
    fx.n = 0;
    for (unsigned i = 0; i < SV_EFFECTS_MAX; i++) {
        sv_effect *e = sv_effects_push(&fx, SV_FX_CLOSE);
        assert_ptr_equal(e, &fx.v[i]);
        assert_int_equal(e->kind, SV_FX_CLOSE);
        assert_int_equal(e->stream, 0);
        assert_null(e->data);
        assert_int_equal(e->len, 0);
    }
    assert_null(sv_effects_push(&fx, SV_FX_FINISH));
    assert_int_equal(fx.n, SV_EFFECTS_MAX);
    assert_string_equal(ops->name, "trojan");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(password__hex_vector),
        cmocka_unit_test(connect__vector_first_record),
        cmocka_unit_test(connect__header_only_and_ipv6),
        cmocka_unit_test(udp__vector_first_record),
        cmocka_unit_test(udp__server_reply_vector),
        cmocka_unit_test(frame__copy_and_datagram_refusals),
        cmocka_unit_test(cuts__vectors_and_streams_agree),
        cmocka_unit_test(udp__packet_split_across_many_feeds),
        cmocka_unit_test(udp__many_packets_fill_the_effects),
        cmocka_unit_test(refuse__every_request_error),
        cmocka_unit_test(refuse__empty_user_set),
        cmocka_unit_test(udp__errors_close),
        cmocka_unit_test(udp__largest_packet_accepted),
        cmocka_unit_test(creds__duplicates_and_bad_secrets_refused),
        cmocka_unit_test(creds__users_max_build_and_look_up),
        cmocka_unit_test(effects__push_bounded_and_zeroed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
