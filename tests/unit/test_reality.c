/*
 * Unit tests: the REALITY check and temporary certificate (supervisor/transport/reality.c,
 * issue 11) on the PROTOCOLS-2.md §1.7 vector, and the ways a client fails the §1.3 check; the
 * layer through a transport chain on the hellos of tests/unit/vectors/reality/ (made by
 * tests/fuzz/reality_seeds.py), whole and a byte at a time, and on ClientHellos recorded from
 * the Xray-core and sing-box clients (tests/unit/fixtures/reality/).
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
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "supervisor/transport/reality.h"
#include "tests/unit/tls_target.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

/* §1.7 */
static const char k_priv[] = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
static const char k_share[] = "5869aff450549732cbaaed5e5df9b30a6da31cb0e5742bad5ad4a1a768f1a67b";
static const char k_auth_key[] =
    "a524c9e5d4a2fe035d3077ef1576396d27468d993b599512b5f3bad6ffd5b19b";
static const char k_sealed[] = "1bcac61a72a1debe82181fdc14fb235284ed0f55287dfea8b3650dc269a1e269";
static const char k_pub[] = "cd14b37f956e953194ff7fb73b3d81dcc561d61a7538094b7c3e1a643ee5f3aa";
static const char k_hmac[] =
    "fd1737e1d577b662d0622a8bd0df312d07442fb89cf5b73f33584617d6c95e52"
    "d17caca86472543d87a9f75410dba573ed85520b920edef42f71beaf4dcf61bd";
static const uint64_t k_client_time = 0x65000000u; /* seconds, in P */

static void unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

typedef struct vec {
    uint8_t share[32], random[32], hello[79];
} vec;

/* The 79-byte synthetic ClientHello of §1.7 with the sealed session id at offset 39. */
static void vector(vec *v)
{
    unhex(k_share, v->share, 32);
    for (int i = 0; i < 32; i++)
        v->random[i] = (uint8_t)(0x40 + i);
    static const uint8_t head[] = {0x01, 0x00, 0x00, 0x4b, 0x03, 0x03};
    static const uint8_t tail[] = {0x00, 0x02, 0x13, 0x01, 0x01, 0x00, 0x00, 0x00};
    memcpy(v->hello, head, 6);
    memcpy(v->hello + 6, v->random, 32);
    v->hello[38] = 32;
    unhex(k_sealed, v->hello + 39, 32);
    memcpy(v->hello + 71, tail, 8);
}

static bool check(const sv_reality_auth *a, const vec *v, const char *sni, uint64_t now_ms,
                  uint8_t key[32])
{
    return sv_reality_check(a, v->share, v->random, v->hello, sizeof v->hello, 39, sni,
                            strlen(sni), now_ms, key);
}

static void init(sv_reality_auth *a, const char *priv, const char *sids, const char *names,
                 uint64_t window_ms)
{
    const char *what = NULL;
    assert_int_equal(sv_reality_auth_init(a, priv, sids, names, window_ms, &what), 0);
}

static void vector_is_valid_and_gives_the_auth_key(void **st)
{
    (void)st;
    sv_reality_auth a;
    vec v;
    uint8_t key[32] = {0}, want[32];
    init(&a, k_priv, "aa,0123456789abcdef", "a.test,www.example.com", 0);
    vector(&v);
    unhex(k_auth_key, want, 32);
    assert_true(check(&a, &v, "www.example.com", 1, key));
    assert_memory_equal(key, want, 32);
    sv_reality_auth_deinit(&a);
    /* inside a one-minute window, and exactly at its edge */
    init(&a, k_priv, "0123456789abcdef", "www.example.com", 60000);
    assert_true(check(&a, &v, "www.example.com", k_client_time * 1000 + 30000, key));
    assert_true(check(&a, &v, "www.example.com", k_client_time * 1000 - 60000, key));
    sv_reality_auth_deinit(&a);
}

