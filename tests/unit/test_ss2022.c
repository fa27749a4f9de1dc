/*
 * Unit tests: Shadowsocks 2022 TCP core (supervisor/proto/ss2022.c, PROTOCOLS.md §3) on the
 * vectors of tests/unit/vectors/shadowsocks-2022.json (single user and EIH, both AES sizes):
 * requests fed whole and byte at a time (the runtime's carry), the response built with the
 * vector's salt, and every refusal: a request 60 s old, a replayed salt, an unknown identity
 * header, a corrupt header; key decoding and credential errors; HChaCha20 on its draft's vector.
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

#include "supervisor/crypto/aead.h"
#include "supervisor/crypto/blake3.h"
#include "supervisor/proto/ss2022.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define TS 1700000000

static json_t *g_vec;

static int load_vectors(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/shadowsocks-2022.json",
             top ? top : TOP_SRCDIR);
    json_error_t err;
    g_vec = json_load_file(path, 0, &err);
    if (g_vec == NULL)
        fprintf(stderr, "%s: %s\n", path, err.text);
    return g_vec != NULL ? 0 : -1;
}

static int free_vectors(void **state)
{
    (void)state;
    json_decref(g_vec);
    return 0;
}

static const char *str(const json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *v = o;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    assert_non_null(json_string_value(v));
    return json_string_value(v);
}

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = strlen(s) / 2;
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static enum sv_ss_cipher cipher_of(const char *m)
{
    return strcmp(m, "2022-blake3-aes-128-gcm") == 0 ? SV_SS_2022_AES_128_GCM
                                                      : SV_SS_2022_AES_256_GCM;
}

/* What a connection produced: concatenated outbound bytes, the destination, the last error. */
typedef struct run {
    int auth, opens, err;
    enum sv_probe_policy policy;
    char dest[300];
    uint8_t data[4096];
    size_t len;
} run;

/* Feed @p wire as the runtime does, @p step bytes per read (0 = whole), keeping the tail. */
static void feed_all(sv_ss22_tcp *t, const sv_ss22_creds *c, const uint8_t *wire, size_t n,
                     size_t step, run *r)
{
    static uint8_t buf[2 * SV_SS22_CARRY_MAX];
    size_t have = 0, off = 0;
    memset(r, 0, sizeof *r);
    r->auth = -1;
    while (off < n) {
        size_t take = step == 0 ? n - off : (n - off < step ? n - off : step);
        memcpy(buf + have, wire + off, take);
        have += take;
        off += take;
        size_t used = 0;
        for (;;) {
            sv_effects fx;
            ssize_t k = sv_ss22_tcp_feed(t, c, buf + used, have - used, &fx);
            for (unsigned i = 0; i < fx.n; i++) {
                const sv_effect *e = &fx.v[i];
                if (e->kind == SV_FX_AUTHENTICATED)
                    r->auth = e->principal;
                else if (e->kind == SV_FX_OPEN) {
                    r->opens++;
                    sv_dest_format(&e->dest, r->dest, sizeof r->dest);
                } else if (e->kind == SV_FX_TO_OUTBOUND) {
                    assert_true(r->len + e->len <= sizeof r->data);
                    memcpy(r->data + r->len, e->data, e->len);
                    r->len += e->len;
                } else if (e->kind == SV_FX_ERROR) {
                    r->err = e->error;
                    r->policy = e->policy;
                }
            }
            if (k < 0) {
                assert_int_equal(r->err, (int)k);
                return;
            }
            if (k == 0)
                break;
            used += (size_t)k;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
        assert_true(have <= SV_SS22_CARRY_MAX);
    }
}

static sv_ss22_creds *single(const json_t *v)
{
    uint8_t key[32] = {0};
    unhex(str(v, "psk_hex"), key, sizeof key);
    sv_ss22_creds *c = NULL;
    sv_error err = {0};
    assert_int_equal(sv_ss22_creds_from_keys("t", cipher_of(str(v, "method")), NULL,
                                             (const uint8_t(*)[32])key, 1, &c, &err),
                     0);
    return c;
}

static const uint8_t *g_salt;
static void fixed_salt(uint8_t *buf, size_t n) { memcpy(buf, g_salt, n); }

static void check_request(const json_t *v, const sv_ss22_creds *c, const char *wire_path,
                          const char *want_payload, size_t step)
{
    uint8_t wire[1024];
    size_t n = unhex(str(v, wire_path), wire, sizeof wire);
    sv_ss22_tcp t = {0};
    sv_ss22_tcp_init(&t, cipher_of(str(v, "method")));
    t.now = TS;
    run r;
    feed_all(&t, c, wire, n, step, &r);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.auth, 0);
    assert_int_equal(r.opens, 1);
    assert_string_equal(r.dest, "example.test:443");
    assert_int_equal(r.len, strlen(want_payload));
    assert_memory_equal(r.data, want_payload, r.len);
    sv_ss22_tcp_deinit(&t);
}

