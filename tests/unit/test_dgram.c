/*
 * Unit tests of the datagram seam (supervisor/proto/dgram.h, issue 25): the Shadowsocks AEAD
 * and Shadowsocks 2022 datagram cores taken from the registration table (sv_dgram_ops_for,
 * plane.c) and driven only through it, on the official vectors (tests/unit/vectors/
 * shadowsocks-aead.json, shadowsocks-2022.json): each vector's client datagram opens to its
 * user, destination and payload; each reply seals to the vector's wire bytes; a client datagram
 * made by the existing encoder opens through the table; a wrong key, a stale timestamp and a
 * replayed packet ID are refused with the cores' own errors; a guided open past its limit asks
 * for the scan, which finds the user.
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

#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/ss2022.h"
#include "supervisor/runtime.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define TS 1700000000 /* the 2022 vectors' timestamp */

static json_t *g_aead, *g_2022;

static json_t *load(const char *name)
{
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/%s", top ? top : TOP_SRCDIR, name);
    json_error_t err;
    json_t *v = json_load_file(path, 0, &err);
    if (v == NULL)
        fprintf(stderr, "%s: %s\n", path, err.text);
    return v;
}

static int setup(void **state)
{
    (void)state;
    g_aead = load("shadowsocks-aead.json");
    g_2022 = load("shadowsocks-2022.json");
    return g_aead != NULL && g_2022 != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_aead);
    json_decref(g_2022);
    return 0;
}

/* The string at dotted @p path under @p o. */
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

/* What the fixed random source gives next (salts, nonces, session IDs). */
static uint8_t g_rand[32];
static void fixed_rng(uint8_t *buf, size_t n)
{
    assert_true(n <= sizeof g_rand);
    memcpy(buf, g_rand, n);
}

static void set_rand(const char *hex)
{
    memset(g_rand, 0, sizeof g_rand);
    unhex(hex, g_rand, sizeof g_rand);
}

/* ---------- Shadowsocks AEAD ---------- */

static char pw_other[] = "another-user", pw_vec[] = "katana-test-pass";

/* A Shadowsocks inbound of @p cipher whose users are "another-user" (index 0) and, with
 * @p with_vector_user, the vectors' password (index 1); its credential table from the stream
 * core the registration table names, and the datagram core beside it. */
static const sv_dgram_ops *ss_inbound(enum sv_ss_cipher cipher, bool with_vector_user,
                                      void **creds)
{
    static sv_user users[2] = {{.id = 7, .secret = pw_other}, {.id = 9, .secret = pw_vec}};
    sv_user_set set = {.tag = (char *)"s", .users = users, .n_users = with_vector_user ? 2 : 1};
    sv_inbound_spec in = {.tag = (char *)"in", .protocol = SV_INBOUND_SHADOWSOCKS,
                          .ss_cipher = cipher, .udp = true};
    const sv_proto_ops *core = sv_proto_ops_for(&in);
    const sv_dgram_ops *ops = sv_dgram_ops_for(&in);
    assert_non_null(core);
    assert_non_null(ops);
    assert_string_equal(ops->name, core->name);
    sv_error err = {0};
    assert_int_equal(core->creds_new(&in, &set, creds, &err), 0);
    return ops;
}

static void ss_free(void *creds)
{
    sv_inbound_spec in = {.protocol = SV_INBOUND_SHADOWSOCKS};
    sv_proto_ops_for(&in)->creds_free(creds);
}

static enum sv_ss_cipher aead_cipher(const json_t *c)
{
    const char *name = str(c, "cipher");
    return strcmp(name, "aes-128-gcm") == 0   ? SV_SS_AES_128_GCM
           : strcmp(name, "aes-256-gcm") == 0 ? SV_SS_AES_256_GCM
                                              : SV_SS_CHACHA20_POLY1305;
}

