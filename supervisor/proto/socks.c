/* SOCKS5 server core (PROTOCOLS-3.md §4.1: RFC 1928, RFC 1929): greeting, sub-negotiation,
 * CONNECT request. */
#include "config.h"

#include "supervisor/proto/socks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/proto/userpass.h"

_Static_assert(SV_SOCKS_CARRY_MAX >= SV_SOCKS_GREETING_MAX &&
                   SV_SOCKS_CARRY_MAX >= SV_SOCKS_REQUEST_MAX,
               "carry_max holds every phase");

/* ---------------------------------------------------------------------------------------- */
/* Credential table                                                                          */
/* ---------------------------------------------------------------------------------------- */

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    sv_userpass *t = NULL;
    int rc = sv_userpass_new(users, in != NULL && in->proxy_no_auth, &t, err);
    *out = t;
    return rc;
}

static void creds_free(void *creds)
{
    sv_userpass_free(creds);
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state                                                                      */
/* ---------------------------------------------------------------------------------------- */

enum socks_phase { PH_GREETING = 0, PH_AUTH, PH_REQUEST, PH_CONNECT, PH_UDP, PH_FAILED };

/* The replies live here so that the effects pointing at them outlive the call. */
typedef struct socks_conn {
    enum socks_phase phase;
    bool plain;                              /* the inbound has no TLS: CONNECT may be spliced */
    int error;                               /* PH_FAILED: the error that ended it */
    uint8_t method_reply[2];                 /* 05 METHOD */
    uint8_t auth_reply[2];                   /* 01 STATUS */
    uint8_t connect_reply[SV_SOCKS_REPLY_LEN]; /* 05 00 00 01 0*6 */
    uint8_t answer[SV_SOCKS_REPLY_LEN];      /* the refusal of SV_PROBE_ANSWER */
} socks_conn;

static int conn_init(void *state, const sv_inbound_spec *in)
{
    memset(state, 0, sizeof(socks_conn));
    ((socks_conn *)state)->plain = in != NULL && in->tls.cert == SV_CERT_NONE;
    return 0;
}

/* A CONNECT tunnel in clear carries the bytes as they are both ways: the runtime may relay it
 * in the kernel (splice), as it does Vision's raw directions. */
static unsigned conn_direct(const void *state)
{
    const socks_conn *c = state;
    return c->plain && c->phase == PH_CONNECT ? SV_DIRECT_IN | SV_DIRECT_OUT : 0;
}

static void conn_deinit(void *state)
{
    (void)state;
}

static ssize_t fail(socks_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy,
                    size_t answer_len)
{
    c->phase = PH_FAILED;
    c->error = error;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e != NULL) {
        e->error = error;
        e->policy = policy;
        if (policy == SV_PROBE_ANSWER) {
            e->data = c->answer;
            e->len = answer_len;
        }
    }
    return error;
}

/* Refuse with the two-byte answer @p a0 @p a1 (05 FF, 01 01). */
static ssize_t refuse2(socks_conn *c, sv_effects *fx, int error, uint8_t a0, uint8_t a1)
{
    c->answer[0] = a0;
    c->answer[1] = a1;
    return fail(c, fx, error, SV_PROBE_ANSWER, 2);
}

/* Fill @p out with the reply 05 REP 00 01 0.0.0.0:0 (RFC 1928 §6; BND is left zero, as Xray's
 * CONNECT reply has it). */
static void reply_fill(uint8_t out[SV_SOCKS_REPLY_LEN], uint8_t rep)
{
    memset(out, 0, SV_SOCKS_REPLY_LEN);
    out[0] = SV_SOCKS_VERSION;
    out[1] = rep;
    out[3] = SV_ATYP_IPV4;
}

/* Refuse a request with the reply code @p rep. */
static ssize_t refuse_request(socks_conn *c, sv_effects *fx, int error, uint8_t rep)
{
    reply_fill(c->answer, rep);
    return fail(c, fx, error, SV_PROBE_ANSWER, SV_SOCKS_REPLY_LEN);
}

static void push_to_client(sv_effects *fx, uint8_t *p, size_t n)
{
    sv_effect *e = sv_effects_push(fx, SV_FX_TO_CLIENT);
    e->data = p;
    e->len = n;
}

static void push_authenticated(sv_effects *fx, int principal)
{
    sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
    e->principal = principal;
}

