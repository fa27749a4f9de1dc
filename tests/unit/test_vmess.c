/*
 * Unit tests: VMess AEAD core (supervisor/proto/vmess.c) through its ops table (proto.h).
 * Known answers come from tests/unit/vectors/vmess-aead.json, captured from the v2ray 4.34 client
 * (PROTOCOLS.md §6, §11). A small client encoder below builds requests the vectors do not cover
 * (options, securities, commands, broken fields) with the same primitives; time is driven
 * explicitly through set_time.
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
#include <openssl/evp.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/proto/vmess.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static const sv_proto_ops *const ops = &sv_vmess_ops;

#define VEC_UUID "27848739-7e62-4138-9fd3-098a63964b6b"
#define OTHER_UUID "0b3f4f6e-2f0a-4a7e-9d8e-5e6f1d2c3b4a"

static json_t *g_vec;
static void *g_creds;     /* users 0 OTHER_UUID, 1 VEC_UUID (the vectors'), 2 a third */
static sv_replay *g_replay;

/* ---------- fixtures and JSON helpers ---------- */

static void *creds_of(const char **uuids, size_t n, int *rc, sv_error *err)
{
    sv_user *u = calloc(n ? n : 1, sizeof *u);
    assert_non_null(u);
    for (size_t i = 0; i < n; i++) {
        u[i].id = i + 1;
        u[i].secret = (char *)uuids[i];
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
    snprintf(path, sizeof path, "%s/tests/unit/vectors/vmess-aead.json", top ? top : TOP_SRCDIR);
    json_error_t jerr;
    g_vec = json_load_file(path, 0, &jerr);
    if (g_vec == NULL) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return -1;
    }
    static const char *uuids[] = {OTHER_UUID, VEC_UUID, "A1B2C3D4-0000-4000-8000-00000000000F"};
    int rc;
    sv_error err = {0};
    g_creds = creds_of(uuids, 3, &rc, &err);
    return rc == 0 && g_creds != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_vec);
    ops->creds_free(g_creds);
    return 0;
}

/* A fresh replay filter per test, attached to the shared table. */
static int replay_setup(void **state)
{
    (void)state;
    g_replay = sv_replay_new(1024);
    sv_proto_replay(ops)->attach_replay(g_creds, g_replay);
    return g_replay != NULL ? 0 : -1;
}

static int replay_teardown(void **state)
{
    (void)state;
    sv_proto_replay(ops)->attach_replay(g_creds, NULL);
    sv_replay_free(g_replay);
    g_replay = NULL;
    return 0;
}

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

static size_t hex_to(const char *s, uint8_t *out, size_t cap)
{
    size_t n = strlen(s) / 2;
    assert_true(n <= cap && strlen(s) % 2 == 0);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static size_t jhex(const char *path, uint8_t *out, size_t cap)
{
    return hex_to(jstr(path), out, cap);
}

static const char *cpath(int i, const char *rest)
{
    static char buf[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "cases.%d.%s", i, rest);
    return buf[k];
}

static int64_t case_ts(int i)
{
    return json_integer_value(jget(cpath(i, "request.auth_id.timestamp")));
}

#define N_CASES 6

/* ---------- connection helpers ---------- */

static void *conn_new(int64_t now)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    sv_proto_clock(ops)->set_time(st, now);
    return st;
}

static void conn_free(void *st)
{
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

/* What a run produced: authentication, the opened destination, the bytes or datagrams. */
typedef struct outcome {
    int principal;
    bool opened;
    sv_dest dest;
    uint8_t data[70000];
    size_t len;
    unsigned datagrams;
    size_t dgram_len[64];
    int error;
    enum sv_probe_policy policy;
} outcome;

static void collect(const sv_effects *fx, ssize_t r, outcome *o)
{
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            assert_int_equal(o->principal, -1);
            o->principal = e->principal;
            break;
        case SV_FX_OPEN:
            assert_true(o->principal >= 0 && !o->opened);
            o->opened = true;
            o->dest = e->dest;
            break;
        case SV_FX_TO_OUTBOUND:
        case SV_FX_DATAGRAM:
            assert_true(o->opened && e->len > 0 && o->len + e->len <= sizeof o->data);
            memcpy(o->data + o->len, e->data, e->len);
            o->len += e->len;
            if (e->kind == SV_FX_DATAGRAM) {
                assert_int_equal(e->dest.port, o->dest.port);
                assert_true(o->datagrams < 64);
                o->dgram_len[o->datagrams++] = e->len;
            }
            break;
        case SV_FX_ERROR:
            assert_true(i == fx->n - 1 && r < 0 && e->error == (int)r);
            o->error = e->error;
            o->policy = e->policy;
            break;
        default:
            fail_msg("unexpected effect %d", e->kind);
        }
    }
}

/* Feed @p wire in pieces of @p piece bytes through a runtime-like carry. @return feed's last
 * error, or 0. */
static int run(void *st, const uint8_t *wire, size_t n, size_t piece, outcome *o)
{
    uint8_t *buf = malloc(n + ops->carry_max + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    int rc = 0;
    memset(o, 0, sizeof *o);
    o->principal = -1;
    for (;;) {
        sv_effects fx;
        memset(&fx, 0xa5, sizeof fx);
        ssize_t r = have > 0 ? ops->feed(st, g_creds, buf, have, &fx) : 0;
        if (have == 0)
            fx.n = 0;
        collect(&fx, r, o);
        if (r < 0) {
            rc = (int)r;
            break;
        }
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        assert_true(have <= ops->carry_max);
        if (in == n)
            break;
        size_t k = piece < n - in ? piece : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    free(buf);
    return rc;
}

/* ---------- a test client (PROTOCOLS.md §6.3-6.6) ---------- */

typedef struct tclient {
    uint8_t cmd_key[16];
    uint8_t key[16], iv[16];
    uint8_t v, opt, sec;
    sv_vmess_shake up, down;
    uint16_t up_count, up_len_count, down_count, down_len_count;
    uint8_t rkey[16], riv[16];
} tclient;

static void kdf16(const uint8_t *key, const char *p1, const uint8_t *p2, size_t l2,
                  const uint8_t *p3, size_t l3, uint8_t *out, size_t n)
{
    sv_vmess_bytes path[3] = {{p1, strlen(p1)}, {p2, l2}, {p3, l3}};
    uint8_t full[32];
    assert_int_equal(sv_vmess_kdf(key, 16, path, p3 ? 3 : p2 ? 2 : 1, full), 0);
    memcpy(out, full, n);
}

static void aead(int sec, const uint8_t k16[16], const uint8_t nonce[12], const uint8_t *aad,
                 size_t aad_len, const uint8_t *in, size_t n, uint8_t *out, bool enc, bool *ok)
{
    uint8_t key[32];
    unsigned l = 0;
    const EVP_CIPHER *c = EVP_aes_128_gcm();
    memcpy(key, k16, 16);
    if (sec == SV_VMESS_SEC_CHACHA20_POLY1305) {
        c = EVP_chacha20_poly1305();
        EVP_Digest(k16, 16, key, &l, EVP_md5(), NULL);
        EVP_Digest(key, 16, key + 16, &l, EVP_md5(), NULL);
    }
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ol;
    assert_int_equal(EVP_CipherInit_ex(ctx, c, NULL, key, nonce, enc), 1);
    if (aad_len)
        assert_int_equal(EVP_CipherUpdate(ctx, NULL, &ol, aad, (int)aad_len), 1);
    if (!enc)
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, (void *)(in + n));
    if (n)
        assert_int_equal(EVP_CipherUpdate(ctx, out, &ol, in, (int)n), 1);
    *ok = EVP_CipherFinal_ex(ctx, out + n, &ol) == 1;
    if (enc)
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, out + n);
    EVP_CIPHER_CTX_free(ctx);
}