/* Single user, both AES sizes: request (with the next chunk), padding-only request, response. */
static void test_tcp_vectors(void **state)
{
    (void)state;
    const json_t *tcp = json_object_get(g_vec, "tcp");
    assert_int_equal(json_array_size(tcp), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_array_get(tcp, i);
        sv_ss22_creds *c = single(v);
        /* request + next chunk, whole and byte at a time */
        char both[2048];
        snprintf(both, sizeof both, "%s%s", str(v, "request.wire_hex"),
                 str(v, "request.next_chunk.wire_hex"));
        json_t *tmp = json_pack("{s:{s:s}, s:s}", "x", "w", both, "method", str(v, "method"));
        char want[128];
        snprintf(want, sizeof want, "%s%s", str(v, "request.initial_payload_text"),
                 str(v, "request.next_chunk.plaintext_text"));
        for (size_t step = 0; step <= 1; step++)
            check_request(tmp, c, "x.w", want, step);
        json_decref(tmp);
        check_request(v, c, "request_padding_only.wire_hex", "", 1);

        /* the response: salt, header echoing the request salt, first payload */
        uint8_t wire[1024], salt[32], out[512];
        size_t n = unhex(str(v, "request.wire_hex"), wire, sizeof wire);
        unhex(str(v, "response.salt"), salt, sizeof salt);
        sv_ss22_tcp t = {0};
        sv_ss22_tcp_init(&t, cipher_of(str(v, "method")));
        t.now = TS;
        run r;
        feed_all(&t, c, wire, n, 0, &r);
        g_salt = salt;
        t.rng = fixed_salt;
        const char *payload = str(v, "response.payload_text");
        assert_int_equal(sv_ss22_tcp_frame(&t, c, (const uint8_t *)payload, strlen(payload), out,
                                           10),
                         -EMSGSIZE);
        ssize_t w = sv_ss22_tcp_frame(&t, c, (const uint8_t *)payload, strlen(payload), out,
                                      sizeof out);
        uint8_t want_wire[512];
        size_t wn = unhex(str(v, "response.wire_hex"), want_wire, sizeof want_wire);
        assert_int_equal(w, (ssize_t)wn);
        assert_memory_equal(out, want_wire, wn);
        sv_ss22_tcp_deinit(&t);
        sv_ss22_creds_free(c);
    }
}

static sv_ss22_creds *multi(const json_t *v, bool with_user)
{
    uint8_t ipsk[32], keys[2][32] = {{0}};
    enum sv_ss_cipher ci = cipher_of(str(v, "method"));
    size_t k = sv_ss22_key_len(ci);
    assert_int_equal(sv_ss22_key_decode(str(v, "ipsk_base64"), k, ipsk), 0);
    memset(keys[0], 0x5a, sizeof keys[0]); /* another user first */
    assert_int_equal(sv_ss22_key_decode(str(v, "upsk_base64"), k, keys[1]), 0);
    sv_ss22_creds *c = NULL;
    sv_error err = {0};
    assert_int_equal(sv_ss22_creds_from_keys("t", ci, ipsk, (const uint8_t(*)[32])keys,
                                             with_user ? 2 : 1, &c, &err),
                     0);
    return c;
}