static void failures_are_invalid(void **st)
{
    (void)st;
    sv_reality_auth a;
    vec v;
    uint8_t key[32];
    vector(&v);
    /* wrong short id (one bit), and an id that is a prefix of the client's */
    init(&a, k_priv, "0123456789abcdee,01234567", "www.example.com", 0);
    assert_false(check(&a, &v, "www.example.com", 1, key));
    sv_reality_auth_deinit(&a);
    /* wrong private key (the client sealed to another public key; byte 2 differs: byte 0 of an
     * X25519 key loses its low bits to clamping) */
    init(&a, "AQIEBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA", "0123456789abcdef", "www.example.com",
         0);
    assert_false(check(&a, &v, "www.example.com", 1, key));
    sv_reality_auth_deinit(&a);
    /* time outside the window, either side */
    init(&a, k_priv, "0123456789abcdef", "www.example.com", 60000);
    assert_false(check(&a, &v, "www.example.com", k_client_time * 1000 + 60001, key));
    assert_false(check(&a, &v, "www.example.com", k_client_time * 1000 - 3600000, key));
    /* wrong or differently cased SNI */
    assert_false(check(&a, &v, "www.example.org", k_client_time * 1000, key));
    assert_false(check(&a, &v, "WWW.example.com", k_client_time * 1000, key));
    /* client version bounds (the vector's client says 26.3.27) */
    a.min_client_ver = 26u << 16 | 3u << 8 | 28u;
    assert_false(check(&a, &v, "www.example.com", k_client_time * 1000, key));
    a.min_client_ver = 26u << 16 | 3u << 8 | 27u;
    assert_true(check(&a, &v, "www.example.com", k_client_time * 1000, key));
    a.max_client_ver = 1u << 16 | 8u << 8 | 1u;
    assert_false(check(&a, &v, "www.example.com", k_client_time * 1000, key));
    a.max_client_ver = 0;
    /* any other byte of the hello (the AAD) or of the sealed id changed */
    vec t = v;
    t.hello[75] ^= 1;
    assert_false(check(&a, &t, "www.example.com", k_client_time * 1000, key));
    t = v;
    t.hello[39 + 31] ^= 0x80;
    assert_false(check(&a, &t, "www.example.com", k_client_time * 1000, key));
    /* a session id that is not 32 bytes long, or out of the message */
    t = v;
    t.hello[38] = 31;
    assert_false(check(&a, &t, "www.example.com", k_client_time * 1000, key));
    assert_false(sv_reality_check(&a, v.share, v.random, v.hello, sizeof v.hello, 60,
                                  "www.example.com", 15, 1, key));
    /* a low-order peer share (X25519 gives zero) */
    t = v;
    memset(t.share, 0, 32);
    assert_false(check(&a, &t, "www.example.com", k_client_time * 1000, key));
    sv_reality_auth_deinit(&a);
}

static void settings_are_parsed_strictly(void **st)
{
    (void)st;
    sv_reality_auth a;
    const char *what = NULL;
    uint8_t key[32], sid[8];
    assert_int_equal(sv_reality_parse_key(k_priv, key), 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(key[i], i + 1);
    assert_int_equal(sv_reality_parse_key("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=", key), 0);
    assert_int_equal(sv_reality_parse_key("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHy", key),
                     -EINVAL);
    assert_int_equal(sv_reality_parse_key("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHy+", key),
                     -EINVAL);
    assert_int_equal(sv_reality_parse_key(NULL, key), -EINVAL);
    assert_int_equal(sv_reality_parse_short_id("ab", 2, sid), 0);
    assert_int_equal(sid[0], 0xab);
    assert_int_equal(sid[1], 0);
    assert_int_equal(sv_reality_parse_short_id("", 0, sid), 0);
    assert_int_equal(sv_reality_parse_short_id("abc", 3, sid), -EINVAL);
    assert_int_equal(sv_reality_parse_short_id("0123456789abcdef01", 18, sid), -EINVAL);
    assert_int_equal(sv_reality_parse_short_id("zz", 2, sid), -EINVAL);
    assert_int_equal(sv_reality_auth_init(&a, "short", "ab", "a.test", 0, &what), -EINVAL);
    assert_string_equal(what, "private_key");
    assert_int_equal(sv_reality_auth_init(&a, k_priv, "abc", "a.test", 0, &what), -EINVAL);
    assert_string_equal(what, "short_ids");
    assert_int_equal(sv_reality_auth_init(&a, k_priv, "ab", "", 0, &what), -EINVAL);
    assert_string_equal(what, "server_names");
    assert_int_equal(sv_reality_auth_init(&a, k_priv, "ab", "a.test,", 0, &what), -EINVAL);
    /* no short id: the all-zero id only */
    assert_int_equal(sv_reality_auth_init(&a, k_priv, NULL, "a.test", 0, &what), 0);
    assert_int_equal(a.n_short_ids, 1);
    static const uint8_t zero[8];
    assert_memory_equal(a.short_ids[0], zero, 8);
    sv_reality_auth_deinit(&a);
}

static void certificate_carries_the_hmac(void **st)
{
    (void)st;
    uint8_t seed[32], auth_key[32], pub[32], mac[64], want[64];
    for (int i = 0; i < 32; i++)
        seed[i] = (uint8_t)(0x80 + i);
    unhex(k_auth_key, auth_key, 32);
    unhex(k_pub, pub, 32);
    unhex(k_hmac, want, 64);
    sv_reality_cert_hmac(auth_key, pub, mac);
    assert_memory_equal(mac, want, 64);

    sv_reality_cert c;
    assert_int_equal(sv_reality_cert_make(&c, seed), 0);
    assert_memory_equal(c.pub, pub, 32);
    uint8_t *der = malloc(c.der_len);
    assert_non_null(der);
    sv_reality_cert_patch(&c, auth_key, der);
    assert_memory_equal(der + c.der_len - 64, want, 64);
    assert_memory_equal(der, c.der, c.der_len - 64);
    /* the patched certificate still parses: serial 0, empty names, the Ed25519 key */
    const uint8_t *p = der;
    X509 *x = d2i_X509(NULL, &p, (long)c.der_len);
    assert_non_null(x);
    assert_int_equal(ASN1_INTEGER_get(X509_get0_serialNumber(x)), 0);
    assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(x)), 0);
    assert_int_equal(X509_NAME_entry_count(X509_get_issuer_name(x)), 0);
    assert_int_equal(X509_get_signature_nid(x), NID_ED25519);
    X509_free(x);
    free(der);
    sv_reality_cert_free(&c);
    sv_reality_cert_free(&c);
    /* a random key differs from run to run */
    sv_reality_cert a, b;
    assert_int_equal(sv_reality_cert_make(&a, NULL), 0);
    assert_int_equal(sv_reality_cert_make(&b, NULL), 0);
    assert_memory_not_equal(a.pub, b.pub, 32);
    sv_reality_cert_free(&a);
    sv_reality_cert_free(&b);
}

