/*
 * Fuzz harness: the REALITY layer (supervisor/transport/reality.c, issue 11, PROTOCOLS-2.md §1)
 * in a transport chain, fed arbitrary client bytes: the ClientHello collection, the §1.3 check
 * and, for a valid hello, the start of the TLS 1.3 server. Input: byte 0 picks the split
 * pattern; the rest is what a client sends after TCP. The settings are fixed: the §1.7 server
 * key, short ids 0123456789abcdef and the all-zero id, SNI www.example.com, no time window.
 * Seeds (tests/fuzz/reality_seeds.py): valid hellos (one record, two records, followed by a
 * record), an X25519MLKEM768-only one, a wrong short id, a wrong SNI, no TLS 1.3, plain HTTP;
 * and recorded-*: the Xray-core and sing-box hellos of tests/unit/fixtures/reality/ (valid).
 * Checks: never a crash; the same status, error and bytes up whether the input comes whole or
 * split (and the same number of bytes down: the server's flight is random but its size is
 * not); a refused session passes up exactly every byte it was given and answers nothing, then
 * passes a wrap down as it is; otherwise nothing comes up before the TLS handshake is done,
 * and whatever goes down is TLS records.
 * The same input is also a target's first flight (§1.5 step 1) for the valid hello of
 * tests/unit/vectors/reality/valid on a mirroring layer: sv_reality_flight_parse() stays within
 * the bytes, and the layer goes on with a ServerHello record (mirrored or its own) whatever the
 * target sent.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/reality.h"
#include "tests/fuzz/fuzz.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define DOWN_MAX (64u * 1024u)

typedef struct run {
    uint8_t *up, *down;
    size_t up_len, down_len, cap;
    uint8_t buf[1500]; /* small on purpose: the top layer's output is cut often */
    int rc;
    unsigned status;
} run;

static uint8_t *alloc_cb(void *ctx, size_t *cap)
{
    run *r = ctx;
    *cap = sizeof r->buf;
    return r->buf;
}

static bool deliver_cb(void *ctx, uint8_t *p, size_t n)
{
    run *r = ctx;
    FUZZ_CHECK(n > 0 && n <= sizeof r->buf && p == r->buf);
    FUZZ_CHECK(r->up_len + n <= r->cap);
    memcpy(r->up + r->up_len, p, n);
    r->up_len += n;
    return true;
}

static void take_down(sv_chain *ch, run *r)
{
    size_t len;
    FUZZ_CHECK(sv_chain_pump(ch) == 0);
    const uint8_t *p = sv_chain_out_peek(ch, &len);
    FUZZ_CHECK(r->down_len + len <= DOWN_MAX);
    if (len > 0)
        memcpy(r->down + r->down_len, p, len);
    r->down_len += len;
    sv_chain_out_consume(ch, len);
}

static void drive(const sv_reality_conf *rc, const uint8_t *p, size_t n, size_t step, run *r)
{
    static uint8_t stage[SV_CHAIN_STAGE_BYTES];
    sv_layer_conf conf[1] = {{&sv_reality_layer_ops, rc}};
    sv_chain ch;
    FUZZ_CHECK(sv_chain_open(&ch, conf, 1) == 0);
    memset(r, 0, sizeof *r);
    r->cap = n + 16;
    r->up = malloc(r->cap);
    r->down = malloc(DOWN_MAX);
    FUZZ_CHECK(r->up != NULL && r->down != NULL);
    size_t off = 0;
    while (off < n) {
        size_t k = step == 0 || step > n - off ? n - off : step;
        int e = sv_chain_unwrap(&ch, p + off, k, stage, alloc_cb, deliver_cb, r);
        off += k;
        take_down(&ch, r);
        if (e < 0) {
            r->rc = e;
            break;
        }
    }
    r->status = sv_chain_status(&ch);
    if (r->status & SV_LAYER_REFUSED) {
        FUZZ_CHECK(r->rc == 0);
        FUZZ_CHECK(r->up_len == n && memcmp(r->up, p, n) == 0 && r->down_len == 0);
        FUZZ_CHECK(sv_chain_wrap(&ch, (const uint8_t *)"xyz", 3) == 3);
        take_down(&ch, r);
        FUZZ_CHECK(r->down_len == 3 && memcmp(r->down, "xyz", 3) == 0);
    } else {
        FUZZ_CHECK(!(r->status & SV_LAYER_UP)); /* no client Finished can be forged here */
        FUZZ_CHECK(r->up_len == 0);
        FUZZ_CHECK(r->down_len == 0 || (r->down_len >= 5 && r->down[0] == 0x16 &&
                                        r->down[1] == 0x03 && r->down[2] == 0x03));
    }
    sv_chain_free(&ch);
}

