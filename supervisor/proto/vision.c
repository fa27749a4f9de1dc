/* XTLS Vision (PROTOCOLS-2.md §2): flow rules, un-padding, TLS filter and padding. */
#include "config.h"

#include "supervisor/proto/vision.h"

#include <errno.h>
#include <string.h>

enum { RX_UUID = 0, RX_HEAD, RX_CONTENT, RX_PADDING, RX_PLAIN };

#define FILTER_BUFFERS 8 /* §2.5 NumberOfPacketToFilter */
#define LONG_PAD_UNDER 900
#define LONG_PAD_RANGE 500
#define SHORT_PAD_RANGE 256

int sv_vision_check(bool account_vision, enum sv_vision_request_flow flow, uint8_t cmd,
                    const uint8_t *body, size_t n, bool *framed)
{
    *framed = false;
    if (flow == SV_VISION_REQ_OTHER)
        return -EPROTONOSUPPORT;
    if (flow == SV_VISION_REQ_VISION) {
        if (!account_vision)
            return -EPERM;
        if (cmd == 0x02)
            return -EPROTONOSUPPORT;
        *framed = true;
        return 1;
    }
    if (!account_vision || cmd == 0x02)
        return 1;
    if (cmd != 0x03)
        return -EPERM;
    /* Mux without flow: only XUDP (first frame: session 0, network UDP at offset 6) */
    if (n < 7)
        return 0;
    return body[2] == 0 && body[3] == 0 && body[6] == 2 ? 1 : -EPERM;
}

const char *sv_vision_strerror(int rc, bool account_vision, enum sv_vision_request_flow flow)
{
    if (rc == -EPROTONOSUPPORT)
        return flow == SV_VISION_REQ_OTHER ? "unknown request flow"
                                           : "xtls-rprx-vision doesn't support UDP";
    if (rc == -EPERM)
        return account_vision ? "client flow is empty" : "not able to use the flow";
    return "accepted";
}

void sv_vision_init(sv_vision *v, const uint8_t *uuid, bool may_direct, uint64_t seed)
{
    memset(v, 0, sizeof *v);
    memcpy(v->uuid, uuid, SV_VISION_UUID_LEN);
    v->to_filter = FILTER_BUFFERS;
    v->may_direct = may_direct;
    v->tx_padding = true;
    v->rx_state = RX_UUID;
    v->rng = seed != 0 ? seed : 0x9e3779b97f4a7c15u;
}

/* ---------- receiver (§2.4) ---------- */

ssize_t sv_vision_unpad(sv_vision *v, uint8_t *p, size_t n, size_t *out_len)
{
    size_t at = 0, w = 0;
    *out_len = 0;
    if (v->rx_state == RX_UUID) {
        if (n < SV_VISION_UUID_LEN)
            return 0;
        if (memcmp(p, v->uuid, SV_VISION_UUID_LEN) == 0) {
            at = SV_VISION_UUID_LEN;
            v->rx_state = RX_HEAD;
        } else {
            v->rx_state = RX_PLAIN;
        }
    }
    while (at < n) {
        switch (v->rx_state) {
        case RX_HEAD: {
            size_t k = SV_VISION_HEAD_LEN - v->rx_head_len;
            if (k > n - at)
                k = n - at;
            memcpy(v->rx_head + v->rx_head_len, p + at, k);
            v->rx_head_len = (uint8_t)(v->rx_head_len + k);
            at += k;
            if (v->rx_head_len < SV_VISION_HEAD_LEN)
                break;
            v->rx_head_len = 0;
            v->rx_cmd = v->rx_head[0];
            if (v->rx_cmd > SV_VISION_DIRECT)
                return -EPROTO;
            v->rx_content = (uint16_t)(v->rx_head[1] << 8 | v->rx_head[2]);
            v->rx_padding = (uint16_t)(v->rx_head[3] << 8 | v->rx_head[4]);
            v->rx_state = v->rx_content > 0 ? RX_CONTENT : RX_PADDING;
            break;
        }
        case RX_CONTENT: {
            size_t k = v->rx_content < n - at ? v->rx_content : n - at;
            if (k > 0 && w != at)
                memmove(p + w, p + at, k);
            w += k;
            at += k;
            v->rx_content = (uint16_t)(v->rx_content - k);
            if (v->rx_content == 0)
                v->rx_state = RX_PADDING;
            break;
        }
        case RX_PADDING: {
            size_t k = v->rx_padding < n - at ? v->rx_padding : n - at;
            at += k;
            v->rx_padding = (uint16_t)(v->rx_padding - k);
            break;
        }
        default: /* RX_PLAIN */
            if (w != at)
                memmove(p + w, p + at, n - at);
            w += n - at;
            at = n;
            break;
        }
        /* a frame ends when its content and padding are through (also at the end of input) */
        if (v->rx_state == RX_PADDING && v->rx_padding == 0) {
            if (v->rx_cmd == SV_VISION_CONTINUE) {
                v->rx_state = RX_HEAD;
            } else {
                v->rx_state = RX_PLAIN;
                v->rx_direct = v->rx_cmd == SV_VISION_DIRECT;
            }
        }
    }
    *out_len = w;
    return (ssize_t)n;
}

