/*
 * Fuzz harness: Shadowsocks AEAD TCP server core (sv_ss_tcp_feed / sv_ss_tcp_seal).
 * Input: byte 0 picks the cipher, byte 1 the split pattern, the rest is client wire bytes.
 * The keyring holds the vectors' password (user 1) so seeds made from the vectors go deep.
 * Checks (STYLE.md §11): consumed <= len; plaintext lies inside the consumed bytes; the core never
 * stalls with salt + SV_SS_NEED_MAX bytes buffered; the same outcome whole and split.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/shadowsocks.h"
#include "tests/fuzz/fuzz.h"

#define BUF_CAP (SV_SS_SALT_MAX + SV_SS_NEED_MAX)

/* What a run produced, as one byte string, plus the final return code. */
typedef struct transcript {
    uint8_t *b;
    size_t len, cap;
    int rc;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->b = realloc(t->b, t->cap);
        FUZZ_CHECK(t->b != NULL);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
}

static void tr_out(transcript *t, const sv_ss_tcp *c, const sv_ss_out *o, const uint8_t *p,
                   ssize_t r)
{
    if (o->data != NULL)
        FUZZ_CHECK(o->data >= p && o->data + o->len <= p + r);
    if (o->authenticated)
        FUZZ_CHECK(c->user >= 0);
    if (o->open) {
        char d[300];
        int dl = sv_dest_format(&o->dest, d, sizeof d);
        FUZZ_CHECK(dl > 0 && (size_t)dl < sizeof d);
        tr_put(t, "O", 1);
        tr_put(t, d, (size_t)dl);
    }
    if (o->len > 0) {
        tr_put(t, "D", 1);
        tr_put(t, o->data, o->len);
    }
}

static const char *const g_passwords[] = {"fuzz-user-0", "katana-test-pass", "fuzz-user-2"};

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like buffer. */
static void run(enum sv_ss_cipher cipher, const uint8_t *wire, size_t n, size_t piece,
                uint32_t seed, transcript *t)
{
    sv_ss_keyring ring;
    FUZZ_CHECK(sv_ss_keyring_init(&ring, cipher, g_passwords, 3) == 0);
    sv_replay *rp = sv_replay_new(4);
    FUZZ_CHECK(rp != NULL);
    sv_ss_tcp c = {0};
    FUZZ_CHECK(sv_ss_tcp_init(&c, cipher) == 0);
    size_t cap = n > BUF_CAP ? n : BUF_CAP;
    uint8_t *buf = malloc(cap ? cap : 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    t->rc = 0;
    for (;;) {
        sv_ss_out o;
        ssize_t r = sv_ss_tcp_feed(&c, &ring, rp, buf, have, &o);
        if (r < 0) {
            t->rc = (int)r;
            FUZZ_CHECK(c.state == SV_SS_FAILED && sv_ss_tcp_feed(&c, &ring, rp, buf, have, &o) < 0);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        tr_out(t, &c, &o, buf, r);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        FUZZ_CHECK(o.data == NULL && !o.open && !o.authenticated);
        FUZZ_CHECK(have < BUF_CAP); /* never stalls with a full buffer */
        if (in == n)
            break;
        seed = seed * 1103515245u + 12345u;
        size_t k = piece > n ? n : 1 + (seed >> 8) % piece;
        k = k < n - in ? k : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    /* The user as the core knows it at the end (a failing call returns no sv_ss_out). */
    tr_put(t, "U", 1);
    tr_put(t, &c.user, sizeof c.user);
    if (t->rc == 0 && c.user >= 0) {
        /* Downstream: seal a slice of the input; the wire length is fixed by the format. */
        uint8_t sbuf[SV_SS_SEAL_HEAD + 256 + SV_SS_SEAL_TAIL], *w = NULL;
        size_t len = 1 + (n % 256);
        memset(sbuf + SV_SS_SEAL_HEAD, 0x5a, len);
        ssize_t sl = sv_ss_tcp_seal(&c, &ring, sbuf, len, &w);
        FUZZ_CHECK(sl == (ssize_t)(sv_ss_key_len(cipher) + 2 + 16 + len + 16));
        FUZZ_CHECK(w >= sbuf && w + sl <= sbuf + sizeof sbuf);
    }
    free(buf);
    sv_ss_tcp_deinit(&c);
    sv_replay_free(rp);
    sv_ss_keyring_deinit(&ring);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const enum sv_ss_cipher ciphers[] = {SV_SS_AES_128_GCM, SV_SS_AES_256_GCM,
                                                SV_SS_CHACHA20_POLY1305};
    static const size_t pieces[] = {1, 3, 17, 64, 1000, 20000};
    enum sv_ss_cipher cipher = ciphers[data[0] % 3];
    size_t piece = pieces[data[1] % 6];
    const uint8_t *wire = data + 2;
    size_t n = size - 2;

    transcript whole = {0}, split = {0};
    run(cipher, wire, n, n + 1, 0, &whole);
    run(cipher, wire, n, piece, data[1], &split);
    FUZZ_CHECK(whole.rc == split.rc);
    FUZZ_CHECK(whole.len == split.len);
    FUZZ_CHECK(whole.len == 0 || memcmp(whole.b, split.b, whole.len) == 0);
    free(whole.b);
    free(split.b);
    return 0;
}