static void chunk_nonce(const uint8_t iv[16], uint16_t count, uint8_t nonce[12])
{
    nonce[0] = (uint8_t)(count >> 8);
    nonce[1] = (uint8_t)count;
    memcpy(nonce + 2, iv + 2, 10);
}

/* CRC-32 (IEEE), table-driven here (the core's is bitwise), checked against the vectors. */
static uint32_t crc32_for_test(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (table[1] == 0)
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

enum { BREAK_NONE, BREAK_CRC, BREAK_LEN_TAG, BREAK_HDR_TAG, BREAK_FNV, BREAK_VERSION };

/* A request header; @p addr is the style-B address (port, type, addr) or NULL (command 3).
 * @return its length. */
static size_t tc_header(tclient *t, const char *uuid, int64_t ts, uint8_t opt, uint8_t sec,
                        uint8_t cmd, const uint8_t *addr, size_t alen, int brk, uint8_t *out)
{
    memset(t, 0, sizeof *t);
    assert_int_equal(sv_vmess_cmd_key(uuid, t->cmd_key), 0);
    for (int i = 0; i < 16; i++) {
        t->key[i] = (uint8_t)(0x10 + i * 7);
        t->iv[i] = (uint8_t)(0x80 + i * 3);
    }
    t->v = 0x5a;
    t->opt = opt;
    t->sec = sec;
    uint8_t h[600];
    size_t L = 0;
    h[L++] = brk == BREAK_VERSION ? 2 : 1;
    memcpy(h + L, t->iv, 16);
    L += 16;
    memcpy(h + L, t->key, 16);
    L += 16;
    h[L++] = t->v;
    h[L++] = opt;
    h[L++] = (uint8_t)(3 << 4 | sec);
    h[L++] = 0;
    h[L++] = cmd;
    if (alen > 0)
        memcpy(h + L, addr, alen);
    L += alen;
    memset(h + L, 0xcc, 3);
    L += 3;
    uint32_t f = sv_vmess_fnv1a(h, L) ^ (brk == BREAK_FNV ? 1u : 0u);
    h[L++] = (uint8_t)(f >> 24);
    h[L++] = (uint8_t)(f >> 16);
    h[L++] = (uint8_t)(f >> 8);
    h[L++] = (uint8_t)f;

    /* auth ID */
    uint8_t auth_key[16], plain[16], auth_id[16];
    kdf16(t->cmd_key, "AES Auth ID Encryption", NULL, 0, NULL, 0, auth_key, 16);
    for (int i = 0; i < 8; i++)
        plain[i] = (uint8_t)((uint64_t)ts >> (56 - 8 * i));
    memcpy(plain + 8, "\x01\x02\x03\x04", 4);
    uint32_t crc = (uint32_t)crc32_for_test(plain, 12) ^ (brk == BREAK_CRC ? 1u : 0u);
    plain[12] = (uint8_t)(crc >> 24);
    plain[13] = (uint8_t)(crc >> 16);
    plain[14] = (uint8_t)(crc >> 8);
    plain[15] = (uint8_t)crc;
    EVP_CIPHER_CTX *ecb = EVP_CIPHER_CTX_new();
    int ol;
    EVP_EncryptInit_ex(ecb, EVP_aes_128_ecb(), NULL, auth_key, NULL);
    EVP_CIPHER_CTX_set_padding(ecb, 0);
    EVP_EncryptUpdate(ecb, auth_id, &ol, plain, 16);
    EVP_CIPHER_CTX_free(ecb);

    uint8_t nonce8[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    uint8_t k[16], n[12], lenb[2] = {(uint8_t)(L >> 8), (uint8_t)L};
    bool ok;
    size_t at = 0;
    memcpy(out, auth_id, 16);
    at += 16;
    kdf16(t->cmd_key, "VMess Header AEAD Key_Length", auth_id, 16, nonce8, 8, k, 16);
    kdf16(t->cmd_key, "VMess Header AEAD Nonce_Length", auth_id, 16, nonce8, 8, n, 12);
    aead(SV_VMESS_SEC_AES_128_GCM, k, n, auth_id, 16, lenb, 2, out + at, true, &ok);
    if (brk == BREAK_LEN_TAG)
        out[at + 5] ^= 1;
    at += 18;
    memcpy(out + at, nonce8, 8);
    at += 8;
    kdf16(t->cmd_key, "VMess Header AEAD Key", auth_id, 16, nonce8, 8, k, 16);
    kdf16(t->cmd_key, "VMess Header AEAD Nonce", auth_id, 16, nonce8, 8, n, 12);
    aead(SV_VMESS_SEC_AES_128_GCM, k, n, auth_id, 16, h, L, out + at, true, &ok);
    if (brk == BREAK_HDR_TAG)
        out[at + L] ^= 1;
    at += L + 16;

    sv_vmess_shake_init(&t->up, t->iv);
    uint8_t d[32];
    unsigned dl;
    EVP_Digest(t->key, 16, d, &dl, EVP_sha256(), NULL);
    memcpy(t->rkey, d, 16);
    EVP_Digest(t->iv, 16, d, &dl, EVP_sha256(), NULL);
    memcpy(t->riv, d, 16);
    sv_vmess_shake_init(&t->down, t->riv);
    return at;
}

/* One client chunk of @p len payload bytes (0 = end of stream). @return its length. */
static size_t tc_chunk(tclient *t, const uint8_t *p, size_t len, uint8_t *out)
{
    bool aeadsec = t->sec == SV_VMESS_SEC_AES_128_GCM || t->sec == SV_VMESS_SEC_CHACHA20_POLY1305;
    bool al = aeadsec && (t->opt & SV_VMESS_OPT_AUTH_LENGTH);
    bool padded = aeadsec && (t->opt & SV_VMESS_OPT_GLOBAL_PADDING);
    size_t pad = padded ? sv_vmess_shake_next(&t->up) % 64 : 0;
    size_t total = aeadsec ? len + 16 + pad : len;
    size_t at;
    bool ok;
    uint8_t nonce[12];
    if (al) {
        uint8_t lk[16], sz[2] = {(uint8_t)((total - 16) >> 8), (uint8_t)(total - 16)};
        kdf16(t->key, "auth_len", NULL, 0, NULL, 0, lk, 16);
        chunk_nonce(t->iv, t->up_len_count++, nonce);
        aead(t->sec, lk, nonce, NULL, 0, sz, 2, out, true, &ok);
        at = 18;
    } else {
        uint16_t mask = (t->opt & SV_VMESS_OPT_CHUNK_MASKING) ? sv_vmess_shake_next(&t->up) : 0;
        uint16_t f = (uint16_t)(total ^ mask);
        out[0] = (uint8_t)(f >> 8);
        out[1] = (uint8_t)f;
        at = 2;
    }
    if (!aeadsec) {
        if (len > 0)
            memcpy(out + at, p, len);
        return at + len;
    }
    chunk_nonce(t->iv, t->up_count++, nonce);
    aead(t->sec, t->key, nonce, NULL, 0, p, len, out + at, true, &ok);
    memset(out + at + len + 16, 0xee, pad);
    return at + total;
}

/* Read the server's response header and chunks from @p w (n bytes) into @p out.
 * @return payload bytes; *eof set when the end-of-stream chunk came. */
static size_t tc_read(tclient *t, const uint8_t *w, size_t n, bool header, uint8_t *out,
                      bool *eof)
{
    bool ok;
    size_t at = 0, got = 0;
    if (header) {
        uint8_t k[16], nonce[12], lenb[2], hdr[4];
        kdf16(t->rkey, "AEAD Resp Header Len Key", NULL, 0, NULL, 0, k, 16);
        kdf16(t->riv, "AEAD Resp Header Len IV", NULL, 0, NULL, 0, nonce, 12);
        aead(SV_VMESS_SEC_AES_128_GCM, k, nonce, NULL, 0, w, 2, lenb, false, &ok);
        assert_true(ok);
        assert_int_equal(lenb[0] << 8 | lenb[1], 4);
        kdf16(t->rkey, "AEAD Resp Header Key", NULL, 0, NULL, 0, k, 16);
        kdf16(t->riv, "AEAD Resp Header IV", NULL, 0, NULL, 0, nonce, 12);
        aead(SV_VMESS_SEC_AES_128_GCM, k, nonce, NULL, 0, w + 18, 4, hdr, false, &ok);
        assert_true(ok);
        assert_int_equal(hdr[0], t->v);
        assert_int_equal(hdr[1] | hdr[2] | hdr[3], 0);
        at = 38;
    }
    bool aeadsec = t->sec == SV_VMESS_SEC_AES_128_GCM || t->sec == SV_VMESS_SEC_CHACHA20_POLY1305;
    bool al = aeadsec && (t->opt & SV_VMESS_OPT_AUTH_LENGTH);
    *eof = false;
    while (at < n) {
        size_t pad = aeadsec && (t->opt & SV_VMESS_OPT_GLOBAL_PADDING)
                         ? sv_vmess_shake_next(&t->down) % 64
                         : 0;
        size_t size;
        uint8_t nonce[12];
        if (al) {
            uint8_t lk[16], sz[2];
            kdf16(t->rkey, "auth_len", NULL, 0, NULL, 0, lk, 16);
            chunk_nonce(t->riv, t->down_len_count++, nonce);
            aead(t->sec, lk, nonce, NULL, 0, w + at, 2, sz, false, &ok);
            assert_true(ok);
            size = (size_t)(sz[0] << 8 | sz[1]) + 16;
            at += 18;
        } else {
            bool masked = t->opt & SV_VMESS_OPT_CHUNK_MASKING;
            uint16_t mask = masked ? sv_vmess_shake_next(&t->down) : 0;
            size = (uint16_t)((w[at] << 8 | w[at + 1]) ^ mask);
            at += 2;
        }
        assert_true(at + size <= n);
        size_t plen = aeadsec ? size - pad - 16 : size;
        if (aeadsec) {
            chunk_nonce(t->riv, t->down_count++, nonce);
            aead(t->sec, t->rkey, nonce, NULL, 0, w + at, plen, out + got, false, &ok);
            assert_true(ok);
        } else {
            memcpy(out + got, w + at, plen);
        }
        at += size;
        got += plen;
        if (plen == 0) {
            *eof = true;
            assert_int_equal(at, n);
        }
    }
    return got;
}

/* ---------- known answers ---------- */

static void keys__cmd_key_auth_key_and_kdf_vectors(void **state)
{
    (void)state;
    uint8_t want[64], got[32];
    assert_int_equal(sv_vmess_cmd_key(jstr("uuid"), got), 0);
    jhex("cmd_key", want, sizeof want);
    assert_memory_equal(got, want, 16);
    uint8_t cmd_key[16];
    memcpy(cmd_key, got, 16);
    for (int i = 0; i < N_CASES; i++) {
        uint8_t auth_id[16], nonce8[8], k[16];
        jhex(cpath(i, "request.auth_id.wire_hex"), auth_id, sizeof auth_id);
        jhex(cpath(i, "request.connection_nonce_hex"), nonce8, sizeof nonce8);
        kdf16(cmd_key, "AES Auth ID Encryption", NULL, 0, NULL, 0, k, 16);
        jhex(cpath(i, "request.auth_id.auth_id_key"), want, sizeof want);
        assert_memory_equal(k, want, 16);
        static const char *const names[4][2] = {
            {"VMess Header AEAD Key_Length", "request.length.key"},
            {"VMess Header AEAD Nonce_Length", "request.length.nonce"},
            {"VMess Header AEAD Key", "request.header.key"},
            {"VMess Header AEAD Nonce", "request.header.nonce"},
        };
        for (int j = 0; j < 4; j++) {
            size_t n = jhex(cpath(i, names[j][1]), want, sizeof want);
            kdf16(cmd_key, names[j][0], auth_id, 16, nonce8, 8, k, n);
            assert_memory_equal(k, want, n);
        }
        /* the auth ID's CRC32 and the header's FNV-1a */
        uint8_t dec[16], hdr[600];
        jhex(cpath(i, "request.auth_id.decrypted_hex"), dec, sizeof dec);
        assert_int_equal(crc32_for_test(dec, 12),
                         (uint32_t)dec[12] << 24 | dec[13] << 16 | dec[14] << 8 | dec[15]);
        size_t hl = jhex(cpath(i, "request.header.plaintext_hex"), hdr, sizeof hdr);
        uint32_t f = sv_vmess_fnv1a(hdr, hl - 4);
        assert_int_equal(f, (uint32_t)hdr[hl - 4] << 24 | hdr[hl - 3] << 16 | hdr[hl - 2] << 8 |
                                hdr[hl - 1]);
    }
    /* bounds */
    sv_vmess_bytes long_path = {want, 65};
    assert_int_equal(sv_vmess_kdf(cmd_key, 16, &long_path, 1, got), -EINVAL);
    assert_int_equal(sv_vmess_kdf(cmd_key, 16, &long_path, 4, got), -EINVAL);
    assert_int_equal(sv_vmess_cmd_key("27848739-7e62-4138-9fd3-098a63964b6", got), -EINVAL);
    assert_int_equal(sv_vmess_cmd_key("27848739x7e62-4138-9fd3-098a63964b6b", got), -EINVAL);
    assert_int_equal(sv_vmess_cmd_key("27848739-7e62-4138-9fd3-098a63964b6g", got), -EINVAL);
    assert_int_equal(sv_vmess_cmd_key(NULL, got), -EINVAL);
}

/* The SHAKE128 stream equals OpenSSL's one-shot SHAKE128 over several blocks, and gives the
 * vectors' first mask and padding. */
static void shake__matches_openssl_and_vectors(void **state)
{
    (void)state;
    uint8_t iv[16], ref[2000];
    for (int i = 0; i < 16; i++)
        iv[i] = (uint8_t)(i * 37 + 1);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestInit_ex(md, EVP_shake128(), NULL), 1);
    EVP_DigestUpdate(md, iv, 16);
    assert_int_equal(EVP_DigestFinalXOF(md, ref, sizeof ref), 1);
    EVP_MD_CTX_free(md);
    sv_vmess_shake s;
    sv_vmess_shake_init(&s, iv);
    for (size_t i = 0; i < sizeof ref; i += 2)
        assert_int_equal(sv_vmess_shake_next(&s), ref[i] << 8 | ref[i + 1]);

    for (int i = 0; i < N_CASES; i++) {
        uint8_t hdr[600], want[2];
        jhex(cpath(i, "request.header.plaintext_hex"), hdr, sizeof hdr);
        sv_vmess_shake_init(&s, hdr + 1);
        int opt = (int)json_integer_value(jget(cpath(i, "request.fields.option")));
        int pad = (int)json_integer_value(jget(cpath(i, "body_chunks.0.padding_len")));
        if (opt & SV_VMESS_OPT_GLOBAL_PADDING)
            assert_int_equal(sv_vmess_shake_next(&s) % 64, pad);
        jhex(cpath(i, "body_chunks.0.mask"), want, 2);
        assert_int_equal(sv_vmess_shake_next(&s), want[0] << 8 | want[1]);
    }
}

/* Every captured request, whole and byte at a time: the user, the destination, the payload. */
static void request__vectors_whole_and_byte_at_a_time(void **state)
{
    (void)state;
    static uint8_t wire[4096];
    for (int i = 0; i < N_CASES; i++) {
        size_t n = jhex(cpath(i, "client_to_server_wire_hex"), wire, sizeof wire);
        uint8_t want[2048];
        size_t wl = jhex(cpath(i, "body_chunks.0.plaintext_hex"), want, sizeof want);
        bool udp = strcmp(jstr(cpath(i, "network")), "udp") == 0;
        for (size_t pi = 0, piece = 1; pi < 3; pi++, piece = pi == 1 ? 7 : n) {
            outcome *o = calloc(1, sizeof *o);
            void *st = conn_new(case_ts(i));
            assert_int_equal(run(st, wire, n, piece, o), 0);
            assert_int_equal(o->principal, 1);
            assert_true(o->opened);
            assert_int_equal(o->dest.port,
                             json_integer_value(jget(cpath(i, "destination.port"))));
            char host[300];
            sv_dest_format(&o->dest, host, sizeof host);
            assert_non_null(strstr(host, jstr(cpath(i, "destination.host"))));
            assert_int_equal(o->dest.network, udp ? SV_NET_UDP : SV_NET_TCP);
            assert_int_equal(o->len, wl);
            assert_memory_equal(o->data, want, wl);
            assert_int_equal(o->datagrams, udp ? 1 : 0);
            conn_free(st);
            free(o);
        }
    }
}

/* The server direction of every vector: response header byte for byte; body chunks (size
 * fields and ciphertexts; padding is random) and the end-of-stream chunk. */
static void response__vectors(void **state)
{
    (void)state;
    static uint8_t wire[4096], out[8192], want[4096];
    for (int i = 0; i < N_CASES; i++) {
        size_t n = jhex(cpath(i, "client_to_server_wire_hex"), wire, sizeof wire);
        outcome *o = calloc(1, sizeof *o);
        void *st = conn_new(case_ts(i));
        assert_int_equal(run(st, wire, n, n, o), 0);
        const char *text = jstr(cpath(i, "server_to_client.payload_text"));
        bool udp = strcmp(jstr(cpath(i, "network")), "udp") == 0;
        sv_dest from = o->dest;
        ssize_t w =
            udp ? sv_proto_datagram(ops)->frame_datagram(
                      st, g_creds, 0, &from, (const uint8_t *)text, strlen(text), out, sizeof out)
                : ops->frame(st, g_creds, 0, (const uint8_t *)text, strlen(text), out, sizeof out);
        assert_true(w > 0 && (size_t)w <= ops->frame_max(strlen(text)));
        /* TCP ends with the end-of-stream chunk; the UDP captures have none */
        ssize_t e = udp ? 0
                        : sv_proto_end(ops)->frame_end(st, g_creds, 0, false, out + w,
                                                       sizeof out - (size_t)w);
        assert_true(udp || (e > 0 && (size_t)e <= ops->frame_max(0)));
        size_t total = (size_t)(w + e);
        size_t wl = jhex(cpath(i, "server_to_client.wire_hex"), want, sizeof want);
        assert_int_equal(total, wl);
        assert_memory_equal(out, want, SV_VMESS_RESP_HEADER);
        /* walk the chunks with the response IV's SHAKE stream */
        uint8_t riv[16];
        jhex(cpath(i, "server_to_client.response_body_iv"), riv, sizeof riv);
        int opt = (int)json_integer_value(jget(cpath(i, "request.fields.option")));
        bool aeadsec = strcmp(jstr(cpath(i, "security_config")), "none") != 0;
        sv_vmess_shake s;
        sv_vmess_shake_init(&s, riv);
        size_t at = SV_VMESS_RESP_HEADER;
        while (at < wl) {
            size_t pad = aeadsec && (opt & SV_VMESS_OPT_GLOBAL_PADDING)
                             ? sv_vmess_shake_next(&s) % 64 : 0;
            uint16_t size = (uint16_t)((want[at] << 8 | want[at + 1]) ^ sv_vmess_shake_next(&s));
            assert_memory_equal(out + at, want + at, 2 + size - pad);
            at += 2 + size;
        }
        assert_int_equal(at, wl);
        /* once ended, nothing more is framed but chunks */
        conn_free(st);
        free(o);
    }
}

/* ---------- built requests: options, securities, errors ---------- */

static const uint8_t ADDR_DOMAIN[] = {0x01, 0xbb, 0x02, 0x0c, 'e', 'x', 'a', 'm', 'p', 'l',
                                      'e', '.', 't', 'e', 's', 't'};
static const uint8_t ADDR_V4[] = {0x00, 0x35, 0x01, 127, 0, 0, 1};
#define NOW 1800000000

/* Build a request with a few chunks of @p body, run it in @p piece cuts, check the payload,
 * then frame a reply and read it back with the client's keys. */
static void roundtrip(uint8_t opt, uint8_t sec, uint8_t cmd, size_t body, size_t piece)
{
    static uint8_t wire[80000], reply[70000], got[70000], frame_out[90000];
    tclient t;
    const uint8_t *addr = cmd == 2 ? ADDR_V4 : ADDR_DOMAIN;
    size_t alen = cmd == 2 ? sizeof ADDR_V4 : sizeof ADDR_DOMAIN;
    size_t n = tc_header(&t, VEC_UUID, NOW - 100, opt, sec, cmd, addr, alen, BREAK_NONE, wire);
    uint8_t payload[16000];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i * 13 + 5);
    bool raw = sec == SV_VMESS_SEC_ZERO ||
               (sec == SV_VMESS_SEC_NONE && !(opt & SV_VMESS_OPT_CHUNK_STREAM));
    size_t sent = 0, chunks = 0;
    while (sent < body) {
        size_t k = body - sent < 3000 ? body - sent : 3000;
        if (raw) /* no chunks: the bytes as they are */
            memcpy(wire + n, payload + sent % 8000, k);
        n += raw ? k : tc_chunk(&t, payload + sent % 8000, k, wire + n);
        sent += k;
        chunks++;
    }
    if (!raw)
        n += tc_chunk(&t, NULL, 0, wire + n); /* end of stream */
    outcome *o = calloc(1, sizeof *o);
    void *st = conn_new(NOW);
    assert_int_equal(run(st, wire, n, piece, o), 0);
    assert_int_equal(o->principal, 1);
    assert_int_equal(o->len, body);
    for (size_t i = 0, off = 0; off < body; i++) {
        size_t k = body - off < 3000 ? body - off : 3000;
        assert_memory_equal(o->data + off, payload + off % 8000, k);
        off += k;
    }
    assert_int_equal(o->datagrams, cmd == 2 ? chunks : 0);
    /* the reply: more than one downstream chunk */
    size_t rl = cmd == 2 ? 1200 : 20000;
    for (size_t i = 0; i < rl; i++)
        reply[i] = (uint8_t)(i * 7 + 3);
    ssize_t w = cmd == 2 ? sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &o->dest, reply,
                                                                  rl, frame_out, sizeof frame_out)
                         : ops->frame(st, g_creds, 0, reply, rl, frame_out, sizeof frame_out);
    assert_true(w > 0 && (size_t)w <= ops->frame_max(rl));
    ssize_t e = sv_proto_end(ops)->frame_end(st, g_creds, 0, false, frame_out + w,
                                             sizeof frame_out - (size_t)w);
    assert_true(e >= 0);
    bool eof;
    if (raw) {
        /* header then the bytes as they are */
        assert_int_equal(tc_read(&t, frame_out, SV_VMESS_RESP_HEADER, true, got, &eof), 0);
        assert_int_equal((size_t)(w + e), SV_VMESS_RESP_HEADER + rl);
        assert_memory_equal(frame_out + SV_VMESS_RESP_HEADER, reply, rl);
    } else {
        size_t gl = tc_read(&t, frame_out, (size_t)(w + e), true, got, &eof);
        assert_int_equal(gl, rl);
        assert_memory_equal(got, reply, rl);
        assert_true(eof);
    }
    conn_free(st);
    free(o);
}

