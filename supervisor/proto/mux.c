/* Mux.Cool server side (PROTOCOLS.md §7): frame decoder and encoder, sans-I/O. */
#include "config.h"

#include "supervisor/proto/mux.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What the data block of the current frame is for. */
enum mux_action { ACT_DROP = 0, ACT_TCP, ACT_DATAGRAM };

typedef struct mux_session {
    bool used;
    uint16_t id;
    uint8_t network; /* enum sv_network */
    sv_dest *udp;    /* a UDP session's destination (every datagram's) */
} mux_session;

struct sv_mux {
    bool in_data;   /* reading the current frame's data block */
    uint8_t action; /* enum mux_action */
    uint16_t id;    /* the current frame's session */
    uint32_t left;  /* data bytes of the current frame still to come */
    const sv_dest *udp;   /* where the current frame's datagram goes */
    sv_dest keep_dest;    /* the address a Keep frame carried (XUDP, PROTOCOLS-2.md §5.2) */
    unsigned n_ends;
    uint8_t ends[SV_EFFECTS_MAX][SV_MUX_END_LEN]; /* End frames answered in this feed() */
    mux_session s[SV_MUX_SESSIONS_MAX];
};

sv_mux *sv_mux_new(void)
{
    return calloc(1, sizeof(sv_mux));
}

void sv_mux_free(sv_mux *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < SV_MUX_SESSIONS_MAX; i++)
        free(m->s[i].udp);
    free(m);
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static mux_session *find(sv_mux *m, uint16_t id)
{
    for (size_t i = 0; i < SV_MUX_SESSIONS_MAX; i++)
        if (m->s[i].used && m->s[i].id == id)
            return &m->s[i];
    return NULL;
}

static mux_session *free_slot(sv_mux *m)
{
    for (size_t i = 0; i < SV_MUX_SESSIONS_MAX; i++)
        if (!m->s[i].used)
            return &m->s[i];
    return NULL;
}

static void forget(mux_session *s)
{
    free(s->udp);
    memset(s, 0, sizeof *s);
}

void sv_mux_session_gone(sv_mux *m, uint16_t id)
{
    mux_session *s = find(m, id);
    if (s == NULL)
        return;
    if (m->in_data && m->id == id)
        m->action = ACT_DROP; /* the rest of its data block has nowhere to go */
    forget(s);
}

size_t sv_mux_frame_end(uint16_t id, bool error, uint8_t *out)
{
    out[0] = 0;
    out[1] = 4; /* meta_len */
    out[2] = (uint8_t)(id >> 8);
    out[3] = (uint8_t)id;
    out[4] = SV_MUX_END;
    out[5] = error ? 0x02 : 0x00;
    return SV_MUX_END_LEN;
}

/* Answer session @p id with an End frame (an unknown session, or no room for a new one). */
static void answer_end(sv_mux *m, uint16_t id, sv_effects *fx)
{
    uint8_t *f = m->ends[m->n_ends++];
    sv_mux_frame_end(id, false, f);
    sv_effect *e = sv_effects_push(fx, SV_FX_TO_CLIENT);
    e->data = f;
    e->len = SV_MUX_END_LEN;
}

/*
 * A New frame's metadata (@p meta, @p ml bytes, ml >= 4): open the session. Its data block, if
 * any, goes to the new session (or is dropped when it cannot be opened).
 * @return 0, -EPROTO (bad network or address, a session already open) or -ENOMEM.
 */
static int open_session(sv_mux *m, const uint8_t *meta, size_t ml, sv_effects *fx)
{
    uint16_t id = be16(meta);
    sv_dest d;
    if (ml < 5 || (meta[4] != SV_NET_TCP && meta[4] != SV_NET_UDP))
        return -EPROTO;
    ssize_t a = sv_dest_parse_b(meta + 5, ml - 5, &d);
    if (a <= 0 || find(m, id) != NULL)
        return -EPROTO;
    d.network = meta[4];
    /* XUDP (PROTOCOLS-2.md §5.1): a New UDP frame with data may end with the client's 8-byte
     * GlobalID; other trailing bytes are ignored */
    const uint8_t *gid = NULL;
    if (d.network == SV_NET_UDP && (meta[3] & 0x01) && ml - 5 - (size_t)a >= 8)
        gid = meta + 5 + a;
    mux_session *s = free_slot(m);
    if (s == NULL) {
        answer_end(m, id, fx);
        m->action = ACT_DROP;
        return 0;
    }
    if (d.network == SV_NET_UDP) {
        s->udp = malloc(sizeof *s->udp);
        if (s->udp == NULL)
            return -ENOMEM;
        *s->udp = d;
    }
    s->used = true;
    s->id = id;
    s->network = (uint8_t)d.network;
    sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
    e->stream = id;
    e->dest = d;
    if (gid != NULL)
        memcpy(e->global_id, gid, sizeof e->global_id);
    m->action = d.network == SV_NET_TCP ? ACT_TCP : ACT_DATAGRAM;
    m->udp = s->udp;
    return 0;
}