/* ---- the layer ---- */

typedef struct drv {
    uint8_t in[SV_REALITY_RAW_MAX + 4096];
    size_t in_len;
    uint8_t up[SV_REALITY_RAW_MAX + 4096];
    size_t up_len;
    uint8_t down[1 << 16];
    size_t down_len;
    uint8_t buf[4096];
    uint8_t stage[SV_CHAIN_STAGE_BYTES];
    int rc;
    unsigned status;
} drv;

static uint8_t *d_alloc(void *ctx, size_t *cap)
{
    drv *d = ctx;
    *cap = sizeof d->buf;
    return d->buf;
}

static bool d_deliver(void *ctx, uint8_t *p, size_t n)
{
    drv *d = ctx;
    assert_true(d->up_len + n <= sizeof d->up);
    memcpy(d->up + d->up_len, p, n);
    d->up_len += n;
    return true;
}

/* Read @p name, relative to the source tree, into d->in. */
static void load_file(drv *d, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", TOP_SRCDIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    d->in_len = fread(d->in, 1, sizeof d->in, f);
    fclose(f);
    assert_true(d->in_len > 0);
}

static void load(drv *d, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/unit/vectors/reality/%s", name);
    load_file(d, path);
}

static uint64_t clock_far(void) { return 0x65000000ull * 1000u + 3600000u; }
static uint64_t clock_near(void) { return 0x65000000ull * 1000u + 1000u; }

/* Feed d->in through a chain holding the layer, @p step bytes at a time (0: whole). */
static void run_layer(const sv_reality_conf *rc, drv *d, size_t step)
{
    sv_layer_conf conf[1] = {{&sv_reality_layer_ops, rc}};
    sv_chain ch;
    assert_int_equal(sv_chain_open(&ch, conf, 1), 0);
    d->up_len = d->down_len = 0;
    d->rc = 0;
    for (size_t off = 0; off < d->in_len && d->rc == 0;) {
        size_t k = step == 0 || step > d->in_len - off ? d->in_len - off : step;
        d->rc = sv_chain_unwrap(&ch, d->in + off, k, d->stage, d_alloc, d_deliver, d);
        off += k;
        size_t len;
        assert_int_equal(sv_chain_pump(&ch), 0);
        const uint8_t *p = sv_chain_out_peek(&ch, &len);
        assert_true(d->down_len + len <= sizeof d->down);
        if (len > 0)
            memcpy(d->down + d->down_len, p, len);
        d->down_len += len;
        sv_chain_out_consume(&ch, len);
    }
    d->status = sv_chain_status(&ch);
    if (d->status & SV_LAYER_REFUSED) { /* the relay's bytes go down as they are */
        size_t len;
        assert_int_equal(sv_chain_wrap(&ch, (const uint8_t *)"HTTP/1.1 200", 12), 12);
        const uint8_t *p = sv_chain_out_peek(&ch, &len);
        assert_int_equal(len, 12);
        assert_memory_equal(p, "HTTP/1.1 200", 12);
        sv_chain_out_consume(&ch, len);
    } else { /* nothing to wrap before the handshake: -ENOTCONN, or the earlier error */
        ssize_t w = sv_chain_wrap(&ch, (const uint8_t *)"x", 1);
        assert_int_equal(w, d->rc < 0 ? d->rc : -ENOTCONN);
    }
    sv_chain_free(&ch);
}

