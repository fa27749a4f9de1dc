/*
 * Shadowsocks 2022 TCP server core (PROTOCOLS.md §3): session subkeys by BLAKE3 derive_key,
 * the fixed and variable request headers, EIH user lookup, ±30 s timestamps, the salt replay
 * filter, and the response header that echoes the request salt.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "supervisor/crypto/blake3.h"
#include "supervisor/proto/ss2022.h"
#include "supervisor/util/digits.h"

#define CTX_SESSION "shadowsocks 2022 session subkey"
#define CTX_IDENTITY "shadowsocks 2022 identity subkey"

struct sv_ss22_creds {
    enum sv_ss_cipher cipher;
    size_t key_len;
    bool multi;                        /**< EIH: users told apart by their identity header */
    uint8_t ipsk[SV_SS22_KEY_MAX];     /**< multi: the server's identity key */
    size_t n;
    uint8_t (*upsk)[SV_SS22_KEY_MAX];  /**< n user keys */
    uint8_t (*hash)[16];               /**< n × BLAKE3(uPSK)[0:16] */
    int32_t *slots;                    /**< open addressing over hash: user index + 1, 0 = empty */
    size_t n_slots;                    /**< a power of two, ≥ 2n */
    sv_replay *replay;                 /**< borrowed */
};

size_t sv_ss22_key_len(enum sv_ss_cipher cipher)
{
    switch (cipher) {
    case SV_SS_2022_AES_128_GCM:
        return 16;
    case SV_SS_2022_AES_256_GCM:
    case SV_SS_2022_CHACHA20_POLY1305:
        return 32;
    default:
        return 0;
    }
}

int sv_ss22_key_decode(const char *b64, size_t key_len, uint8_t *out)
{
    size_t len = b64 != NULL ? strlen(b64) : 0;
    size_t want = (key_len + 2) / 3 * 4, pad = (3 - key_len % 3) % 3;
    if (len != want || key_len > SV_SS22_KEY_MAX)
        return -EINVAL;
    uint8_t buf[SV_SS22_KEY_MAX + 2];
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = sv_b64_digit(b64[i + j], false);
            if (d < 0 && !(b64[i + j] == '=' && i + j >= len - pad))
                return -EINVAL;
            v = v << 6 | (uint32_t)(d < 0 ? 0 : d);
        }
        buf[o++] = (uint8_t)(v >> 16);
        buf[o++] = (uint8_t)(v >> 8);
        buf[o++] = (uint8_t)v;
    }
    for (size_t i = key_len; i < o; i++)
        if (buf[i] != 0)
            return -EINVAL; /* non-canonical trailing bits */
    memcpy(out, buf, key_len);
    return 0;
}

int sv_ss22_user_key(const char *secret, size_t key_len, uint8_t *out)
{
    if (secret == NULL || strlen(secret) < key_len)
        return -EINVAL;
    memcpy(out, secret, key_len);
    return 0;
}

static uint64_t slot_hash(const uint8_t h[16])
{
    uint64_t v;
    memcpy(&v, h, sizeof v); /* already uniform: a BLAKE3 output */
    return v;
}

int sv_ss22_lookup(const sv_ss22_creds *c, const uint8_t hash[16])
{
    if (c->n_slots == 0)
        return -1;
    for (size_t i = slot_hash(hash) & (c->n_slots - 1);; i = (i + 1) & (c->n_slots - 1)) {
        int32_t s = c->slots[i];
        if (s == 0)
            return -1;
        if (memcmp(c->hash[s - 1], hash, 16) == 0)
            return s - 1;
    }
}

void sv_ss22_creds_free(sv_ss22_creds *c)
{
    if (c == NULL)
        return;
    if (c->upsk != NULL)
        OPENSSL_cleanse(c->upsk, c->n * sizeof *c->upsk);
    OPENSSL_cleanse(c->ipsk, sizeof c->ipsk);
    free(c->upsk);
    free(c->hash);
    free(c->slots);
    free(c);
}

void sv_ss22_creds_set_replay(sv_ss22_creds *c, sv_replay *r) { c->replay = r; }

