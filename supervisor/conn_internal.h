/*
 * One TCP connection of a worker (sv_conn) as the parts of conn.c see it: the connection's
 * state and the functions each part offers the others. conn.c is one translation unit with its
 * parts (the conn_*.c.inc files it includes): they call each other both ways (a write that
 * drains resumes a read, a close ends every part), and the objects of libsv.a must not call in
 * circles (tests/unit/t-no-cycles.sh). Included by conn.c only; every function declared here
 * is static, and its contract is the comment at its definition.
 */
#ifndef SV_CONN_INTERNAL_H
#define SV_CONN_INTERNAL_H

#include "supervisor/connector.h"
#include "supervisor/plane.h"
#include "supervisor/udp.h"
#include "supervisor/util/proxy_header.h"
#include "supervisor/shared.h"

#define IOV_MAX_BATCH 64 /* a read of 2 KiB VMess chunks (v2ray) goes out in one writev */

typedef struct sv_subflow sv_subflow;

/* A client write the kernel did not take whole: the request and the bytes left, one allocation
 * (an idle connection holds neither). */
typedef struct client_write {
    uv_write_t req;
    uint8_t data[];
} client_write;

typedef struct sv_conn {
    sv_list link;
    sv_worker *w;
    sv_wlistener *listener;
    sv_handler *handler;
    uv_tcp_t client;
    sv_ob_stream ob; /**< the remote side: the routed target's outbound stream */
    uv_timer_t *timer; /**< the bound on the handshake, sniff or drain while one runs; allocated
                            on demand and dropped once relaying (none while idle) */
    client_write *wr_client; /**< the client write in flight (to_client is its data), or NULL */
    int pending;  /**< open handles + in-flight requests that hold the connection */
    uint32_t carry_len;
    sv_principal *principal; /**< who the connection acts for, once authenticated (a reference) */
    sv_session_rec *sess;
    sv_flow_rec *flow;
    sv_target *target; /**< the outbound version flow was opened on (a reference), or NULL */
    uint64_t user_id;
    uint8_t *carry;
    uint8_t *to_remote, *to_client;
    size_t to_remote_len, to_client_len;
    uint8_t *remote_more;  /**< bytes for the remote that came while to_remote was being written
                                (the rest of the read that filled the socket; reading stopped) */
    size_t remote_more_len;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } peer; /**< the client's address (not a sockaddr_storage: 100 bytes less per connection) */
    unsigned n_subs;
    uint32_t flags;         /**< enum sv_conn_flag bits (conn_has, conn_set ...) */
    uint8_t direct_counted; /**< SV_DIRECT_IN / OUT already counted in shared->direct */
    uint8_t end_why;        /**< why it ends (sv_close_reason + 1), 0: not said (an error) */
    sv_chain chain;      /**< the transport layers over the client socket (none: plain TCP) */
    sv_assoc *assoc;     /**< UDP carried in the stream (Trojan UDP ASSOCIATE), or NULL */
    sv_dest *held;       /**< a TCP open waiting for the first client bytes to sniff,
                              or NULL; its payload collects in to_remote meanwhile */
    uint64_t last_active; /**< loop time (ms) of the last byte read from either side */
    uint8_t *client_more; /**< bytes for the client that came while to_client was being
                               written (a multiplexed connection's End frames) */
    size_t client_more_len;
    sv_subflow **subs;    /**< multiplexed (Mux.Cool) only: the open sub-flows (n_subs), or
                               NULL */
    sv_pacer *pacer;      /**< the user's speed limit (a reference), or NULL (anonymous) */
    uv_timer_t *pace_timer; /**< allocated at the first debt, closed with the connection;
                                 NULL before (no per-connection cost while unpaced) */
    struct conn_paused *paused; /**< admission waiting for the fleet, or NULL */
    struct target_peek *peek; /**< REALITY: the target's first flight being read, or NULL */
    struct conn_splice *splice; /**< Vision direct both ways: the kernel relay, or NULL */
    struct conn_relay *relay; /**< UDP beside the stream (SOCKS5 UDP ASSOCIATE), or NULL */
    _Alignas(max_align_t) uint8_t state[]; /**< the protocol core's state (ops->state_size) */
} sv_conn;