static sv_reality_conf *layer_conf(uint64_t window_ms)
{
    const char *what;
    int rc;
    sv_reality_conf *c = sv_reality_conf_new(k_priv, "aa,0123456789abcdef", "www.example.com",
                                             window_ms, &what, &rc);
    assert_non_null(c);
    return c;
}

/* Issue 33: a valid hello's sealed session id is remembered for at least twice the time window
 * (the longest it can pass the time check again), then forgotten; no window, no memory. */
static void replayed_session_ids_are_known_for_twice_the_window(void **st)
{
    (void)st;
    uint8_t a[32], b[32];
    memset(a, 0xa5, sizeof a);
    memset(b, 0x5a, sizeof b);
    sv_reality_replay_forget();
    assert_false(sv_reality_replayed(a, 1000, 100));
    assert_true(sv_reality_replayed(a, 1050, 100));
    assert_false(sv_reality_replayed(b, 1100, 100));
    assert_true(sv_reality_replayed(a, 1199, 100));
    assert_true(sv_reality_replayed(a, 1250, 100)); /* a new generation: a is in the old one */
    assert_true(sv_reality_replayed(b, 1300, 100));
    assert_false(sv_reality_replayed(a, 1450, 100)); /* 450 ms > 2 x 100 later: forgotten */
    assert_false(sv_reality_replayed(b, 1500, 0));   /* no window: nothing remembered */
    assert_false(sv_reality_replayed(b, 1500, 0));
    sv_reality_replay_forget();
}

static void layer_answers_a_valid_hello_with_its_flight(void **st)
{
    (void)st;
    static drv d;
    sv_reality_conf *rc = layer_conf(0);
    static const char *const valid[] = {"valid", "valid-two-records"};
    for (size_t i = 0; i < 2; i++) {
        size_t first = 0;
        load(&d, valid[i]);
        static const size_t steps[] = {0, 1, 5, 100};
        for (size_t s = 0; s < 4; s++) {
            run_layer(rc, &d, steps[s]);
            assert_int_equal(d.rc, 0);
            assert_int_equal(d.status, 0); /* waiting for the client's Finished */
            assert_int_equal(d.up_len, 0);
            /* ServerHello, then the dummy ChangeCipherSpec, then encrypted records */
            assert_true(d.down_len > 200);
            assert_memory_equal(d.down, "\x16\x03\x03", 3);
            size_t sh = 5 + ((size_t)d.down[3] << 8 | d.down[4]);
            assert_memory_equal(d.down + sh, "\x14\x03\x03\x00\x01\x01", 6);
            assert_memory_equal(d.down + sh + 6, "\x17\x03\x03", 3);
            if (s == 0)
                first = d.down_len;
            assert_int_equal(d.down_len, first); /* random bytes, same sizes */
        }
    }
    /* a record after the hello goes to the TLS server, which refuses it before Finished */
    load(&d, "valid-then-garbage");
    run_layer(rc, &d, 0);
    assert_true(d.rc < 0);
    assert_int_equal(d.up_len, 0);
    sv_reality_conf_free(rc);
    /* the same hello inside a time window around its timestamp, and outside it */
    load(&d, "valid");
    rc = layer_conf(60000);
    rc->now_ms = clock_near;
    run_layer(rc, &d, 0);
    assert_false(d.status & SV_LAYER_REFUSED);
    rc->now_ms = clock_far;
    run_layer(rc, &d, 0);
    assert_true(d.status & SV_LAYER_REFUSED);
    sv_reality_conf_free(rc);
}

/* Issue 11: the temporary certificate's Ed25519 key is the process's, so that an inbound
 * rebuilt by a reload (another sv_reality_conf) keeps it; each conf holds its own reference. */
static void certificate_key_survives_a_rebuild(void **st)
{
    (void)st;
    sv_reality_conf *a = layer_conf(0);
    uint8_t pub[32];
    memcpy(pub, a->cert.pub, 32);
    sv_reality_conf *b = layer_conf(60000); /* another build, other settings */
    assert_memory_equal(b->cert.pub, pub, 32);
    assert_int_equal(b->cert.der_len, a->cert.der_len);
    sv_reality_conf_free(a);
    sv_reality_conf *c = layer_conf(0); /* after the first one is gone */
    assert_memory_equal(c->cert.pub, pub, 32);
    uint8_t raw[32];
    size_t len = sizeof raw;
    assert_int_equal(EVP_PKEY_get_raw_public_key(c->cert.key, raw, &len), 1);
    assert_memory_equal(raw, pub, 32);
    sv_reality_conf_free(b);
    sv_reality_conf_free(c);
}