bool sv_vision_rx_watch(const sv_vision *v)
{
    return v->rx_state != RX_PLAIN;
}

/* ---------- the TLS filter (§2.5) ---------- */

static bool contains_tls13(const uint8_t *p, size_t n)
{
    static const uint8_t sv[6] = {0x00, 0x2b, 0x00, 0x02, 0x03, 0x04};
    for (size_t i = 0; i + sizeof sv <= n; i++)
        if (memcmp(p + i, sv, sizeof sv) == 0)
            return true;
    return false;
}

void sv_vision_filter(sv_vision *v, const uint8_t *p, size_t n)
{
    if (v->to_filter <= 0 || n == 0)
        return;
    v->to_filter--;
    if (n >= 6) {
        if (p[0] == 0x16 && p[1] == 0x03 && p[2] == 0x03 && p[5] == 0x02) { /* ServerHello */
            v->hello_left = (int32_t)(p[3] << 8 | p[4]) + 5;
            v->tls12 = v->is_tls = true;
            if (n >= 79 && v->hello_left >= 79) {
                size_t sid = p[43];
                if (43 + sid + 3 <= n)
                    v->cipher = (uint16_t)(p[43 + sid + 1] << 8 | p[43 + sid + 2]);
            }
        } else if (p[0] == 0x16 && p[1] == 0x03 && p[5] == 0x01) { /* ClientHello */
            v->is_tls = true;
        }
    }
    if (v->hello_left > 0) {
        size_t end = (size_t)v->hello_left < n ? (size_t)v->hello_left : n;
        v->hello_left -= (int32_t)(n < (size_t)INT32_MAX ? n : (size_t)INT32_MAX);
        if (contains_tls13(p, end)) {
            /* TLS_AES_128_GCM, _256_GCM, CHACHA20_POLY1305, AES_128_CCM; not CCM_8 (0x1305) */
            v->xtls = v->cipher >= 0x1301 && v->cipher <= 0x1304;
            v->to_filter = 0;
        } else if (v->hello_left <= 0) {
            v->to_filter = 0; /* TLS 1.2: no direct */
        }
    }
}

/* ---------- sender (§2.3, §2.5) ---------- */

size_t sv_vision_pad_max(size_t n)
{
    size_t frames = n / (SV_VISION_BODY_MAX - SHORT_PAD_RANGE) + 1;
    return n + SV_VISION_UUID_LEN + frames * SV_VISION_HEAD_LEN + SV_VISION_PAD_BUDGET;
}

