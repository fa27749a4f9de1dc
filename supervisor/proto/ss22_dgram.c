/*
 * Shadowsocks 2022 UDP on the datagram seam (dgram.h): an adapter over the sv_ss22_udp_* API of
 * ss2022.h, one session state per client session ID.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <openssl/rand.h>

#include "supervisor/proto/ss2022.h"
#include "supervisor/proto/ss22_dgram.h"

_Static_assert(SV_SS22_UDP_OVERHEAD <= SV_DGRAM_OVERHEAD_MAX,
               "a Shadowsocks 2022 reply's overhead must fit the runtime's room");
_Static_assert(SV_DGRAM_SESSION_ID == 8, "a Shadowsocks 2022 session ID is 8 bytes (§3.5)");

/* One client session (§3.5). */
typedef struct ss22_session {
    uint8_t csid[8];     /* the client's session ID */
    uint8_t ssid[8];     /* ours */
    uint64_t pid;        /* packet ID of our next reply */
    sv_ss22_window win;  /* the client's packet IDs seen */
} ss22_session;

static int ss22d_open(const void *creds, int64_t now, sv_dgram_guide *guide, uint8_t *pkt,
                      size_t n, sv_dgram_in *out, sv_aead *ctx)
{
    (void)guide;
    sv_ss22_udp_in in;
    int rc = sv_ss22_udp_open(creds, now, pkt, n, &in, ctx);
    if (rc != 0)
        return rc;
    out->user = in.user;
    out->dest = in.dest;
    out->payload = in.payload;
    out->len = in.len;
    memcpy(out->session_id, in.session_id, sizeof out->session_id);
    out->packet_id = in.packet_id;
    return 0;
}

static bool ss22d_match(const void *session, const sv_dgram_in *in)
{
    return memcmp(((const ss22_session *)session)->csid, in->session_id, 8) == 0;
}

static int ss22d_session_init(void *session, const sv_dgram_in *first,
                              void (*rng)(uint8_t *buf, size_t n))
{
    ss22_session *s = session;
    memcpy(s->csid, first->session_id, sizeof s->csid);
    if (rng != NULL)
        rng(s->ssid, sizeof s->ssid);
    else if (RAND_bytes(s->ssid, sizeof s->ssid) != 1)
        return -EIO;
    return 0;
}

static bool ss22d_accept(void *session, const sv_dgram_in *in)
{
    return sv_ss22_window_accept(&((ss22_session *)session)->win, in->packet_id);
}

static ssize_t ss22d_seal(void *session, const void *creds, int user, int64_t now,
                          const sv_dest *from, const uint8_t *payload, size_t n, uint8_t *out,
                          size_t cap, sv_aead *ctx, void (*rng)(uint8_t *buf, size_t n))
{
    ss22_session *s = session;
    return sv_ss22_udp_seal(creds, user, s->ssid, s->pid++, s->csid, now, from, payload, n, out,
                            cap, ctx, rng);
}

const sv_dgram_ops sv_ss2022_dgram_ops = {
    .name = "shadowsocks-2022",
    .session_size = sizeof(ss22_session),
    .overhead = SV_SS22_UDP_OVERHEAD,
    .open = ss22d_open,
    .session_match = ss22d_match,
    .session_init = ss22d_session_init,
    .session_accept = ss22d_accept,
    .seal = ss22d_seal,
};