/*
 * Decode one frame header at @p p (status, session, the length of its data block); an empty
 * datagram is delivered with it.
 * @return header bytes consumed; 0 when incomplete; -EPROTO or -ENOMEM.
 */
static ssize_t read_header(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    if (n < 2)
        return 0;
    size_t ml = be16(p);
    if (ml < 4 || ml > SV_MUX_META_MAX)
        return -EPROTO;
    if (n < 2 + ml)
        return 0;
    const uint8_t *meta = p + 2;
    uint8_t status = meta[2], option = meta[3];
    if (status < SV_MUX_NEW || status > SV_MUX_KEEPALIVE)
        return -EPROTO;
    size_t hl = 2 + ml + ((option & 0x01) ? 2 : 0);
    if (n < hl)
        return 0;
    uint16_t id = be16(meta);
    m->id = id;
    m->action = ACT_DROP;
    mux_session *s;
    switch ((enum sv_mux_status)status) {
    case SV_MUX_NEW: {
        int rc = open_session(m, meta, ml, fx);
        if (rc < 0)
            return rc;
        break;
    }
    case SV_MUX_KEEP:
        s = find(m, id);
        if (s == NULL) {
            answer_end(m, id, fx);
        } else {
            m->action = s->network == SV_NET_TCP ? ACT_TCP : ACT_DATAGRAM;
            m->udp = s->udp;
            if (s->network == SV_NET_UDP && ml > 4 && meta[4] == SV_NET_UDP) {
                /* XUDP (PROTOCOLS-2.md §5.2): this datagram's own destination */
                ssize_t a = sv_dest_parse_b(meta + 5, ml - 5, &m->keep_dest);
                if (a <= 0)
                    return -EPROTO;
                m->keep_dest.network = SV_NET_UDP;
                m->udp = &m->keep_dest;
            }
        }
        break;
    case SV_MUX_END:
        s = find(m, id);
        if (s != NULL) {
            forget(s);
            sv_effect *e = sv_effects_push(fx, SV_FX_CLOSE);
            e->stream = id;
        }
        break;
    case SV_MUX_KEEPALIVE:
        break;
    }
    m->left = (option & 0x01) ? be16(p + 2 + ml) : 0;
    if (m->action == ACT_DATAGRAM && m->left > SV_MUX_UDP_PAYLOAD_MAX)
        m->action = ACT_DROP;
    if ((option & 0x01) && m->left == 0 && m->action == ACT_DATAGRAM) {
        sv_effect *e = sv_effects_push(fx, SV_FX_DATAGRAM); /* an empty datagram is one */
        e->stream = id;
        e->dest = *m->udp;
        e->data = p + hl;
    }
    m->in_data = m->left > 0;
    return (ssize_t)hl;
}

/* Deliver what there is of the current data block. @return bytes consumed (0: need more). */
static size_t read_data(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t k = n < m->left ? n : m->left;
    if (m->action == ACT_DATAGRAM) {
        if (n < m->left)
            return 0; /* a datagram goes whole (at most SV_MUX_UDP_PAYLOAD_MAX bytes) */
        sv_effect *e = sv_effects_push(fx, SV_FX_DATAGRAM);
        e->stream = m->id;
        e->dest = *m->udp;
        e->data = p;
        e->len = k;
    } else if (m->action == ACT_TCP && k > 0) {
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->stream = m->id;
        e->data = p;
        e->len = k;
    }
    m->left -= (uint32_t)k;
    if (m->left == 0)
        m->in_data = false;
    return k;
}

/* One header or one piece of data block. @return bytes consumed (0: need more) or an error. */
static ssize_t step(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    if (m->in_data)
        return (ssize_t)read_data(m, p, n, fx);
    return read_header(m, p, n, fx);
}

ssize_t sv_mux_feed(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t at = 0;
    m->n_ends = 0;
    /* room for a header's two effects, and one slot stays for the caller's error effect */
    while (fx->n + 3 <= SV_EFFECTS_MAX) {
        ssize_t k = step(m, p + at, n - at, fx);
        if (k < 0)
            return k;
        if (k == 0)
            break;
        at += (size_t)k;
    }
    return (ssize_t)at;
}