/* EIH, both AES sizes: the user is found by its identity header; the response uses uPSK. */
static void test_eih_vectors(void **state)
{
    (void)state;
    const json_t *eih = json_object_get(g_vec, "tcp_eih");
    assert_int_equal(json_array_size(eih), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_array_get(eih, i);
        sv_ss22_creds *c = multi(v, true);
        uint8_t hash[16];
        unhex(str(v, "upsk_blake3_hash_first16"), hash, sizeof hash);
        assert_int_equal(sv_ss22_lookup(c, hash), 1);
        uint8_t wire[1024], salt[32], out[512], want[512];
        size_t n = unhex(str(v, "request_wire_hex"), wire, sizeof wire);
        for (size_t step = 0; step <= 1; step++) {
            uint8_t copy[1024];
            memcpy(copy, wire, n);
            sv_ss22_tcp t = {0};
            sv_ss22_tcp_init(&t, cipher_of(str(v, "method")));
            t.now = TS + 30; /* the edge of the window is accepted */
            run r;
            feed_all(&t, c, copy, n, step, &r);
            assert_int_equal(r.err, 0);
            assert_int_equal(r.auth, 1);
            assert_int_equal(r.opens, 1);
            t.now = TS;
            unhex(str(v, "response_wire_hex"), want, sizeof want);
            memcpy(salt, want, sizeof salt); /* the wire starts with the response salt */
            g_salt = salt;
            t.rng = fixed_salt;
            uint8_t payload[16];
            size_t pn = unhex(str(v, "response_payload_plain"), payload, sizeof payload);
            ssize_t w = sv_ss22_tcp_frame(&t, c, payload, pn, out, sizeof out);
            size_t wn = unhex(str(v, "response_wire_hex"), want, sizeof want);
            assert_int_equal(w, (ssize_t)wn);
            assert_memory_equal(out, want, wn);
            sv_ss22_tcp_deinit(&t);
        }
        /* an identity header of nobody the server knows: refused, drained */
        sv_ss22_creds *other = multi(v, false);
        sv_ss22_tcp t = {0};
        sv_ss22_tcp_init(&t, cipher_of(str(v, "method")));
        t.now = TS;
        run r;
        feed_all(&t, other, wire, n, 0, &r);
        assert_int_equal(r.err, -EBADMSG);
        assert_int_equal(r.policy, SV_PROBE_DRAIN);
        assert_int_equal(r.auth, -1);
        sv_ss22_tcp_deinit(&t);
        sv_ss22_creds_free(other);
        sv_ss22_creds_free(c);
    }
}

