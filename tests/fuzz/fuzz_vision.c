/*
 * Fuzz harness: XTLS Vision (supervisor/proto/vision.c: sv_vision_unpad, sv_vision_filter,
 * sv_vision_pad; PROTOCOLS-2.md §2).
 * Input: byte 0 picks the split pattern (value % 7) and whether the UUID is put in front (bit
 * 7); the rest is the client's bytes after a VLESS request with the Vision flow.
 * Checks (STYLE.md §11): the receiver consumes nothing or everything; its content is never
 * longer than its input; the same content and end state whole and split; fewer than 16 bytes at
 * the start are never consumed; an error is terminal for that input. Sender: each write of the
 * same bytes (in pieces) fits sv_vision_pad_max, every frame stays within SV_VISION_BODY_MAX,
 * and a receiver given our frames gets back exactly the bytes written.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/vision.h"
#include "tests/fuzz/fuzz.h"

static const uint8_t k_uuid[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                   0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};

static size_t piece_len(unsigned pattern, size_t i, size_t left)
{
    static const size_t sizes[] = {0, 1, 2, 5, 16, 21, 300};
    size_t k = sizes[pattern % 7];
    if (pattern % 7 == 6)
        k = 1 + (i * 37) % 300;
    return k == 0 || k > left ? left : k;
}

typedef struct outcome {
    uint8_t *content;
    size_t len;
    int error;
    bool direct, watch;
} outcome;

/* Un-pad @p in in pieces, as the VLESS core and the runtime's carry do. */
static outcome run_rx(const uint8_t *in, size_t n, unsigned pattern)
{
    outcome o = {malloc(n + 1), 0, 0, false, false};
    uint8_t *carry = malloc(n + 1);
    FUZZ_CHECK(o.content != NULL && carry != NULL);
    sv_vision v;
    sv_vision_init(&v, k_uuid, true, 1);
    size_t at = 0, carry_len = 0;
    for (size_t i = 0; at < n; i++) {
        size_t k = piece_len(pattern, i, n - at);
        memcpy(carry + carry_len, in + at, k);
        carry_len += k;
        at += k;
        size_t out = 0;
        ssize_t r = sv_vision_unpad(&v, carry, carry_len, &out);
        if (r < 0) {
            o.error = (int)r;
            break;
        }
        FUZZ_CHECK(r == 0 || (size_t)r == carry_len);
        FUZZ_CHECK(r > 0 || (carry_len < 16 && out == 0));
        FUZZ_CHECK(out <= carry_len);
        memcpy(o.content + o.len, carry, out);
        o.len += out;
        if (r > 0)
            carry_len = 0;
        sv_vision_filter(&v, carry, out);
    }
    o.direct = sv_vision_rx_direct(&v);
    o.watch = sv_vision_rx_watch(&v);
    free(carry);
    return o;
}

/* Our frames for @p in written in pieces, read back by a receiver. */
static void run_tx(const uint8_t *in, size_t n, unsigned pattern)
{
    sv_vision tx, rx;
    sv_vision_init(&tx, k_uuid, pattern & 1, (uint64_t)n * 2654435761u + 1);
    sv_vision_init(&rx, k_uuid, true, 1);
    uint8_t *wire = malloc(sv_vision_pad_max(n) + n + 16);
    FUZZ_CHECK(wire != NULL);
    size_t at = 0, back = 0;
    for (size_t i = 0; at < n; i++) {
        size_t k = piece_len(pattern + 1, i, n - at);
        bool padding = tx.tx_padding;
        ssize_t w = sv_vision_pad(&tx, in + at, k, wire, sv_vision_pad_max(k));
        FUZZ_CHECK(w >= (ssize_t)k && (size_t)w <= sv_vision_pad_max(k));
        if (padding) { /* frames: each within the bound */
            size_t f = tx.tx_uuid_sent && i == 0 ? 16 : 0;
            while (f + 5 <= (size_t)w) {
                size_t len = (size_t)wire[f + 1] << 8 | wire[f + 2];
                size_t pad = (size_t)wire[f + 3] << 8 | wire[f + 4];
                FUZZ_CHECK(wire[f] <= 2 && len + pad <= SV_VISION_BODY_MAX);
                f += 5 + len + pad;
                if (wire[f - 5 - len - pad] != 0)
                    break;
            }
        }
        size_t out = 0;
        ssize_t r = sv_vision_unpad(&rx, wire, (size_t)w, &out);
        FUZZ_CHECK(r == w); /* our first frame opens with the 16-byte UUID */
        FUZZ_CHECK(out == k && memcmp(wire, in + at, k) == 0);
        back += out;
        at += k;
    }
    FUZZ_CHECK(back == n);
    free(wire);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1u << 16)
        return 0;
    unsigned pattern = data[0];
    size_t n = size - 1 + ((pattern & 0x80) ? 16 : 0);
    uint8_t *in = malloc(n + 1);
    FUZZ_CHECK(in != NULL);
    if (pattern & 0x80)
        memcpy(in, k_uuid, 16);
    memcpy(in + n - (size - 1), data + 1, size - 1);
    outcome whole = run_rx(in, n, 0);
    outcome split = run_rx(in, n, pattern);
    FUZZ_CHECK(whole.error == split.error);
    if (whole.error == 0) {
        FUZZ_CHECK(whole.len == split.len && memcmp(whole.content, split.content, whole.len) == 0);
        FUZZ_CHECK(whole.direct == split.direct && whole.watch == split.watch);
        FUZZ_CHECK(whole.len <= n);
    }
    free(whole.content);
    free(split.content);
    run_tx(data + 1, size - 1, pattern);
    free(in);
    return 0;
}
