/*
 * The running supervisor's sizes and time bounds: buffers, reads, timeouts, accept and
 * admission limits (DESIGN.md "Threads and loops"). Constants only; every runtime file uses
 * some of them.
 */
#ifndef SV_BOUNDS_H
#define SV_BOUNDS_H

#define SV_WORKERS_MAX 64
/**
 * Room for the wire framed from one remote read of SV_SCRATCH bytes: every core's
 * frame_max(SV_SCRATCH) must fit (sv_handler_new checks). Shadowsocks needs
 * SV_SS_SEALED_MAX(SV_SCRATCH) (202 bytes over the payload); VMess (PROTOCOLS.md §6.6) a
 * response header and a chunk's overhead (up to 97 bytes) per 2 KiB-16 KiB of payload.
 */
#define SV_SEALED_MAX (SV_SCRATCH + 16384)
/** A sub-flow's outbound stops being read while the core holds more than this for it, waiting
 *  for the client's flow control (proto.h queued), and reads again under the low mark */
#define SV_SUB_QUEUED_HIGH (512u * 1024u)
#define SV_SUB_QUEUED_LOW (128u * 1024u)
/** Most bytes for the client kept behind a write in flight (a multiplexed connection's End
 *  frames; what a core's flow-control backlog, SV_SUB_QUEUED_HIGH and a read per stream, may
 *  release at once): past it the client is taken as one that does not read */
#define SV_CLIENT_MORE_MAX (8u * 1024u * 1024u)
/** Per-worker read buffer: one plain TCP read, either side. 256 KiB: a bulk relay
 *  makes a quarter of the reads, writes and loop turns per GB that 64 KiB made, and carries a
 *  chunk split by a read boundary a quarter as often. */
#define SV_SCRATCH (256 * 1024)
/** A client read under transport layers (wrapped bytes, into the sealed buffer): as large as a
 *  plain read (a quarter of the reads and writes per GB that 64 KiB made for
 *  REALITY). The top layer unwraps into scratch, so under one layer (TLS, REALITY) a read
 *  reaches the protocol in one piece; between two layers it moves in stage pieces
 *  (layer.h SV_CHAIN_STAGE). */
#define SV_LAYERED_READ SV_SCRATCH
/** Most unconsumed client bytes any protocol core keeps between reads (its carry_max): a whole
 *  Shadowsocks 2022 chunk (0xFFFF + tag, PROTOCOLS.md §3.2), the largest of the cores. */
#define SV_CARRY_MAX (0xFFFF + 16) /* SV_SS22_CARRY_MAX; plane.c checks that they agree */
#define SV_UDP_SUBLINKS_MAX 64          /**< seed 002: sub-links per UDP association */
#define SV_ROUTE_RESOLVERS_MAX 16       /**< `dns` route servers a worker serves */
#define SV_UDP_IDLE_MS 60000            /**< an idle UDP association expires */
#define SV_PROXY_WAIT_MS 5000          /**< a PROXY protocol header must be whole within this
                                             (proxy-protocol.txt suggests at least 3 s) */
#define SV_PROXY_WAITS_MAX 1024         /**< connections per worker waiting for their PROXY
                                             header; the oldest is closed for a new one */
#define SV_HANDSHAKE_MS 60000           /**< a client that never completes its header is closed */
#define SV_TLS_HANDSHAKE_MS 10000       /**< a transport handshake (TLS, WebSocket
                                             upgrade ...) not done by then is dropped */
#define SV_TLS_PLAIN_READ (3 * 16384)   /**< remote read size under transport layers: its
                                             wrapping fits their output queues (SV_TLS_OUT_MAX) */
#define SV_REFUSE_LINGER_MS 5000        /**< a client answered 404 is closed after this at most */
#define SV_TCP_IDLE_MS 300000           /**< a relay that moved nothing either way for this long ends */
#define SV_IDLE_SWEEP_MS 10000          /**< how often a worker looks for idle relays */
#define SV_PROBE_DRAIN_MIN_MS 5000      /**< a failed client is drained for a random time ... */
#define SV_PROBE_DRAIN_SPAN_MS 25000    /**< ... in [min, min + span) before the close */
#define SV_OWN_ADDRS_REFRESH_MS 30000   /**< how often the control loop re-reads the host's addresses */
#define SV_LISTEN_BACKLOG 1024          /**< accept queue of each worker's listening socket */
#define SV_ACCEPT_BATCH 64              /**< accepts per readiness callback (then the loop turns) */
#define SV_ACCEPT_RETRY_MS 200          /**< a paused worker retries accepting this often */
#define SV_TRIM_FALL 256                /**< the heap is trimmed once the
                                             connections fell by this many (and by half) */
#define SV_EVICT_ON_EMFILE 16           /**< pre-auth connections closed per accept
                                             that failed for lack of descriptors */
#define SV_PREAUTH_PRESSED_MS 5000      /**< under pressure a connection not
                                             authenticated by then is closed (admission.c) */
#define SV_ADOPT_WAIT_MS 2000           /**< sv_apply waits this long at most for every worker to
                                             adopt its plane (they do within a loop turn) */

/** Room for a core's end-of-stream bytes (proto.h frame_end; VLESS with Vision's padding needs
 *  about 1.5 KiB); a core whose frame_max(0) is larger has them built in sealed instead. */
#define SV_END_FRAME_MAX 2048

#endif