/* A request 60 s old (or 31 s ahead), a replayed salt, a corrupt header: refused, drained. */
static void test_refusals(void **state)
{
    (void)state;
    const json_t *v = json_array_get(json_object_get(g_vec, "tcp"), 0);
    sv_ss22_creds *c = single(v);
    uint8_t wire[1024], copy[1024];
    size_t n = unhex(str(v, "request.wire_hex"), wire, sizeof wire);
    struct {
        int64_t now;
        int want;
    } clocks[] = {{TS + 60, -ETIME}, {TS - 31, -ETIME}, {TS + 31, -ETIME}, {TS - 30, 0}};
    for (size_t i = 0; i < sizeof clocks / sizeof clocks[0]; i++) {
        memcpy(copy, wire, n);
        sv_ss22_tcp t = {0};
        sv_ss22_tcp_init(&t, SV_SS_2022_AES_128_GCM);
        t.now = clocks[i].now;
        run r;
        feed_all(&t, c, copy, n, 0, &r);
        assert_int_equal(r.err, clocks[i].want);
        if (r.err != 0) {
            assert_int_equal(r.policy, SV_PROBE_DRAIN);
            assert_int_equal(r.auth, -1);
        }
        sv_ss22_tcp_deinit(&t);
    }
    /* replayed salt: the first is served, the same bytes again are refused */
    sv_replay *rp = sv_replay_new(64);
    sv_ss22_creds_set_replay(c, rp);
    for (int round = 0; round < 2; round++) {
        memcpy(copy, wire, n);
        sv_ss22_tcp t = {0};
        sv_ss22_tcp_init(&t, SV_SS_2022_AES_128_GCM);
        t.now = TS;
        run r;
        feed_all(&t, c, copy, n, 0, &r);
        assert_int_equal(r.err, round == 0 ? 0 : -EEXIST);
        sv_ss22_tcp_deinit(&t);
    }
    /* every single-byte corruption of the headers fails to authenticate or parse */
    for (size_t at = 0; at < n; at += 7) {
        memcpy(copy, wire, n);
        copy[at] ^= 0x40;
        sv_ss22_tcp t = {0};
        sv_ss22_tcp_init(&t, SV_SS_2022_AES_128_GCM);
        t.now = TS;
        run r;
        feed_all(&t, c, copy, n, 0, &r);
        assert_true(r.err == -EBADMSG || r.err == -EEXIST);
        assert_int_equal(r.policy, SV_PROBE_DRAIN);
        assert_int_equal(r.opens, 0);
        sv_ss22_tcp_deinit(&t);
    }
    /* a corrupt chunk after the header ends the relay with CLOSE */
    char both[2048];
    snprintf(both, sizeof both, "%s%s", str(v, "request.wire_hex"),
             str(v, "request.next_chunk.wire_hex"));
    size_t bn = unhex(both, copy, sizeof copy);
    copy[bn - 1] ^= 1;
    sv_ss22_creds_set_replay(c, NULL);
    sv_ss22_tcp t = {0};
    sv_ss22_tcp_init(&t, SV_SS_2022_AES_128_GCM);
    t.now = TS;
    run r;
    feed_all(&t, c, copy, bn, 0, &r);
    assert_int_equal(r.err, -EBADMSG);
    assert_int_equal(r.policy, SV_PROBE_CLOSE);
    assert_int_equal(r.opens, 1);
    sv_ss22_tcp_deinit(&t);
    sv_replay_free(rp);
    sv_ss22_creds_free(c);
}

static void test_keys_and_creds(void **state)
{
    (void)state;
    uint8_t k[32];
    assert_int_equal(sv_ss22_key_decode("JWpjnVQ7nrE6KxBNqlzTSQ==", 16, k), 0);
    assert_int_equal(k[0], 0x25);
    assert_int_equal(sv_ss22_key_decode("JWpjnVQ7nrE6KxBNqlzTSQ==", 32, k), -EINVAL);
    assert_int_equal(sv_ss22_key_decode("JWpjnVQ7nrE6KxBNqlzTSQ=", 16, k), -EINVAL);
    assert_int_equal(sv_ss22_key_decode("JWpjnVQ7nrE6KxBNqlzT*Q==", 16, k), -EINVAL);
    assert_int_equal(sv_ss22_key_decode("JWpjnVQ7nrE6KxBNqlzTSR==", 16, k), -EINVAL);
    assert_int_equal(sv_ss22_key_decode(NULL, 16, k), -EINVAL);
    /* Xboard: the user key is the first 16/32 characters of the UUID */
    const char *uuid = "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    assert_int_equal(sv_ss22_user_key(uuid, 16, k), 0);
    assert_memory_equal(k, "5a1b2c3d-4e5f-4a", 16);
    assert_int_equal(sv_ss22_user_key("short", 16, k), -EINVAL);

    sv_ss22_creds *c = NULL;
    sv_error err = {0};
    const char *two[] = {uuid, "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"};
    const char *same[] = {uuid, "5a1b2c3d-4e5f-4a6b-0000-000000000000"};
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_AES_128_GCM, NULL, two, 2, &c, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "server_key"));
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_AES_128_GCM, "bad", two, 2, &c, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "server_key"));
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_CHACHA20_POLY1305,
                                       "klmDzbDBonLE+cn2Qqk3rs5quAvEsruDf/tlHQhgXP0=", two, 2, &c,
                                       &err),
                     -EINVAL);
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_AES_128_GCM,
                                       "JWpjnVQ7nrE6KxBNqlzTSQ==", same, 2, &c, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "same"));
    const char *shortsec[] = {"abc"};
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_AES_256_GCM, NULL, shortsec, 1, &c, &err),
                     -EINVAL);
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_AES_128_GCM, NULL, shortsec, 1, &c, &err),
                     -EINVAL);
    assert_int_equal(sv_ss22_creds_new("n1", SV_SS_2022_AES_256_GCM,
                                       "klmDzbDBonLE+cn2Qqk3rs5quAvEsruDf/tlHQhgXP0=", two, 2, &c,
                                       &err),
                     0);
    uint8_t h[16], key[32];
    memcpy(key, two[1], 32);
    sv_blake3_hash(key, 32, h, 16);
    assert_int_equal(sv_ss22_lookup(c, h), 1);
    h[0] ^= 1;
    assert_int_equal(sv_ss22_lookup(c, h), -1);
    sv_ss22_creds_free(c);
}