int sv_ss22_creds_from_keys(const char *tag, enum sv_ss_cipher cipher, const uint8_t *ipsk,
                            const uint8_t (*keys)[SV_SS22_KEY_MAX], size_t n,
                            sv_ss22_creds **out, sv_error *err)
{
    size_t k = sv_ss22_key_len(cipher);
    if (k == 0)
        return sv_error_set(err, -EINVAL, "inbound %s: not a Shadowsocks 2022 cipher", tag);
    if (ipsk != NULL && cipher == SV_SS_2022_CHACHA20_POLY1305)
        return sv_error_set(err, -EINVAL, "inbound %s: server_key: 2022-blake3-chacha20-poly1305 "
                            "has no identity headers (single user only)", tag);
    if (ipsk == NULL && n > 1)
        return sv_error_set(err, -EINVAL, "inbound %s: %zu users need a server_key (identity "
                            "headers); without one a Shadowsocks 2022 inbound has one user",
                            tag, n);
    sv_ss22_creds *c = calloc(1, sizeof *c);
    if (c == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    c->cipher = cipher;
    c->key_len = k;
    c->n = n;
    c->multi = ipsk != NULL;
    if (c->multi)
        memcpy(c->ipsk, ipsk, k);
    size_t slots = 1;
    while (slots < 2 * n)
        slots <<= 1;
    c->upsk = calloc(n ? n : 1, sizeof *c->upsk);
    c->hash = calloc(n ? n : 1, sizeof *c->hash);
    c->slots = c->multi ? calloc(slots, sizeof *c->slots) : NULL;
    c->n_slots = c->multi ? slots : 0;
    if (c->upsk == NULL || c->hash == NULL || (c->multi && c->slots == NULL)) {
        sv_ss22_creds_free(c);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(c->upsk[i], keys[i], k);
        sv_blake3_hash(c->upsk[i], k, c->hash[i], 16);
        if (!c->multi)
            continue;
        if (sv_ss22_lookup(c, c->hash[i]) >= 0) {
            sv_ss22_creds_free(c);
            return sv_error_set(err, -EINVAL, "inbound %s: two users have the same Shadowsocks "
                                "2022 key (the first %zu bytes of their secrets)", tag, k);
        }
        size_t s = slot_hash(c->hash[i]) & (slots - 1);
        while (c->slots[s] != 0)
            s = (s + 1) & (slots - 1);
        c->slots[s] = (int32_t)i + 1;
    }
    *out = c;
    return 0;
}

int sv_ss22_creds_new(const char *tag, enum sv_ss_cipher cipher, const char *server_key,
                      const char *const *secrets, size_t n, sv_ss22_creds **out, sv_error *err)
{
    size_t k = sv_ss22_key_len(cipher);
    uint8_t ipsk[SV_SS22_KEY_MAX];
    if (k == 0)
        return sv_error_set(err, -EINVAL, "inbound %s: not a Shadowsocks 2022 cipher", tag);
    if (server_key != NULL && sv_ss22_key_decode(server_key, k, ipsk) != 0)
        return sv_error_set(err, -EINVAL, "inbound %s: server_key is not the base64 of %zu bytes",
                            tag, k);
    uint8_t (*keys)[SV_SS22_KEY_MAX] = calloc(n ? n : 1, sizeof *keys);
    if (keys == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (sv_ss22_user_key(secrets[i], k, keys[i]) != 0)
            rc = sv_error_set(err, -EINVAL, "inbound %s: a user secret is shorter than the "
                              "%zu-byte Shadowsocks 2022 key", tag, k);
    if (rc == 0)
        rc = sv_ss22_creds_from_keys(tag, cipher, server_key != NULL ? ipsk : NULL,
                                     (const uint8_t(*)[SV_SS22_KEY_MAX])keys, n, out, err);
    OPENSSL_cleanse(keys, (n ? n : 1) * sizeof *keys);
    OPENSSL_cleanse(ipsk, sizeof ipsk);
    free(keys);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */

int sv_ss22_tcp_init(sv_ss22_tcp *t, enum sv_ss_cipher cipher)
{
    t->state = SV_SS22_AUTH;
    t->cipher = cipher;
    t->user = -1;
    return 0;
}

void sv_ss22_tcp_deinit(sv_ss22_tcp *t)
{
    sv_aead_deinit(&t->open);
    sv_aead_deinit(&t->seal);
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* session/identity subkey = derive_key(context, key ‖ salt), key_len bytes (§3.1) */
static void subkey(const char *context, const uint8_t *key, const uint8_t *salt, size_t k,
                   uint8_t *out)
{
    uint8_t material[2 * SV_SS22_KEY_MAX];
    memcpy(material, key, k);
    memcpy(material + k, salt, k);
    sv_blake3_derive_key(context, material, 2 * k, out, k);
    OPENSSL_cleanse(material, sizeof material);
}

/* One AES block (128 or 256 by @p k) decrypted with @p key: the EIH (§3.7). */
static int aes_block_decrypt(const uint8_t *key, size_t k, const uint8_t in[16], uint8_t out[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0, ok = ctx != NULL &&
                      EVP_DecryptInit_ex(ctx, k == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                                         NULL, key, NULL) == 1 &&
                      EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 &&
                      EVP_DecryptUpdate(ctx, out, &len, in, 16) == 1 && len == 16;
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -ENOMEM;
}

/* The salt, EIH and fixed header: who the client is, whether the request is fresh. */
static ssize_t step_auth(sv_ss22_tcp *t, const sv_ss22_creds *c, uint8_t *p, size_t n,
                         sv_effects *fx)
{
    size_t k = c->key_len, eih = c->multi ? SV_SS22_EIH : 0;
    size_t need = k + eih + SV_SS22_FIXED + SV_SS22_TAG;
    if (n < need)
        return 0;
    int user = 0;
    if (c->multi) {
        uint8_t idkey[SV_SS22_KEY_MAX], hash[16];
        subkey(CTX_IDENTITY, c->ipsk, p, k, idkey);
        int rc = aes_block_decrypt(idkey, k, p + k, hash);
        OPENSSL_cleanse(idkey, sizeof idkey);
        if (rc != 0)
            return rc;
        user = sv_ss22_lookup(c, hash);
    } else if (c->n == 0) {
        user = -1;
    }
    if (user < 0)
        return -EBADMSG;
    uint8_t key[SV_SS22_KEY_MAX];
    subkey(CTX_SESSION, c->upsk[user], p, k, key);
    int rc = sv_aead_init(&t->open, c->cipher, key, false);
    OPENSSL_cleanse(key, sizeof key);
    if (rc != 0)
        return rc;
    uint8_t *h = p + k + eih;
    if (sv_aead_open(&t->open, h, SV_SS22_FIXED) != 0)
        return -EBADMSG;
    if (h[0] != 0)
        return -EPROTO;
    uint64_t ts = 0;
    for (int i = 1; i <= 8; i++)
        ts = ts << 8 | h[i];
    int64_t skew = (int64_t)ts - t->now;
    if (ts > (uint64_t)INT64_MAX || skew > SV_SS22_WINDOW_S || skew < -SV_SS22_WINDOW_S)
        return -ETIME;
    uint16_t len = get_u16(h + 9);
    if (len < 1 + 1 + 1 + 2 + 2) /* the shortest address (a 1-byte name) and padding length */
        return -EPROTO;
    if (c->replay != NULL && !sv_replay_add(c->replay, p, k))
        return -EEXIST;
    memcpy(t->request_salt, p, k);
    t->user = user;
    t->need = len;
    t->state = SV_SS22_HEADER;
    sv_effects_push(fx, SV_FX_AUTHENTICATED)->principal = user;
    return (ssize_t)need;
}

/* The variable header: address, padding, initial payload (§3.2). */
static ssize_t step_header(sv_ss22_tcp *t, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t len = t->need;
    if (n < len + SV_SS22_TAG)
        return 0;
    if (sv_aead_open(&t->open, p, len) != 0)
        return -EBADMSG;
    sv_dest d;
    ssize_t a = sv_dest_parse(p, len, &d);
    if (a <= 0 || (size_t)a + 2 > len)
        return -EPROTO;
    size_t pad = get_u16(p + a);
    if (pad > SV_SS22_PADDING_MAX || (size_t)a + 2 + pad > len)
        return -EPROTO;
    size_t off = (size_t)a + 2 + pad;
    if (pad == 0 && off == len)
        return -EPROTO; /* neither payload nor padding */
    sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
    e->dest = d;
    e->dest.network = SV_NET_TCP;
    if (off < len) {
        e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->data = p + off;
        e->len = len - off;
    }
    t->state = SV_SS22_LENGTH;
    return (ssize_t)(len + SV_SS22_TAG);
}

static ssize_t step(sv_ss22_tcp *t, const sv_ss22_creds *c, uint8_t *p, size_t n,
                    sv_effects *fx)
{
    switch (t->state) {
    case SV_SS22_AUTH:
        return step_auth(t, c, p, n, fx);
    case SV_SS22_HEADER:
        return step_header(t, p, n, fx);
    case SV_SS22_LENGTH:
        if (n < 2 + SV_SS22_TAG)
            return 0;
        if (sv_aead_open(&t->open, p, 2) != 0)
            return -EBADMSG;
        t->need = get_u16(p);
        if (t->need == 0)
            return -EPROTO;
        t->state = SV_SS22_PAYLOAD;
        return 2 + SV_SS22_TAG;
    case SV_SS22_PAYLOAD: {
        if (n < t->need + SV_SS22_TAG)
            return 0;
        if (sv_aead_open(&t->open, p, t->need) != 0)
            return -EBADMSG;
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->data = p;
        e->len = t->need;
        t->state = SV_SS22_LENGTH;
        return (ssize_t)(t->need + SV_SS22_TAG);
    }
    case SV_SS22_FAILED:
        break;
    }
    return -EINVAL;
}

ssize_t sv_ss22_tcp_feed(sv_ss22_tcp *t, const sv_ss22_creds *c, uint8_t *p, size_t n,
                         sv_effects *fx)
{
    size_t off = 0;
    fx->n = 0;
    while (off < n && fx->n + 3 <= SV_EFFECTS_MAX) {
        enum sv_ss22_state before = t->state;
        ssize_t r = step(t, c, p + off, n - off, fx);
        if (r < 0) {
            t->state = SV_SS22_FAILED;
            sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
            e->error = (int)r;
            e->policy = before == SV_SS22_AUTH || before == SV_SS22_HEADER ? SV_PROBE_DRAIN
                                                                          : SV_PROBE_CLOSE;
            return r;
        }
        if (r == 0)
            break;
        off += (size_t)r;
    }
    return (ssize_t)off;
}

ssize_t sv_ss22_tcp_frame(sv_ss22_tcp *t, const sv_ss22_creds *c, const uint8_t *in, size_t len,
                          uint8_t *out, size_t cap)
{
    if (t->user < 0 || (size_t)t->user >= c->n || len == 0)
        return -EINVAL;
    if (cap < SV_SS22_FRAMED_MAX(len))
        return -EMSGSIZE;
    size_t k = c->key_len, o = 0;
    size_t first = len < SV_SS22_CHUNK_MAX ? len : SV_SS22_CHUNK_MAX;
    if (!t->response_sent) {
        uint8_t key[SV_SS22_KEY_MAX];
        if (t->rng != NULL)
            t->rng(out, k);
        else if (RAND_bytes(out, (int)k) != 1)
            return -EINVAL;
        subkey(CTX_SESSION, c->upsk[t->user], out, k, key);
        int rc = sv_aead_init(&t->seal, c->cipher, key, true);
        OPENSSL_cleanse(key, sizeof key);
        if (rc != 0)
            return rc;
        o = k;
        uint8_t *h = out + o;
        h[0] = 1;
        uint64_t ts = t->now > 0 ? (uint64_t)t->now : 0;
        for (int i = 0; i < 8; i++)
            h[1 + i] = (uint8_t)(ts >> (56 - 8 * i));
        memcpy(h + 9, t->request_salt, k);
        put_u16(h + 9 + k, (uint16_t)first);
        size_t hl = 1 + 8 + k + 2;
        if (sv_aead_seal(&t->seal, h, hl) != 0 ||
            sv_aead_seal_to(&t->seal, in, first, out + o + hl + SV_SS22_TAG) != 0)
            return -EINVAL;
        o += hl + SV_SS22_TAG + first + SV_SS22_TAG;
        in += first;
        len -= first;
        t->response_sent = true;
    }
    while (len > 0) {
        size_t chunk = len < SV_SS22_CHUNK_MAX ? len : SV_SS22_CHUNK_MAX;
        put_u16(out + o, (uint16_t)chunk);
        if (sv_aead_seal(&t->seal, out + o, 2) != 0 ||
            sv_aead_seal_to(&t->seal, in, chunk, out + o + 2 + SV_SS22_TAG) != 0)
            return -EINVAL;
        o += 2 + SV_SS22_TAG + chunk + SV_SS22_TAG;
        in += chunk;
        len -= chunk;
    }
    return (ssize_t)o;
}

/* ---------------------------------------------------------------------------------------- */
/* UDP (AES methods)                                                                          */

bool sv_ss22_window_accept(sv_ss22_window *w, uint64_t id)
{
    const uint64_t size = SV_SS22_UDP_WINDOW;
    if (id == UINT64_MAX)
        return false;
    if (id >= w->top) { /* ahead: forget the slots the window slides past */
        uint64_t from = w->top, steps = id + 1 - w->top;
        if (steps >= size)
            memset(w->bits, 0, sizeof w->bits);
        else
            for (uint64_t i = from; i <= id; i++)
                w->bits[(i % size) / 64] &= ~(1ull << (i % 64));
        w->top = id + 1;
    } else if (w->top - id > size) {
        return false; /* too old */
    }
    uint64_t *word = &w->bits[(id % size) / 64], bit = 1ull << (id % 64);
    if (*word & bit)
        return false;
    *word |= bit;
    return true;
}

static int aes_block(const uint8_t *key, size_t k, const uint8_t in[16], uint8_t out[16], bool enc)
{
    if (enc) {
        EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
        int len = 0, ok = ctx != NULL &&
                          EVP_EncryptInit_ex(ctx, k == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                                             NULL, key, NULL) == 1 &&
                          EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 &&
                          EVP_EncryptUpdate(ctx, out, &len, in, 16) == 1 && len == 16;
        EVP_CIPHER_CTX_free(ctx);
        return ok ? 0 : -ENOMEM;
    }
    return aes_block_decrypt(key, k, in, out);
}

static bool fresh(uint64_t ts, int64_t now)
{
    int64_t skew = (int64_t)ts - now;
    return ts <= (uint64_t)INT64_MAX && skew <= SV_SS22_WINDOW_S && skew >= -SV_SS22_WINDOW_S;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* Key the AEAD @p ctx with derive_key(key ‖ session ID) and nonce = header[4:16]. */
static int udp_key(const sv_ss22_creds *c, const uint8_t *key, const uint8_t hdr[16], bool enc,
                   sv_aead *ctx)
{
    uint8_t material[SV_SS22_KEY_MAX + 8], sub[SV_SS22_KEY_MAX];
    memcpy(material, key, c->key_len);
    memcpy(material + c->key_len, hdr, 8);
    sv_blake3_derive_key(CTX_SESSION, material, c->key_len + 8, sub, c->key_len);
    int rc = sv_aead_init(ctx, c->cipher, sub, enc);
    OPENSSL_cleanse(sub, sizeof sub);
    if (rc == 0)
        memcpy(ctx->nonce, hdr + 4, 12);
    return rc;
}

/* Key @p ctx for XChaCha20-Poly1305 with the PSK and a 24-byte nonce (§3.6, PROTOCOLS.md §1.2). */
static int xchacha_key(const sv_ss22_creds *c, const uint8_t nonce[24], bool enc, sv_aead *ctx)
{
    uint8_t sub[32];
    sv_hchacha20(c->upsk[0], nonce, sub);
    int rc = sv_aead_init(ctx, c->cipher, sub, enc);
    OPENSSL_cleanse(sub, sizeof sub);
    if (rc == 0) {
        memset(ctx->nonce, 0, 4);
        memcpy(ctx->nonce + 4, nonce + 16, 8);
    }
    return rc;
}

/* Body after the header fields: padding, address, payload (both methods). */
static int parse_body_rest(uint8_t *b, size_t len, size_t off, sv_ss22_udp_in *out)
{
    if (off + 2 > len)
        return -EPROTO;
    size_t pad = get_u16(b + off);
    off += 2 + pad;
    if (pad > SV_SS22_PADDING_MAX || off > len)
        return -EPROTO;
    ssize_t a = sv_dest_parse(b + off, len - off, &out->dest);
    if (a <= 0)
        return -EPROTO;
    out->dest.network = SV_NET_UDP;
    out->payload = b + off + (size_t)a;
    out->len = len - off - (size_t)a;
    return 0;
}

/* §3.6: nonce 24 | XChaCha20-Poly1305(PSK; session ID, packet ID, type, timestamp, ...). */
static int xchacha_open(const sv_ss22_creds *c, int64_t now, uint8_t *pkt, size_t n,
                        sv_ss22_udp_in *out, sv_aead *ctx)
{
    if (n < 24 + 8 + 8 + 1 + 8 + 2 + SV_SS22_TAG || c->n == 0)
        return -EPROTO;
    int rc = xchacha_key(c, pkt, false, ctx);
    if (rc != 0)
        return rc;
    uint8_t *b = pkt + 24;
    size_t len = n - 24 - SV_SS22_TAG;
    if (sv_aead_open(ctx, b, len) != 0)
        return -EBADMSG;
    if (b[16] != 0)
        return -EPROTO;
    if (!fresh(get_u64(b + 17), now))
        return -ETIME;
    out->user = 0;
    memcpy(out->session_id, b, 8);
    out->packet_id = get_u64(b + 8);
    return parse_body_rest(b, len, 25, out);
}

int sv_ss22_udp_open(const sv_ss22_creds *c, int64_t now, uint8_t *pkt, size_t n,
                     sv_ss22_udp_in *out, sv_aead *ctx)
{
    if (c->cipher == SV_SS_2022_CHACHA20_POLY1305)
        return xchacha_open(c, now, pkt, n, out, ctx);
    size_t eih = c->multi ? SV_SS22_EIH : 0, head = 16 + eih;
    if (n < head + 1 + 8 + 2 + SV_SS22_TAG || c->n == 0)
        return -EPROTO;
    uint8_t hdr[16];
    int rc = aes_block(c->multi ? c->ipsk : c->upsk[0], c->key_len, pkt, hdr, false);
    if (rc != 0)
        return rc;
    int user = 0;
    if (c->multi) {
        uint8_t hash[16];
        if ((rc = aes_block(c->ipsk, c->key_len, pkt + 16, hash, false)) != 0)
            return rc;
        for (int i = 0; i < 16; i++)
            hash[i] ^= hdr[i];
        user = sv_ss22_lookup(c, hash);
        if (user < 0)
            return -EBADMSG;
    }
    if ((rc = udp_key(c, c->upsk[user], hdr, false, ctx)) != 0)
        return rc;
    uint8_t *b = pkt + head;
    size_t len = n - head - SV_SS22_TAG;
    if (sv_aead_open(ctx, b, len) != 0)
        return -EBADMSG;
    if (b[0] != 0)
        return -EPROTO;
    if (!fresh(get_u64(b + 1), now))
        return -ETIME;
    out->user = user;
    memcpy(out->session_id, hdr, 8);
    out->packet_id = get_u64(hdr + 8);
    return parse_body_rest(b, len, 9, out);
}

ssize_t sv_ss22_udp_seal(const sv_ss22_creds *c, int user, const uint8_t server_sid[8],
                         uint64_t packet_id, const uint8_t client_sid[8], int64_t now,
                         const sv_dest *from, const uint8_t *payload, size_t n, uint8_t *out,
                         size_t cap, sv_aead *ctx, void (*rng)(uint8_t *buf, size_t n))
{
    if (user < 0 || (size_t)user >= c->n)
        return -EINVAL;
    if (cap < n + SV_SS22_UDP_OVERHEAD)
        return -EMSGSIZE;
    if (c->cipher == SV_SS_2022_CHACHA20_POLY1305) { /* §3.6 */
        if (rng != NULL)
            rng(out, 24);
        else if (RAND_bytes(out, 24) != 1)
            return -EINVAL;
        int rc = xchacha_key(c, out, true, ctx);
        if (rc != 0)
            return rc;
        uint8_t *b = out + 24;
        size_t addr = sv_dest_encode(from, b + 8 + 8 + 1 + 8 + 8 + 2);
        memmove(b + 35 + addr, payload, n);
        memcpy(b, server_sid, 8);
        put_u64(b + 8, packet_id);
        b[16] = 1;
        put_u64(b + 17, now > 0 ? (uint64_t)now : 0);
        memcpy(b + 25, client_sid, 8);
        put_u16(b + 33, 0);
        size_t len = 35 + addr + n;
        if (sv_aead_seal(ctx, b, len) != 0)
            return -EINVAL;
        return (ssize_t)(24 + len + SV_SS22_TAG);
    }
    uint8_t hdr[16];
    memcpy(hdr, server_sid, 8);
    put_u64(hdr + 8, packet_id);
    int rc = udp_key(c, c->upsk[user], hdr, true, ctx);
    if (rc == 0)
        rc = aes_block(c->upsk[user], c->key_len, hdr, out, true);
    if (rc != 0)
        return rc;
    uint8_t *b = out + 16;
    b[0] = 1;
    put_u64(b + 1, now > 0 ? (uint64_t)now : 0);
    memcpy(b + 9, client_sid, 8);
    put_u16(b + 17, 0);
    size_t len = 19 + sv_dest_encode(from, b + 19);
    memmove(b + len, payload, n);
    len += n;
    if (sv_aead_seal(ctx, b, len) != 0)
        return -EINVAL;
    return (ssize_t)(16 + len + SV_SS22_TAG);
}

/* ---------------------------------------------------------------------------------------- */
/* proto.h seam                                                                               */

static int ops_creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                         sv_error *err)
{
    size_t n = users != NULL ? users->n_users : 0;
    const char **secrets = calloc(n ? n : 1, sizeof *secrets);
    if (secrets == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        secrets[i] = users->users[i].secret;
    sv_ss22_creds *c = NULL;
    int rc = sv_ss22_creds_new(in->tag, in->ss_cipher, in->ss_server_key, secrets, n, &c, err);
    free(secrets);
    if (rc == 0)
        *out = c;
    return rc;
}

static void ops_creds_free(void *creds) { sv_ss22_creds_free(creds); }

static void ops_attach_replay(void *creds, sv_replay *filter)
{
    sv_ss22_creds_set_replay(creds, filter);
}

static void ops_set_time(void *state, int64_t unix_s) { ((sv_ss22_tcp *)state)->now = unix_s; }

static int ops_init(void *state, const sv_inbound_spec *in)
{
    return sv_ss22_tcp_init(state, in->ss_cipher);
}

static void ops_deinit(void *state) { sv_ss22_tcp_deinit(state); }

static ssize_t ops_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    return sv_ss22_tcp_feed(state, creds, p, n, fx);
}

static ssize_t ops_frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                         size_t len, uint8_t *out, size_t cap)
{
    (void)stream;
    return sv_ss22_tcp_frame(state, creds, in, len, out, cap);
}

static size_t ops_frame_max(size_t len) { return SV_SS22_FRAMED_MAX(len); }

static const sv_proto_ext_replay ops_replay = {.attach_replay = ops_attach_replay};
static const sv_proto_ext_clock ops_clock = {.set_time = ops_set_time};

const sv_proto_ops sv_ss2022_ops = {
    .name = "shadowsocks-2022",
    .creds_new = ops_creds_new,
    .creds_free = ops_creds_free,
    .state_size = sizeof(sv_ss22_tcp),
    .init = ops_init,
    .deinit = ops_deinit,
    .feed = ops_feed,
    .carry_max = SV_SS22_CARRY_MAX,
    .frame = ops_frame,
    .frame_max = ops_frame_max,
    .ext =
        {
            [SV_PROTO_CAP_REPLAY] = &ops_replay,
            [SV_PROTO_CAP_CLOCK] = &ops_clock,
        },
};