ssize_t sv_mux_step(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx)
{
    m->n_ends = 0;
    return step(m, p, n, fx);
}

size_t sv_mux_data_left(const sv_mux *m, uint16_t *id)
{
    if (!m->in_data || m->action != ACT_TCP)
        return 0;
    *id = m->id;
    return m->left;
}

void sv_mux_unread(sv_mux *m, size_t k)
{
    if (k == 0)
        return;
    m->left += (uint32_t)k;
    m->in_data = true;
}

size_t sv_mux_frame_max(size_t len)
{
    size_t blocks = len == 0 ? 1 : (len + SV_MUX_DATA_MAX - 1) / SV_MUX_DATA_MAX;
    return len + blocks * 8;
}

size_t sv_mux_frame_head(uint16_t id, size_t len, uint8_t *out)
{
    out[0] = 0;
    out[1] = 4; /* meta_len */
    out[2] = (uint8_t)(id >> 8);
    out[3] = (uint8_t)id;
    out[4] = SV_MUX_KEEP;
    out[5] = 0x01; /* data follows */
    out[6] = (uint8_t)(len >> 8);
    out[7] = (uint8_t)len;
    return SV_MUX_HEAD_LEN;
}

ssize_t sv_mux_frame_data(uint16_t id, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
    if (cap < sv_mux_frame_max(len))
        return -EMSGSIZE;
    size_t at = 0, off = 0;
    do {
        size_t k = len - off < SV_MUX_DATA_MAX ? len - off : SV_MUX_DATA_MAX;
        uint8_t *f = out + at;
        sv_mux_frame_head(id, k, f);
        memcpy(f + 8, in + off, k);
        at += 8 + k;
        off += k;
    } while (off < len);
    return (ssize_t)at;
}

/* Encode @p d in address style B (PROTOCOLS.md §1.1: port, type 1/2/3, address).
 * @return its length (at most SV_DEST_WIRE_MAX). */
static size_t put_dest_b(const sv_dest *d, uint8_t *out)
{
    out[0] = (uint8_t)(d->port >> 8);
    out[1] = (uint8_t)d->port;
    if (d->atyp == SV_ATYP_DOMAIN) {
        size_t n = strnlen(d->host, 255);
        out[2] = 2;
        out[3] = (uint8_t)n;
        memcpy(out + 4, d->host, n);
        return 4 + n;
    }
    size_t n = d->atyp == SV_ATYP_IPV6 ? 16 : 4;
    out[2] = d->atyp == SV_ATYP_IPV6 ? 3 : 1;
    memcpy(out + 3, d->ip, n);
    return 3 + n;
}

size_t sv_mux_frame_datagram_head(uint16_t id, const sv_dest *from, size_t len, uint8_t *out)
{
    size_t a = put_dest_b(from, out + 7);
    size_t ml = 5 + a;
    out[0] = (uint8_t)(ml >> 8);
    out[1] = (uint8_t)ml;
    out[2] = (uint8_t)(id >> 8);
    out[3] = (uint8_t)id;
    out[4] = SV_MUX_KEEP;
    out[5] = 0x01; /* data follows */
    out[6] = SV_NET_UDP; /* an address follows */
    out[7 + a] = (uint8_t)(len >> 8);
    out[8 + a] = (uint8_t)len;
    return 9 + a;
}

int sv_mux_answers_write(sv_effects *fx, unsigned first, size_t answer_max, sv_mux_answer_fn write,
                         void *core, uint8_t **buf)
{
    *buf = NULL;
    unsigned n_answers = 0;
    for (unsigned i = first; i < fx->n; i++)
        n_answers += fx->v[i].kind == SV_FX_TO_CLIENT;
    if (n_answers == 0)
        return 0;
    size_t cap = n_answers * answer_max, len = 0;
    uint8_t *out = malloc(cap);
    if (out == NULL) {
        fx->n = first;
        return -ENOMEM;
    }
    unsigned kept = first;
    for (unsigned i = first; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        if (e->kind != SV_FX_TO_CLIENT) {
            fx->v[kept++] = *e;
            continue;
        }
        ssize_t w = write(core, e->data, e->len, out + len, cap - len);
        if (w < 0) {
            free(out);
            fx->n = first;
            return (int)w;
        }
        len += (size_t)w;
    }
    memmove(&fx->v[first + 1], &fx->v[first], (kept - first) * sizeof fx->v[0]);
    fx->n = kept + 1;
    fx->v[first] = (sv_effect){.kind = SV_FX_TO_CLIENT, .data = out, .len = len};
    *buf = out;
    return 0;
}