/* UDP, AES methods: the vectors' client datagrams open, their replies are built byte for byte. */
static void check_udp(const json_t *c2s, const json_t *s2c, const sv_ss22_creds *c, int user,
                      const char *dest, const char *payload)
{
    uint8_t pkt[512], out[512], want[512], sid[8], csid[8];
    size_t n = unhex(str(c2s, "wire_hex"), pkt, sizeof pkt);
    sv_aead ctx = {0};
    sv_ss22_udp_in in;
    memset(&in, 0, sizeof in);
    uint8_t copy[512];
    memcpy(copy, pkt, n);
    assert_int_equal(sv_ss22_udp_open(c, TS + 60, copy, n, &in, &ctx), -ETIME);
    memcpy(copy, pkt, n);
    copy[n - 1] ^= 1;
    assert_int_equal(sv_ss22_udp_open(c, TS, copy, n, &in, &ctx), -EBADMSG);
    assert_int_equal(sv_ss22_udp_open(c, TS, pkt, n, &in, &ctx), 0);
    assert_int_equal(in.user, user);
    unhex(str(c2s, "client_session_id"), csid, sizeof csid);
    assert_memory_equal(in.session_id, csid, 8);
    assert_int_equal(in.packet_id, json_integer_value(json_object_get(c2s, "packet_id")));
    char d[300];
    sv_dest_format(&in.dest, d, sizeof d);
    assert_string_equal(d, dest);
    assert_int_equal(in.dest.network, SV_NET_UDP);
    assert_int_equal(in.len, strlen(payload));
    assert_memory_equal(in.payload, payload, in.len);

    /* the reply: from the destination, the server's own session ID */
    uint8_t plain[512];
    size_t pn = unhex(str(s2c, "body_plain"), plain, sizeof plain);
    uint8_t sep[16];
    unhex(str(s2c, "separate_header_plain"), sep, sizeof sep);
    memcpy(sid, sep, 8); /* the server's session ID, packet ID 0 */
    sv_dest from = in.dest;
    size_t addr_at = 1 + 8 + 8 + 2;
    ssize_t a = sv_dest_parse(plain + addr_at, pn - addr_at, &from);
    assert_true(a > 0);
    ssize_t w = sv_ss22_udp_seal(c, user, sid, 0, csid, TS, &from, plain + addr_at + a,
                                 pn - addr_at - (size_t)a, out, sizeof out, &ctx, NULL);
    size_t wn = unhex(str(s2c, "wire_hex"), want, sizeof want);
    assert_int_equal(w, (ssize_t)wn);
    assert_memory_equal(out, want, wn);
    assert_int_equal(sv_ss22_udp_seal(c, user, sid, 0, csid, TS, &from, plain, 100, out, 100,
                                      &ctx, NULL),
                     -EMSGSIZE);
    sv_aead_deinit(&ctx);
}