static void options__every_security_and_option(void **state)
{
    (void)state;
    const uint8_t S = SV_VMESS_OPT_CHUNK_STREAM, M = SV_VMESS_OPT_CHUNK_MASKING,
                  P = SV_VMESS_OPT_GLOBAL_PADDING, A = SV_VMESS_OPT_AUTH_LENGTH;
    const uint8_t aeads[] = {SV_VMESS_SEC_AES_128_GCM, SV_VMESS_SEC_CHACHA20_POLY1305};
    const uint8_t opts[] = {S, S | M, S | M | P, S | A, S | M | A};
    for (size_t i = 0; i < sizeof aeads; i++)
        for (size_t j = 0; j < sizeof opts; j++)
            for (uint8_t cmd = 1; cmd <= 2; cmd++) {
                roundtrip(opts[j], aeads[i], cmd, 7000, 7000 + 200);
                roundtrip(opts[j], aeads[i], cmd, 700, 1);
            }
    roundtrip(S | M, SV_VMESS_SEC_NONE, 1, 9000, 9000);
    roundtrip(S | M, SV_VMESS_SEC_NONE, 2, 900, 1);
    roundtrip(S, SV_VMESS_SEC_NONE, 1, 900, 3);
    roundtrip(0, SV_VMESS_SEC_NONE, 1, 5000, 777); /* zero: no chunks */
    roundtrip(0, SV_VMESS_SEC_ZERO, 1, 5000, 5000);
}