static void layer_passes_everyone_else_through(void **st)
{
    (void)st;
    static drv d;
    sv_reality_conf *rc = layer_conf(0);
    static const char *const probes[] = {"wrong-short-id", "wrong-sni", "no-tls13", "http-get",
                                         "valid-mlkem-only"};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        load(&d, probes[i]);
        static const size_t steps[] = {0, 1, 7};
        for (size_t s = 0; s < 3; s++) {
            run_layer(rc, &d, steps[s]);
            assert_int_equal(d.rc, 0);
            assert_int_equal(d.status, SV_LAYER_UP | SV_LAYER_REFUSED);
            assert_int_equal(d.up_len, d.in_len); /* every byte, as it came */
            assert_memory_equal(d.up, d.in, d.in_len);
            assert_int_equal(d.down_len, 0);
        }
    }
    /* handshake records that never end a hello within the bound: refused, all passed on */
    memset(d.in, 0, sizeof d.in);
    d.in_len = 0;
    static const uint8_t head[] = {0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x01, 0x00, 0x00};
    while (d.in_len + 16384 + 5 < sizeof d.in) {
        memcpy(d.in + d.in_len, head, 5);
        if (d.in_len == 0)
            memcpy(d.in + 5, head + 5, 4);
        d.in_len += 16384 + 5;
    }
    run_layer(rc, &d, 0);
    assert_int_equal(d.status, SV_LAYER_UP | SV_LAYER_REFUSED);
    assert_int_equal(d.up_len, d.in_len);
    assert_memory_equal(d.up, d.in, d.in_len);
    sv_reality_conf_free(rc);
}

/* ---------- ClientHellos recorded from real clients (tests/unit/fixtures/reality/) ---------- */

/* Each recorded by capture.py with §1.7's key pair (k_priv), short id 0123456789abcdef and
 * server name www.example.com; @c time_s is the Unix time just after it arrived, so the
 * client's REALITY timestamp is that or a second or two less (see the README there). */
static const struct {
    const char *file;
    uint64_t time_s;
} k_recorded[] = {
    {"xray-26.3.27.hello", 1796171042u},
    {"sing-box-1.14.1.hello", 1796171044u},
};

static uint64_t g_now_ms; /* the clock of recorded_clock */
static uint64_t recorded_clock(void) { return g_now_ms; }

/* Run the layer over @p d (whole and a byte at a time) with these settings, the window 60 s
 * and the clock at @p now_ms. @return true when the client was taken as valid. */
static bool recorded_valid(drv *d, const char *priv, const char *sids, const char *names,
                           uint64_t now_ms)
{
    const char *what;
    int rc;
    sv_reality_conf *c = sv_reality_conf_new(priv, sids, names, 60000, &what, &rc);
    assert_non_null(c);
    c->now_ms = recorded_clock;
    g_now_ms = now_ms;
    bool valid = false;
    static const size_t steps[] = {0, 1};
    for (size_t s = 0; s < 2; s++) {
        sv_reality_replay_forget(); /* the same hello twice: no replay of the other run */
        run_layer(c, d, steps[s]);
        assert_int_equal(d->rc, 0);
        bool ok = d->status == 0;
        if (ok) { /* our flight down, nothing up */
            assert_int_equal(d->up_len, 0);
            assert_true(d->down_len > 200);
            assert_memory_equal(d->down, "\x16\x03\x03", 3);
        } else { /* a probe: every byte up, as it came */
            assert_int_equal(d->status, SV_LAYER_UP | SV_LAYER_REFUSED);
            assert_int_equal(d->up_len, d->in_len);
            assert_memory_equal(d->up, d->in, d->in_len);
            assert_int_equal(d->down_len, 0);
        }
        if (s > 0)
            assert_int_equal(ok, valid); /* the same verdict byte by byte */
        valid = ok;
    }
    sv_reality_conf_free(c);
    return valid;
}