static void test_udp_vectors(void **state)
{
    (void)state;
    const json_t *udp = json_object_get(g_vec, "udp_aes");
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_array_get(udp, i);
        sv_ss22_creds *c = NULL;
        sv_error err;
        uint8_t key[32] = {0};
        enum sv_ss_cipher ci = cipher_of(str(v, "method"));
        assert_int_equal(sv_ss22_key_decode(str(v, "psk_base64"), sv_ss22_key_len(ci), key), 0);
        assert_int_equal(sv_ss22_creds_from_keys("t", ci, NULL, (const uint8_t(*)[32])key, 1, &c,
                                                 &err),
                         0);
        check_udp(json_object_get(v, "client_to_server"), json_object_get(v, "server_to_client"),
                  c, 0, "127.0.0.1:53", "udp ping 2022");
        sv_ss22_creds_free(c);
    }
    const json_t *v = json_object_get(g_vec, "udp_eih_aes128");
    sv_ss22_creds *c = multi(v, true);
    check_udp(json_object_get(v, "client_to_server"), json_object_get(v, "server_to_client"), c,
              1, "example.test:53", "eih udp");
    sv_ss22_creds_free(c);
    /* an identity header of nobody known */
    c = multi(v, false);
    uint8_t pkt[512];
    size_t n = unhex(str(v, "client_to_server.wire_hex"), pkt, sizeof pkt);
    sv_aead ctx = {0};
    sv_ss22_udp_in in;
    assert_int_equal(sv_ss22_udp_open(c, TS, pkt, n, &in, &ctx), -EBADMSG);
    assert_int_equal(sv_ss22_udp_open(c, TS, pkt, 20, &in, &ctx), -EPROTO);
    sv_aead_deinit(&ctx);
    sv_ss22_creds_free(c);
}

/* chacha20 (§3.6): XChaCha20-Poly1305 under the PSK, session and packet IDs in the body. */
static void test_udp_chacha_vectors(void **state)
{
    (void)state;
    const json_t *v = json_object_get(g_vec, "udp_chacha20");
    uint8_t key[32] = {0}, pkt[512], copy[512], out[512], want[512], nonce[24], sid[8];
    assert_int_equal(sv_ss22_key_decode(str(v, "psk_base64"), 32, key), 0);
    sv_ss22_creds *c = NULL;
    sv_error err;
    assert_int_equal(sv_ss22_creds_from_keys("t", SV_SS_2022_CHACHA20_POLY1305, NULL,
                                             (const uint8_t(*)[32])key, 1, &c, &err),
                     0);
    size_t n = unhex(str(v, "client_to_server.wire_hex"), pkt, sizeof pkt);
    sv_aead ctx = {0};
    sv_ss22_udp_in in;
    memcpy(copy, pkt, n);
    assert_int_equal(sv_ss22_udp_open(c, TS - 31, copy, n, &in, &ctx), -ETIME);
    memcpy(copy, pkt, n);
    copy[3] ^= 1; /* the nonce */
    assert_int_equal(sv_ss22_udp_open(c, TS, copy, n, &in, &ctx), -EBADMSG);
    assert_int_equal(sv_ss22_udp_open(c, TS, pkt, n, &in, &ctx), 0);
    uint8_t csid[8];
    unhex(str(v, "client_to_server.client_session_id"), csid, sizeof csid);
    assert_memory_equal(in.session_id, csid, 8);
    assert_int_equal(in.packet_id, 0);
    char d[300];
    sv_dest_format(&in.dest, d, sizeof d);
    assert_string_equal(d, "127.0.0.1:53");
    assert_int_equal(in.len, strlen("udp ping chacha"));
    assert_memory_equal(in.payload, "udp ping chacha", in.len);

    unhex(str(v, "server_to_client.nonce"), nonce, sizeof nonce);
    unhex(str(v, "server_to_client.server_session_id"), sid, sizeof sid);
    g_salt = nonce;
    ssize_t w = sv_ss22_udp_seal(c, 0, sid, 0, csid, TS, &in.dest,
                                 (const uint8_t *)"udp pong chacha", 15, out, sizeof out, &ctx,
                                 fixed_salt);
    size_t wn = unhex(str(v, "server_to_client.wire_hex"), want, sizeof want);
    assert_int_equal(w, (ssize_t)wn);
    assert_memory_equal(out, want, wn);
    sv_aead_deinit(&ctx);
    sv_ss22_creds_free(c);
}