/* Refused before authentication: the error, always with SV_PROBE_DRAIN, whole and piecewise. */
static void expect_refused(const uint8_t *wire, size_t n, int64_t now, int error,
                           enum sv_probe_policy policy)
{
    for (size_t pi = 0, piece = 1; pi < 3; pi++, piece = pi == 1 ? 5 : n) {
        outcome *o = calloc(1, sizeof *o);
        void *st = conn_new(now);
        assert_int_equal(run(st, wire, n, piece, o), error);
        assert_int_equal(o->error, error);
        assert_int_equal(o->policy, policy);
        assert_int_equal(o->principal, -1);
        /* no success after an error */
        sv_effects fx;
        uint8_t b[64] = {0};
        assert_int_equal(ops->feed(st, g_creds, b, sizeof b, &fx), error);
        assert_int_equal(fx.n, 1);
        assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
        uint8_t out[256];
        assert_int_equal(ops->frame(st, g_creds, 0, b, 4, out, sizeof out), -EINVAL);
        conn_free(st);
        free(o);
    }
}

static void refuse__auth_window_wrong_user_and_broken_fields(void **state)
{
    (void)state;
    static uint8_t wire[2048];
    tclient t;
    const uint8_t S = SV_VMESS_OPT_CHUNK_STREAM, M = SV_VMESS_OPT_CHUNK_MASKING;
    const uint8_t gcm = SV_VMESS_SEC_AES_128_GCM;
    size_t n;
    /* ±120 s: edges pass, one second more fails (the vector at its own timestamp passes above) */
    for (int d = -121; d <= 121; d += 1) {
        if (d > -120 && d < 120 && d != 0)
            continue;
        n = tc_header(&t, VEC_UUID, NOW + d, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                      BREAK_NONE, wire);
        outcome *o = calloc(1, sizeof *o);
        void *st = conn_new(NOW);
        int rc = run(st, wire, n, n, o);
        if (d < -SV_VMESS_AUTH_WINDOW_S || d > SV_VMESS_AUTH_WINDOW_S) {
            assert_int_equal(rc, -ETIME);
            assert_int_equal(o->policy, SV_PROBE_DRAIN);
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(o->principal, 1);
        }
        conn_free(st);
        free(o);
    }
    /* a timestamp five minutes old, and one far in the future */
    n = tc_header(&t, VEC_UUID, NOW - 300, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                  BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -ETIME, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, -1, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE,
                  wire);
    expect_refused(wire, n, NOW, -ETIME, SV_PROBE_DRAIN);
    /* an unknown UUID, a bad CRC */
    n = tc_header(&t, "11111111-2222-4333-8444-555555555555", NOW, S | M, gcm, 1, ADDR_DOMAIN,
                  sizeof ADDR_DOMAIN, BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EACCES, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_CRC,
                  wire);
    expect_refused(wire, n, NOW, -EACCES, SV_PROBE_DRAIN);
    /* AEAD tags, version, FNV */
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                  BREAK_LEN_TAG, wire);
    expect_refused(wire, n, NOW, -EBADMSG, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                  BREAK_HDR_TAG, wire);
    expect_refused(wire, n, NOW, -EBADMSG, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_FNV,
                  wire);
    expect_refused(wire, n, NOW, -EPROTO, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                  BREAK_VERSION, wire);
    expect_refused(wire, n, NOW, -EPROTO, SV_PROBE_DRAIN);
    /* bad addresses: unknown type, empty domain, truncated */
    const uint8_t bad_type[] = {0, 80, 4, 1, 2, 3, 4};
    const uint8_t empty_domain[] = {0, 80, 2, 0};
    const uint8_t short_v6[] = {0, 80, 3, 1, 2};
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, bad_type, sizeof bad_type, BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EPROTO, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, empty_domain, sizeof empty_domain,
                  BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EPROTO, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 1, short_v6, sizeof short_v6, BREAK_NONE,
                  wire);
    expect_refused(wire, n, NOW, -EPROTO, SV_PROBE_DRAIN);
    /* securities 0-2 and 7, chunk stream off for an AEAD, padding without masking, commands */
    const uint8_t bad_secs[] = {0, 1, 2, 7, 15};
    for (size_t i = 0; i < sizeof bad_secs; i++) {
        n = tc_header(&t, VEC_UUID, NOW, S | M, bad_secs[i], 1, ADDR_DOMAIN,
                      sizeof ADDR_DOMAIN, BREAK_NONE, wire);
        expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
    }
    n = tc_header(&t, VEC_UUID, NOW, M, gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | SV_VMESS_OPT_GLOBAL_PADDING, gcm, 1, ADDR_DOMAIN,
                  sizeof ADDR_DOMAIN, BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M | SV_VMESS_OPT_GLOBAL_PADDING | SV_VMESS_OPT_AUTH_LENGTH,
                  gcm, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE, wire);
    expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, 0, SV_VMESS_SEC_ZERO, 2, ADDR_V4, sizeof ADDR_V4, BREAK_NONE,
                  wire);
    expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
    n = tc_header(&t, VEC_UUID, NOW, S | M, gcm, 4, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE,
                  wire);
    expect_refused(wire, n, NOW, -EPROTONOSUPPORT, SV_PROBE_DRAIN);
}