/* The valid hello (a unit vector), or NULL when it cannot be read. */
static const uint8_t *valid_hello(size_t *len)
{
    static uint8_t buf[4096];
    static size_t n;
    static bool tried;
    if (!tried) {
        tried = true;
        FILE *f = fopen(TOP_SRCDIR "/tests/unit/vectors/reality/valid", "rb");
        if (f != NULL) {
            n = fread(buf, 1, sizeof buf, f);
            fclose(f);
        }
    }
    *len = n;
    return n > 0 ? buf : NULL;
}

/* @p f as the target's flight for a valid client of a mirroring layer. */
static void target_flight(const sv_reality_conf *rc, const uint8_t *f, size_t n, bool final)
{
    size_t sh = 0, np = 0, hl = 0;
    uint16_t pad[SV_TLS13S_PAD_MAX];
    int got = sv_reality_flight_parse(f, n, final, &sh, pad, &np);
    FUZZ_CHECK(got >= -1 && got <= 1 && !(final && got == 1));
    FUZZ_CHECK(got != 0 || (sh + 5 <= n && (np == 0 || np == 1 || np == 2 || np == 4 || np == 5)));
    const uint8_t *hello = valid_hello(&hl);
    if (hello == NULL)
        return;
    static uint8_t stage[SV_CHAIN_STAGE_BYTES];
    sv_layer_conf conf[1] = {{&sv_reality_layer_ops, rc}};
    sv_chain ch;
    run r;
    memset(&r, 0, sizeof r);
    r.cap = hl + 16;
    r.up = malloc(r.cap);
    FUZZ_CHECK(r.up != NULL && sv_chain_open(&ch, conf, 1) == 0);
    FUZZ_CHECK(sv_chain_unwrap(&ch, hello, hl, stage, alloc_cb, deliver_cb, &r) == 0);
    FUZZ_CHECK(sv_chain_status(&ch) == SV_LAYER_TARGET);
    int rc2 = sv_chain_target_reply(&ch, f, n, final);
    FUZZ_CHECK(rc2 == got || (rc2 == 0 && got == -1));
    if (rc2 == 0) {
        size_t len;
        const uint8_t *p = sv_chain_out_peek(&ch, &len);
        FUZZ_CHECK(sv_chain_status(&ch) == 0 && len > 5 && memcmp(p, "\x16\x03\x03", 3) == 0);
    }
    sv_chain_free(&ch);
    free(r.up);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sv_reality_conf *mirror_rc;
    static sv_reality_conf *rc;
    if (rc == NULL) {
        const char *what;
        int e;
        rc = sv_reality_conf_new("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA",
                                 "0123456789abcdef,", "www.example.com", 0, &what, &e);
        FUZZ_CHECK(rc != NULL);
        mirror_rc = sv_reality_conf_new("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA",
                                        "0123456789abcdef,", "www.example.com", 0, &what, &e);
        FUZZ_CHECK(mirror_rc != NULL);
        mirror_rc->mirror = true;
    }
    if (size < 1)
        return 0;
    static const size_t steps[] = {1, 2, 3, 7, 64, 1000};
    size_t step = steps[data[0] % 6];
    run whole, split;
    drive(rc, data + 1, size - 1, 0, &whole);
    drive(rc, data + 1, size - 1, step, &split);
    FUZZ_CHECK(whole.rc == split.rc && whole.status == split.status);
    FUZZ_CHECK(whole.up_len == split.up_len && memcmp(whole.up, split.up, whole.up_len) == 0);
    FUZZ_CHECK(whole.down_len == split.down_len);
    free(whole.up);
    free(whole.down);
    free(split.up);
    free(split.down);
    target_flight(mirror_rc, data + 1, size - 1, data[0] & 1);
    return 0;
}