/* HChaCha20 (sv_hchacha20, the key step of the UDP XChaCha20 above) on the test vector of
 * draft-irtf-cfrg-xchacha-03 §2.2.1. */
static void test_hchacha20_vector(void **state)
{
    (void)state;
    uint8_t key[32], out[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)i;
    static const uint8_t nonce[16] = {0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x4a,
                                      0x00, 0x00, 0x00, 0x00, 0x31, 0x41, 0x59, 0x27};
    static const uint8_t want[32] = {
        0x82, 0x41, 0x3b, 0x42, 0x27, 0xb2, 0x7b, 0xfe, 0xd3, 0x0e, 0x42, 0x50,
        0x8a, 0x87, 0x7d, 0x73, 0xa0, 0xf9, 0xe4, 0xd5, 0x8a, 0x74, 0xa8, 0x53,
        0xc1, 0x2e, 0xc4, 0x13, 0x26, 0xd3, 0xec, 0xdc};
    sv_hchacha20(key, nonce, out);
    assert_memory_equal(out, want, sizeof want);
}

/* The packet-ID window: each ID once, out of order within the window, nothing too old. */
static void test_udp_window(void **state)
{
    (void)state;
    sv_ss22_window w;
    memset(&w, 0, sizeof w);
    assert_true(sv_ss22_window_accept(&w, 0));
    assert_false(sv_ss22_window_accept(&w, 0));
    assert_true(sv_ss22_window_accept(&w, 5));
    assert_true(sv_ss22_window_accept(&w, 3));
    assert_false(sv_ss22_window_accept(&w, 3));
    assert_true(sv_ss22_window_accept(&w, 5 + SV_SS22_UDP_WINDOW - 1));
    assert_false(sv_ss22_window_accept(&w, 4)); /* now SV_SS22_UDP_WINDOW below the top */
    assert_true(sv_ss22_window_accept(&w, 6));
    assert_false(sv_ss22_window_accept(&w, 6));
    assert_true(sv_ss22_window_accept(&w, 100000));
    assert_false(sv_ss22_window_accept(&w, 6));
    assert_true(sv_ss22_window_accept(&w, 100000 - SV_SS22_UDP_WINDOW + 1));
    assert_false(sv_ss22_window_accept(&w, 100000 - SV_SS22_UDP_WINDOW));
    assert_false(sv_ss22_window_accept(&w, UINT64_MAX));
    /* a slot reused by the sliding window is free again */
    assert_true(sv_ss22_window_accept(&w, 100000 + SV_SS22_UDP_WINDOW));
    assert_false(sv_ss22_window_accept(&w, 100000 + SV_SS22_UDP_WINDOW));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_vectors),
        cmocka_unit_test(test_eih_vectors),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_keys_and_creds),
        cmocka_unit_test(test_udp_vectors),
        cmocka_unit_test(test_udp_window),
        cmocka_unit_test(test_udp_chacha_vectors),
        cmocka_unit_test(test_hchacha20_vector),
    };
    return cmocka_run_group_tests(tests, load_vectors, free_vectors);
}