/* The vectors' client datagrams open through the table to user 1 (after another user's key). */
static void ss__vector_datagram__opens_to_user_dest_payload(void **state)
{
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        const json_t *c = json_array_get(json_object_get(g_aead, "cases"), i);
        void *creds = NULL;
        const sv_dgram_ops *ops = ss_inbound(aead_cipher(c), true, &creds);
        uint8_t pkt[1024];
        size_t n = unhex(str(c, "udp.client_to_server.wire_hex"), pkt, sizeof pkt);
        sv_dgram_guide g = {.hint = -1, .limit = 16};
        sv_dgram_in in;
        sv_aead ctx = {0};
        assert_int_equal(ops->open(creds, TS, &g, pkt, n, &in, &ctx), 0);
        assert_int_equal(g.trials, 2);
        assert_int_equal(in.user, 1);
        assert_int_equal(in.dest.network, SV_NET_UDP);
        const json_t *addr = json_object_get(json_object_get(json_object_get(json_object_get(
                                                 c, "udp"), "client_to_server"), "decoded"),
                                             "address");
        char want[300], got[300];
        const char *host = str(addr, "host");
        int port = (int)json_integer_value(json_object_get(addr, "port"));
        snprintf(want, sizeof want, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
        sv_dest_format(&in.dest, got, sizeof got);
        assert_string_equal(got, want);
        const char *text = str(c, "udp.client_to_server.decoded.payload_text");
        assert_int_equal(in.len, strlen(text));
        assert_memory_equal(in.payload, text, in.len);
        assert_true(in.payload > pkt && in.payload + in.len <= pkt + n);
        sv_aead_deinit(&ctx);
        ss_free(creds);
    }
}

/* A reply sealed through the table with the vector's salt is the vector's wire; too small an
 * output is -EMSGSIZE. Shadowsocks keeps no session state. */
static void ss__reply__matches_vector_wire(void **state)
{
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        const json_t *c = json_array_get(json_object_get(g_aead, "cases"), i);
        void *creds = NULL;
        const sv_dgram_ops *ops = ss_inbound(aead_cipher(c), true, &creds);
        assert_int_equal(ops->session_size, 0);
        assert_null(ops->session_match);
        uint8_t plain[1024], want[1024], out[1024];
        size_t pn = unhex(str(c, "udp.server_to_client.plaintext_hex"), plain, sizeof plain);
        size_t wn = unhex(str(c, "udp.server_to_client.wire_hex"), want, sizeof want);
        set_rand(str(c, "udp.server_to_client.salt"));
        sv_dest from;
        ssize_t al = sv_dest_parse(plain, pn, &from);
        assert_true(al > 0);
        sv_aead ctx = {0};
        ssize_t w = ops->seal(NULL, creds, 1, TS, &from, plain + al, pn - (size_t)al, out,
                              sizeof out, &ctx, fixed_rng);
        assert_int_equal(w, (ssize_t)wn);
        assert_memory_equal(out, want, wn);
        assert_true(wn <= pn - (size_t)al + ops->overhead);
        assert_int_equal(ops->seal(NULL, creds, 1, TS, &from, plain + al, pn - (size_t)al, out,
                                   wn - 1, &ctx, fixed_rng),
                         -EMSGSIZE);
        sv_aead_deinit(&ctx);
        ss_free(creds);
    }
}

/* A datagram of the existing encoder (sv_ss_udp_seal with user 1's key) opens through the
 * table; with only another user's key it is refused with -EBADMSG and left as it was. */
static void ss__encoder_round_trip_and_wrong_key(void **state)
{
    (void)state;
    void *creds = NULL, *wrong = NULL;
    const sv_dgram_ops *ops = ss_inbound(SV_SS_AES_256_GCM, true, &creds);
    ss_inbound(SV_SS_AES_256_GCM, false, &wrong);
    uint8_t key[SV_SS_KEY_MAX], pkt[512], copy[512];
    sv_ss_password_to_key(SV_SS_AES_256_GCM, pw_vec, key);
    sv_dest to = {.atyp = SV_ATYP_IPV4, .ip = {10, 0, 0, 1}, .port = 53};
    ssize_t n = sv_ss_udp_seal(SV_SS_AES_256_GCM, key, &to, (const uint8_t *)"query", 5, pkt,
                               sizeof pkt, NULL);
    assert_true(n > 0);
    memcpy(copy, pkt, (size_t)n);
    sv_aead ctx = {0};
    sv_dgram_in in;
    sv_dgram_guide g = {.hint = -1, .limit = 16};
    assert_int_equal(ops->open(wrong, TS, &g, copy, (size_t)n, &in, &ctx), -EBADMSG);
    assert_memory_equal(copy, pkt, (size_t)n);
    assert_int_equal(ops->open(creds, TS, NULL, copy, (size_t)n, &in, &ctx), 0);
    assert_int_equal(in.user, 1);
    assert_int_equal(in.dest.port, 53);
    assert_int_equal(in.len, 5);
    assert_memory_equal(in.payload, "query", 5);
    assert_int_equal(ops->open(creds, TS, NULL, pkt, 20, &in, &ctx), -EPROTO);
    sv_aead_deinit(&ctx);
    ss_free(wrong);
    ss_free(creds);
}