/* Mux.Cool (command 3, no address, §7.1): the body's frames are decoded across chunks (a frame
 * header split between two chunks, two frames in one chunk), whole and byte at a time; the
 * reply is Keep frames then the End frame, sealed as chunks the client reads back. */
static void mux__frames_across_chunks(void **state)
{
    (void)state;
    static uint8_t wire[4096], out[4096], got[4096];
    static const uint8_t frames[] = {
        0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1, /* New 1 */
        0x00, 0x03, 'a', 'b', 'c',
        0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x02, 'd', 'e', /* Keep 1 */
        0x00, 0x04, 0x00, 0x01, 0x03, 0x00}; /* End 1 */
    const uint8_t S = SV_VMESS_OPT_CHUNK_STREAM, M = SV_VMESS_OPT_CHUNK_MASKING;
    for (size_t pi = 0, piece = 1; pi < 2; pi++, piece = 4096) {
        tclient t;
        size_t n = tc_header(&t, VEC_UUID, NOW, S | M, SV_VMESS_SEC_AES_128_GCM, 3, NULL, 0,
                             BREAK_NONE, wire);
        n += tc_chunk(&t, frames, 6, wire + n);                       /* half a header */
        n += tc_chunk(&t, frames + 6, sizeof frames - 6, wire + n);   /* the rest, 3 frames */
        void *st = conn_new(NOW);
        sv_effects fx;
        size_t have = 0, off = 0;
        char log[256] = "";
        while (off < n) {
            have = have + piece > n - off ? n - off : have + piece;
            ssize_t r = ops->feed(st, g_creds, wire + off, have, &fx);
            assert_true(r >= 0);
            for (unsigned i = 0; i < fx.n; i++) {
                const sv_effect *e = &fx.v[i];
                char one[64];
                if (e->kind == SV_FX_AUTHENTICATED)
                    snprintf(one, sizeof one, "auth %d mux %d;", e->principal, e->multiplexed);
                else if (e->kind == SV_FX_OPEN)
                    snprintf(one, sizeof one, "open %u port %u;", e->stream, e->dest.port);
                else if (e->kind == SV_FX_TO_OUTBOUND)
                    snprintf(one, sizeof one, "data %u %.*s;", e->stream, (int)e->len,
                             (const char *)e->data);
                else
                    snprintf(one, sizeof one, "kind %d %u;", e->kind, e->stream);
                strncat(log, one, sizeof log - strlen(log) - 1);
            }
            off += (size_t)r;
            have -= (size_t)r;
        }
        assert_string_equal(log, "auth 1 mux 1;open 1 port 80;data 1 abc;data 1 de;kind 6 1;");
        ssize_t w = ops->frame(st, g_creds, 1, (const uint8_t *)"xyz", 3, out, sizeof out);
        assert_true(w > 0 && (size_t)w <= ops->frame_max(3));
        ssize_t e =
            sv_proto_end(ops)->frame_end(st, g_creds, 1, true, out + w, sizeof out - (size_t)w);
        assert_true(e > 0);
        bool eof = false;
        size_t gl = tc_read(&t, out, (size_t)(w + e), true, got, &eof);
        static const uint8_t want[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x03, 'x', 'y',
                                       'z', 0x00, 0x04, 0x00, 0x01, 0x03, 0x02};
        assert_int_equal(gl, sizeof want);
        assert_memory_equal(got, want, sizeof want);
        conn_free(st);
    }
}