/** The states of a connection, one bit each of sv_conn.flags (set, cleared and read only
 *  through conn_has, conn_set, conn_clear and conn_put). */
enum sv_conn_flag {
    SV_CONN_FLOW_REGISTERED = 1u << 0, /**< flow is the tracker's (registered), else ours */
    SV_CONN_OB_OPENED = 1u << 1,   /**< ob was opened: it is closed with the connection
                                        (on_ob_closed) */
    SV_CONN_CONNECTED = 1u << 2,   /**< the remote side is connected */
    SV_CONN_CLIENT_EOF = 1u << 3,  /**< the client ended its direction */
    SV_CONN_REMOTE_EOF = 1u << 4,  /**< the remote ended its direction */
    SV_CONN_REMOTE_SHUT = 1u << 5, /**< the remote was half-closed (the client's end passed on) */
    SV_CONN_CLIENT_SHUT = 1u << 6, /**< the client was half-closed (the remote's end passed on) */
    SV_CONN_WRITING_REMOTE = 1u << 7, /**< a write to the remote is in flight */
    SV_CONN_WRITING_CLIENT = 1u << 8, /**< a write to the client is in flight (wr_client) */
    SV_CONN_DRAINING = 1u << 9,    /**< a failed client is read and discarded until the timer */
    SV_CONN_CLOSING = 1u << 10,    /**< conn_close ran: handles are closing */
    SV_CONN_CHAIN_UP = 1u << 11,   /**< the chain's handshakes completed */
    SV_CONN_CHAIN_BYE = 1u << 12,  /**< the chain's ends of stream (close_notify ...) are queued */
    SV_CONN_RAW = 1u << 13,        /**< fallback relay: client bytes go to the remote as they are */
    SV_CONN_PACE_KNOWN = 1u << 14, /**< pacer was looked up (at the first payload after
                                        admission) */
    SV_CONN_PACED_UP = 1u << 15,   /**< in debt: the client's side stopped reading until
                                        pace_timer fires */
    SV_CONN_PACED_DOWN = 1u << 16, /**< in debt: the remote's side, likewise */
    SV_CONN_SUBS_PACED = 1u << 17, /**< some sub-flows stopped reading until pace_timer fires */
    SV_CONN_SUBS_BLOCKED = 1u << 18, /**< some sub-flows stopped reading until the core's queue
                                          drains */
    SV_CONN_SUBS_SNIFFING = 1u << 19, /**< some sub-flows wait for their first payload to be
                                           sniffed */
    SV_CONN_NO_SPLICE = 1u << 20,  /**< the kernel relay is not possible for this connection */
    SV_CONN_PREAUTH = 1u << 21,    /**< in w->preauth (accepted, not authenticated nor closing) */
    SV_CONN_FORWARD_SEEN = 1u << 22, /**< the chain's forwarded client address was looked at
                                          (forwarded_apply: once, before the first payload) */
};

/** Is any of the bits @p f of @p c set? */
static inline bool conn_has(const sv_conn *c, uint32_t f) { return (c->flags & f) != 0; }
/** Set the bits @p f of @p c. */
static inline void conn_set(sv_conn *c, uint32_t f) { c->flags |= f; }
/** Clear the bits @p f of @p c. */
static inline void conn_clear(sv_conn *c, uint32_t f) { c->flags &= ~f; }
/** Set the bits @p f of @p c when @p on, else clear them. */
static inline void conn_put(sv_conn *c, uint32_t f, bool on)
{
    c->flags = on ? c->flags | f : c->flags & ~f;
}

/* What admit() decided: refuse, go on, or wait for the fleet (or a scan) to answer. */
enum admit_result { ADMIT_NO, ADMIT_YES, ADMIT_WAIT };

