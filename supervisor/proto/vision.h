/*
 * XTLS Vision (`xtls-rprx-vision`, PROTOCOLS-2.md §2) for the VLESS core, sans-I/O:
 * the flow rules of the request (§2.2), the padding frames (§2.3), the receiver's un-padding
 * (§2.4), the sender's rules for when padding stops (§2.5) and the TLS filter both share.
 * No socket, clock, log or allocation; randomness only from the seed given to sv_vision_init().
 *
 * Frame: [user UUID, first frame of a direction only] | command u8 | content length u16 |
 * padding length u16 | content | padding. Commands: 0 continue, 1 end (padding stops, the rest
 * stays inside the outer TLS), 2 direct (padding stops, the rest goes raw under the outer TLS,
 * §2.6).
 */
#ifndef SV_PROTO_VISION_H
#define SV_PROTO_VISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** The flow name in the request addons (§2.2; the `-udp443` variant sends this too). */
#define SV_VISION_FLOW "xtls-rprx-vision"
/** Bytes of the user id that opens the first frame of each direction. */
#define SV_VISION_UUID_LEN 16
/** Bytes of a frame header after the UUID: command, content length, padding length. */
#define SV_VISION_HEAD_LEN 5
/** Content plus padding of one frame we send (§2.3: a frame fits an 8192-byte buffer). */
#define SV_VISION_BODY_MAX (8192 - 21)
/** Padding bytes one sv_vision_pad() call adds at most over all its frames (our bound; the
 *  receiver ignores padding, so less than Xray's draw is always valid). */
#define SV_VISION_PAD_BUDGET 1500

/** Frame commands (§2.3). */
enum sv_vision_cmd { SV_VISION_CONTINUE = 0, SV_VISION_END = 1, SV_VISION_DIRECT = 2 };

/** What the request's addons said about the flow (§2.2). */
enum sv_vision_request_flow {
    SV_VISION_REQ_NONE = 0,  /**< no addons or an empty Flow */
    SV_VISION_REQ_VISION,    /**< Flow = "xtls-rprx-vision" */
    SV_VISION_REQ_OTHER,     /**< any other non-empty Flow */
};

/**
 * The server's flow rules (§2.2, Xray's table): may this request go on, and is its body
 * Vision-framed?
 * @param account_vision  the node serves Vision (every user of a node shares its flow)
 * @param flow            what the request's addons said
 * @param cmd             VLESS command (1 TCP, 2 UDP, 3 Mux)
 * @param body, n         the bytes after the request header so far (only read for a Mux
 *                        request without flow on a Vision node: XUDP or not)
 * @param framed          receives true when the body carries Vision frames
 * @return 1 accepted, 0 more body bytes are needed (at most 7), or
 *   -EPROTONOSUPPORT an unknown request flow ("unknown request flow"), or Vision with UDP
 *                    ("xtls-rprx-vision doesn't support UDP");
 *   -EPERM           a Vision request on a node without flow ("not able to use the flow"), or
 *                    a TCP request, or a Mux that is not XUDP, without flow on a Vision node
 *                    ("client flow is empty").
 */
int sv_vision_check(bool account_vision, enum sv_vision_request_flow flow, uint8_t cmd,
                    const uint8_t *body, size_t n, bool *framed);

/** A text for an sv_vision_check() refusal (Xray's wording), for tests and errors. */
const char *sv_vision_strerror(int rc, bool account_vision, enum sv_vision_request_flow flow);

/** One connection's Vision state: the shared TLS filter, the receiver and the sender. */
typedef struct sv_vision {
    uint8_t uuid[SV_VISION_UUID_LEN];
    /* the TLS filter (§2.5), shared by both directions */
    int8_t to_filter;      /* buffers still to examine (starts at 8) */
    int32_t hello_left;    /* bytes of the inner ServerHello record still to scan */
    uint16_t cipher;       /* the inner ServerHello's suite */
    bool is_tls, tls12, xtls;
    bool may_direct;       /* false under Mux: never command 2 from us */
    /* receiver (client to server, §2.4) */
    uint8_t rx_state;
    uint8_t rx_head[SV_VISION_HEAD_LEN], rx_head_len;
    uint8_t rx_cmd;
    uint16_t rx_content, rx_padding; /* still to deliver / to skip in this frame */
    bool rx_direct;        /* a command 2 frame ended: the client's later bytes are raw */
    /* sender (server to client, §2.5) */
    bool tx_uuid_sent, tx_padding, tx_direct;
    uint64_t rng;
} sv_vision;

/**
 * Start a connection's Vision state.
 * @param uuid        the request's user id (16 bytes), the first frame's prefix both ways
 * @param may_direct  whether we may send command 2 (false under Mux: §2.6, no splice there)
 * @param seed        seeds the padding lengths (any value; the core draws it from RAND_bytes)
 */
void sv_vision_init(sv_vision *v, const uint8_t *uuid, bool may_direct, uint64_t seed);

/**
 * Un-pad client bytes in place (§2.4): the content of the frames in @p p [0, @p n) is moved to
 * the front, headers and padding dropped. Frames may straddle calls; header bytes are kept in
 * the state. At the start, fewer than 16 bytes give 0 (need more: call again with them and
 * more); 16 bytes that are not the user id end un-padding (Xray passes such bytes through: the
 * padding is optional for a receiver). After a command 1 or 2 frame everything is plain.
 * @param out_len  receives the content bytes now at @p p
 * @return bytes consumed (0 or @p n), or -EPROTO for a frame command above 2 (the connection
 *         ends).
 */
ssize_t sv_vision_unpad(sv_vision *v, uint8_t *p, size_t n, size_t *out_len);

/** Run the TLS filter of §2.5 over one buffer of inner traffic (either direction) while it is
 *  still filtering: ClientHello / ServerHello, TLS 1.3 and the suite that enables direct. */
void sv_vision_filter(sv_vision *v, const uint8_t *p, size_t n);

/** Most bytes sv_vision_pad() writes for @p n bytes of payload. */
size_t sv_vision_pad_max(size_t n);

/**
 * Frame one write of @p n payload bytes for the client (§2.3, §2.5): while padding, split into
 * frames of at most SV_VISION_BODY_MAX content plus padding (the first with the UUID), long
 * padding (to 900..1399) for short TLS content; padding ends with this write when it is made
 * of whole inner TLS application-data records (command 2 when the inner ServerHello showed
 * TLS 1.3 with a suite other than CCM_8 and direct is allowed, else 1), or when the traffic is
 * not TLS 1.2+ once the filter has nearly run out (command 1). Afterwards a plain copy.
 * @p in and @p out may overlap only when @p in lies at least sv_vision_pad_max(n) - n bytes
 * after @p out (the copy runs forward).
 * @return bytes written, or -EMSGSIZE when @p cap < sv_vision_pad_max(n).
 */
ssize_t sv_vision_pad(sv_vision *v, const uint8_t *in, size_t n, uint8_t *out, size_t cap);

/** @return true while the client's frames may still bring a command 2 (un-padding goes on). */
bool sv_vision_rx_watch(const sv_vision *v);
/** @return true once a command 2 frame went out: later bytes towards the client go raw. */
static inline bool sv_vision_tx_direct(const sv_vision *v) { return v->tx_direct; }
/** @return true once the client's command 2 frame ended: its later bytes come raw. */
static inline bool sv_vision_rx_direct(const sv_vision *v) { return v->rx_direct; }

#endif