/* The Mux.Cool decoder's End answers (a Keep for a session never opened, one for a session that
 * ended here while the client was still sending, as after a kill) are sealed as the
 * downstream's next chunks, the response header first when nothing went out yet, in one
 * SV_FX_TO_CLIENT ahead of the call's other effects. Plaintext there broke the client's stream:
 * t-mux-clients' sub-flows were all reset after a sibling was killed. */
static void mux__end_answers_are_sealed(void **state)
{
    (void)state;
    static uint8_t wire[4096], down[4096], got[4096];
    static const uint8_t opens[] = {
        0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1, /* New 1 */
        0x00, 0x01, 'a',
        0x00, 0x0c, 0x00, 0x02, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1, /* New 2 */
        0x00, 0x01, 'b'};
    static const uint8_t keep9[] = {0x00, 0x04, 0x00, 0x09, 0x02, 0x00}; /* never opened */
    static const uint8_t later[] = {
        0x00, 0x04, 0x00, 0x02, 0x02, 0x01, 0x00, 0x01, 'q',        /* Keep 2 */
        0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x02, 'z', 'z'}; /* Keep 1: ended here */
    const uint8_t S = SV_VMESS_OPT_CHUNK_STREAM, M = SV_VMESS_OPT_CHUNK_MASKING;
    tclient t;
    size_t n = tc_header(&t, VEC_UUID, NOW, S | M, SV_VMESS_SEC_AES_128_GCM, 3, NULL, 0,
                         BREAK_NONE, wire);
    n += tc_chunk(&t, opens, sizeof opens, wire + n);
    n += tc_chunk(&t, keep9, sizeof keep9, wire + n);
    void *st = conn_new(NOW);
    size_t dl = 0;
    char log[256] = "";
    sv_effects fx;
    for (int round = 0; round < 2; round++) {
        ssize_t r = ops->feed(st, g_creds, wire, n, &fx);
        assert_int_equal(r, (ssize_t)n);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            char one[64];
            if (e->kind == SV_FX_TO_CLIENT) {
                memcpy(down + dl, e->data, e->len);
                dl += e->len;
                snprintf(one, sizeof one, "client;");
            } else if (e->kind == SV_FX_TO_OUTBOUND) {
                snprintf(one, sizeof one, "data %u %.*s;", e->stream, (int)e->len,
                         (const char *)e->data);
            } else {
                snprintf(one, sizeof one, "kind %d %u;", e->kind, e->stream);
            }
            strncat(log, one, sizeof log - strlen(log) - 1);
        }
        strncat(log, "|", sizeof log - strlen(log) - 1);
        if (round == 0) { /* session 1's outbound ends here (a kill): its End goes out */
            ssize_t w =
                sv_proto_end(ops)->frame_end(st, g_creds, 1, true, down + dl, sizeof down - dl);
            assert_true(w > 0);
            dl += (size_t)w;
            n = tc_chunk(&t, later, sizeof later, wire);
        }
    }
    assert_string_equal(log, "kind 1 0;client;kind 2 1;data 1 a;kind 2 2;data 2 b;|"
                             "client;data 2 q;|");
    bool eof = false;
    size_t gl = tc_read(&t, down, dl, true, got, &eof);
    static const uint8_t want[] = {0x00, 0x04, 0x00, 0x09, 0x03, 0x00,  /* End 9 (answer) */
                                   0x00, 0x04, 0x00, 0x01, 0x03, 0x02,  /* End 1 (killed) */
                                   0x00, 0x04, 0x00, 0x01, 0x03, 0x00}; /* End 1 (answer) */
    assert_false(eof);
    assert_int_equal(gl, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    conn_free(st);
}