/* ---------------------------------------------------------------------------------------- */
/* Phases: each returns its length when whole and handled, 0 when short, or a negative errno  */
/* (the error effect pushed)                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* Greeting 05 NMETHODS METHODS (RFC 1928 §3). */
static ssize_t feed_greeting(socks_conn *c, const void *creds, const uint8_t *p, size_t n,
                             sv_effects *fx)
{
    if (n >= 1 && p[0] != SV_SOCKS_VERSION)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
    if (n >= 2 && p[1] == 0)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
    if (n < 2 || n < 2 + (size_t)p[1])
        return 0;
    size_t len = 2 + (size_t)p[1];
    bool userpass = memchr(p + 2, SV_SOCKS_METHOD_USERPASS, p[1]) != NULL;
    bool none = memchr(p + 2, SV_SOCKS_METHOD_NONE, p[1]) != NULL;
    int anonymous = sv_userpass_anonymous(creds);
    c->method_reply[0] = SV_SOCKS_VERSION;
    if (userpass) {
        c->method_reply[1] = SV_SOCKS_METHOD_USERPASS;
        push_to_client(fx, c->method_reply, 2);
        c->phase = PH_AUTH;
    } else if (none && anonymous >= 0) {
        c->method_reply[1] = SV_SOCKS_METHOD_NONE;
        push_to_client(fx, c->method_reply, 2);
        push_authenticated(fx, anonymous);
        c->phase = PH_REQUEST;
    } else {
        return refuse2(c, fx, -EACCES, SV_SOCKS_VERSION, SV_SOCKS_METHOD_REFUSED);
    }
    return (ssize_t)len;
}

/* Sub-negotiation 01 ULEN UNAME PLEN PASSWD (RFC 1929 §2). */
static ssize_t feed_auth(socks_conn *c, const void *creds, const uint8_t *p, size_t n,
                         sv_effects *fx)
{
    if (n >= 1 && p[0] != SV_SOCKS_AUTH_VERSION)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
    if (n < 2)
        return 0;
    size_t ulen = p[1];
    if (n < 3 + ulen)
        return 0;
    size_t plen = p[2 + ulen];
    size_t len = 3 + ulen + plen;
    if (n < len)
        return 0;
    int user = sv_userpass_lookup(creds, p + 2, ulen, p + 3 + ulen, plen);
    if (user < 0)
        return refuse2(c, fx, -EACCES, SV_SOCKS_AUTH_VERSION, 0x01);
    c->auth_reply[0] = SV_SOCKS_AUTH_VERSION;
    c->auth_reply[1] = 0x00;
    push_to_client(fx, c->auth_reply, 2);
    push_authenticated(fx, user);
    c->phase = PH_REQUEST;
    return (ssize_t)len;
}

static bool atyp_known(uint8_t atyp)
{
    return atyp == SV_ATYP_IPV4 || atyp == SV_ATYP_DOMAIN || atyp == SV_ATYP_IPV6;
}

/* Request 05 CMD 00 ATYP DST.ADDR DST.PORT (RFC 1928 §4): CONNECT and UDP ASSOCIATE. */
static ssize_t feed_request(socks_conn *c, const uint8_t *p, size_t n, sv_effects *fx)
{
    if (n >= 1 && p[0] != SV_SOCKS_VERSION)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
    if (n >= 2 && p[1] != SV_SOCKS_CONNECT && p[1] != SV_SOCKS_UDP_ASSOCIATE)
        return refuse_request(c, fx, -EPROTONOSUPPORT, SV_SOCKS_REP_CMD_UNSUPPORTED);
    if (n >= 3 && p[2] != 0x00)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
    if (n >= 4 && !atyp_known(p[3]))
        return refuse_request(c, fx, -EAFNOSUPPORT, SV_SOCKS_REP_ATYP_UNSUPPORTED);
    if (n < 4)
        return 0;
    sv_dest d;
    memset(&d, 0, sizeof d);
    ssize_t a = sv_dest_parse(p + 3, n - 3, &d);
    if (a < 0)
        return fail(c, fx, (int)a, SV_PROBE_CLOSE, 0);
    if (a == 0)
        return 0;
    if (p[1] == SV_SOCKS_UDP_ASSOCIATE) { /* the runtime opens the relay, then relay_ready() */
        sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
        e->dest = d;
        e->dest.network = SV_NET_UDP;
        c->phase = PH_UDP;
        return 3 + a;
    }
    reply_fill(c->connect_reply, SV_SOCKS_REP_OK);
    push_to_client(fx, c->connect_reply, SV_SOCKS_REPLY_LEN);
    sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
    e->dest = d;
    e->dest.network = SV_NET_TCP;
    c->phase = PH_CONNECT;
    return 3 + a;
}