/* Guided: a wrong hint with a limit of 1 asks for the scan (-EAGAIN, the datagram as it was);
 * the table's scan finds user 1, and the answer as the hint opens it in one trial. */
static void ss__guide_limit__scan_then_hint(void **state)
{
    (void)state;
    void *creds = NULL;
    const sv_dgram_ops *ops = ss_inbound(SV_SS_CHACHA20_POLY1305, true, &creds);
    assert_non_null(ops->scan);
    uint8_t key[SV_SS_KEY_MAX], pkt[512], copy[512];
    sv_ss_password_to_key(SV_SS_CHACHA20_POLY1305, pw_vec, key);
    sv_dest to = {.atyp = SV_ATYP_IPV4, .ip = {10, 0, 0, 2}, .port = 123};
    ssize_t n = sv_ss_udp_seal(SV_SS_CHACHA20_POLY1305, key, &to, (const uint8_t *)"ntp", 3,
                               pkt, sizeof pkt, NULL);
    assert_true(n > 0);
    memcpy(copy, pkt, (size_t)n);
    sv_aead ctx = {0};
    sv_dgram_in in;
    sv_dgram_guide g = {.hint = 0, .limit = 1};
    assert_int_equal(ops->open(creds, TS, &g, copy, (size_t)n, &in, &ctx), -EAGAIN);
    assert_int_equal(g.trials, 1);
    assert_memory_equal(copy, pkt, (size_t)n);
    unsigned trials = 0;
    int user = ops->scan(creds, copy, (size_t)n, &trials);
    assert_int_equal(user, 1);
    sv_dgram_guide once = {.hint = user, .limit = 1};
    assert_int_equal(ops->open(creds, TS, &once, copy, (size_t)n, &in, &ctx), 0);
    assert_int_equal(once.trials, 1);
    assert_int_equal(in.user, 1);
    sv_aead_deinit(&ctx);
    ss_free(creds);
}

/* ---------- Shadowsocks 2022 ---------- */

static const sv_dgram_ops *ss22_ops(void)
{
    sv_inbound_spec in = {.protocol = SV_INBOUND_SS2022, .udp = true};
    const sv_dgram_ops *ops = sv_dgram_ops_for(&in);
    assert_non_null(ops);
    assert_string_equal(ops->name, sv_proto_ops_for(&in)->name);
    assert_non_null(ops->session_match);
    assert_non_null(ops->session_init);
    assert_non_null(ops->session_accept);
    assert_null(ops->scan);
    return ops;
}

static enum sv_ss_cipher cipher_2022(const char *m)
{
    return strcmp(m, "2022-blake3-aes-128-gcm") == 0   ? SV_SS_2022_AES_128_GCM
           : strcmp(m, "2022-blake3-aes-256-gcm") == 0 ? SV_SS_2022_AES_256_GCM
                                                       : SV_SS_2022_CHACHA20_POLY1305;
}

/* The credential table of the stream core (the type its creds_new builds) for the vector's
 * single PSK, or its EIH keys with another user first (the vector's user is then index 1). */