/* The same auth ID twice: the second is a replay, refused like a wrong user; a request whose
 * length does not open does not enter the filter. */
static void refuse__replayed_auth_id(void **state)
{
    (void)state;
    static uint8_t wire[2048], broken[2048];
    tclient t;
    size_t n = tc_header(&t, VEC_UUID, NOW, SV_VMESS_OPT_CHUNK_STREAM | SV_VMESS_OPT_CHUNK_MASKING,
                         SV_VMESS_SEC_AES_128_GCM, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                         BREAK_NONE, wire);
    memcpy(broken, wire, n);
    broken[20] ^= 1; /* the length's ciphertext: the same auth ID, not authenticated */
    expect_refused(broken, n, NOW, -EBADMSG, SV_PROBE_DRAIN);
    outcome *o = calloc(1, sizeof *o);
    void *st = conn_new(NOW);
    assert_int_equal(run(st, wire, n, n, o), 0);
    assert_int_equal(o->principal, 1);
    conn_free(st);
    free(o);
    expect_refused(wire, n, NOW, -EALREADY, SV_PROBE_DRAIN);
    /* the vectors' auth IDs too */
    static uint8_t vw[4096];
    size_t vn = jhex(cpath(0, "client_to_server_wire_hex"), vw, sizeof vw);
    o = calloc(1, sizeof *o);
    st = conn_new(case_ts(0));
    assert_int_equal(run(st, vw, vn, vn, o), 0);
    conn_free(st);
    free(o);
    expect_refused(vw, vn, case_ts(0), -EALREADY, SV_PROBE_DRAIN);
}