static void push_data(sv_effects *fx, uint8_t *p, size_t n)
{
    if (n > 0) {
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->data = p;
        e->len = n;
    }
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    socks_conn *c = state;
    fx->n = 0;
    size_t at = 0;
    for (;;) {
        ssize_t r;
        switch (c->phase) {
        case PH_FAILED:
            return fail(c, fx, c->error, SV_PROBE_CLOSE, 0);
        case PH_CONNECT:
            push_data(fx, p + at, n - at);
            return (ssize_t)n;
        case PH_UDP: /* the control connection carries nothing more (§7): dropped */
            return (ssize_t)n;
        case PH_GREETING:
            r = feed_greeting(c, creds, p + at, n - at, fx);
            break;
        case PH_AUTH:
            r = feed_auth(c, creds, p + at, n - at, fx);
            break;
        case PH_REQUEST:
            r = feed_request(c, p + at, n - at, fx);
            break;
        default:
            return fail(c, fx, -EPROTO, SV_PROBE_CLOSE, 0);
        }
        if (r < 0)
            return r;
        if (r == 0)
            return (ssize_t)at;
        at += (size_t)r;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* UDP ASSOCIATE: the relay beside the stream (RFC 1928 §7)                                  */
/* ---------------------------------------------------------------------------------------- */

/* 05 00 00 ATYP BND.ADDR BND.PORT: the relay's address. */
static ssize_t relay_ready(void *state, const struct sockaddr *bound, uint8_t *out, size_t cap)
{
    (void)state;
    sv_dest d = {0};
    if (bound->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)bound;
        d.atyp = SV_ATYP_IPV4;
        memcpy(d.ip, &a->sin_addr, 4);
        d.port = ntohs(a->sin_port);
    } else if (bound->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)bound;
        d.atyp = SV_ATYP_IPV6;
        memcpy(d.ip, &a->sin6_addr, 16);
        d.port = ntohs(a->sin6_port);
    } else {
        return -EINVAL;
    }
    uint8_t addr[SV_DEST_WIRE_MAX];
    size_t alen = sv_dest_encode(&d, addr);
    if (cap < 3 + alen)
        return -EMSGSIZE;
    out[0] = SV_SOCKS_VERSION;
    out[1] = SV_SOCKS_REP_OK;
    out[2] = 0x00;
    memcpy(out + 3, addr, alen);
    return (ssize_t)(3 + alen);
}

/* 05 01 (general failure) 00 01 0.0.0.0:0. */
static ssize_t relay_failed(void *state, uint8_t *out, size_t cap)
{
    (void)state;
    if (cap < SV_SOCKS_REPLY_LEN)
        return -EMSGSIZE;
    reply_fill(out, SV_SOCKS_REP_FAILURE);
    return SV_SOCKS_REPLY_LEN;
}

/* RSV(2) = 0, FRAG, ATYP DST.ADDR DST.PORT, DATA. */
static int relay_open(const uint8_t *p, size_t n, sv_dest *dest, size_t *payload_off)
{
    if (n < 4 || p[0] != 0 || p[1] != 0)
        return -EPROTO;
    if (p[2] != 0)
        return -EOPNOTSUPP; /* a fragment: not reassembled, dropped (§7) */
    ssize_t a = sv_dest_parse(p + 3, n - 3, dest);
    if (a <= 0)
        return -EPROTO;
    dest->network = SV_NET_UDP;
    *payload_off = 3 + (size_t)a;
    return 0;
}

/* A reply datagram: 00 00 00, the remote's address, the payload. */
static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    (void)state, (void)creds, (void)stream;
    if (from->atyp != SV_ATYP_IPV4 && from->atyp != SV_ATYP_IPV6 &&
        from->atyp != SV_ATYP_DOMAIN)
        return -EINVAL;
    uint8_t addr[SV_DEST_WIRE_MAX];
    size_t alen = sv_dest_encode(from, addr);
    if (len > SV_SOCKS_UDP_PAYLOAD_MAX)
        return -EINVAL;
    if (cap < 3 + alen + len)
        return -EMSGSIZE;
    memmove(out + 3 + alen, payload, len);
    out[0] = out[1] = out[2] = 0;
    memcpy(out + 3, addr, alen);
    return (ssize_t)(3 + alen + len);
}

static const sv_proto_ext_relay socks_relay = {
    .relay_ready = relay_ready, .relay_failed = relay_failed, .relay_open = relay_open};
static const sv_proto_ext_datagram socks_datagram = {.frame_datagram = frame_datagram};
static const sv_proto_ext_direct socks_direct = {.direct = conn_direct};

const sv_proto_ops sv_socks_ops = {
    .name = "socks",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(socks_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_SOCKS_CARRY_MAX,
    .frame = sv_frame_copy,
    .frame_max = sv_frame_copy_max,
    .ext =
        {
            [SV_PROTO_CAP_DATAGRAM] = &socks_datagram,
            [SV_PROTO_CAP_RELAY] = &socks_relay,
            [SV_PROTO_CAP_DIRECT] = &socks_direct,
        },
};