static sv_ss22_creds *ss22_creds(const json_t *v)
{
    enum sv_ss_cipher ci = cipher_2022(str(v, "method"));
    size_t k = sv_ss22_key_len(ci);
    uint8_t ipsk[32], keys[2][32];
    memset(keys, 0x5a, sizeof keys);
    bool eih = json_object_get(v, "ipsk_base64") != NULL;
    if (eih) {
        assert_int_equal(sv_ss22_key_decode(str(v, "ipsk_base64"), k, ipsk), 0);
        assert_int_equal(sv_ss22_key_decode(str(v, "upsk_base64"), k, keys[1]), 0);
    } else {
        assert_int_equal(sv_ss22_key_decode(str(v, "psk_base64"), k, keys[0]), 0);
    }
    sv_ss22_creds *c = NULL;
    sv_error err = {0};
    assert_int_equal(sv_ss22_creds_from_keys("t", ci, eih ? ipsk : NULL,
                                             (const uint8_t(*)[32])keys, eih ? 2 : 1, &c, &err),
                     0);
    return c;
}

/* One 2022 vector through the table: open (stale and corrupt ones refused first), a new
 * session with the vector's server session ID, its packet ID accepted once, and the reply
 * sealed to the vector's wire; the next reply has the next packet ID. */
static void check_2022(const json_t *v, int user, const char *dest, const char *payload,
                       const char *reply)
{
    const sv_dgram_ops *ops = ss22_ops();
    sv_ss22_creds *c = ss22_creds(v);
    const json_t *c2s = json_object_get(v, "client_to_server");
    const json_t *s2c = json_object_get(v, "server_to_client");
    uint8_t pkt[512], copy[512], out[512], want[512], csid[8];
    size_t n = unhex(str(c2s, "wire_hex"), pkt, sizeof pkt);
    sv_aead ctx = {0};
    sv_dgram_in in;
    memcpy(copy, pkt, n);
    assert_int_equal(ops->open(c, TS + 60, NULL, copy, n, &in, &ctx), -ETIME);
    memcpy(copy, pkt, n);
    copy[n - 1] ^= 1;
    assert_int_equal(ops->open(c, TS, NULL, copy, n, &in, &ctx), -EBADMSG);
    assert_int_equal(ops->open(c, TS, NULL, pkt, 20, &in, &ctx), -EPROTO);
    assert_int_equal(ops->open(c, TS, NULL, pkt, n, &in, &ctx), 0);
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

    void *session = calloc(1, ops->session_size);
    assert_non_null(session);
    const char *sid_hex = json_object_get(s2c, "server_session_id") != NULL
                              ? str(s2c, "server_session_id")
                              : str(s2c, "separate_header_plain"); /* its first 8 bytes */
    set_rand(sid_hex);
    assert_int_equal(ops->session_init(session, &in, fixed_rng), 0);
    assert_true(ops->session_match(session, &in));
    assert_true(ops->session_accept(session, &in));
    assert_false(ops->session_accept(session, &in)); /* the same packet ID again */
    sv_dgram_in other = in;
    other.session_id[0] ^= 1;
    assert_false(ops->session_match(session, &other));

    if (cipher_2022(str(v, "method")) == SV_SS_2022_CHACHA20_POLY1305)
        set_rand(str(s2c, "nonce")); /* the reply's random nonce (§3.6) */
    sv_dest from = in.dest;
    const uint8_t *body = (const uint8_t *)reply;
    size_t blen = reply != NULL ? strlen(reply) : 0;
    uint8_t plain[512];
    if (reply == NULL) { /* the reply's address and payload are those of its plain body */
        size_t pn = unhex(str(s2c, "body_plain"), plain, sizeof plain);
        size_t at = 1 + 8 + 8 + 2;
        ssize_t a = sv_dest_parse(plain + at, pn - at, &from);
        assert_true(a > 0);
        body = plain + at + a;
        blen = pn - at - (size_t)a;
    }
    ssize_t w = ops->seal(session, c, user, TS, &from, body, blen, out, sizeof out, &ctx,
                          fixed_rng);
    size_t wn = unhex(str(s2c, "wire_hex"), want, sizeof want);
    assert_int_equal(w, (ssize_t)wn);
    assert_memory_equal(out, want, wn);
    assert_true(wn <= blen + ops->overhead);
    w = ops->seal(session, c, user, TS, &from, body, blen, out, sizeof out, &ctx, fixed_rng);
    assert_int_equal(w, (ssize_t)wn);
    assert_memory_not_equal(out, want, wn); /* packet ID 1 */
    assert_int_equal(ops->seal(session, c, user, TS, &from, body, blen, out, 40, &ctx, NULL),
                     -EMSGSIZE);
    if (ops->session_deinit != NULL)
        ops->session_deinit(session);
    free(session);
    sv_aead_deinit(&ctx);
    sv_ss22_creds_free(c);
}