static void recorded_client_hellos(void **st)
{
    (void)st;
    static drv d;
    static const char wrong_priv[] = "AQIEBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
    for (size_t i = 0; i < sizeof k_recorded / sizeof k_recorded[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/unit/fixtures/reality/%s", k_recorded[i].file);
        load_file(&d, path);
        uint64_t t = k_recorded[i].time_s * 1000u;
        print_message("%s: %zu bytes\n", k_recorded[i].file, d.in_len);
        /* the right key, short id and name, inside the window on either side */
        assert_true(recorded_valid(&d, k_priv, "aa,0123456789abcdef", "www.example.com", t));
        assert_true(recorded_valid(&d, k_priv, "0123456789abcdef", "a.test,www.example.com",
                                   t + 55000));
        assert_true(recorded_valid(&d, k_priv, "0123456789abcdef", "www.example.com",
                                   t - 55000));
        /* a wrong private key, short id or server name */
        assert_false(recorded_valid(&d, wrong_priv, "0123456789abcdef", "www.example.com", t));
        assert_false(recorded_valid(&d, k_priv, "0123456789abcdee", "www.example.com", t));
        assert_false(recorded_valid(&d, k_priv, "01234567", "www.example.com", t));
        assert_false(recorded_valid(&d, k_priv, "0123456789abcdef", "www.example.org", t));
        /* outside the window, later and earlier */
        assert_false(recorded_valid(&d, k_priv, "0123456789abcdef", "www.example.com",
                                    t + 65000));
        assert_false(recorded_valid(&d, k_priv, "0123456789abcdef", "www.example.com",
                                    t - 65000));
    }
}

/* ---------- the target's first flight mirrored (PROTOCOLS-2.md §1.5 steps 1-5) ---------- */

/* Open a mirroring layer on the "valid" hello: it waits for the target (nothing down, nothing
 * up) and asks for the hello's records to be sent there. */
static void start_mirror(sv_chain *ch, sv_layer_conf *conf, drv *d)
{
    load(d, "valid");
    assert_int_equal(sv_chain_open(ch, conf, 1), 0);
    d->up_len = 0;
    assert_int_equal(sv_chain_unwrap(ch, d->in, d->in_len, d->stage, d_alloc, d_deliver, d), 0);
    assert_int_equal(sv_chain_status(ch), SV_LAYER_TARGET);
    size_t len = 0;
    assert_null(sv_chain_out_peek(ch, &len));
    assert_int_equal(len, 0);
    assert_int_equal(d->up_len, 0);
    assert_int_equal(sv_chain_wrap(ch, (const uint8_t *)"x", 1), -ENOTCONN);
    const uint8_t *ask = sv_chain_target_ask(ch, &len);
    assert_int_equal(len, d->in_len); /* the hello's records, as the client sent them */
    assert_memory_equal(ask, d->in, len);
}

static void layer_mirrors_the_targets_flight(void **st)
{
    (void)st;
    static drv d;
    static uint8_t target[16384], ours[16384];
    sv_reality_conf *rc = layer_conf(0);
    rc->mirror = true;
    sv_layer_conf conf[1] = {{&sv_reality_layer_ops, rc}};
    sv_chain ch;
    start_mirror(&ch, conf, &d);
    size_t len = 0;
    const uint8_t *ask = sv_chain_target_ask(&ch, &len);
    size_t tn = tls_target_answer("www.example.com", ask, len, target, sizeof target);
    size_t tsize[16] = {0};
    size_t tcount = tls_record_sizes(target, tn, tsize, 16);
    assert_true(tcount == 3 || tcount == 6); /* SH, CCS, then 1 or 4 encrypted records */
    assert_int_equal(tsize[1], 6);
    /* a flight not all there yet: the layer asks for more, whatever the piece */
    for (size_t k = 0; k < tn; k += 97) {
        assert_int_equal(sv_chain_target_reply(&ch, target, k, false), 1);
        assert_int_equal(sv_chain_status(&ch), SV_LAYER_TARGET);
    }
    /* the target's ticket follows in the same read: one record more */
    static const uint8_t ticket[5 + 200] = {23, 3, 3, 0, 200};
    memcpy(target + tn, ticket, sizeof ticket);
    assert_int_equal(sv_chain_target_reply(&ch, target, tn + sizeof ticket, false), 0);
    assert_int_equal(sv_chain_status(&ch), 0); /* waiting for the client's Finished */
    assert_null(sv_chain_target_ask(&ch, &len));
    const uint8_t *flight = sv_chain_out_peek(&ch, &len);
    assert_true(len <= sizeof ours);
    memcpy(ours, flight, len);
    size_t osize[16] = {0}, ocount = tls_record_sizes(ours, len, osize, 16);
    assert_int_equal(ocount, tcount + 1);
    for (size_t i = 0; i < tcount; i++)
        assert_int_equal(osize[i], tsize[i]); /* every record the target's size */
    assert_int_equal(osize[tcount], sizeof ticket);
    assert_memory_equal(ours + tsize[0], "\x14\x03\x03\x00\x01\x01", 6);
    /* the ServerHello is the target's (version, random, session id, suite, extensions and
     * their order) except the 32 bytes of the X25519 key share, which are ours */
    size_t differ = 0, first = 0, last = 0;
    for (size_t i = 0; i < tsize[0]; i++)
        if (ours[i] != target[i])
            last = i, first = differ++ == 0 ? i : first;
    assert_true(differ > 0 && last - first < 32);
    assert_true(first > 5 + 4 + 2 + 32 + 1 + 32 + 3);
    size_t ks = 0; /* where the key share's data is in the target's ServerHello */
    for (size_t i = 5 + 4 + 2 + 32 + 1 + 32 + 3 + 2; i + 8 < tsize[0]; i++)
        if (memcmp(target + i, "\x00\x33\x00\x24\x00\x1d\x00\x20", 8) == 0)
            ks = i + 8;
    assert_true(ks > 0 && first >= ks && last < ks + 32);
    sv_chain_free(&ch);

    /* nothing usable in time (here: a flight cut inside its ServerHello): katana's own */
    start_mirror(&ch, conf, &d);
    assert_int_equal(sv_chain_target_reply(&ch, target, 20, true), 0);
    assert_int_equal(sv_chain_status(&ch), 0);
    flight = sv_chain_out_peek(&ch, &len);
    assert_true(len > 200);
    assert_memory_equal(flight, "\x16\x03\x03", 3);
    assert_memory_not_equal(flight + 11, target + 11, 32); /* our own random */
    sv_chain_free(&ch);

    /* a ServerHello alone at the end (no CCS): mirrored, records not padded */
    start_mirror(&ch, conf, &d);
    ask = sv_chain_target_ask(&ch, &len);
    tn = tls_target_answer("www.example.com", ask, len, target, sizeof target);
    tcount = tls_record_sizes(target, tn, tsize, 16);
    assert_int_equal(sv_chain_target_reply(&ch, target, tsize[0], false), 1);
    assert_int_equal(sv_chain_target_reply(&ch, target, tsize[0], true), 0);
    flight = sv_chain_out_peek(&ch, &len);
    assert_memory_equal(flight + 11, target + 11, 32); /* the target's random */
    ocount = tls_record_sizes(flight, len, osize, 16);
    assert_int_equal(ocount, 3); /* SH, CCS, our flight in one record */
    sv_chain_free(&ch);

    /* a valid client katana cannot serve (no X25519 share) is relayed without asking */
    load(&d, "valid-mlkem-only");
    run_layer(rc, &d, 0);
    assert_int_equal(d.status, SV_LAYER_UP | SV_LAYER_REFUSED);
    assert_int_equal(d.up_len, d.in_len);
    sv_reality_conf_free(rc);
}

static void flight_patterns(void **st)
{
    (void)st;
    uint8_t f[64] = {22, 3, 3, 0, 6, 2, 0, 0, 2, 0xaa, 0xbb, /* a (short) ServerHello */
                     20, 3, 3, 0, 1, 1};                   /* CCS */
    uint16_t pad[SV_TLS13S_PAD_MAX];
    size_t sh = 0, np = 0;
    assert_int_equal(sv_reality_flight_parse(f, 4, false, &sh, pad, &np), 1);
    assert_int_equal(sv_reality_flight_parse(f, 4, true, &sh, pad, &np), -1);
    assert_int_equal(sv_reality_flight_parse(f, 17, false, &sh, pad, &np), 1);
    assert_int_equal(sh, 6);
    assert_int_equal(sv_reality_flight_parse(f, 17, true, &sh, pad, &np), 0);
    assert_int_equal(np, 0);
    /* four small records, then a ticket */
    size_t n = 17;
    for (int i = 0; i < 5; i++) {
        static const uint8_t r[] = {23, 3, 3, 0, 3, 0, 0, 0};
        memcpy(f + n, r, sizeof r);
        n += sizeof r;
        int want = i < 3 ? 1 : 0;
        assert_int_equal(sv_reality_flight_parse(f, n, false, &sh, pad, &np), want);
    }
    assert_int_equal(np, 5);
    assert_int_equal(pad[0], 8);
    /* the pattern broken: not a ServerHello first, not TLS 1.2 headers, a long CCS */
    f[5] = 1;
    assert_int_equal(sv_reality_flight_parse(f, n, false, &sh, pad, &np), -1);
    f[5] = 2, f[1] = 1;
    assert_int_equal(sv_reality_flight_parse(f, n, false, &sh, pad, &np), -1);
    f[1] = 3, f[14] = 2;
    assert_int_equal(sv_reality_flight_parse(f, n, false, &sh, pad, &np), 0);
    assert_int_equal(np, 0);
    f[14] = 1, f[17] = 21; /* an alert where application data should be */
    assert_int_equal(sv_reality_flight_parse(f, n, false, &sh, pad, &np), 0);
    assert_int_equal(np, 0);
}

/* xver (PROTOCOLS-2.md §1.1): the PROXY protocol header the target gets, v1 text and v2 binary
 * (HAProxy's proxy-protocol.txt examples' layout), IPv4-mapped addresses as IPv4, mixed
 * families as UNKNOWN / LOCAL, other versions none. */
static void proxy_header_v1_v2(void **state)
{
    (void)state;
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(56324)};
    struct sockaddr_in d4 = {.sin_family = AF_INET, .sin_port = htons(443)};
    inet_pton(AF_INET, "192.0.2.1", &s4.sin_addr);
    inet_pton(AF_INET, "198.51.100.7", &d4.sin_addr);
    uint8_t out[SV_PROXY_HEADER_MAX + 1];
    size_t n = sv_proxy_header(1, (struct sockaddr *)&s4, (struct sockaddr *)&d4, out);
    out[n] = 0;
    assert_string_equal((char *)out, "PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n");

    static const uint8_t v2[] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
                                 0x54, 0x0a, 0x21, 0x11, 0x00, 0x0c, 192, 0, 2, 1, 198, 51,
                                 100, 7, 0xdc, 0x04, 0x01, 0xbb};
    n = sv_proxy_header(2, (struct sockaddr *)&s4, (struct sockaddr *)&d4, out);
    assert_int_equal(n, sizeof v2);
    assert_memory_equal(out, v2, sizeof v2);

    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(1)};
    struct sockaddr_in6 d6 = {.sin6_family = AF_INET6, .sin6_port = htons(65535)};
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", &s6.sin6_addr);
    inet_pton(AF_INET6, "2001:db8::1", &d6.sin6_addr);
    n = sv_proxy_header(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out);
    out[n] = 0;
    assert_string_equal((char *)out, "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                                     "2001:db8::1 1 65535\r\n");
    n = sv_proxy_header(2, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out);
    assert_int_equal(n, 16 + 36);
    assert_int_equal(out[13], 0x21);
    assert_int_equal(out[15], 36);
    assert_memory_equal(out + 16, s6.sin6_addr.s6_addr, 16);
    assert_memory_equal(out + 32, d6.sin6_addr.s6_addr, 16);
    assert_int_equal(out[48] << 8 | out[49], 1);
    assert_int_equal(out[50] << 8 | out[51], 65535);

    /* a dual-stack listener: IPv4-mapped on both sides is IPv4 */
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &s6.sin6_addr);
    inet_pton(AF_INET6, "::ffff:127.0.0.2", &d6.sin6_addr);
    n = sv_proxy_header(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out);
    out[n] = 0;
    assert_string_equal((char *)out, "PROXY TCP4 127.0.0.1 127.0.0.2 1 65535\r\n");

    /* IPv4 and IPv4-mapped mix as IPv4; IPv4 and IPv6 have nothing to say */
    n = sv_proxy_header(1, (struct sockaddr *)&s4, (struct sockaddr *)&d6, out);
    out[n] = 0;
    assert_string_equal((char *)out, "PROXY TCP4 192.0.2.1 127.0.0.2 56324 65535\r\n");
    inet_pton(AF_INET6, "2001:db8::1", &d6.sin6_addr);
    n = sv_proxy_header(1, (struct sockaddr *)&s4, (struct sockaddr *)&d6, out);
    out[n] = 0;
    assert_string_equal((char *)out, "PROXY UNKNOWN\r\n");
    n = sv_proxy_header(2, (struct sockaddr *)&s4, (struct sockaddr *)&d6, out);
    assert_int_equal(n, 16);
    assert_int_equal(out[12], 0x20);
    assert_int_equal(out[13], 0x00);
    assert_int_equal(out[14] << 8 | out[15], 0);
    assert_int_equal(sv_proxy_header(0, (struct sockaddr *)&s4, (struct sockaddr *)&d4, out), 0);
    assert_int_equal(sv_proxy_header(3, (struct sockaddr *)&s4, (struct sockaddr *)&d4, out), 0);

    /* the longest fits */
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", &d6.sin6_addr);
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", &s6.sin6_addr);
    s6.sin6_port = htons(65535);
    n = sv_proxy_header(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out);
    assert_int_equal(n, 104);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vector_is_valid_and_gives_the_auth_key),
        cmocka_unit_test(failures_are_invalid),
        cmocka_unit_test(settings_are_parsed_strictly),
        cmocka_unit_test(certificate_carries_the_hmac),
        cmocka_unit_test(replayed_session_ids_are_known_for_twice_the_window),
        cmocka_unit_test(layer_answers_a_valid_hello_with_its_flight),
        cmocka_unit_test(layer_passes_everyone_else_through),
        cmocka_unit_test(certificate_key_survives_a_rebuild),
        cmocka_unit_test(recorded_client_hellos),
        cmocka_unit_test(layer_mirrors_the_targets_flight),
        cmocka_unit_test(flight_patterns),
        cmocka_unit_test(proxy_header_v1_v2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