/* After the header: a broken chunk tag, an oversized chunk, a chunk shorter than its tag, bytes
 * after the end — each closes (no drain), whole and piecewise. */
static void body__errors_close(void **state)
{
    (void)state;
    static uint8_t wire[40000];
    tclient t;
    const uint8_t S = SV_VMESS_OPT_CHUNK_STREAM, M = SV_VMESS_OPT_CHUNK_MASKING;
    uint8_t payload[100] = {1, 2, 3};
    for (int kind = 0; kind < 4; kind++) {
        size_t n = tc_header(&t, VEC_UUID, NOW, kind == 1 ? S : S | M, SV_VMESS_SEC_AES_128_GCM,
                             1, ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE, wire);
        size_t h = n;
        int want = 0;
        if (kind == 0) {
            n += tc_chunk(&t, payload, sizeof payload, wire + n);
            wire[n - 1] ^= 1;
            want = -EBADMSG;
        } else if (kind == 1) { /* plain size field: 16385 */
            wire[n++] = (SV_VMESS_CHUNK_MAX + 1) >> 8;
            wire[n++] = (SV_VMESS_CHUNK_MAX + 1) & 0xff;
            want = -EMSGSIZE;
        } else if (kind == 2) {
            uint16_t mask = sv_vmess_shake_next(&t.up);
            wire[n++] = (uint8_t)((15 ^ mask) >> 8);
            wire[n++] = (uint8_t)(15 ^ mask);
            want = -EPROTO;
        } else {
            n += tc_chunk(&t, NULL, 0, wire + n);
            wire[n++] = 0;
            want = -EPROTO;
        }
        for (size_t pi = 0, piece = 1; pi < 3; pi++, piece = pi == 1 ? 9 : n) {
            outcome *o = calloc(1, sizeof *o);
            void *st = conn_new(NOW);
            assert_int_equal(run(st, wire, n, piece, o), want);
            assert_int_equal(o->principal, 1);
            assert_int_equal(o->policy, SV_PROBE_CLOSE);
            conn_free(st);
            free(o);
        }
        (void)h;
    }
}

/* Many small chunks in one feed: the effects list fills, the rest comes on the next call. */
static void body__many_chunks_fill_the_effects(void **state)
{
    (void)state;
    static uint8_t wire[40000];
    tclient t;
    size_t n = tc_header(&t, VEC_UUID, NOW, SV_VMESS_OPT_CHUNK_STREAM | SV_VMESS_OPT_CHUNK_MASKING |
                         SV_VMESS_OPT_GLOBAL_PADDING, SV_VMESS_SEC_CHACHA20_POLY1305, 1,
                         ADDR_DOMAIN, sizeof ADDR_DOMAIN, BREAK_NONE, wire);
    for (int i = 0; i < 100; i++) {
        uint8_t b = (uint8_t)i;
        n += tc_chunk(&t, &b, 1, wire + n);
    }
    outcome *o = calloc(1, sizeof *o);
    void *st = conn_new(NOW);
    assert_int_equal(run(st, wire, n, n, o), 0);
    assert_int_equal(o->len, 100);
    for (int i = 0; i < 100; i++)
        assert_int_equal(o->data[i], i);
    conn_free(st);
    free(o);
}

static void frame__bounds(void **state)
{
    (void)state;
    static uint8_t wire[2048], out[SV_VMESS_RESP_HEADER + 70000];
    tclient t;
    size_t n = tc_header(&t, VEC_UUID, NOW, SV_VMESS_OPT_CHUNK_STREAM | SV_VMESS_OPT_CHUNK_MASKING,
                         SV_VMESS_SEC_AES_128_GCM, 1, ADDR_DOMAIN, sizeof ADDR_DOMAIN,
                         BREAK_NONE, wire);
    outcome *o = calloc(1, sizeof *o);
    void *st = conn_new(NOW);
    assert_int_equal(run(st, wire, n, n, o), 0);
    uint8_t in[10] = {0};
    assert_int_equal(ops->frame(st, g_creds, 0, in, 10, out, ops->frame_max(10) - 1), -EMSGSIZE);
    assert_int_equal(
        sv_proto_end(ops)->frame_end(st, g_creds, 0, false, out, ops->frame_max(0) - 1), -EMSGSIZE);
    /* TCP connection: no datagrams */
    assert_int_equal(
        sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &o->dest, in, 10, out, sizeof out),
        -EINVAL);
    /* the worker's sealed buffer holds a whole remote read (runtime.h SV_SEALED_MAX) */
    assert_true(ops->frame_max(64 * 1024) <= 64 * 1024 + 4096);
    assert_true(ops->carry_max <= 32 + 2 + 16 + 0x3fff + 16);
    conn_free(st);
    free(o);
}

static void creds__bad_and_duplicate_uuids_refused(void **state)
{
    (void)state;
    int rc;
    sv_error err = {0};
    const char *bad[] = {VEC_UUID, "not-a-uuid"};
    assert_null(creds_of(bad, 2, &rc, &err));
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err.msg, "user 2 has no valid UUID"));
    const char *dup[] = {VEC_UUID, OTHER_UUID, "27848739-7E62-4138-9FD3-098A63964B6B"};
    assert_null(creds_of(dup, 3, &rc, &err));
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err.msg, "users 1 and 3 have the same UUID"));
    void *empty = creds_of(NULL, 0, &rc, &err);
    assert_int_equal(rc, 0);
    static uint8_t vw[4096];
    size_t vn = jhex(cpath(0, "client_to_server_wire_hex"), vw, sizeof vw);
    void *st = conn_new(case_ts(0));
    sv_effects fx;
    assert_int_equal(ops->feed(st, empty, vw, vn, &fx), -EACCES);
    conn_free(st);
    ops->creds_free(empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys__cmd_key_auth_key_and_kdf_vectors),
        cmocka_unit_test(shake__matches_openssl_and_vectors),
        cmocka_unit_test(request__vectors_whole_and_byte_at_a_time),
        cmocka_unit_test(response__vectors),
        cmocka_unit_test(options__every_security_and_option),
        cmocka_unit_test(refuse__auth_window_wrong_user_and_broken_fields),
        cmocka_unit_test(mux__frames_across_chunks),
        cmocka_unit_test(mux__end_answers_are_sealed),
        cmocka_unit_test_setup_teardown(refuse__replayed_auth_id, replay_setup, replay_teardown),
        cmocka_unit_test(body__errors_close),
        cmocka_unit_test(body__many_chunks_fill_the_effects),
        cmocka_unit_test(frame__bounds),
        cmocka_unit_test(creds__bad_and_duplicate_uuids_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