static void ss2022__aes_vectors__open_session_seal(void **state)
{
    (void)state;
    const json_t *udp = json_object_get(g_2022, "udp_aes");
    for (size_t i = 0; i < json_array_size(udp); i++)
        check_2022(json_array_get(udp, i), 0, "127.0.0.1:53", "udp ping 2022", NULL);
    check_2022(json_object_get(g_2022, "udp_eih_aes128"), 1, "example.test:53", "eih udp",
               NULL);
}

static void ss2022__chacha_vector__open_session_seal(void **state)
{
    (void)state;
    check_2022(json_object_get(g_2022, "udp_chacha20"), 0, "127.0.0.1:53", "udp ping chacha",
               "udp pong chacha");
}

/* A vector's datagram opened with another PSK of its method is refused with -EBADMSG, as is
 * the EIH vector's with a table that does not know its user. */
static void ss2022__wrong_key__refused(void **state)
{
    (void)state;
    const sv_dgram_ops *ops = ss22_ops();
    const json_t *v = json_array_get(json_object_get(g_2022, "udp_aes"), 0);
    enum sv_ss_cipher ci = cipher_2022(str(v, "method"));
    uint8_t key[1][32], pkt[512];
    memset(key, 0x5a, sizeof key);
    sv_ss22_creds *c = NULL;
    sv_error err = {0};
    assert_int_equal(sv_ss22_creds_from_keys("t", ci, NULL, (const uint8_t(*)[32])key, 1, &c,
                                             &err),
                     0);
    size_t n = unhex(str(v, "client_to_server.wire_hex"), pkt, sizeof pkt);
    sv_aead ctx = {0};
    sv_dgram_in in;
    assert_int_equal(ops->open(c, TS, NULL, pkt, n, &in, &ctx), -EBADMSG);
    sv_ss22_creds_free(c);
    v = json_object_get(g_2022, "udp_eih_aes128");
    uint8_t ipsk[16];
    assert_int_equal(sv_ss22_key_decode(str(v, "ipsk_base64"), 16, ipsk), 0);
    assert_int_equal(sv_ss22_creds_from_keys("t", cipher_2022(str(v, "method")), ipsk,
                                             (const uint8_t(*)[32])key, 1, &c, &err),
                     0);
    n = unhex(str(v, "client_to_server.wire_hex"), pkt, sizeof pkt);
    assert_int_equal(ops->open(c, TS, NULL, pkt, n, &in, &ctx), -EBADMSG);
    sv_aead_deinit(&ctx);
    sv_ss22_creds_free(c);
}

/* Neither protocol carried inside a stream only has a datagram core on its own socket. */
static void table__stream_only_protocols__none(void **state)
{
    (void)state;
    enum sv_inbound_protocol ps[] = {SV_INBOUND_TROJAN, SV_INBOUND_VLESS, SV_INBOUND_VMESS};
    for (size_t i = 0; i < 3; i++) {
        sv_inbound_spec in = {.protocol = ps[i]};
        assert_null(sv_dgram_ops_for(&in));
    }
    sv_inbound_spec mux = {.protocol = SV_INBOUND_SHADOWSOCKS, .ws = {.mux = true}};
    sv_inbound_spec plain = {.protocol = SV_INBOUND_SHADOWSOCKS};
    assert_ptr_equal(sv_dgram_ops_for(&mux), sv_dgram_ops_for(&plain));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ss__vector_datagram__opens_to_user_dest_payload),
        cmocka_unit_test(ss__reply__matches_vector_wire),
        cmocka_unit_test(ss__encoder_round_trip_and_wrong_key),
        cmocka_unit_test(ss__guide_limit__scan_then_hint),
        cmocka_unit_test(ss2022__aes_vectors__open_session_seal),
        cmocka_unit_test(ss2022__chacha_vector__open_session_seal),
        cmocka_unit_test(ss2022__wrong_key__refused),
        cmocka_unit_test(table__stream_only_protocols__none),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