static uint32_t draw(sv_vision *v, uint32_t range)
{
    uint64_t x = v->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    v->rng = x;
    return (uint32_t)((x * 0x2545f4914f6cdd1du) >> 33) % range;
}

/* Whole TLS application-data records from end to end (Xray's IsCompleteRecord). */
static bool complete_records(const uint8_t *p, size_t n)
{
    size_t at = 0;
    while (at < n) {
        if (n - at < 5 || p[at] != 0x17 || p[at + 1] != 0x03 || p[at + 2] != 0x03)
            return false;
        size_t len = (size_t)p[at + 3] << 8 | p[at + 4];
        if (n - at - 5 < len)
            return false;
        at += 5 + len;
    }
    return n > 0;
}

/* One frame at @p out: [UUID] header, @p len content bytes moved from @p in, @p pad zeros. */
static size_t put_frame(sv_vision *v, uint8_t *out, const uint8_t *in, size_t len, size_t pad,
                        uint8_t cmd)
{
    size_t h = 0;
    uint8_t head[SV_VISION_UUID_LEN + SV_VISION_HEAD_LEN];
    if (!v->tx_uuid_sent) {
        memcpy(head, v->uuid, SV_VISION_UUID_LEN);
        h = SV_VISION_UUID_LEN;
        v->tx_uuid_sent = true;
    }
    head[h] = cmd;
    head[h + 1] = (uint8_t)(len >> 8);
    head[h + 2] = (uint8_t)len;
    head[h + 3] = (uint8_t)(pad >> 8);
    head[h + 4] = (uint8_t)pad;
    h += SV_VISION_HEAD_LEN;
    /* content first (it may overlap the input, which lies ahead), then the header */
    if (len > 0)
        memmove(out + h, in, len);
    memcpy(out, head, h);
    memset(out + h + len, 0, pad);
    return h + len + pad;
}

ssize_t sv_vision_pad(sv_vision *v, const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    if (cap < sv_vision_pad_max(n))
        return -EMSGSIZE;
    if (!v->tx_padding) {
        if (n > 0 && out != in)
            memmove(out, in, n);
        return (ssize_t)n;
    }
    sv_vision_filter(v, in, n);
    bool ending = v->is_tls && complete_records(in, n);
    bool long_pad = v->is_tls;
    size_t budget = SV_VISION_PAD_BUDGET, at = 0, w = 0;
    const size_t piece_max = SV_VISION_BODY_MAX - SHORT_PAD_RANGE;
    do {
        size_t len = n - at < piece_max ? n - at : piece_max;
        bool last = at + len == n;
        uint8_t cmd = SV_VISION_CONTINUE;
        bool stop_here = false;
        if (ending && last) {
            cmd = v->xtls && v->may_direct ? SV_VISION_DIRECT : SV_VISION_END;
        } else if (!ending && !v->tls12 && v->to_filter <= 1) {
            cmd = SV_VISION_END; /* not TLS 1.2+: stop padding now (§2.5 rule 2) */
            stop_here = true;
        }
        size_t pad = long_pad && len < LONG_PAD_UNDER
                         ? draw(v, LONG_PAD_RANGE) + LONG_PAD_UNDER - len
                         : draw(v, SHORT_PAD_RANGE);
        if (len + pad > SV_VISION_BODY_MAX)
            pad = SV_VISION_BODY_MAX - len;
        if (pad > budget)
            pad = budget;
        budget -= pad;
        long_pad = false;
        /* the write position never passes the read position: see vision.h */
        w += put_frame(v, out + w, in + at, len, pad, cmd);
        at += len;
        if (cmd != SV_VISION_CONTINUE) {
            v->tx_padding = false;
            v->tx_direct = cmd == SV_VISION_DIRECT;
        }
        if (stop_here && at < n) { /* the rest of this write goes plain (Xray's break) */
            memmove(out + w, in + at, n - at);
            w += n - at;
            at = n;
        }
    } while (at < n);
    return (ssize_t)w;
}