/* conn.c */
static void conn_release(sv_conn *c);
static void conn_close(sv_conn *c);
static void conn_end(sv_conn *c, sv_close_reason why);
static bool conn_timer_start(sv_conn *c, uv_timer_cb cb, uint64_t ms);
static void conn_timer_drop(sv_conn *c);
static void on_drain_timeout(uv_timer_t *t);
static void start_drain(sv_conn *c);
static void maybe_finish(sv_conn *c);
static void shutdown_remote(sv_conn *c);
static void shutdown_client(sv_conn *c);
static bool apply_effects(sv_conn *c, const sv_effects *fx, uv_buf_t *iov, unsigned *niov);
static void process_client(sv_conn *c, uint8_t *data, size_t len);
static void client_eof(sv_conn *c);
static void client_chain_read(sv_conn *c, const uint8_t *in, size_t n);
static void client_read_start(sv_conn *c);
static void on_handshake_timeout(uv_timer_t *t);

/* conn_write.c.inc */
static bool pace_arm(sv_conn *c);
static bool pace_account(sv_conn *c, uint64_t n);
static void pace_charge(sv_conn *c, uint64_t n, bool up);
static void on_remote_written(void *owner, int status);
static void client_read_stop(sv_conn *c);
static bool write_remote(sv_conn *c, const uv_buf_t *iov, unsigned n);
static bool flush_chain(sv_conn *c);
static bool held_append(sv_conn *c, uint8_t **buf, size_t *buf_len, const uint8_t *p, size_t len);
static bool write_client(sv_conn *c, uint8_t *wire, size_t len);

/* conn_remote.c.inc */
static bool sync_direct(sv_conn *c);
static void remote_alloc(void *owner, uv_buf_t *buf);
static ssize_t end_frame(sv_conn *c, uint32_t stream, bool abort, uint8_t **out);
static void remote_read_start(sv_conn *c);
static void remote_read_stop(sv_conn *c);
static bool open_stream(sv_conn *c, const sv_outbound_ops *ops, const sv_socket_policy *sock,
                        sv_resolver *res, const sv_dest *d, bool allow_internal);
static sv_connector_req stream_req(const sv_conn *c, const sv_dest *d, const char *sniffed);
static bool open_flow(sv_conn *c, const sv_dest *d, const char *sniffed);

/* conn_splice.c.inc */
static void splice_end(sv_conn *c);
static void splice_run(sv_conn *c);
static void splice_try(sv_conn *c);

/* conn_admit.c.inc */
static bool hold_open(sv_conn *c, const sv_dest *d);
static bool sniff_and_open(sv_conn *c, bool now);
static void dial_fallback(sv_conn *c);
static void paused_end(sv_conn *c);
static bool scan_elsewhere(sv_conn *c, const sv_effect *e);
static bool pause_effects(sv_conn *c, const sv_effects *fx, unsigned from, bool multiplexed);
static bool pause_input(sv_conn *c, const uint8_t *p, size_t n);
static enum admit_result admit(sv_conn *c, int idx);

/* conn_client.c.inc */
static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static bool keep_carry(sv_conn *c, const uint8_t *p, size_t n);
static bool to_outbound(sv_conn *c, uv_buf_t *iov, unsigned *niov, uint8_t *data, size_t len);
static size_t target_proxy_header(sv_conn *c, uint8_t out[SV_PROXY_HEADER_MAX]);
static void client_failed(sv_conn *c, const sv_effect *e);
static bool open_assoc(sv_conn *c);
static void answer_and_close(sv_conn *c, const uint8_t *answer, size_t len);
static void on_assoc_released(void *ctx);

/* conn_relay.c.inc */
static bool open_relay(sv_conn *c);
static void relay_end(sv_conn *c);

/* conn_sub.c.inc */
static sv_subflow *sub_find(sv_conn *c, uint32_t stream, unsigned *at);
static bool subs_over_pause(const sv_conn *c);
static void subs_read(sv_conn *c, bool on);
static void subs_unblock(sv_conn *c);
static void subs_resume_paced(sv_conn *c);
static void subs_close(sv_conn *c);
static void subs_scan_kill(sv_conn *c);
static bool mux_start(sv_conn *c);
static bool subs_sniff(sv_conn *c);
static void sub_open(sv_conn *c, const sv_effect *e);
static void sub_write(sv_conn *c, uint32_t stream, uint8_t *data, size_t len);
static void sub_client_end(sv_conn *c, uint32_t stream, bool half);

/* conn_flight.c.inc */
static void peek_end(sv_conn *c);
static void peek_start(sv_conn *c);

#endif
